//! What ops in flight, and ops issued that can begin, say of when an open bubble's GPU may start
//! transferring (its `busy_from`, which a grant must not run past): an op that began, from its
//! begin plus the shortest wait learnt at its position or from its partners' begins; an op not
//! seen to begin that can, from its issue.
use super::*;

/// An op that began and has not ended: the earliest time it may start transferring.
#[derive(Clone, Copy, Debug)]
pub(super) struct InFlight {
    /// Its begin plus the shortest wait learnt at its position (its begin when nothing was
    /// learnt).
    pub(super) learnt: Ns,
    /// What its partners say: transferring from then ([`Timeline::partners_transferring`]).
    pub(super) partners: Option<Ns>,
}

impl InFlight {
    pub(super) fn busy_from(&self) -> Ns {
        self.partners.map_or(self.learnt, |p| p.min(self.learnt))
    }
}

impl Timeline {
    /// The bubble open now, if any.
    pub fn open_now(&self) -> Option<OpenBubble> {
        let mut b = self.open.as_ref()?.bubble;
        b.busy_from = self
            .in_flight
            .values()
            .map(InFlight::busy_from)
            .chain(self.may_begin(b.start))
            .min();
        Some(b)
    }

    /// What the open bubble's part predicted now is learnt at, and from when: (its start, its
    /// position, the start of the part). The part begins at the bubble's start, or at the end of
    /// an op that moved nothing inside it (`Timeline::moved_nothing`).
    pub fn open_part(&self) -> Option<(Ns, (OpIndex, Part), Ns)> {
        let o = self.open.as_ref()?;
        Some((o.bubble.start, o.anchor?, o.learn_from))
    }

    /// The bytes the open bubble's part follows: those of the op at its position
    /// ([`CommSig::followed_bytes`]; 0: none open, or the op left the pattern's history). What
    /// [`super::super::anchors`] scales an offset by ([`super::super::sizes`]).
    pub fn open_part_bytes(&self) -> u64 {
        self.open_part()
            .map_or(0, |(_, (pos, _), _)| self.pattern.followed_bytes(pos))
    }

    /// The earliest time an op in flight is known to transfer from, from its partners' begins
    /// alone (what [`Timeline::open_now`]'s `busy_from` holds besides the waits learnt at the
    /// ops' positions).
    pub fn busy_known(&self) -> Option<Ns> {
        self.in_flight.values().filter_map(|f| f.partners).min()
    }

