//! How promptly trainers report their communication ops' ends, steered by whether anyone on the
//! node harvests bubbles.
//!
//! Reporting each op's end the moment the GPU reaches it costs a trainer a thread wake-up per op
//! (+2.3-2.5 % iteration time on the test bed's 2 ms stress job, +1.9 % on a 16-core host; see
//! docs/perf-hook.md). Only grants need ends that early: a grant opened on a bubble the agent still
//! believes open, because its end has not been read yet, would let side tasks run over the
//! trainer's compute. So while no side task is on the node (no side-task ring, no SDK task's status
//! file), the agent lets its trainers' comm threads read ends in batches (the ring header's
//! `lazy_ends_until_ns`, renewed every [`LAZY_RENEW_NS`] for [`LAZY_LEASE_NS`]: an agent that dies
//! lets it run out), and asks for prompt ends again as soon as one appears. The GPU's times of a
//! lazily read end are exact; only their arrival waits.
//!
//! Grants are safe whatever a trainer does: each process says in its ring header until when its
//! ends may still arrive late ([`freeride_abi::ring::RingHeader::ends_late_until`]), and a GPU
//! with such a trainer gets no grant until that time has passed ([`ends_may_be_late`]), whether
//! its laziness came from this agent's word or from `FREERIDE_COMM_ENDS=lazy`.
use crate::collect::{Collector, ProcessView};
use crate::inference::Ns;
use freeride_abi::Role;

/// How long the agent's word lets a trainer's ends be lazy.
pub const LAZY_LEASE_NS: Ns = 1_000_000_000;
/// How often the agent renews the word while nobody harvests (also how soon a ring that opened
/// meanwhile hears it).
pub const LAZY_RENEW_NS: Ns = 100_000_000;
/// What the agent adds to a process's "late until" before it grants again: its own poll's lag.
pub const ENDS_SETTLE_NS: Ns = 5_000_000;

/// The agent's side of the ends' promptness.
#[derive(Debug, Default)]
pub struct EndsSteering {
    /// Whether this node may let ends be lazy at all (`freeride agent`; never `freeride sim`,
    /// whose runs without side tasks measure grants as if there were some).
    allowed: bool,
    /// When the word was last written, and what (0: prompt).
    written: Option<(Ns, Ns)>,
}

impl EndsSteering {
    /// Ends always prompt (the agent never writes the word).
    pub fn prompt() -> EndsSteering {
        EndsSteering::default()
    }

    /// Ends lazy while nobody harvests.
    pub fn lazy_while_nobody_harvests() -> EndsSteering {
        EndsSteering {
            allowed: true,
            written: None,
        }
    }

    /// Whether trainers are being told their ends may be lazy now.
    pub fn lazy_now(&self) -> bool {
        self.written.is_some_and(|(_, until)| until != 0)
    }

    /// Writes the word into the trainers' rings when it changes or is due for renewal.
    /// `harvest`: a side task is on the node.
    pub fn steer(&mut self, now: Ns, harvest: bool, collector: &Collector) {
        if !self.allowed {
            return;
        }
        let until = if harvest { 0 } else { now + LAZY_LEASE_NS };
        let due = match self.written {
            None => true,
            Some((_, 0)) => until != 0,
            Some((at, _)) => until == 0 || now.saturating_sub(at) >= LAZY_RENEW_NS,
        };
        if due {
            collector.let_trainer_ends_be_lazy_until(until);
            self.written = Some((now, until));
        }
    }
}

/// Whether a side task is on the node, as its rings show (the SDK's status files are the caller's).
pub fn sidetask_ring_live(procs: &[ProcessView]) -> bool {
    procs
        .iter()
        .any(|p| p.role == Some(Role::Sidetask) && !p.gone)
}

