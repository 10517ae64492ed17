//! The bubbles of one trainer process on one GPU, from its observations ([`Obs`]).
//!
//! The timeline follows the process's streams ([`super::streams`]): compute streams carry
//! launches, communication streams carry comm ops. It learns how far the GPU got on a compute
//! stream from
//! * the GPU begin of a comm op queued after the compute (on the same stream, or on a stream made to
//!   wait for an event recorded on the compute stream: PyTorch's ProcessGroupNCCL does that before
//!   every op). Until the process is seen recording events or making streams wait (today's rings),
//!   every comm op is taken to follow the compute stream the host launched on last, as
//!   ProcessGroupNCCL's ops do;
//! * a timed stream wait reached on the compute stream;
//! * a synchronize that returned.
//!
//! A compute stream made to wait for an event recorded after a comm op cannot run past the wait
//! until it releases; launches queued behind it do not run. The GPU is idle while every compute
//! stream is idle (drained, or held by such a wait) and no comm op is transferring: a send from its
//! begin (one larger than NCCL's buffer for the buffer's share, then for the rest from its
//! receiver's begin), a receive or a collective just before its end, each for its learnt transfer
//! time ([`super::transfer`]). That is a bubble: from the GPU-side drain to the first moment
//! something can run or transfer again. Communication that overlaps runnable compute is not one.
//!
//! No stuck state: an op that will never be timed (reported untimed, or queued before an op of its
//! stream that began) is forgotten; the table of pending ops is bounded and never evicts an op a
//! wait still waits for while another can go.
use super::bubble::{Bubble, OpenBubble};
use super::fabric::fabric;
use super::obs::{CommSig, Ns, Obs, StreamId, SyncOn};
use super::partners::Floor;
use super::pattern::{whole, OpIndex, Part, Pattern, AWAITED, REPEAT, WAIT};
use super::streams::{Blocker, Stream, Window};
use super::transfer::Transfers;
use in_flight::InFlight;
use std::collections::{HashMap, HashSet, VecDeque};

/// Ops issued and not ended kept at most (a lost record must not grow the table without bound).
pub const MAX_PENDING_OPS: usize = 4096;
/// Event records kept at most (frameworks reuse their events; past this the table starts again,
/// and waits on forgotten events hold nothing).
const MAX_EVENTS: usize = 8192;
/// Transfer intervals kept.
const MAX_TRANSFERS: usize = 256;
/// Drain marks awaiting their GPU time kept at most.
const MAX_MARKS: usize = 64;
/// An op issued this long ago that never began is forgotten (it will not be timed)...
pub const OP_TIMEOUT_NS: Ns = 10_000_000_000;
/// ...and one that began this long ago and was never seen to end (its end record was lost).
pub const IN_FLIGHT_TIMEOUT_NS: Ns = 60_000_000_000;
/// ...and so is one that never began this long after a synchronize that covered it returned
/// (its GPU times would have come by then).
pub const SYNCED_GRACE_NS: Ns = 50_000_000;
/// How often the pending ops are looked over for ones that will not be timed.
const EXPIRE_EVERY_NS: Ns = 10_000_000;
/// Compute queued at least this long ago, with no wait in its way, is taken to have run (or twice
/// the longest the host was seen running ahead of the GPU, if longer).
pub const STALE_MIN_NS: Ns = 200_000_000;

/// An event's latest record.
#[derive(Clone, Copy, Debug)]
struct Record {
    stream: StreamId,
    /// Launches on its stream before it, and waits queued on its stream before it.
    launches: u64,
    waits: u64,
    /// The last comm op queued on its stream before it.
    last_op: Option<u64>,
}

#[derive(Debug)]
struct Op {
    sig: CommSig,
    stream: StreamId,
    issued: Ns,
    pos: OpIndex,
    /// Points of other streams (stream, launches, waits before it) that must have run when it
    /// begins.
    deps: Vec<(StreamId, u64, u64)>,
    /// Its own stream's launches and waits queued before it.
    after: (u64, u64),
    begin: Option<Ns>,
    /// A synchronize covering it returned at this time.
    synced: Option<Ns>,
    /// The earliest its transfer can have begun, from its partners' begins on the node
    /// ([`super::partners`]).
    transfer_from: Option<Floor>,
}