    /// When the ops issued but not seen to begin may start transferring, for those that can begin
    /// now: the first op on its stream that has not ended, with the compute queued before it run
    /// and no wait on communication in flight queued on its stream.
    /// Its begin record may come late (the poller's delay): it may begin from its issue or the
    /// bubble's start, whichever is later, and transfer after the shortest wait learnt at its
    /// position. (One whose compute has not run, or that is queued behind another op or behind
    /// such a wait, cannot begin yet; one on a stream never seen timed will not be seen to begin.)
    pub(super) fn may_begin(&self, start: Ns) -> impl Iterator<Item = Ns> + '_ {
        self.can_begin_now()
            .map(move |(_, op)| op.issued.max(start) + self.learnt_wait(op))
    }

    /// The ops issued and not seen to begin that can begin now (see `Timeline::may_begin`):
    /// their begin records may come late.
    pub fn may_begin_ops(&self) -> impl Iterator<Item = u64> + '_ {
        self.can_begin_now().map(|(id, _)| id)
    }

    /// The first op not ended of each stream, where it can begin now.
    fn can_begin_now(&self) -> impl Iterator<Item = (u64, &Op)> + '_ {
        let mut streams: Vec<StreamId> = vec![];
        self.order.iter().filter_map(move |&id| {
            let op = self.ops.get(&id)?;
            if streams.contains(&op.stream) {
                return None;
            }
            streams.push(op.stream);
            self.can_begin(op).then_some((id, op))
        })
    }

    /// The shortest wait learnt at `op`'s position, between its begin and its transfer.
    fn learnt_wait(&self, op: &Op) -> Ns {
        #[cfg(test)]
        if let Some(w) = self.test_wait {
            return w;
        }
        self.pattern
            .predict(op.pos, WAIT)
            .map_or(0, |p| p.shortest_ns)
    }

    /// Test support: every op issued waits `ns` from its begin to its transfer (as if learnt).
    #[cfg(test)]
    pub fn set_learnt_wait(&mut self, ns: Ns) {
        self.test_wait = Some(ns);
    }

    /// Whether `op`, the first op not ended on its stream, can begin now: not seen to begin, the
    /// compute queued before it run, its stream timed (see [`Timeline::may_begin`]).
    fn can_begin(&self, op: &Op) -> bool {
        let ran = op
            .deps
            .iter()
            .all(|&(s, k, w)| self.streams.get(&s).is_none_or(|s| s.ran_to(k, w)))
            && self
                .streams
                .get(&op.stream)
                .is_none_or(|s| s.ran_to(op.after.0, op.after.1));
        op.begin.is_none() && ran && self.timed.contains(&op.stream)
    }

    /// When op `id` may begin, if it can begin now (its begin record may come late): its issue.
    /// `None`: it began, ended, is not of this timeline, or cannot begin yet (queued behind
    /// another op or compute, or on a stream never seen timed).
    pub fn may_begin_from(&self, id: u64) -> Option<Ns> {
        let op = self.ops.get(&id)?;
        let first = self
            .order
            .iter()
            .find(|i| self.ops.get(i).is_some_and(|o| o.stream == op.stream))?;
        (*first == id && self.can_begin(op)).then_some(op.issued)
    }

    /// The ops that began and have not ended.
    pub fn in_flight_ops(&self) -> impl Iterator<Item = u64> + '_ {
        self.in_flight.keys().copied()
    }

    /// Test support: op `id` in flight may start transferring at `t` at the earliest (as if
    /// that wait had been learnt at its position).
    #[cfg(test)]
    pub fn set_learnt(&mut self, id: u64, t: Ns) {
        if let Some(f) = self.in_flight.get_mut(&id) {
            f.learnt = t;
        }
    }

    /// What op `id`'s partners say of its transfer now ([`crate::inference::partners`]):
    /// `Some(t)`, under way from GPU time `t` at the latest (every party to one of its match keys
    /// had begun, and that key's data has not all arrived): a grant must not run past it; `None`,
    /// nothing moves for a key now (none completed, or the ones that did have delivered their
    /// data).
    ///
    /// An op with a send larger than NCCL's buffer whose transfer is learnt has its data's
    /// movements placed as transfers of their own (its buffer's share from its begin, the rest
    /// once its receiver runs, a group's receives from when their sender began:
    /// [`Timeline::receiver_began`], `group_receives`): what its partners say places those and
    /// bounds nothing more. Until 2026-12-07 it also held the op as transferring from its first
    /// key's completion until it ended, which kept every bubble inside such a group from a
    /// grant: ZB-H1 with batched groups and 2 ms sends, p=2, had 47-50 % of its idle time held
    /// so (granted 0.44-0.48; 0.77-0.80 without it, at most 0.0009 of it over busy time).
    pub fn partners_transferring(&mut self, id: u64, t: Option<Ns>) {
        let Some(b) = self.ops.get(&id).and_then(|op| op.begin) else {
            return;
        };
        let placed = self.rendezvous.contains_key(&id);
        if let Some(f) = self.in_flight.get_mut(&id).filter(|_| !placed) {
            f.partners = t.map(|t| t.max(b));
        }
        if let Some(t) = t.filter(|_| self.rendezvous.contains_key(&id)) {
            self.group_receives(id, t);
            let now = self.now;
            self.refresh(now);
        }
    }

    /// The receiver of op `id`'s send (the first, of a group's) began at `t`: the rest of a
    /// send larger than NCCL's buffer moves from then.
    pub fn receiver_began(&mut self, id: u64, t: Ns) {
        let Some(b) = self.ops.get(&id).and_then(|op| op.begin) else {
            return;
        };
        if self.rendezvous.contains_key(&id) {
            self.rest_moves(id, t.max(b));
            let now = self.now;
            self.refresh(now);
        }
    }
}
