//! The contract between simulated kernels and the simulated GPU.
//!
//! This module is the one place that says how a stand-in kernel tells the simulated GPU what to do.
//! It is shared (as Rust source, statically linked) by the stand-in libcuda, libnccl, libcublas and
//! pipesim, which otherwise only talk to each other through the real C ABIs.
//!
//! * Every simulated kernel takes as its first kernel parameter (`kernelParams[0]`) a pointer to a
//!   `uint64_t`: how many nanoseconds the kernel runs on the GPU once it is running. A NULL
//!   `kernelParams` or a NULL first pointer means [`DEFAULT_KERNEL_NS`].
//! * Kernels whose function name starts with [`COMM_KERNEL_PREFIX`] are communication kernels: they
//!   take few SMs ([`COMM_SM_PERCENT`]) and their second parameter (`kernelParams[1]`) points to a
//!   [`DeviceWork`]. When the kernel runs, the GPU calls `run(ctx)` on the stream's execution thread;
//!   `run` blocks until the transfer is complete (its peer posted, the transfer time passed). The
//!   kernel's `uint64_t` duration is then ignored.
//! * Like the real driver, a launch copies the parameter *values* at launch time: the caller may reuse
//!   its parameter buffers as soon as the launch returns. `DeviceWork.ctx` is owned by the kernel from
//!   launch on; `run` is called exactly once and must free it.
use std::ffi::c_void;

/// Run time of a kernel launched without a duration parameter.
pub const DEFAULT_KERNEL_NS: u64 = 1_000;
/// Function-name prefix that marks a communication kernel.
pub const COMM_KERNEL_PREFIX: &str = "nccl";
/// SM share (percent) a communication kernel occupies while it waits and transfers.
pub const COMM_SM_PERCENT: u32 = 2;
/// `DeviceWork.magic`.
pub const DEVICE_WORK_MAGIC: u64 = 0x4b52_4f57_5645_4446; // "FDEVWORK"

/// The body of a communication kernel (see the module docs).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DeviceWork {
    pub magic: u64,
    pub run: unsafe extern "C" fn(ctx: *mut c_void),
    pub ctx: *mut c_void,
}

/// Environment variables of the test bed (all optional).
pub mod env {
    /// Folder of the simulated GPUs' shared state (default `/dev/shm/freeride-sim-<uid>`).
    pub const SIM_DIR: &str = "FREERIDE_SIM_DIR";
    /// Ground-truth trace: every kernel's execution as a JSON line, appended (unset: no trace).
    pub const SIM_TRACE: &str = "FREERIDE_SIM_TRACE";
    /// `timeslice` (default) or `mps`; read by the process that creates a device's state.
    pub const SIM_MODE: &str = "FREERIDE_SIM_MODE";
    /// Number of simulated devices (default 8).
    pub const SIM_DEVICES: &str = "FREERIDE_SIM_DEVICES";
    /// Device memory per simulated device in MiB (default 81920).
    pub const SIM_MEM_MIB: &str = "FREERIDE_SIM_MEM_MIB";
    /// In MPS mode, this process's SM share in percent (1..=100, default 100), as with real MPS.
    pub const MPS_THREAD_PERCENTAGE: &str = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";
    /// NCCL transfer cost: picoseconds per byte (default 100, i.e. 10 GB/s).
    pub const NCCL_PS_PER_BYTE: &str = "FREERIDE_SIM_NCCL_PS_PER_BYTE";
    /// NCCL fixed latency per transfer in nanoseconds (default 0).
    pub const NCCL_BASE_NS: &str = "FREERIDE_SIM_NCCL_BASE_NS";
}

/// Monotonic clock in nanoseconds (CLOCK_MONOTONIC): the one clock of the test bed, the ground
/// truth and freeride's events alike.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
