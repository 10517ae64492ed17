//! The session directory: where rings (and later grant blocks) live.
//!
//! * Default: `/dev/shm/freeride-<uid>`, mode 0700, owned by the user; `FREERIDE_DIR` overrides.
//! * `ring-<pid>-<start_ns>.ring`: one event ring per process instance (a new one after fork or
//!   exec: the pid alone is not unique across exec). It appears complete: the writer sizes and
//!   initializes `ring-<pid>-<start_ns>.staging` and then links it under the final name, so a
//!   reader never sees an empty or half-written ring under a ring name. A `.staging` file whose
//!   process is gone was left by a crash mid-creation; the agent removes it.
//! * `grant-<bus id>` (`grant-0000:11:00.0`): the per-GPU grant control block of the side-task
//!   gate (see [`crate::grant`]), named by the physical GPU ([`crate::gpu::GpuId`]), whatever
//!   ordinal each process has for it.
//! * `agent.pid`: the pid of the agent that serves the directory, as information only. The claim
//!   itself is an exclusive `flock` on the directory, held for the agent's life: exactly one agent
//!   per directory, whatever the race (`agent/src/claim.rs`). Removed by that agent when it stops.
//! * `doorbell`: the futex word that wakes the agent (see [`crate::doorbell`]).
//! * `agent-status.json`: the agent's published state (for `freeride status`).
//! * `sidetask-<pid>.json`: an SDK side task's state; the agent removes it once the process is
//!   gone.
//!
//! What the agent made goes when it stops: its pid file, its state, the grant blocks (side tasks
//! then read "no agent"; a mapping they hold stays valid), and the doorbell unless a live
//! process still has a ring here (its comm poller rings that file; the next agent takes it over).
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub const RING_PREFIX: &str = "ring-";
pub const RING_SUFFIX: &str = ".ring";
/// A ring being created (see the module docs): never listed by [`list_rings`].
pub const RING_STAGING_SUFFIX: &str = ".staging";
pub const GRANT_PREFIX: &str = "grant-";
pub const AGENT_PID_FILE: &str = "agent.pid";

/// `/dev/shm/freeride-<uid>`.
pub fn default_dir() -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    PathBuf::from(format!("/dev/shm/freeride-{uid}"))
}

/// `FREERIDE_DIR` if set and non-empty, else [`default_dir`].
pub fn resolve_dir() -> PathBuf {
    match std::env::var_os(crate::env::DIR) {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => default_dir(),
    }
}

