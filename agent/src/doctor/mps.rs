//! CUDA MPS: freeride works with and without it (without: the trainer and side tasks time-slice
//! the GPU; with: they share its SMs, `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` caps a side task). What
//! goes wrong is a half state: a pipe directory whose control daemon is gone (CUDA clients then
//! fail or hang connecting to it), or a daemon this environment does not point at.
use super::{Finding, Level};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

const CHECK: &str = "mps";
/// The control daemon's executable name.
pub const DAEMON: &str = "nvidia-cuda-mps-control";
/// The pipe directory CUDA uses without `CUDA_MPS_PIPE_DIRECTORY`.
pub const DEFAULT_PIPE_DIR: &str = "/tmp/nvidia-mps";

/// Pids of running MPS control daemons (by their executable's name in `/proc/<pid>/cmdline`).
pub fn daemons(proc_dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(proc_dir) else {
        return vec![];
    };
    let mut pids: Vec<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(proc_dir.join(pid.to_string()).join("cmdline")).is_ok_and(|c| {
                let argv0 = c.split(|b| *b == 0).next().unwrap_or(&[]);
                Path::new(std::ffi::OsStr::from_bytes(argv0))
                    .file_name()
                    .is_some_and(|n| n == DAEMON)
            })
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// The MPS state as this environment's CUDA clients would see it.
pub fn check(proc_dir: &Path) -> Vec<Finding> {
    let pipe_dir = std::env::var_os("CUDA_MPS_PIPE_DIRECTORY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_PIPE_DIR));
    let control = pipe_dir.join("control");
    let pipe = control.exists();
    let pids = daemons(proc_dir);
    let f = match (pids.is_empty(), pipe) {
        (true, false) => Finding::new(
            CHECK,
            Level::Info,
            "off: side tasks time-slice the GPU with the trainer",
        ),
        (false, true) => Finding::new(
            CHECK,
            Level::Info,
            format!(
                "on: control daemon pid {} ({}); side tasks share the SMs (cap one with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE)",
                pids.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
                pipe_dir.display()
            ),
        ),
        (true, true) => Finding::new(
            CHECK,
            Level::Fail,
            format!(
                "{} exists but no {DAEMON} runs: CUDA clients try to connect to a dead MPS server (start the daemon, or remove the stale pipe directory)",
                control.display()
            ),
        ),
        (false, false) => Finding::new(
            CHECK,
            Level::Warn,
            format!(
                "{DAEMON} runs (pid {}) but not at {} (this environment's pipe directory): this node's processes may not all use MPS alike (set CUDA_MPS_PIPE_DIRECTORY as the daemon's)",
                pids.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
                pipe_dir.display()
            ),
        ),
    };
    vec![f]
}
