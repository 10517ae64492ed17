//! How long a communication op keeps the GPU busy moving data (its *transfer*), learnt
//! conservatively: an over-estimate only shortens bubbles and grants, an under-estimate would put a
//! grant on a transferring kernel.
//!
//! An op's duration is its wait for its peers plus its transfer, so every duration bounds the
//! transfer of an op of its class on its communicator from above (point-to-point ops of any kind
//! move data over the same links at the same cost per byte; each collective kind is its own class),
//! and so does the same duration scaled up by the size ratio for a larger op. A receive's own
//! duration bounds nothing else: a receive posted after an eager send's data arrived ends at once,
//! while the send, and a receive whose data was still on its way, did transfer. The estimate of an op
//! is the smallest such bound over the recent ops of its (communicator, class); [`Transfers::bound`] adds bounds found elsewhere
//! (the end of a collective minus the latest begin of its members seen on this node). With nothing
//! learnt yet for its kind, an op is taken to transfer for its whole duration.
use super::obs::{CommKind, CommSig, Ns};
use std::collections::{HashMap, VecDeque};
use std::sync::OnceLock;

/// NCCL's buffer per channel by default (`NCCL_BUFFSIZE`), bytes.
pub const NCCL_BUFFSIZE_DEFAULT: u64 = 4 << 20;

/// What a send fills from its begin, whether or not its receiver is there: NCCL's buffer
/// (`NCCL_BUFFSIZE` in the agent's environment, as the cluster sets it for its jobs; 4 MiB by
/// default; 0: every send moves all its data from its begin). A send larger than it waits for its
/// receiver's kernel before it moves the rest (NVIDIA/nccl#1025, #544), idle in between.
pub fn nccl_buffer_bytes() -> u64 {
    static B: OnceLock<u64> = OnceLock::new();
    *B.get_or_init(|| {
        std::env::var("NCCL_BUFFSIZE")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(NCCL_BUFFSIZE_DEFAULT)
    })
}

/// The part of a send's transfer of `ns` that moves from its begin when its largest single send
/// is `largest_send` bytes and the buffer `buffer` (`None`: all of it; the send fits, or the
/// buffer is 0, unlimited).
pub fn eager_part(ns: Ns, largest_send: u64, buffer: u64) -> Option<Ns> {
    if buffer == 0 || largest_send <= buffer {
        return None;
    }
    Some((ns as u128 * buffer as u128 / largest_send as u128) as Ns)
}

/// Bounds kept per (communicator, class): the newest ones.
const WINDOW: usize = 32;
/// (Communicator, class) pairs remembered; past this many the table starts again.
const MAX_KEYS: usize = 1024;

/// What bounds what: point-to-point ops together, each collective kind apart.
fn class(kind: CommKind) -> Option<CommKind> {
    (kind.collective()).then_some(kind)
}

/// (Communicator, class): the newest (bytes, bound) pairs.
type Bounds = HashMap<(u64, Option<CommKind>), VecDeque<(u64, Ns)>>;

#[derive(Debug, Default)]
pub struct Transfers {
    recent: Bounds,
}

impl Transfers {
    /// An op of `sig` took `duration` on the GPU.
    pub fn record(&mut self, sig: &CommSig, duration: Ns) {
        if sig.collective() || sig.has_send() {
            self.bound(sig, duration);
        }
    }

    /// An op of `sig` transferred for at most `ns`.
    pub fn bound(&mut self, sig: &CommSig, ns: Ns) {
        let key = (sig.comm, class(sig.kind));
        if self.recent.len() >= MAX_KEYS && !self.recent.contains_key(&key) {
            self.recent.clear();
        }
        let v = self.recent.entry(key).or_default();
        if v.len() == WINDOW {
            v.pop_front();
        }
        v.push_back((sig.bytes.max(1), ns));
    }

    /// The transfer time of an op of `sig` (at most `duration`, its own duration when known).
    pub fn estimate(&self, sig: &CommSig, duration: Option<Ns>) -> Option<Ns> {
        let learnt = self.recent.get(&(sig.comm, class(sig.kind))).and_then(|v| {
            v.iter()
                .map(|&(bytes, ns)| {
                    if sig.bytes > bytes {
                        (ns as u128 * sig.bytes as u128 / bytes as u128).min(u64::MAX as u128) as Ns
                    } else {
                        ns
                    }
                })
                .min()
        });
        match (learnt, duration) {
            (Some(l), Some(d)) => Some(l.min(d)),
            (l, d) => l.or(d),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_beyond_the_buffer_moves_its_share_of_it_first() {
        assert_eq!(eager_part(2_000, 4 << 20, 4 << 20), None);
        assert_eq!(eager_part(2_000, 8 << 20, 0), None);
        assert_eq!(eager_part(2_000, 8 << 20, 4 << 20), Some(1_000));
        assert_eq!(eager_part(2_000, 0, 4 << 20), None);
    }

    fn sig(bytes: u64) -> CommSig {
        CommSig {
            comm: 1,
            kind: CommKind::AllReduce,
            peer: -1,
            bytes,
            largest_send: 0,
        }
    }

    #[test]
    fn the_shortest_recent_duration_bounds_the_transfer_scaled_by_size() {
        let mut t = Transfers::default();
        assert_eq!(t.estimate(&sig(1000), None), None);
        assert_eq!(t.estimate(&sig(1000), Some(70)), Some(70));
        t.record(&sig(1000), 500);
        t.record(&sig(1000), 200);
        t.record(&sig(4000), 900);
        assert_eq!(t.estimate(&sig(1000), None), Some(200));
        // A larger op: the bounds scaled up by size (200 x 2 = 400 < 900 x 1).
        assert_eq!(t.estimate(&sig(2000), None), Some(400));
        // Never more than the op's own duration.
        assert_eq!(t.estimate(&sig(1000), Some(150)), Some(150));
        // Another collective kind on the communicator is learnt separately...
        let ag = CommSig {
            kind: CommKind::AllGather,
            ..sig(1000)
        };
        assert_eq!(t.estimate(&ag, None), None);
        // ...point-to-point kinds together.
        let send = CommSig {
            kind: CommKind::Send,
            peer: 1,
            ..sig(1000)
        };
        let recv = CommSig {
            kind: CommKind::Recv,
            ..send
        };
        t.record(&send, 90);
        assert_eq!(t.estimate(&recv, None), Some(90));
        // A receive that found its (eager) data already there bounds neither sends nor receives.
        t.record(&recv, 0);
        assert_eq!(t.estimate(&send, None), Some(90));
        assert_eq!(t.estimate(&recv, None), Some(90));
        assert_eq!(t.estimate(&recv, Some(0)), Some(0));
    }

    #[test]
    fn old_bounds_age_out() {
        let mut t = Transfers::default();
        t.record(&sig(1000), 10);
        for _ in 0..WINDOW {
            t.record(&sig(1000), 300);
        }
        assert_eq!(t.estimate(&sig(1000), None), Some(300));
    }
}
