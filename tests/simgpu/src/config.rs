//! The test bed's environment (see [`crate::abi::env`]), read with defaults.
use crate::abi::env;
use crate::arbiter::Mode;
use std::path::PathBuf;

/// Default number of simulated devices.
pub const DEFAULT_DEVICES: i32 = 8;
/// Default device memory in MiB (80 GiB).
pub const DEFAULT_MEM_MIB: u64 = 81_920;

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
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
    var(env::SIM_DEVICES)
        .and_then(|v| v.trim().parse::<i32>().ok())
        .map(|n| n.clamp(0, 64))
        .unwrap_or(DEFAULT_DEVICES)
}

/// Device memory in bytes (`$FREERIDE_SIM_MEM_MIB`).
pub fn mem_bytes() -> u64 {
    var(env::SIM_MEM_MIB)
        .and_then(|v| v.trim().parse::<u64>().ok())
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

/// This process's MPS SM share in percent (`$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`, 1..=100, default 100).
pub fn mps_share() -> u32 {
    var(env::MPS_THREAD_PERCENTAGE)
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|p| p.is_finite())
        .map(|p| (p.round() as i64).clamp(1, 100) as u32)
        .unwrap_or(100)
}

/// Ground-truth trace file (`$FREERIDE_SIM_TRACE`), if set.
pub fn trace_path() -> Option<PathBuf> {
    var(env::SIM_TRACE).map(PathBuf::from)
}
