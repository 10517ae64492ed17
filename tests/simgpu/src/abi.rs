//! The contract between simulated kernels and the simulated GPU.
//!
//! This module is the one place that says how a stand-in kernel tells the simulated GPU what to do.
//! It is shared (as Rust source, statically linked) by the stand-in libcuda, libnccl, libcublas and
//! pipesim, which otherwise only talk to each other through the real C ABIs.
//!
//! # Kernel parameters
//! * Every simulated kernel takes as its first kernel parameter (`kernelParams[0]`) a pointer to a
//!   `uint64_t`, the *kernel word*: the low [`DURATION_BITS`] bits are how many nanoseconds the
//!   kernel runs on the whole device, alone; the top byte ([`FILL_SHIFT`]) is how much of the
//!   device it fills, in percent of its SMs (1..=100; 0, what every caller that knows nothing of
//!   it passes, means the whole device; above 100 reads as 100). The byte between is reserved
//!   (ignored, pass 0). A NULL `kernelParams` or a NULL first pointer means
//!   [`DEFAULT_KERNEL_NS`] on the whole device. [`kernel_word`] and [`decode_kernel_word`] build
//!   and read it. A kernel that fills f % of the device runs at full speed as long as it gets
//!   those f % of the SMs (see `crate::sched`).
//!   The stand-in cannot know how many parameters a caller passed, so nothing beyond
//!   `kernelParams[0]` is ever read for a compute kernel; callers that pass a plain duration
//!   (every caller before the fill existed) get the whole device, as before.
//! * Kernels whose function name starts with [`COMM_KERNEL_PREFIX`] are communication kernels:
//!   their second parameter (`kernelParams[1]`) is NULL or points to a [`DeviceWork`] (below). A
//!   communication kernel without one transfers for its duration from its start.
//! * Like the real driver, a launch copies the parameter *values* at launch time: the caller may
//!   reuse its parameter buffers as soon as the launch returns. `DeviceWork.ctx` is owned by the
//!   kernel from launch on; `run` is called exactly once and must free it.
//!
//! # Communication kernels: `DeviceWork`, version 4
//! A communication kernel first *waits* for its peers (a receive for the matching send, a
//! collective for every rank), then *transfers*. When the kernel has started on the GPU, the
//! simulated GPU calls `run(ctx, &mut CommKernel)` on the stream's execution thread, with
//! [`CommKernel::start_ns`] set to the kernel's start (GPU time). `run` blocks in real time until
//! it knows when its transfer begins (its peers posted), then sets
//! [`CommKernel::transfer_start_ns`] (not before `start_ns`) and [`CommKernel::transfer_ns`] (GPU
//! time the transfer takes once begun; 0 when the data is already there) and returns at once: it
//! does not sleep through the transfer. A kernel that transferred before it waited (a send that
//! filled its buffer, then waited for its receiver) also sets [`CommKernel::eager_ns`]: that part
//! ran from `start_ns` on; one busy again before its transfer (a group's large send moving its
//! rest before the group's receives' data came) sets [`CommKernel::mid_start_ns`] and
//! [`CommKernel::mid_ns`]. The simulated GPU then ends the kernel once its context
//! has been resident on the device for `transfer_ns` from `transfer_start_ns` on; under
//! time-slicing, while another process holds the device, the transfer does not progress, so a
//! receive whose data has arrived completes late. Whether the *waiting* part needs the context
//! resident is a knob ([`env::SIM_COMM_SPIN`], default yes: on a real GPU a waiting NCCL kernel is
//! a running kernel that spins on a few SMs, so its process has work and takes its time slices,
//! and it notices its peer only while resident). Communication kernels take few SMs: they do not
//! take the SM shares of compute kernels, under MPS or within a process.
//!
//! Version 1 (`run(ctx)`, which slept until the transfer's end in real time, magic
//! [`DEVICE_WORK_MAGIC_V1`]), version 2 (a `CommKernel` without `eager_ns`, magic
//! [`DEVICE_WORK_MAGIC_V2`]) and version 3 (without `mid_start_ns`/`mid_ns`, magic
//! [`DEVICE_WORK_MAGIC_V3`]) are refused by the stand-in driver with `CUDA_ERROR_INVALID_VALUE`.
use std::ffi::c_void;

/// Run time of a kernel launched without a duration parameter.
pub const DEFAULT_KERNEL_NS: u64 = 1_000;
/// Bits of the kernel word that hold the duration (ns).
pub const DURATION_BITS: u32 = 48;
/// Shift of the fill byte (percent of the device's SMs) in the kernel word.
pub const FILL_SHIFT: u32 = 56;
/// Function-name prefix that marks a communication kernel.
pub const COMM_KERNEL_PREFIX: &str = "nccl";
/// `DeviceWork.magic` of version 4 ("FDEVWRK4").
pub const DEVICE_WORK_MAGIC: u64 = 0x344b_5257_5645_4446;
/// `DeviceWork.magic` of version 3 ("FDEVWRK3"), no longer accepted: its `CommKernel` is two
/// fields shorter.
pub const DEVICE_WORK_MAGIC_V3: u64 = 0x334b_5257_5645_4446;
/// `DeviceWork.magic` of version 2 ("FDEVWRK2"), no longer accepted: its `CommKernel` is a
/// field shorter.
pub const DEVICE_WORK_MAGIC_V2: u64 = 0x324b_5257_5645_4446;
/// `DeviceWork.magic` of version 1 ("FDEVWORK"), no longer accepted.
pub const DEVICE_WORK_MAGIC_V1: u64 = 0x4b52_4f57_5645_4446;