#[derive(Debug)]
struct Open {
    bubble: OpenBubble,
    /// Where the bubble is learnt: the op whose begin or wait opened it, and whether the bubble
    /// is while the op is in flight or after it ended.
    anchor: Option<(OpIndex, Part)>,
    /// Where the part learnt at `anchor` began: the bubble's start, or the end of an op that
    /// ended inside it moving nothing ([`Timeline::moved_nothing`]).
    learn_from: Ns,
    /// Where it opened: `anchor` before any op ended inside it moving nothing. The whole bubble
    /// is learnt there ([`whole`]).
    origin: Option<(OpIndex, Part)>,
    /// The end predicted when it opened for the whole bubble (what the forecast is scored by).
    forecast: Option<Ns>,
    /// Where its window said it opened, before a repeat was told apart ([`REPEAT`]).
    opened_at: Option<(OpIndex, Part)>,
}

/// A known transfer: from, to, and where a bubble after it is learnt.
type Transfer = (Ns, Ns, Option<(OpIndex, Part)>);

/// What a send larger than NCCL's buffer still has to move once its receiver's kernel runs.
#[derive(Clone, Copy, Debug)]
struct Rest {
    /// Its buffer's share is in by then (the rest cannot move before).
    from: Ns,
    ns: Ns,
    pos: OpIndex,
    /// When its receiver was seen to begin (or it, when later): the rest moved after that.
    receiver: Option<Ns>,
    /// A group's receive placed from when its sender began (its data comes then, not at the
    /// group's end, which its send's rest may set).
    received: bool,
    /// A group's receives' transfer: learnt for what it moves besides its largest send.
    recv_ns: Option<Ns>,
}

/// The GPU-level idle window of the timeline.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Idle {
    from: Ns,
    until: Option<Ns>,
    blocked: bool,
    anchor: Option<(OpIndex, Part)>,
}

/// Bubbles shorter than this are not learnt (nothing can be granted in them).
pub const MIN_LEARNT_NS: Ns = 100_000;
/// A bubble that opens where one at least this long opened is learnt apart ([`REPEAT`]).
const REPEAT_AFTER_NS: Ns = 1_000_000;
/// A transfer that its partners' records bound to less than this moved nothing: the begin record
/// of a party that arrived last is written a few microseconds before its kernel runs (2.6 µs on
/// the test bed; a launch's latency on a GPU), so an op that moved nothing is often bounded to a
/// few microseconds instead of 0. Whether the bound came out as 0 or as that skew must not decide
/// whether its bubble is learnt as one or as two (which flipped as a 0 entered or left the
/// window of learnt bounds). No NCCL op that moves data ends within this of its last party's
/// arrival; a grant would not cover such a stretch anyway (the part before it ends at the op's
/// end, the part after it is granted once the end is seen).
const RECORD_SKEW_NS: Ns = 10_000;

