//! freeride side-task SDK: GPU work that runs only in the bubbles of a pipeline-parallel trainer.
//!
//! * Iterative ([`runtime`]): implement [`SideTask`] (`init`, `step`, `is_finished`, hooks) and
//!   hand it to a [`Runtime`]; `step` is called only when the GPU's grant has more time and GPU
//!   budget left than the step's learned duration (a probe step needs `probe_min_grant_ns`).
//! * Imperative ([`imperative`]): [`run_imperative`] runs free code; the interposer's gate
//!   (`FREERIDE_ROLE=sidetask`) holds its launches while the grant is closed.
//! * Life cycle ([`lifecycle`]): submitted -> created -> paused <-> running -> finished | stopped,
//!   invalid transitions rejected, a hook at each; SIGTERM or a [`StopFlag`] stops cleanly.
//! * Memory ([`memory`]): allocations within the grant's `mem_budget_bytes` and a configured cap.
//! * GPU ([`gpu`]): cudarc's driver API loaded dynamically (real driver or the test bed's
//!   stand-in), one context + stream per task; real kernels as cuBLAS GEMMs ([`blas`],
//!   [`Gpu::gemm`]: they run on a GPU and on the test bed's stand-in BLAS alike), simulated
//!   kernels by name and duration (test bed only).
//! * C ABI ([`ffi`], `include/freeride_sidetask.h`, `libfreeride_sidetask.so`) and a Python
//!   package (`python/freeride/`: `import freeride`).
//!
//! Files: reads `<session>/grant-<bus id>` (mapped read-only; written by the agent), writes
//! `<session>/sidetask-<pid>.json` (status). `<session>` is `session_dir`, else `FREERIDE_DIR`,
//! else `/dev/shm/freeride-<uid>`.
//!
//! Without an agent (no valid grant file, or its agent process is gone) a task waits, paused, and
//! says so once on stderr; with `no_agent = standalone` (or `FREERIDE_SIDETASK_STANDALONE=1`) it
//! runs freely instead, as if the whole GPU were granted — for development and tests. A live
//! agent's grant is always obeyed.
pub mod blas;
pub mod cli;
pub mod config;
pub mod double_gate;
pub mod error;
pub mod estimator;
pub mod ffi;
pub mod gpu;
pub mod grant_watch;
pub mod grant_writer;
pub mod imperative;
pub mod lifecycle;
pub mod memory;
pub mod pacer;
pub mod runtime;
mod shm_map;
pub mod status;
pub mod stop;
#[cfg(test)]
mod testutil;

pub use config::{NoAgent, TaskConfig};
pub use error::{Result, SdkError};
pub use gpu::{Gpu, Kernel};
pub use imperative::{run_imperative, run_imperative_with_hook, ImperativeCtx};
pub use lifecycle::State;
pub use pacer::{Summary, Window};
pub use runtime::{BoxError, Ctx, Runtime, SideTask, StepOutcome, TaskResult};
pub use stop::StopFlag;