/// Checks that `dir` is a real directory (not a symlink) owned by us and not accessible to
/// group or others.
pub fn validate_dir(dir: &Path) -> io::Result<()> {
    let md = std::fs::symlink_metadata(dir)?;
    if md.file_type().is_symlink() {
        let target = std::fs::read_link(dir)
            .map(|t| format!(" (to {})", t.display()))
            .unwrap_or_default();
        return Err(io::Error::other(format!(
            "{} is a symbolic link{target}: a session directory must be a real directory (a link \
             could be re-pointed by someone else); name the directory itself",
            dir.display()
        )));
    }
    if !md.file_type().is_dir() {
        return Err(io::Error::other(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if md.uid() != uid {
        return Err(io::Error::other(format!(
            "{} is owned by uid {}, not by us ({uid})",
            dir.display(),
            md.uid()
        )));
    }
    if md.mode() & 0o077 != 0 {
        return Err(io::Error::other(format!(
            "{} has mode {:o}; it must not be accessible to others (0700)",
            dir.display(),
            md.mode() & 0o777
        )));
    }
    Ok(())
}

/// Creates the session directory (mode 0700) if needed and validates it.
pub fn ensure_dir(dir: &Path) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {
            // umask may have cleared bits we want; make it exactly 0700.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    validate_dir(dir)
}

pub fn ring_file_name(pid: u32, start_ns: u64) -> String {
    format!("{RING_PREFIX}{pid}-{start_ns}{RING_SUFFIX}")
}

/// Where the ring of [`ring_file_name`] is built before it is published.
pub fn ring_staging_name(pid: u32, start_ns: u64) -> String {
    format!("{RING_PREFIX}{pid}-{start_ns}{RING_STAGING_SUFFIX}")
}

/// `(pid, start_ns)` of a ring file name.
pub fn parse_ring_file_name(name: &str) -> Option<(u32, u64)> {
    parse_pid_start(name, RING_SUFFIX)
}

/// `(pid, start_ns)` of a staging ring's name.
pub fn parse_ring_staging_name(name: &str) -> Option<(u32, u64)> {
    parse_pid_start(name, RING_STAGING_SUFFIX)
}

fn parse_pid_start(name: &str, suffix: &str) -> Option<(u32, u64)> {
    let s = name.strip_prefix(RING_PREFIX)?.strip_suffix(suffix)?;
    let (p, t) = s.split_once('-')?;
    Some((p.parse().ok()?, t.parse().ok()?))
}

/// `grant-<bus id>` of GPU `gpu`.
pub fn grant_file_name(gpu: crate::gpu::GpuId) -> String {
    format!("{GRANT_PREFIX}{gpu}")
}

/// The GPU of a grant block's file name.
pub fn parse_grant_file_name(name: &str) -> Option<crate::gpu::GpuId> {
    crate::gpu::GpuId::parse(name.strip_prefix(GRANT_PREFIX)?)
}

/// The entries of `dir` whose names `parse` takes, with what it made of them.
fn list_named(
    dir: &Path,
    parse: fn(&str) -> Option<(u32, u64)>,
) -> io::Result<Vec<(PathBuf, (u32, u64))>> {
    let mut v = vec![];
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if let Some(id) = e.file_name().to_str().and_then(parse) {
            v.push((e.path(), id));
        }
    }
    Ok(v)
}

/// Staging rings in `dir` (see the module docs), with their pids.
pub fn list_staging(dir: &Path) -> io::Result<Vec<(PathBuf, u32)>> {
    Ok(list_named(dir, parse_ring_staging_name)?
        .into_iter()
        .map(|(p, (pid, _))| (p, pid))
        .collect())
}

/// All ring files in `dir`, sorted by name.
pub fn list_rings(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = list_named(dir, parse_ring_file_name)?
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    v.sort();
    Ok(v)
}

/// Whether process `pid` exists (signal 0; a zombie still does). Cheap: the agent asks it of
/// every ring on every poll.
pub fn pid_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid as i32, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Whether process `pid` runs: exists and is not a zombie (dead, not yet reaped by its parent; it
/// holds no memory, GPU context or CPU any more). Reads /proc: for checks every few ms, not for
/// every poll.
pub fn pid_running(pid: u32) -> bool {
    pid_alive(pid) && !is_zombie(pid)
}

/// `/proc/<pid>/stat` says Z (zombie) or X (dead). Unreadable: not a zombie.
fn is_zombie(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": comm may hold spaces and parentheses; the state follows the last ')'.
    stat.rfind(')')
        .and_then(|i| stat[i + 1..].trim_start().chars().next())
        .is_some_and(|c| c == 'Z' || c == 'X')
}

pub(crate) fn cstring(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::other("path contains NUL"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zombie_is_not_running() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Not reaped yet: a zombie once it has exited.
        let t0 = std::time::Instant::now();
        while !is_zombie(pid) && t0.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!pid_running(pid), "a zombie counts as running");
        assert!(pid_alive(pid), "a zombie still exists");
        child.wait().unwrap();
        assert!(pid_running(std::process::id()));
    }

    #[test]
    fn names() {
        let n = ring_file_name(42, 7);
        assert_eq!(parse_ring_file_name(&n), Some((42, 7)));
        assert_eq!(parse_ring_file_name("ring-x-1.ring"), None);
        assert_eq!(parse_ring_file_name("grant-0000:10:00.0"), None);
        let g = crate::gpu::GpuId::parse("0000:11:00.0").unwrap();
        assert_eq!(grant_file_name(g), "grant-0000:11:00.0");
        assert_eq!(parse_grant_file_name(&grant_file_name(g)), Some(g));
        assert_eq!(parse_grant_file_name("grant-gpu0"), None);
        let st = ring_staging_name(42, 7);
        assert_eq!(parse_ring_staging_name(&st), Some((42, 7)));
        assert_eq!(
            parse_ring_file_name(&st),
            None,
            "a staging ring is not a ring"
        );
        assert_eq!(parse_ring_staging_name(&n), None);
    }

    #[test]
    fn ensure_and_validate() {
        let base = std::env::temp_dir().join(format!("frabi-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        ensure_dir(&base).unwrap();
        ensure_dir(&base).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(validate_dir(&base).is_err());
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = base.with_extension("lnk");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&base, &link).unwrap();
        let e = validate_dir(&link).unwrap_err().to_string();
        assert!(
            e.contains("is a symbolic link") && e.contains(&base.display().to_string()),
            "{e}"
        );
        std::fs::remove_file(&link).unwrap();
        std::fs::remove_dir_all(&base).unwrap();
    }
}