/// Whether a trainer whose ends may come as late as one of `late_until` (each a process's word, 0:
/// never said) may still report an end late at `now`: its GPU gets no grant. The words must be
/// read after the agent's last word was written ([`Collector::ends_late_until`] after
/// [`EndsSteering::steer`]): a comm thread says how late its ends may come, then looks at the
/// agent's word once more before it sleeps (both sequentially consistent), so either the agent
/// reads what it said or it sees the agent's "prompt" and does not sleep.
pub fn ends_may_be_late(late_until: impl IntoIterator<Item = Ns>, now: Ns) -> bool {
    late_until
        .into_iter()
        .any(|t| t != 0 && t.saturating_add(ENDS_SETTLE_NS) > now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc(pid: u32, role: Role, late: Ns) -> ProcessView {
        ProcessView {
            pid,
            role: Some(role),
            device: 0,
            gone: false,
            events: 0,
            dropped: 0,
            invalid: 0,
            mem_held_bytes: 0,
            mem_by_device: vec![],
            ends_late_until_ns: late,
        }
    }

    #[test]
    fn a_trainer_whose_ends_may_be_late_blocks_its_gpus_grants_until_they_cannot() {
        assert!(!ends_may_be_late([0], 500), "never said");
        assert!(ends_may_be_late([0, 1_000], 500));
        assert!(ends_may_be_late([1_000], 1_000 + ENDS_SETTLE_NS - 1));
        assert!(!ends_may_be_late([1_000], 1_000 + ENDS_SETTLE_NS));
    }

    #[test]
    fn only_a_live_sidetask_ring_counts_as_harvesting() {
        let mut side = proc(3, Role::Sidetask, 0);
        assert!(!sidetask_ring_live(&[proc(1, Role::Trainer, 0)]));
        assert!(sidetask_ring_live(&[side.clone()]));
        side.gone = true;
        assert!(!sidetask_ring_live(&[side]));
    }

    /// The word a ring's header holds at offset 320 (`lazy_ends_until_ns`).
    fn word_of(path: &std::path::Path) -> u64 {
        use std::os::unix::fs::FileExt;
        let mut b = [0u8; 8];
        std::fs::File::open(path)
            .unwrap()
            .read_exact_at(&mut b, 320)
            .unwrap();
        u64::from_le_bytes(b)
    }

    /// The agent's word reaches a trainer's ring and not a side task's; with a side task on the
    /// node the trainer is asked for prompt ends.
    #[test]
    fn the_word_reaches_the_trainers_ring_and_is_cleared_when_a_sidetask_is_seen() {
        use crate::collect::test_rings::ring_file;
        let dir = std::env::temp_dir().join(format!("freeride-ends-ring-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        freeride_abi::session::ensure_dir(&dir).unwrap();
        let me = std::process::id();
        let trainer = ring_file(&dir, me, 1, Role::Trainer);
        let mut col = Collector::new(&dir);
        let mut obs = vec![];
        col.poll(1_000_000, &mut obs);
        assert!(!sidetask_ring_live(&col.processes()));
        let mut s = EndsSteering::lazy_while_nobody_harvests();
        let now = 2_000_000;
        s.steer(now, false, &col);
        assert_eq!(word_of(&trainer), now + LAZY_LEASE_NS);
        // A side task comes: its ring is never written, and the trainer is asked for prompt ends.
        let side = ring_file(&dir, me, 2, Role::Sidetask);
        let later = now + LAZY_RENEW_NS;
        col.poll(later, &mut obs);
        s.steer(later, false, &col);
        assert_eq!(word_of(&trainer), later + LAZY_LEASE_NS, "renewed");
        assert_eq!(word_of(&side), 0, "a side task's ring is never written");
        let harvest = sidetask_ring_live(&col.processes());
        assert!(harvest);
        s.steer(later + 1, harvest, &col);
        assert_eq!(word_of(&trainer), 0);
        drop(col);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_word_is_renewed_while_nobody_harvests_and_cleared_at_once_when_someone_does() {
        let dir = std::env::temp_dir().join(format!("freeride-ends-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let col = Collector::new(&dir);
        let mut never = EndsSteering::prompt();
        never.steer(1, false, &col);
        assert!(!never.lazy_now());
        let mut s = EndsSteering::lazy_while_nobody_harvests();
        s.steer(1_000, false, &col);
        assert_eq!(s.written, Some((1_000, 1_000 + LAZY_LEASE_NS)));
        s.steer(1_000 + LAZY_RENEW_NS - 1, false, &col);
        assert_eq!(
            s.written,
            Some((1_000, 1_000 + LAZY_LEASE_NS)),
            "not due yet"
        );
        s.steer(1_000 + LAZY_RENEW_NS, false, &col);
        assert_eq!(
            s.written,
            Some((1_000 + LAZY_RENEW_NS, 1_000 + LAZY_RENEW_NS + LAZY_LEASE_NS))
        );
        s.steer(1_000 + LAZY_RENEW_NS + 1, true, &col);
        assert_eq!(s.written, Some((1_000 + LAZY_RENEW_NS + 1, 0)), "at once");
        assert!(!s.lazy_now());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