/// One (process, GPU) timeline.
#[derive(Debug, Default)]
pub struct Timeline {
    /// The process records events and stream waits: trust them.
    explicit: bool,
    streams: HashMap<StreamId, Stream>,
    /// The compute stream the host launched on last.
    current: Option<StreamId>,
    events: HashMap<u64, Record>,
    ops: HashMap<u64, Op>,
    /// Pending ops in issue order (ids; ended ones are skipped lazily).
    order: VecDeque<u64>,
    /// Ops that began and have not ended: when each may start transferring.
    in_flight: HashMap<u64, InFlight>,
    /// Streams whose comm ops were seen to begin: only theirs are expected to (ops captured into
    /// a graph, or on a stream the interposer cannot time, never are).
    timed: HashSet<StreamId>,
    transfers: Transfers,
    /// Known transfer intervals (the GPU is busy in them), with the op's pattern index and the
    /// part a bubble after it is learnt as.
    xfers: VecDeque<Transfer>,
    /// Ends of receives and collectives that moved nothing (no transfer time before their end):
    /// the idle time after each is learnt at it, as after a transfer ([`Timeline::moved_nothing`]).
    nothing_moved: Vec<(Ns, (OpIndex, Part))>,
    /// Sends that began with no transfer time learnt yet: busy until they end.
    sending: HashMap<u64, Ns>,
    /// Sends larger than NCCL's buffer that began: the rest of their transfer, which waits for
    /// their receiver's kernel.
    rendezvous: HashMap<u64, Rest>,
    /// NCCL's buffer per send ([`super::transfer::nccl_buffer_bytes`]; 0: every send eager).
    buffer_bytes: u64,
    /// The latest time the agent saw an observation (what partners' news is stamped with).
    now: Ns,
    pattern: Pattern,
    open: Option<Open>,
    /// Where the last bubble learnt opened, as its window said ([`Open::opened_at`]).
    last_opened_at: Option<(OpIndex, Part)>,
    /// Bubbles were reported up to here.
    emitted_until: Ns,
    closed: Vec<Bubble>,
    /// Ops that ended (signature, begin, end), for matching with other processes' ops.
    ended: Vec<(CommSig, Ns, Ns)>,
    /// How far ahead of the GPU the host was seen queueing compute (decaying maximum).
    runahead_ns: Ns,
    /// Who it is (the process id), for messages.
    label: u32,
    /// When the pending ops are looked over next.
    expire_at: Ns,
    /// Drain marks queued and not yet reached: wait id -> (stream, launches on it before the
    /// mark) ([`Timeline::on_drain_mark`]).
    marks: HashMap<u64, (StreamId, u64)>,
    /// Tests: the wait learnt at every op's position ([`Timeline::set_learnt_wait`]).
    #[cfg(test)]
    test_wait: Option<Ns>,
}

impl Timeline {
    pub fn new() -> Self {
        Self::default()
    }

    /// A timeline named `label` (the process id) in messages, its sends filling NCCL's buffer
    /// as the environment says ([`super::transfer::nccl_buffer_bytes`]).
    pub fn labelled(label: u32) -> Self {
        Timeline {
            label,
            buffer_bytes: super::transfer::nccl_buffer_bytes(),
            ..Self::default()
        }
    }

    /// A timeline whose sends larger than `bytes` wait for their receivers (0: none does).
    pub fn with_buffer(mut self, bytes: u64) -> Self {
        self.buffer_bytes = bytes;
        self
    }

    /// Who it is (the process id it was made for).
    pub fn label(&self) -> u32 {
        self.label
    }

    pub fn pattern(&self) -> &Pattern {
        &self.pattern
    }

    /// Bubbles closed since the last call.
    pub fn take_closed(&mut self) -> Vec<Bubble> {
        std::mem::take(&mut self.closed)
    }

    /// Ops that ended since the last call: (signature, GPU begin, GPU end).
    pub fn take_ended(&mut self) -> Vec<(CommSig, Ns, Ns)> {
        std::mem::take(&mut self.ended)
    }

    /// Op `id`, about to end, cannot have begun transferring before its partners' begins say
    /// ([`super::partners::Floor`]).
    pub fn transfer_floor(&mut self, id: u64, f: Floor) {
        if let Some(op) = self.ops.get_mut(&id) {
            op.transfer_from = Some(f);
        }
    }

    /// A bound on the transfer time of ops of `sig`, found elsewhere.
    pub fn bound_transfer(&mut self, sig: &CommSig, ns: Ns) {
        self.transfers.bound(sig, ns);
    }

    /// Comm ops waiting for their GPU times.
    pub fn pending_ops(&self) -> usize {
        self.ops.len()
    }

    /// Whether op `id` or wait `wait` belongs to this timeline.
    pub fn has_op(&self, id: u64) -> bool {
        self.ops.contains_key(&id)
    }
    pub fn has_wait(&self, wait: u64) -> bool {
        self.marks.contains_key(&wait) || self.streams.values().any(|s| s.blocker(wait).is_some())
    }

