//! Private folders of one run (`freeride doctor`'s probe, the test bed's `freeride sim`, tests):
//! [`ScratchDir`], under /dev/shm (mode 0700), removed on drop; the folders of earlier runs that
//! were killed before they could remove their own are removed by the next one of their kind.
use freeride_abi::{now_ns, session};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A folder under /dev/shm (mode 0700) removed on drop.
pub struct ScratchDir(pub PathBuf);

impl ScratchDir {
    pub fn new(tag: &str) -> Result<ScratchDir, String> {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        remove_stale_scratch(&base, tag);
        let p = base.join(format!(
            "freeride-{tag}-{}-{}",
            std::process::id(),
            now_ns()
        ));
        session::ensure_dir(&p).map_err(|e| format!("cannot create {}: {e}", p.display()))?;
        Ok(ScratchDir(p))
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Removes the folders `<base>/freeride-<tag>-<pid>-<n>` of earlier runs whose process is gone
/// (a `freeride sim` killed with SIGKILL cannot remove its own; its children end with it), if
/// they are ours. A folder of a live process, or one whose pid was reused, is left alone.
pub fn remove_stale_scratch(base: &Path, tag: &str) {
    let prefix = format!("freeride-{tag}-");
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|n| n.split_once('-'))
            .and_then(|(pid, n)| n.parse::<u64>().ok().and(pid.parse::<u32>().ok()))
        else {
            continue;
        };
        let ours = e
            .path()
            .symlink_metadata()
            .is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if ours && pid != std::process::id() && !freeride_abi::session::pid_alive(pid) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_scratch_folders_of_gone_processes_are_removed_and_live_ones_kept() {
        let base = ScratchDir::new("stale-base").unwrap();
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        gone.wait().unwrap();
        let dead = base.0.join(format!("freeride-session-{}-5", gone.id()));
        let live = base
            .0
            .join(format!("freeride-session-{}-6", std::process::id()));
        let other = base.0.join(format!("freeride-gpu-{}-7", gone.id()));
        let odd = base.0.join(format!("freeride-session-{}", gone.id()));
        for d in [&dead, &live, &other, &odd] {
            std::fs::create_dir(d).unwrap();
        }
        remove_stale_scratch(&base.0, "session");
        assert!(!dead.exists());
        assert!(live.exists() && other.exists() && odd.exists());
    }
}
