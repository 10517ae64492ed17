//! `/dev/shm`, where the session directory and every process's ring live: it must exist, be a
//! tmpfs (the rings are shared memory: on disk they would be written back), let every user create
//! their own session directory (mode 1777), and have room for the rings of the node's processes.
use super::{size, Finding, Level};
use freeride_abi::ring;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

const CHECK: &str = "/dev/shm";
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// Bytes of one process's ring with the configured capacity (`FREERIDE_RING_CAPACITY`).
pub fn ring_bytes() -> u64 {
    let cap = std::env::var(freeride_abi::env::RING_CAPACITY)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(ring::DEFAULT_CAPACITY as u64);
    4096 + 64 * cap
}

/// Checks `path` (normally `/dev/shm`) for `processes` rings.
pub fn check(path: &Path, processes: u64) -> Vec<Finding> {
    let mut out = vec![];
    let md = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => {
            out.push(Finding::new(
                CHECK,
                Level::Fail,
                format!("{}: {e}: freeride keeps its rings in shared memory there (in Kubernetes mount an emptyDir with medium Memory or the host's /dev/shm; in Docker --shm-size / --ipc=host)", path.display()),
            ));
            return out;
        }
    };
    let mode = md.mode() & 0o7777;
    if !md.is_dir() {
        out.push(Finding::new(
            CHECK,
            Level::Fail,
            format!("{} is not a directory", path.display()),
        ));
        return out;
    }
    if mode & 0o1777 != 0o1777 {
        out.push(Finding::new(
            CHECK,
            Level::Fail,
            format!(
                "{} has mode {mode:04o}, not 1777: users other than its owner cannot create their session directories (chmod 1777 {})",
                path.display(),
                path.display()
            ),
        ));
    }
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return out;
    };
    // SAFETY: a zeroed statfs is a valid out-buffer; `c` is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: see above.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        out.push(Finding::new(
            CHECK,
            Level::Fail,
            format!(
                "statfs {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            ),
        ));
        return out;
    }
    if st.f_type as i64 != TMPFS_MAGIC {
        out.push(Finding::new(
            CHECK,
            Level::Fail,
            format!(
                "{} is not a tmpfs (filesystem type {:#x}): the rings would be written to disk",
                path.display(),
                st.f_type as i64
            ),
        ));
    }
    let bsize = st.f_bsize as u64;
    let total = st.f_blocks as u64 * bsize;
    let free = st.f_bavail as u64 * bsize;
    let need = processes.saturating_mul(ring_bytes());
    if free < need {
        out.push(Finding::new(
            CHECK,
            Level::Fail,
            format!(
                "{} has {} free of {}: the rings of {processes} processes need {} (raise the size: Docker --shm-size, a Kubernetes emptyDir sizeLimit; or fewer ring slots: FREERIDE_RING_CAPACITY)",
                path.display(),
                size(free),
                size(total),
                size(need)
            ),
        ));
    }
    if out.is_empty() {
        out.push(Finding::new(
            CHECK,
            Level::Ok,
            format!(
                "tmpfs, {} free of {}, mode {mode:04o} (room for {} rings of {})",
                size(free),
                size(total),
                free / ring_bytes().max(1),
                size(ring_bytes())
            ),
        ));
    }
    out
}