    fn stale_ns(&self) -> Ns {
        STALE_MIN_NS.max(2 * self.runahead_ns + 1_000_000)
    }

    fn note_runahead(&mut self, r: Option<Ns>) {
        self.runahead_ns -= self.runahead_ns / 256;
        if let Some(r) = r {
            self.runahead_ns = self.runahead_ns.max(r);
        }
    }

    /// Takes one observation; `now` is when the agent sees it.
    pub fn observe(&mut self, obs: Obs, now: Ns) {
        self.now = self.now.max(now);
        match obs {
            Obs::Launch { t, stream } => {
                self.streams.entry(stream).or_default().on_launch(t);
                self.current = Some(stream);
            }
            Obs::CommIssue { t, id, stream, sig } => self.on_issue(t, id, stream, sig),
            Obs::CommBegin { id, t, .. } => self.on_begin(id, t),
            Obs::CommEnd { id, t, .. } => self.on_end(id, t),
            Obs::CommUntimed { id } => self.forget(id),
            // Matched across processes by the node ([`super::gpus`]).
            Obs::CommMatch { .. } => return,
            Obs::EventRecord { event, stream, .. } => {
                self.explicit = true;
                if self.events.len() >= MAX_EVENTS {
                    self.events.clear();
                }
                let s = self.streams.entry(stream).or_default();
                let last_op = s.last_op.filter(|x| self.ops.contains_key(x));
                self.events.insert(
                    event,
                    Record {
                        stream,
                        launches: s.launches,
                        waits: s.waits,
                        last_op,
                    },
                );
            }
            Obs::StreamWait {
                stream,
                event: 0,
                wait,
                ..
            } if wait != 0 => self.on_drain_mark(stream, wait),
            Obs::StreamWait {
                stream,
                event,
                wait,
                ..
            } => self.on_wait(stream, event, wait),
            Obs::WaitReached { wait, t, .. } if self.marks.contains_key(&wait) => {
                if let Some((stream, at)) = self.marks.remove(&wait) {
                    let r = self
                        .streams
                        .get_mut(&stream)
                        .and_then(|s| s.drained_to(at, t));
                    self.note_runahead(r);
                }
            }
            Obs::WaitReached { wait, t, .. } => {
                let mut r = None;
                for s in self.streams.values_mut() {
                    if s.blocker(wait).is_some() {
                        r = s.reached(wait, t);
                    }
                }
                self.note_runahead(r);
            }
            Obs::WaitReleased { wait, t, .. } => self.on_released(wait, t),
            Obs::Sync { t0, t1, on } => self.on_sync(t0, t1, on),
            Obs::Lost { t } => {
                // The bubble's end may be among the lost records: it is dropped, not reported.
                if let Some(o) = self.open.take() {
                    self.emitted_until = self.emitted_until.max(o.bubble.start);
                }
                self.emitted_until = self.emitted_until.max(t.min(now));
                for s in self.streams.values_mut() {
                    s.lost();
                }
                self.sending.clear();
                self.rendezvous.clear();
                // Their ends may be among the lost records.
                let begun: Vec<u64> = self.in_flight.keys().copied().collect();
                for x in begun {
                    self.forget(x);
                }
            }
            Obs::Exit { t } => {
                if let Some(mut o) = self.open.take() {
                    // Cut short by the exit: what was forecast did not get the chance to happen,
                    // and nothing is learnt from it.
                    o.bubble.predicted_end = None;
                    o.anchor = None;
                    self.close(o, t, now, true);
                }
                let pattern = std::mem::take(&mut self.pattern);
                let closed = std::mem::take(&mut self.closed);
                *self = Timeline {
                    pattern,
                    closed,
                    emitted_until: t,
                    label: self.label,
                    buffer_bytes: self.buffer_bytes,
                    now: self.now,
                    ..Timeline::default()
                };
                return;
            }
        }
        self.refresh(now);
    }

