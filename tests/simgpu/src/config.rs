//! The test bed's environment (see [`crate::abi::env`]), read with defaults.
use crate::abi::env;
use crate::sched::Knobs;
use std::path::PathBuf;

/// Default number of simulated devices.
pub const DEFAULT_DEVICES: i32 = 8;
/// Default device memory in MiB (80 GiB).
pub const DEFAULT_MEM_MIB: u64 = 81_920;
/// Default time slice (µs), calibrated against the H200 rows of
/// `shared/reference/launch-paths.md` (`scripts/bench-contention`; TESTBED.md, "Contention").
pub const DEFAULT_SLICE_US: u64 = 2_000;
/// Default cost of a switch between processes (µs).
pub const DEFAULT_SWITCH_US: u64 = 25;
/// Default MPS interference (see [`crate::abi::env::SIM_MPS_INTERFERENCE`]).
pub const DEFAULT_MPS_INTERFERENCE: f64 = 0.7;
/// Default launch-queue depth of a stream: real CUDA blocks the launching thread once about 1024
/// launches are pending on a stream (NVIDIA developer forum, "CUDA stream are blocked when launch
/// lots of kernels (>1000)", 2018: 4-5 µs launches up to ~1000 queued, then one per completion).
pub const DEFAULT_QUEUE_DEPTH: usize = 1024;
/// Default grace (µs of real time) for a late stream thread (see [`crate::sched`]).
pub const DEFAULT_HOLD_US: u64 = 2_000;

/// How the device is shared between processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Mode {
    /// Time slices, one process at a time (the default of a real GPU without MPS).
    Timeslice = 0,
    /// Kernels of different processes side by side on SM shares (NVIDIA MPS).
    Mps = 1,
}

impl Mode {
    /// From its value in the shared state (unknown values read as `Timeslice`).
    pub fn from_u32(v: u32) -> Mode {
        if v == Mode::Mps as u32 {
            Mode::Mps
        } else {
            Mode::Timeslice
        }
    }
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn parsed<T: std::str::FromStr>(name: &str) -> Option<T> {
    var(name).and_then(|v| v.trim().parse::<T>().ok())
}

/// Folder of the devices' shared state: `$FREERIDE_SIM_DIR` or `/dev/shm/freeride-sim-<uid>`.
pub fn sim_dir() -> PathBuf {
    match var(env::SIM_DIR) {
        Some(d) => PathBuf::from(d),
        None => {
            // SAFETY: getuid has no preconditions.
            let uid = unsafe { libc::getuid() };
            PathBuf::from(format!("/dev/shm/freeride-sim-{uid}"))
        }
    }
}

/// Number of simulated devices (`$FREERIDE_SIM_DEVICES`, default 8, at most 64).
pub fn device_count() -> i32 {
    parsed::<i32>(env::SIM_DEVICES)
        .map(|n| n.clamp(0, 64))
        .unwrap_or(DEFAULT_DEVICES)
}

/// Device memory in bytes (`$FREERIDE_SIM_MEM_MIB`).
pub fn mem_bytes() -> u64 {
    parsed::<u64>(env::SIM_MEM_MIB)
        .unwrap_or(DEFAULT_MEM_MIB)
        .saturating_mul(1 << 20)
}

/// Arbitration mode (`$FREERIDE_SIM_MODE`), read by the process that creates a device's state.
pub fn mode() -> Mode {
    match var(env::SIM_MODE).as_deref().map(str::trim) {
        Some("mps") | Some("MPS") => Mode::Mps,
        _ => Mode::Timeslice,
    }
}

/// The device's knobs, read by the process that creates its state.
pub fn knobs() -> Knobs {
    Knobs {
        mode: mode() as u32,
        comm_spin: u32::from(parsed::<u32>(env::SIM_COMM_SPIN).unwrap_or(1) != 0),
        slice_ns: parsed::<u64>(env::SIM_SLICE_US)
            .unwrap_or(DEFAULT_SLICE_US)
            .max(1)
            .saturating_mul(1_000),
        switch_ns: parsed::<u64>(env::SIM_SWITCH_US)
            .unwrap_or(DEFAULT_SWITCH_US)
            .saturating_mul(1_000),
        interference: parsed::<f64>(env::SIM_MPS_INTERFERENCE)
            .filter(|x| x.is_finite() && *x >= 0.0)
            .unwrap_or(DEFAULT_MPS_INTERFERENCE),
        hold_ns: parsed::<u64>(env::SIM_HOLD_US)
            .unwrap_or(DEFAULT_HOLD_US)
            .saturating_mul(1_000),
    }
}

/// This process's MPS SM share in percent (`$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`, 1..=100, default 100).
pub fn mps_share() -> u32 {
    parsed::<f64>(env::MPS_THREAD_PERCENTAGE)
        .filter(|p| p.is_finite())
        .map(|p| (p.round() as i64).clamp(1, 100) as u32)
        .unwrap_or(100)
}

/// This process's launch-queue depth per stream (`$FREERIDE_SIM_QUEUE_DEPTH`, at least 1).
pub fn queue_depth() -> usize {
    parsed::<usize>(env::SIM_QUEUE_DEPTH)
        .unwrap_or(DEFAULT_QUEUE_DEPTH)
        .max(1)
}

/// Ground-truth trace file (`$FREERIDE_SIM_TRACE`), if set.
pub fn trace_path() -> Option<PathBuf> {
    var(env::SIM_TRACE).map(PathBuf::from)
}
