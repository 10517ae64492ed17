//! The table of pending ops, bounded and never stuck: an op that will never be timed (it never
//! began, its end was lost, a later op of its stream began first) is forgotten, and a full table
//! gives up the oldest op no wait waits for.
use super::*;

impl Timeline {
    /// Whether a wait still waits for op `id`.
    pub(super) fn awaited_op(&self, id: u64) -> bool {
        self.streams.values().any(|s| s.awaits(id))
    }

    /// Forgets the ops that never began and will not be timed (issued more than
    /// [`OP_TIMEOUT_NS`] before `t`, or covered by a synchronize that returned more than
    /// [`SYNCED_GRACE_NS`] ago), and those whose end was lost ([`IN_FLIGHT_TIMEOUT_NS`]);
    /// looked at every [`EXPIRE_EVERY_NS`].
    pub(super) fn expire(&mut self, t: Ns) {
        if t < self.expire_at {
            return;
        }
        self.expire_at = t + EXPIRE_EVERY_NS;
        let stale: Vec<u64> = self
            .ops
            .iter()
            .filter(|(_, o)| match o.begin {
                None => {
                    o.issued + OP_TIMEOUT_NS < t
                        || o.synced.is_some_and(|s| s + SYNCED_GRACE_NS < t)
                }
                Some(b) => b + IN_FLIGHT_TIMEOUT_NS < t,
            })
            .map(|(&x, _)| x)
            .collect();
        for x in stale {
            self.forget(x);
        }
        self.order.retain(|x| self.ops.contains_key(x));
    }

    /// Makes room in the op table: the oldest op no wait waits for goes (the oldest of all if
    /// every one is awaited).
    pub(super) fn evict(&mut self) {
        self.order.retain(|x| self.ops.contains_key(x));
        let victim = self
            .order
            .iter()
            .position(|&x| !self.awaited_op(x))
            .unwrap_or(0);
        if let Some(x) = self.order.remove(victim) {
            self.forget(x);
        }
    }

    /// Op `id` will never be timed: forgets it; a wait on it that is not timed either holds
    /// nothing (when it releases cannot be known).
    pub(super) fn forget(&mut self, id: u64) {
        if self.ops.remove(&id).is_none() {
            return;
        }
        self.in_flight.remove(&id);
        self.sending.remove(&id);
        self.rendezvous.remove(&id);
        for s in self.streams.values_mut() {
            for b in s.blockers_mut() {
                if b.op == Some(id) {
                    b.op = None;
                    if b.wait == 0 && b.released.is_none() {
                        b.released = Some(0);
                    }
                }
            }
        }
    }

    /// Ops queued on `stream` before op `id` that have not begun (or not ended, when `ended`):
    /// they will never be timed.
    pub(super) fn forget_before(&mut self, stream: StreamId, id: u64, ended: bool) {
        let stale: Vec<u64> = self
            .order
            .iter()
            .take_while(|&&x| x != id)
            .filter(|&&x| {
                self.ops
                    .get(&x)
                    .is_some_and(|o| o.stream == stream && (ended || o.begin.is_none()))
            })
            .copied()
            .collect();
        for x in stale {
            self.forget(x);
        }
    }
}