/// A kernel word for `duration_ns` (at most 2^48 - 1) filling `fill_percent` of the device (0 or
/// 100: all of it).
pub fn kernel_word(duration_ns: u64, fill_percent: u32) -> u64 {
    (duration_ns & ((1 << DURATION_BITS) - 1)) | (u64::from(fill_percent.min(100)) << FILL_SHIFT)
}

/// `(duration_ns, fill_percent)` of a kernel word, the fill in 1..=100.
pub fn decode_kernel_word(word: u64) -> (u64, u32) {
    let duration = word & ((1 << DURATION_BITS) - 1);
    let fill = match (word >> FILL_SHIFT) as u32 {
        0 => 100,
        f => f.min(100),
    };
    (duration, fill)
}

/// What the simulated GPU tells a communication kernel's body and what the body answers (see the
/// module docs).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommKernel {
    /// In: the kernel's start on the GPU (ns).
    pub start_ns: u64,
    /// Out: when its transfer begins (ns, at least `start_ns`); before it, it waits for peers.
    pub transfer_start_ns: u64,
    /// Out: GPU time the transfer takes once begun (ns).
    pub transfer_ns: u64,
    /// Out: GPU time transferred from `start_ns` on, before the wait (0: none): a send larger
    /// than its channel's buffer fills the buffer at once, then waits for its receiver to move
    /// the rest (from `transfer_start_ns`, for `transfer_ns`). The kernel is busy in both parts.
    pub eager_ns: u64,
    /// Out: a busy span between the eager part and the transfer, from `mid_start_ns` for
    /// `mid_ns` (0: none): a group's large send moving its rest once its receiver ran, before
    /// the group's receives' data came (the transfer).
    pub mid_start_ns: u64,
    pub mid_ns: u64,
}

/// The body of a communication kernel (see the module docs).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DeviceWork {
    pub magic: u64,
    pub run: unsafe extern "C" fn(ctx: *mut c_void, kernel: *mut CommKernel),
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
    /// Time-slicing: a process's time slice in µs (default 2000); read by the creating process.
    pub const SIM_SLICE_US: &str = "FREERIDE_SIM_SLICE_US";
    /// Time-slicing: what switching the device to another process costs, in µs (default 25).
    pub const SIM_SWITCH_US: &str = "FREERIDE_SIM_SWITCH_US";
    /// MPS: how much the other processes' SM load slows a kernel (memory bandwidth, caches):
    /// a kernel runs at `(SMs it has / SMs it fills) / (1 + x * others' SM share)` (default 0.7).
    pub const SIM_MPS_INTERFERENCE: &str = "FREERIDE_SIM_MPS_INTERFERENCE";
    /// `1` (default): a communication kernel waiting for its peer spins on the GPU (its process
    /// competes for time slices); `0`: only its transfer needs the device.
    pub const SIM_COMM_SPIN: &str = "FREERIDE_SIM_COMM_SPIN";
    /// Most operations a stream holds queued (launched, not yet done); a launch beyond it blocks
    /// the host until one completes, as CUDA's launch queue does (default 1024; per process).
    pub const SIM_QUEUE_DEPTH: &str = "FREERIDE_SIM_QUEUE_DEPTH";
    /// How long (µs of real time) the simulated GPU waits for a late stream thread before it moves
    /// its timeline on without it (default 2000; see `crate::sched`).
    pub const SIM_HOLD_US: &str = "FREERIDE_SIM_HOLD_US";
    /// Bytes a point-to-point send moves before its receiver's kernel has started, as NCCL's
    /// per-peer buffer holds (4194304 is NCCL_BUFFSIZE's default; 0, the default: any size,
    /// eagerly). A larger send fills the buffer, waits for its receiver, then moves the rest.
    pub const NCCL_BUFFER_BYTES: &str = "FREERIDE_SIM_NCCL_BUFFER_BYTES";
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_word_round_trips_and_plain_durations_fill_the_device() {
        assert_eq!(decode_kernel_word(2_000_000), (2_000_000, 100));
        assert_eq!(
            decode_kernel_word(kernel_word(1_700_000, 30)),
            (1_700_000, 30)
        );
        assert_eq!(decode_kernel_word(kernel_word(5, 0)), (5, 100));
        assert_eq!(decode_kernel_word(kernel_word(5, 250)), (5, 100));
        // The reserved byte is ignored.
        assert_eq!(decode_kernel_word(7 | (0xab << DURATION_BITS)), (7, 100));
        assert_eq!(decode_kernel_word(u64::MAX).1, 100);
    }
}