    fn on_issue(&mut self, t: Ns, id: u64, stream: StreamId, sig: CommSig) {
        let pos = self.pattern.on_issue(sig, t);
        for s in self.streams.values_mut() {
            s.on_op_issued(pos);
        }
        let c = self.streams.entry(stream).or_default();
        c.comm = true;
        c.last_op = Some(id);
        let mut deps = std::mem::take(&mut c.deps);
        let after = (c.launches, c.waits);
        if c.launches > 0 {
            deps.push((stream, c.launches, c.waits));
        }
        if !self.explicit {
            if let Some(cur) = self.current.filter(|&k| k != stream) {
                let (k, w) = self
                    .streams
                    .get(&cur)
                    .map_or((0, 0), |s| (s.launches, s.waits));
                deps.push((cur, k, w));
            }
        }
        self.expire(t);
        if self.ops.len() >= MAX_PENDING_OPS {
            self.evict();
        }
        self.ops.insert(
            id,
            Op {
                sig,
                stream,
                issued: t,
                pos,
                deps,
                after,
                begin: None,
                synced: None,
                transfer_from: None,
            },
        );
        self.order.push_back(id);
    }

    fn on_begin(&mut self, id: u64, t: Ns) {
        let Some(op) = self.ops.get_mut(&id) else {
            return;
        };
        if op.begin.is_some() {
            return;
        }
        op.begin = Some(t);
        let (stream, sig, pos) = (op.stream, op.sig, op.pos);
        self.timed.insert(stream);
        self.pattern.began(pos, t);
        let wait = self.pattern.predict(pos, WAIT).map_or(0, |p| p.shortest_ns);
        self.in_flight.insert(
            id,
            InFlight {
                learnt: t + wait,
                partners: None,
            },
        );
        let deps = std::mem::take(&mut op.deps);
        self.forget_before(stream, id, false);
        for (s, k, _) in deps {
            let r = self.streams.get_mut(&s).and_then(|s| s.drained_to(k, t));
            self.note_runahead(r);
        }
        if sig.has_send() {
            match self.transfers.estimate(&sig, None) {
                Some(d) => {
                    // A group's large send moves on its own: what an op of its size took bounds
                    // it better than the whole group's estimate (sends and receives added up).
                    let alone = |bytes: u64| {
                        let part = CommSig { bytes, ..sig };
                        self.transfers.estimate(&part, Some(d)).unwrap_or(d)
                    };
                    let d_send = alone(sig.largest_send);
                    let recv_ns = sig
                        .has_recv()
                        .then(|| alone(sig.bytes.saturating_sub(sig.largest_send).max(1)));
                    match super::transfer::eager_part(d_send, sig.largest_send, self.buffer_bytes) {
                        // Its buffer's share now; the rest once its receiver's kernel runs
                        // ([`Timeline::receiver_began`]), or, with the receiver not seen to
                        // begin (on another node), just before its end.
                        Some(eager) => {
                            self.add_transfer(t, t + eager, Some((pos, 1)));
                            let rest = Rest {
                                from: t + eager,
                                ns: d_send - eager,
                                pos,
                                receiver: None,
                                received: false,
                                recv_ns,
                            };
                            self.rendezvous.insert(id, rest);
                        }
                        None => self.add_transfer(t, t + d, Some((pos, 1))),
                    }
                }
                None => {
                    self.sending.insert(id, t);
                }
            }
        }
    }

