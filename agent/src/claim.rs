//! The agent's claim of a session directory: exactly one agent serves a directory, whatever the
//! race between agents starting at once.
//!
//! The claim is an exclusive `flock` on `agent.pid` in the directory ([`session::AGENT_PID_FILE`]),
//! held for the agent's life; the file also holds the agent's pid, as information for people and
//! messages. A pid alone is not a claim: two agents that both find no live pid both write theirs.
//! The lock is released by the kernel when the agent's process ends, however it ends, so a killed
//! agent's file never keeps a new one out.
//!
//! The file is removed by the agent that holds it when it stops (before the lock goes). An agent
//! that opened the file just before that removal and then gets the lock holds a file that no
//! longer has the name: it sees that the name now points elsewhere (or nowhere) and starts over.
use freeride_abi::session;
use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// A held claim; dropping it removes the pid file and releases the lock.
#[derive(Debug)]
pub struct Claim {
    file: File,
    path: PathBuf,
    id: (u64, u64),
}

/// Why a claim failed.
#[derive(Debug, PartialEq, Eq)]
pub enum ClaimError {
    /// Another agent holds the directory (its pid, when it has written it yet).
    Held(Option<u32>),
    /// The pid file cannot be made or locked.
    Io(String),
}

impl std::fmt::Display for ClaimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClaimError::Held(Some(pid)) => write!(f, "another agent (pid {pid}) serves"),
            ClaimError::Held(None) => write!(f, "another agent (just starting) serves"),
            ClaimError::Io(e) => write!(f, "{e}"),
        }
    }
}

fn id_of(md: &std::fs::Metadata) -> (u64, u64) {
    (md.dev(), md.ino())
}

/// Claims `dir` (a validated session directory) for this process.
pub fn claim(dir: &Path) -> Result<Claim, ClaimError> {
    let path = dir.join(session::AGENT_PID_FILE);
    let io_err =
        |what: &str, e: io::Error| ClaimError::Io(format!("{what} {}: {e}", path.display()));
    // A holder that removes the file between our open and our lock makes us start over; a few
    // rounds are plenty (each needs another agent to start and stop within it).
    for _ in 0..16 {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| io_err("cannot open", e))?;
        let md = file.metadata().map_err(|e| io_err("cannot stat", e))?;
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        if !md.file_type().is_file() || md.uid() != uid {
            return Err(ClaimError::Io(format!(
                "{} is not a regular file of ours (uid {uid}); remove it",
                path.display()
            )));
        }
        // SAFETY: flock on a descriptor we own; LOCK_NB never blocks.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(ClaimError::Held(text.trim().parse().ok()));
            }
            return Err(io_err("cannot lock", e));
        }
        let id = id_of(&md);
        // The lock is ours; is the file still the one under the name?
        match std::fs::symlink_metadata(&path) {
            Ok(now) if id_of(&now) == id => {}
            _ => continue,
        }
        file.set_len(0).map_err(|e| io_err("cannot write", e))?;
        file.rewind().map_err(|e| io_err("cannot write", e))?;
        file.write_all(format!("{}\n", std::process::id()).as_bytes())
            .map_err(|e| io_err("cannot write", e))?;
        return Ok(Claim { file, path, id });
    }
    Err(ClaimError::Io(format!(
        "{}: other agents keep starting and stopping; try again",
        path.display()
    )))
}

impl Claim {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        // Removed while still locked (see the module docs), and only if it is still ours.
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| id_of(&m) == self.id) {
            let _ = std::fs::remove_file(&self.path);
        }
        let _ = self.file.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::ScratchDir;

    fn dir(tag: &str) -> ScratchDir {
        ScratchDir::new(&format!("claim-{tag}")).unwrap()
    }

    #[test]
    fn a_second_claim_is_refused_while_the_first_is_held_even_without_its_pid_file() {
        let d = dir("held");
        let first = claim(&d.0).unwrap();
        assert_eq!(
            std::fs::read_to_string(first.path()).unwrap().trim(),
            std::process::id().to_string()
        );
        // flock is per open file: a second open in this process conflicts too.
        assert_eq!(
            claim(&d.0).unwrap_err(),
            ClaimError::Held(Some(std::process::id()))
        );
        drop(first);
        assert!(!d.0.join(session::AGENT_PID_FILE).exists());
        let again = claim(&d.0).unwrap();
        drop(again);
    }

    #[test]
    fn a_stale_pid_file_of_a_live_process_does_not_keep_the_agent_out() {
        let d = dir("stale");
        // pid 1 is alive, but it holds no lock: the file is information only.
        std::fs::write(d.0.join(session::AGENT_PID_FILE), "1\n").unwrap();
        let c = claim(&d.0).unwrap();
        assert_eq!(
            std::fs::read_to_string(c.path()).unwrap().trim(),
            std::process::id().to_string()
        );
    }

    #[test]
    fn claims_racing_on_one_directory_leave_exactly_one_holder() {
        let d = dir("race");
        for _ in 0..20 {
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
            let held: Vec<Option<Claim>> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..4)
                    .map(|_| {
                        let b = barrier.clone();
                        let p = d.0.clone();
                        s.spawn(move || {
                            b.wait();
                            claim(&p).ok()
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(held.iter().filter(|c| c.is_some()).count(), 1);
        }
    }

    #[test]
    fn a_planted_symlink_is_not_followed() {
        let d = dir("link");
        let target = d.0.join("elsewhere");
        std::fs::write(&target, "x").unwrap();
        std::os::unix::fs::symlink(&target, d.0.join(session::AGENT_PID_FILE)).unwrap();
        assert!(matches!(claim(&d.0), Err(ClaimError::Io(_))));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "x");
    }
}
