//! Bounds on transfer times from the ops of other processes on the node: a collective ends at about
//! the same time on all its ranks, and it cannot have started transferring before its last rank
//! began it; a receive cannot have moved data before its send began, nor a group of sends and
//! receives before its peer's matching group did. So for a collective (or a
//! receive) whose end matches that of ops of other local processes (same kind and size; a send of
//! the same size for a receive; the two in flight together; of each other timeline the op whose end
//! is nearest, within [`MATCH_NS`]; each the only one of its kind and size in its timeline within
//! [`ISOLATION_NS`], so that frequent collectives such as tensor-parallel all-reduces of different
//! groups are never taken for each other), `end - latest begin` bounds its transfer. Ranks elsewhere are
//! not seen: the bound is then looser, never wrong. (Two GPUs of one process are peers too.)
use super::obs::{CommKind, CommSig, GpuId, Ns};
use std::collections::VecDeque;

/// Ops whose ends are within this of each other are taken to be the same collective or message
/// (a real GPU's ranks end a collective within microseconds; the test bed's simulated GPU wakes its
/// processes' kernels up to a few hundred µs apart, and a loaded machine records them later still).
pub const MATCH_NS: Ns = 1_000_000;
/// Ops of a frequent kind (another of the same kind and size in the same timeline within this)
/// are not matched.
pub const ISOLATION_NS: Ns = 5_000_000;
/// Ended ops remembered for matching.
const RECENT: usize = 256;

/// Which timeline an op belongs to.
pub type Who = (u32, GpuId);

#[derive(Clone, Copy, Debug)]
struct Ended {
    who: Who,
    sig: CommSig,
    begin: Ns,
    end: Ns,
}

/// Whether the transfer of `a` is bounded by the begin of `b` (both of other processes).
fn related(a: &CommSig, b: &CommSig) -> bool {
    if a.bytes != b.bytes {
        return false;
    }
    match (a.kind, b.kind) {
        (x, y) if x.collective() && x == y => a.kind != CommKind::Grouped,
        (CommKind::Recv, CommKind::Send) | (CommKind::SendRecv, CommKind::SendRecv) => true,
        _ => false,
    }
}

#[derive(Debug, Default)]
pub struct Matcher {
    recent: VecDeque<Ended>,
}

impl Matcher {
    /// An op of `who` ended; returns the transfer bounds this teaches: (timeline, signature, bound).
    pub fn on_end(
        &mut self,
        who: Who,
        sig: CommSig,
        begin: Ns,
        end: Ns,
    ) -> Vec<(Who, CommSig, Ns)> {
        let alike = |a: &CommSig, b: &CommSig| a.kind == b.kind && a.bytes == b.bytes;
        let isolated = |w: Who, s: &CommSig, t: Ns, recent: &VecDeque<Ended>| {
            recent
                .iter()
                .filter(|e| e.who == w && alike(&e.sig, s) && e.end.abs_diff(t) <= ISOLATION_NS)
                .count()
        };
        let me_alone = self
            .recent
            .iter()
            .any(|e| e.who != who && e.end.abs_diff(end) <= MATCH_NS)
            && isolated(who, &sig, end, &self.recent) == 0;
        // Of each other timeline, the op in flight with this one whose end is nearest.
        let mut nearest: Vec<Ended> = vec![];
        for e in self.recent.iter().filter(|e| {
            me_alone
                && e.who != who
                && e.end.abs_diff(end) <= MATCH_NS
                // In flight together, within the recorded times' precision (the last rank's
                // begin can be recorded after the others' ends).
                && e.begin < end + MATCH_NS
                && begin < e.end + MATCH_NS
                && (related(&sig, &e.sig) || related(&e.sig, &sig))
                && isolated(e.who, &e.sig, e.end, &self.recent) == 1
        }) {
            match nearest.iter_mut().find(|n| n.who == e.who) {
                Some(n) if n.end.abs_diff(end) > e.end.abs_diff(end) => *n = *e,
                Some(_) => {}
                None => nearest.push(*e),
            }
        }
        let mut out = vec![];
        // Bounds for this op from the ops it matches...
        let latest = nearest
            .iter()
            .filter(|e| related(&sig, &e.sig))
            .map(|e| e.begin)
            .max();
        if let Some(b) = latest.filter(|&b| b > begin) {
            out.push((who, sig, end.saturating_sub(b)));
        }
        // ...and for the ops it teaches about.
        for e in nearest.iter().filter(|e| related(&e.sig, &sig)) {
            if begin > e.begin {
                out.push((e.who, e.sig, e.end.saturating_sub(begin)));
            }
        }
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(Ended {
            who,
            sig,
            begin,
            end,
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ar() -> CommSig {
        CommSig {
            comm: 1,
            kind: CommKind::AllReduce,
            peer: -1,
            bytes: 1 << 20,
            largest_send: 0,
        }
    }

    #[test]
    fn a_collective_transfers_only_after_its_last_local_rank_began() {
        let mut m = Matcher::default();
        let (a, b) = ((1, GpuId(0)), (2, GpuId(1)));
        // Rank a waited 10 ms for rank b; both end together.
        assert!(m.on_end(a, ar(), 1_000_000, 11_500_000).is_empty());
        let out = m.on_end(b, ar(), 11_000_000, 11_510_000);
        assert_eq!(out, vec![(a, ar(), 500_000)]);
        // An op that ends far away, of another size, or of the same timeline: nothing.
        assert!(m.on_end(b, ar(), 20_000_000, 30_000_000).is_empty());
        let other = CommSig { bytes: 8, ..ar() };
        assert!(m
            .on_end((3, GpuId(2)), other, 29_000_000, 30_000_000)
            .is_empty());
        // A frequent kind (two in one timeline within ISOLATION_NS) is never matched: which of
        // them goes with which is a guess.
        let mut m = Matcher::default();
        m.on_end(a, ar(), 0, 1_000_000);
        m.on_end(a, ar(), 1_050_000, 1_200_000);
        assert!(m.on_end(b, ar(), 900_000, 1_190_000).is_empty());
    }

    #[test]
    fn the_last_ranks_begin_recorded_after_the_others_ends_still_matches() {
        let mut m = Matcher::default();
        let (a, b) = ((1, GpuId(0)), (2, GpuId(1)));
        // Rank a waited 20 ms for rank b, whose begin and end were both recorded late.
        assert!(m.on_end(a, ar(), 1_000_000, 21_000_000).is_empty());
        let out = m.on_end(b, ar(), 21_004_000, 21_250_000);
        assert_eq!(out, vec![(a, ar(), 0)]);
    }

    #[test]
    fn a_receive_is_bounded_by_its_send_and_not_the_other_way() {
        let mut m = Matcher::default();
        let recv = CommSig {
            kind: CommKind::Recv,
            peer: 0,
            ..ar()
        };
        let send = CommSig {
            kind: CommKind::Send,
            peer: 1,
            ..ar()
        };
        m.on_end((1, GpuId(1)), recv, 0, 5_000_000);
        let out = m.on_end((2, GpuId(0)), send, 4_800_000, 5_000_000);
        assert_eq!(out, vec![((1, GpuId(1)), recv, 200_000)]);
    }
}
