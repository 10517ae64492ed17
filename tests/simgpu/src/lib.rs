//! The simulated GPU shared by all processes on a device.
//!
//! * [`abi`]: the contract between simulated kernels and the GPU (shared with the other stand-ins).
//! * [`device`]: a process's handle on one simulated device (shared state, memory, running
//!   kernels in the device's model).
//! * [`sched`]: how the device is shared among kernels and processes (time-slicing, MPS), on a
//!   logical timeline.
//! * [`stream`] / [`event`]: per-process in-order streams, each executed by its own thread, and
//!   the events recorded on them.
//! * [`trace`]: the ground-truth trace (`$FREERIDE_SIM_TRACE`).
//! * [`identity`]: simulated device N's PCI bus id and UUID, and `CUDA_VISIBLE_DEVICES`.
//!
//! The process-shared part lives in [`shm`] (layout), [`lock`] (a futex lock) and [`memory`]
//! (device memory accounting).
pub mod abi;
pub mod config;
pub mod device;
pub mod driver_entry;
pub mod event;
mod futex;
pub mod identity;
pub mod lock;
pub mod memory;
pub mod sched;
pub mod shm;
pub mod stream;
pub mod trace;

pub use config::Mode;
pub use device::{Device, SimError};
pub use event::{Event, Record};
pub use stream::{KernelOp, Op, Stream};
