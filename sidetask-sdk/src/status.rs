//! `sidetask-<pid>.json` in the session directory: the task's state and counters, for
//! `freeride status`. Replaced atomically (written to a temporary name, then renamed), at most
//! every `status_interval_ms` except at life-cycle transitions, which are always written.
//!
//! ```json
//! {"pid":123,"task":"pagerank","mode":"iterative","device":4096,"ordinal":0,"state":"running","steps":40,"partial_steps":3,
//!  "gpu_busy_ns":81234000,"last_step_ns":2010000,"step_estimate_ns":2600000,"priority":0,"mem_held_bytes":0,
//!  "overruns":0,"started_ns":...,"updated_ns":...}
//! ```
//!
//! `device` is the task's GPU as the interposer's records name it (the packed PCI bus id,
//! `freeride_abi::GpuId`; -1 until the driver has named it), `ordinal` its device ordinal in the
//! task's process.
use freeride_abi::now_ns;
use serde::Serialize;
use std::path::{Path, PathBuf};

pub const STATUS_PREFIX: &str = "sidetask-";
pub const STATUS_SUFFIX: &str = ".json";

#[derive(Clone, Debug, Default, Serialize)]
pub struct StatusRecord {
    pub pid: u32,
    pub task: String,
    pub mode: &'static str,
    /// The GPU ([`freeride_abi::GpuId`] as the records' `device` field; -1 not named yet).
    pub device: i64,
    pub ordinal: u32,
    pub state: &'static str,
    pub steps: u64,
    /// Of which partial (the task scaled its work to the grant's end).
    pub partial_steps: u64,
    pub gpu_busy_ns: u64,
    pub last_step_ns: u64,
    pub step_estimate_ns: u64,
    pub priority: u64,
    pub mem_held_bytes: u64,
    pub overruns: u64,
    /// Times the step estimate came down (see `TaskConfig::relax_after_grants`).
    pub estimate_relaxed: u64,
    pub started_ns: u64,
    pub updated_ns: u64,
}

pub fn status_file_name(pid: u32) -> String {
    format!("{STATUS_PREFIX}{pid}{STATUS_SUFFIX}")
}

pub struct StatusFile {
    path: PathBuf,
    tmp: PathBuf,
    interval_ns: u64,
    last_ns: u64,
    warned: bool,
}

impl StatusFile {
    pub fn new(dir: &Path, interval_ms: u64) -> Self {
        let pid = std::process::id();
        StatusFile {
            path: dir.join(status_file_name(pid)),
            tmp: dir.join(format!(".{}.tmp", status_file_name(pid))),
            interval_ns: interval_ms * 1_000_000,
            last_ns: 0,
            warned: false,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `rec` if `force` or the interval has passed. Failures are reported once on stderr
    /// and otherwise ignored: status is never a reason for a side task to fail.
    pub fn update(&mut self, rec: &mut StatusRecord, force: bool) {
        let now = now_ns();
        if !force && now.saturating_sub(self.last_ns) < self.interval_ns {
            return;
        }
        self.last_ns = now;
        rec.updated_ns = now;
        let res = serde_json::to_vec(rec)
            .map_err(std::io::Error::other)
            .and_then(|mut body| {
                body.push(b'\n');
                std::fs::write(&self.tmp, body)?;
                std::fs::rename(&self.tmp, &self.path)
            });
        if let Err(e) = res {
            if !self.warned {
                self.warned = true;
                eprintln!(
                    "freeride-sidetask: cannot write {}: {e} (status not reported)",
                    self.path.display()
                );
            }
        }
    }
}
