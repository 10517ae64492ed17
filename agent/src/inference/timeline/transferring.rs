//! When the GPU transfers for a send larger than NCCL's buffer (its buffer's share from its begin,
//! the rest once its receiver runs), a group's receives, and the transfer intervals kept.
use super::*;

impl Timeline {
    /// The rest of a send larger than NCCL's buffer moves from `t` (its receiver's kernel runs)
    /// at the earliest.
    pub(super) fn rest_moves(&mut self, id: u64, t: Ns) {
        let Some(r) = self
            .rendezvous
            .get_mut(&id)
            .filter(|r| r.receiver.is_none())
        else {
            return;
        };
        r.receiver = Some(t);
        let (a, ns, pos) = (t.max(r.from), r.ns, r.pos);
        self.add_transfer(a, a + ns, Some((pos, 2)));
    }

    /// Op `id`, a group with a send larger than NCCL's buffer and a receive, has a key under way
    /// from `t`: its receive's sender began, so its data moves from then (for at most the
    /// group's learnt transfer), whenever the group ends.
    pub(super) fn group_receives(&mut self, id: u64, t: Ns) {
        let Some(begin) = self
            .ops
            .get(&id)
            .filter(|op| op.sig.has_recv())
            .and_then(|op| op.begin)
        else {
            return;
        };
        let Some(r) = self.rendezvous.get_mut(&id).filter(|r| !r.received) else {
            return;
        };
        r.received = true;
        // Its receives' learnt transfer (its send's, fill and rest, where none is learnt).
        let d = r.recv_ns.unwrap_or(r.from.saturating_sub(begin) + r.ns);
        let (a, pos) = (t.max(begin), r.pos);
        self.add_transfer(a, a + d, Some((pos, 2)));
    }

    /// Op `id` of `sig`, a send larger than NCCL's buffer, ended at `t`. With its receiver not
    /// seen to begin (on another node), the rest of its transfer moved just before. With it
    /// seen at `r`, the rest moved between `r` and `t`: the whole of its largest send took at
    /// most that scaled up by the whole over the rest, a bound on its kind's transfers that its
    /// duration (its wait for its receiver included) does not give when every send waits.
    pub(super) fn rest_ended(&mut self, id: u64, sig: &CommSig, t: Ns) {
        let Some(rest) = self.rendezvous.get(&id).copied() else {
            return;
        };
        match rest.receiver {
            None => self.rest_moves(id, t.saturating_sub(rest.ns)),
            // Its end within the records' skew of its receiver's begin: nothing to go by.
            Some(r) if t < r + RECORD_SKEW_NS => {}
            Some(r) => {
                let whole = sig.largest_send;
                let beyond = whole.saturating_sub(self.buffer_bytes).max(1);
                let ns = t.saturating_sub(r) as u128 * whole as u128 / beyond as u128;
                self.transfers.bound(sig, ns.min(Ns::MAX as u128) as Ns);
            }
        }
        self.rendezvous.remove(&id);
    }

    pub(super) fn add_transfer(&mut self, a: Ns, b: Ns, op: Option<(OpIndex, Part)>) {
        if b <= a {
            return;
        }
        if self.xfers.len() == MAX_TRANSFERS {
            self.xfers.pop_front();
        }
        self.xfers.push_back((a, b, op));
    }
}