    fn on_end(&mut self, id: u64, t: Ns) {
        let Some(op) = self.ops.get(&id) else {
            return;
        };
        let (sig, stream, begin, issued, pos) = (op.sig, op.stream, op.begin, op.issued, op.pos);
        self.pattern.ended(pos, t);
        // A group with a send beyond the buffer: its receives move less than the whole group.
        let recv_ns = self.rendezvous.get(&id).and_then(|r| r.recv_ns);
        // What its partners' begins say of its transfer: at most from the floor to the end (an
        // upper bound, as the learnt estimate is; the smaller one holds: even when every party
        // began, its kernel may start later than its begin record, and nothing moves before it
        // does). Not of an op that sends: a send moves its data from its own begin into the
        // receiver's buffers whether or not the receiver is there yet (NCCL's buffers hold a few
        // MiB per peer; what a larger one moves later is `Timeline::rest_ended`'s).
        let partners = op.transfer_from.filter(|_| !sig.has_send());
        let moved = |tr: Ns| if tr < RECORD_SKEW_NS { 0 } else { tr };
        let floor = partners.map(|f| moved(t.saturating_sub(f.t.max(op.begin.unwrap_or(0)))));
        // A collective some of whose parties are on other nodes: what moved after the last of
        // them arrived, which this node does not see, is at most what the fabric can take
        // ([`super::fabric`]; not taught to its kind: ops whose parties are all here need no
        // model).
        let remote = partners
            .and_then(|f| f.remote)
            .filter(|_| sig.collective())
            .map(|n| fabric().collective_bound(&sig, n));
        let at_most = |tr: Ns| {
            let tr = floor.map_or(tr, |f| tr.min(f));
            remote.map_or(tr, |r| tr.min(r))
        };
        // What it teaches of its kind's transfers: a collective's, at most from the latest
        // begin of its parties seen here; for a receive, its
        // end less its send's begin (one posted after an eager send's data arrived moved nothing
        // itself, see [`super::transfer`]).
        let teaches = if sig.collective() {
            floor
        } else {
            partners
                .and_then(|f| f.others)
                .map(|s| moved(t.saturating_sub(s)))
        };
        self.forget_before(stream, id, true);
        let duration = begin.map(|b| t.saturating_sub(b));
        if let (Some(b), Some(d)) = (begin, duration) {
            self.transfers.record(&sig, d);
            self.ended.push((sig, b, t));
        }
        if let Some(tr) = teaches {
            self.transfers.bound(&sig, tr);
        }
        if let Some(b) = self.sending.remove(&id) {
            self.add_transfer(b, t, Some((pos, 1)));
        }
        self.rest_ended(id, &sig, t);
        if sig.has_recv() || sig.collective() {
            // Unknown begin and nothing learnt: busy from its issue (conservative).
            let tr = at_most(
                self.transfers
                    .estimate(&sig, duration)
                    .unwrap_or(t.saturating_sub(issued)),
            );
            // What its receives moved before its end (the whole of it teaches its wait).
            let moved_last = recv_ns.map_or(tr, |r| r.min(tr));
            let from = t.saturating_sub(moved_last).max(begin.unwrap_or(0));
            if from < t {
                self.add_transfer(from, t, Some((pos, 2)));
            } else if self.nothing_moved.len() < MAX_TRANSFERS {
                self.nothing_moved.push((t, (pos, 2)));
            }
            // Its wait is what its transfer leaves of its duration, once something bounds the
            // transfer: what its kind on its communicator was learnt to take, or the begins of
            // all its partners. A receive that ended before its sender's begin was read, on a
            // communicator whose transfers nothing has bounded yet, may have moved data for its
            // whole duration: its wait is unknown, not 0. Learnt as 0 (until 2026-12-07), it
            // stayed the shortest at its position for the next three iterations, and the
            // bubbles that waited on those receives were granted nothing past the receives'
            // begins (torchtitan's ZBV job: its warm-up's first receives, read before their
            // senders' begins on 2 cores).
            let bounded = self.transfers.estimate(&sig, None).is_some()
                || partners.is_some_and(|f| f.others.is_some());
            if let Some(d) = duration.filter(|_| bounded) {
                self.pattern.record(pos, WAIT, d.saturating_sub(tr));
            }
        } else if let Some(d) = duration {
            let tr = at_most(self.transfers.estimate(&sig, duration).unwrap_or(d));
            self.pattern.record(pos, WAIT, d.saturating_sub(tr));
        }
        for s in self.streams.values_mut() {
            for b in s.blockers_mut() {
                if b.op == Some(id) && b.released.is_none() {
                    b.released = Some(t);
                }
            }
        }
        self.ops.remove(&id);
        self.in_flight.remove(&id);
    }

