//! pipesim: a pipeline-parallel "training job" for the GPU-less test bed.
//!
//! * [`schedule`]: which ops (forward, backward, weight-gradient) each rank runs, in which order, and
//!   what it sends and receives (GPipe, 1F1B, interleaved 1F1B, ZB-H1).
//! * [`csv`]: PyTorch's `compute_comms` CSV schedules, parsed and checked.
//! * [`topology`]: the process grid (pipeline x tensor x data parallel), GPUs, nodes.
//! * [`program`]: what a rank does per iteration, as data; [`lower`] builds it from the job.
//! * [`model`]: the discrete-event model of every rank's program (validation, expected timing).
//! * [`placement`]: the environment of every process (rank, GPU view, node's session directory).
//! * [`noise`]: seeded jitter, sequence-length variation, host stalls and pauses.
//! * [`sim`]: a pure discrete-event model of a plan: expected makespan and idle time per rank.
//! * [`cli`]: the job's flags, shared by `pipesim` and `freeride sim`.
//! * [`config`]: the job description shared by the launcher and the stage processes.
//! * [`truth`]: reads the simulated GPU's ground-truth trace and measures iterations and idle time.
//! * [`standins`]: the folder of stand-in libraries the dynamic linker searches.
//! * [`devices`]: how many simulated GPUs a job gets (`FREERIDE_SIM_DEVICES`).
//! * [`procs`]: child processes that end with their parent; SIGINT/SIGTERM as a request to stop.
pub mod cli;
pub mod config;
pub mod csv;
pub mod devices;
pub mod host;
pub mod lower;
pub mod model;
pub mod noise;
pub mod placement;
pub mod procs;
pub mod program;
pub mod schedule;
pub mod sim;
pub mod standins;
pub mod topology;
pub mod truth;
pub mod validate;
