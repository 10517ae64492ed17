//! The agent's side of the session doorbell ([`freeride_abi::doorbell`]): between bubbles it
//! sleeps until a trainer's comm poller rings (or [`QUIET_WAIT_NS`] passes) instead of waking
//! every poll interval.
use crate::inference::Ns;
use freeride_abi::doorbell::{Doorbell, DOORBELL_FILE};
use freeride_abi::session;
use freeride_abi::shm_file::file_id;
use std::path::{Path, PathBuf};

/// The longest sleep on the doorbell between bubbles: what else the agent does (new rings,
/// liveness, the watchdog, heartbeats, memory accounting) is fine at this pace.
pub const QUIET_WAIT_NS: Ns = 2_000_000;
/// How often making the doorbell is tried again after a failure.
const RETRY_NS: Ns = 1_000_000_000;

/// How the agent waits before its next step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pause {
    /// Records are waiting in a ring: no pause.
    None,
    /// Sleep this long.
    Sleep(Ns),
    /// Sleep on the doorbell, at most this long.
    Doorbell(Ns),
}

/// What the next pause is: `backlog` (the last step left records in a ring), `watching` (any
/// ring open), `bubble_open` (any GPU's), `all_ring` (every trainer's poller rings the doorbell),
/// `bell` (the agent has one).
pub fn pause_for(
    backlog: bool,
    watching: bool,
    bubble_open: bool,
    all_ring: bool,
    bell: bool,
    poll_ns: Ns,
) -> Pause {
    if backlog {
        Pause::None
    } else if !watching {
        Pause::Sleep(crate::node::IDLE_POLL_NS.max(poll_ns))
    } else if bubble_open || !all_ring || !bell {
        Pause::Sleep(poll_ns)
    } else {
        Pause::Doorbell(QUIET_WAIT_NS.max(poll_ns))
    }
}

/// The doorbell as the agent holds it: made on the first step, kept for the agent's life.
pub struct Bell {
    dir: PathBuf,
    door: Option<Doorbell>,
    enabled: bool,
    tried_ns: Option<Ns>,
    /// The ring count when the current step began.
    seen: u32,
    pub warnings: Vec<String>,
}

impl Bell {
    /// `FREERIDE_DOORBELL=0` disables it (the agent then polls at its interval throughout).
    pub fn new(dir: &Path) -> Bell {
        let enabled = std::env::var(freeride_abi::env::DOORBELL).map_or(true, |v| v != "0");
        Bell {
            dir: dir.to_path_buf(),
            door: None,
            enabled,
            tried_ns: None,
            seen: 0,
            warnings: vec![],
        }
    }

    /// At the start of a step: makes the doorbell if due, and notes the ring count (a ring after
    /// this wakes the next wait at once).
    pub fn step_begins(&mut self, now: Ns) {
        if self.enabled
            && self.door.is_none()
            && self
                .tried_ns
                .is_none_or(|t| now.saturating_sub(t) >= RETRY_NS)
        {
            self.tried_ns = Some(now);
            match Doorbell::open_or_create(&self.dir) {
                Ok(d) => self.door = Some(d),
                Err(e) if self.dir.exists() => {
                    self.warnings.push(format!(
                        "cannot make the doorbell in {}: {e}; polling between bubbles too",
                        self.dir.display()
                    ));
                    self.enabled = false;
                }
                // No session directory yet: try again later.
                Err(_) => {}
            }
        }
        if let Some(d) = &self.door {
            self.seen = d.seq();
        }
    }

    /// At the agent's exit: removes the doorbell it made or took over, unless a live process
    /// still has a ring in the directory (that trainer's comm poller maps the doorbell and rings
    /// it; the next agent takes the same file over, so the poller's mapping stays the one in
    /// use). A poller whose doorbell disappeared notices within its next check and looks for a
    /// new one (see `interpose/src/comm.rs`).
    pub fn remove_at_exit(&mut self) {
        let Some(d) = self.door.take() else { return };
        let live = session::list_rings(&self.dir)
            .unwrap_or_default()
            .iter()
            .filter_map(|p| {
                p.file_name()?
                    .to_str()
                    .and_then(session::parse_ring_file_name)
            })
            .any(|(pid, _)| session::pid_running(pid));
        let path = self.dir.join(DOORBELL_FILE);
        if !live && file_id(&path) == Some(d.file_id()) {
            let _ = std::fs::remove_file(&path);
        }
    }

    pub fn ready(&self) -> bool {
        self.door.is_some()
    }

    /// Waits as `p` says.
    pub fn pause(&self, p: Pause) {
        match (p, &self.door) {
            (Pause::None, _) => {}
            (Pause::Doorbell(ns), Some(d)) => {
                d.wait(self.seen, ns);
            }
            (Pause::Doorbell(ns), None) | (Pause::Sleep(ns), _) => {
                std::thread::sleep(std::time::Duration::from_nanos(ns))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_sleeps_on_the_doorbell_only_between_bubbles_of_trainers_that_ring() {
        let poll = 50_000;
        assert_eq!(
            pause_for(false, false, false, true, true, poll),
            Pause::Sleep(crate::node::IDLE_POLL_NS)
        );
        assert_eq!(
            pause_for(false, true, true, true, true, poll),
            Pause::Sleep(poll)
        );
        assert_eq!(
            pause_for(false, true, false, false, true, poll),
            Pause::Sleep(poll)
        );
        assert_eq!(
            pause_for(false, true, false, true, false, poll),
            Pause::Sleep(poll)
        );
        assert_eq!(
            pause_for(false, true, false, true, true, poll),
            Pause::Doorbell(QUIET_WAIT_NS)
        );
        // Records left in a ring: read on at once, whatever else holds.
        for (w, o, a, b) in [(true, false, true, true), (true, true, false, false)] {
            assert_eq!(pause_for(true, w, o, a, b, poll), Pause::None);
        }
    }

    #[test]
    fn a_step_after_a_ring_does_not_sleep() {
        let dir = std::env::temp_dir().join(format!("frbell-agent-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        freeride_abi::session::ensure_dir(&dir).unwrap();
        let mut b = Bell::new(&dir);
        b.step_begins(1);
        assert!(b.ready(), "{:?}", b.warnings);
        // A poller rings while the agent's step runs: the pause after it returns at once.
        Doorbell::open(&dir).unwrap().ring();
        let t0 = std::time::Instant::now();
        b.pause(Pause::Doorbell(60_000_000_000));
        assert!(t0.elapsed() < std::time::Duration::from_secs(30));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// At its exit the agent removes the doorbell, unless a live process still has a ring in the
    /// directory (its comm poller rings that file, and the next agent takes it over).
    #[test]
    fn the_doorbell_goes_at_exit_unless_a_live_process_rings_it() {
        let dir = crate::scratch::ScratchDir::new("bell-exit").unwrap();
        let bell_file = dir.0.join(DOORBELL_FILE);
        let ring = dir.0.join(session::ring_file_name(std::process::id(), 1));
        std::fs::write(&ring, b"").unwrap();
        let mut b = Bell::new(&dir.0);
        b.step_begins(1);
        assert!(b.ready() && bell_file.exists());
        b.remove_at_exit();
        assert!(
            bell_file.exists(),
            "removed while a live process has a ring"
        );
        std::fs::remove_file(&ring).unwrap();
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        gone.wait().unwrap();
        std::fs::write(dir.0.join(session::ring_file_name(gone.id(), 1)), b"").unwrap();
        let mut b = Bell::new(&dir.0);
        b.step_begins(1);
        b.remove_at_exit();
        assert!(!bell_file.exists(), "kept for a process that is gone");
    }
}