    /// A drain mark (a timed point with no event, queued before a host-blocking call): when the
    /// GPU reaches it, `stream` has run its launches so far. It waits for nothing: it does not
    /// make the process's waits trusted, and its release says nothing. Marks never reached (their
    /// pair untimed) are dropped beyond [`MAX_MARKS`], the oldest first.
    fn on_drain_mark(&mut self, stream: StreamId, wait: u64) {
        if self.marks.len() >= MAX_MARKS {
            if let Some(&oldest) = self.marks.keys().min() {
                self.marks.remove(&oldest);
            }
        }
        let launches = self.streams.get(&stream).map_or(0, |s| s.launches);
        self.marks.insert(wait, (stream, launches));
    }

    fn on_wait(&mut self, stream: StreamId, event: u64, wait: u64) {
        self.explicit = true;
        let Some(r) = self.events.get(&event).copied() else {
            return;
        };
        let compute = self.streams.get(&r.stream).map_or(0, |s| s.launches);
        let s = self.streams.entry(stream).or_default();
        if r.stream != stream && compute > 0 {
            s.deps.push((r.stream, r.launches, r.waits));
        }
        if let Some(op) = r.last_op.and_then(|x| self.ops.get(&x).map(|o| (x, o.sig))) {
            s.add_blocker(Blocker {
                wait,
                op: Some(op.0),
                sig: Some(op.1),
                at: s.launches,
                seq: 0,
                released: None,
            });
        }
    }

    fn on_released(&mut self, wait: u64, t: Ns) {
        let mut awaited = None;
        for s in self.streams.values_mut() {
            for b in s.blockers_mut().filter(|b| b.wait == wait) {
                b.released = Some(t);
                awaited = Some((b.op, b.sig));
            }
        }
        let Some((op, sig)) = awaited else {
            return;
        };
        let pending = op.and_then(|x| self.ops.get(&x));
        if op.is_some() && pending.is_none() {
            // It ended already: its transfer is known.
            return;
        }
        // The awaited op has not been seen to end (or will never be timed): its transfer ends
        // at the release; with nothing known of it, the whole wait counts as busy.
        let begin = pending.and_then(|o| o.begin);
        let pos = pending.map(|o| (o.pos, 2));
        let tr = sig.and_then(|sig| {
            self.transfers
                .estimate(&sig, begin.map(|b| t.saturating_sub(b)))
        });
        let from = tr.map_or(0, |tr| t.saturating_sub(tr).max(begin.unwrap_or(0)));
        self.add_transfer(from, t, pos);
    }

    fn on_sync(&mut self, t0: Ns, t1: Ns, on: SyncOn) {
        let targets: Vec<(StreamId, u64)> = match on {
            SyncOn::Device => self
                .streams
                .iter()
                .map(|(&k, s)| (k, s.launches_by(t0)))
                .collect(),
            SyncOn::Stream(k) => self
                .streams
                .get(&k)
                .map(|s| (k, s.launches_by(t0)))
                .into_iter()
                .collect(),
            SyncOn::Event(e) => self
                .events
                .get(&e)
                .map(|r| (r.stream, r.launches))
                .into_iter()
                .collect(),
        };
        for (k, n) in targets {
            if let Some(s) = self.streams.get_mut(&k) {
                s.drained_to(n, t1);
            }
        }
        // Ops queued before it that have not begun by its return will not be timed.
        for o in self.ops.values_mut() {
            let covered = match on {
                SyncOn::Device => true,
                SyncOn::Stream(k) => o.stream == k,
                SyncOn::Event(_) => false,
            };
            if covered && o.begin.is_none() && o.issued <= t0 {
                o.synced.get_or_insert(t1);
            }
        }
    }
}

mod bubbles;
mod in_flight;
mod pending;
#[cfg(test)]
mod tests;
mod transferring;
