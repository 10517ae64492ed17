//! The test bed's `freeride sim` and `freeride demo` (the program `freeride-sim`, which the
//! product's `freeride sim` / `freeride demo` exec): pipesim under freeride, with the product's
//! agent loop in this process, scored against the simulated GPU's ground truth.
//!
//! * [`sim`]: one run (the job, side tasks, one agent per node) and its scores;
//! * [`sim_nodes`]: the simulated job's nodes (a session directory and an agent each);
//! * [`sim_procs`]: the job's and the side tasks' processes, tied to this one;
//! * [`sim_gpus`]: the per-GPU view of a run;
//! * [`sim_report`]: the text report and the side tasks that ended early.
pub mod sim;
pub mod sim_gpus;
pub mod sim_grants;
pub mod sim_nodes;
pub mod sim_procs;
pub mod sim_report;
