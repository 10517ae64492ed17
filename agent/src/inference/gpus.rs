//! The node's trainers: one [`Timeline`] per (process, GPU), and each GPU's state, where several
//! trainer processes on one GPU are idle only when all of them are.
use super::anchors::Anchors;
use super::bubble::{Bubble, OpenBubble};
use super::obs::{GpuId, Ns, Obs};
use super::partners::{Partners, Taught};
use super::peers::Matcher;
use super::timeline::Timeline;
use std::cell::OnceCell;
use std::collections::{BTreeMap, HashMap};

/// Added to a transfer bound learnt from other processes' ops: the begin it is measured from can be
/// recorded late by the poller's reaction (a fraction of a millisecond), and an under-estimated
/// transfer would put a grant on a transferring kernel.
const PEER_BOUND_MARGIN_NS: Ns = 500_000;

/// Added to a transfer learnt from exactly matched partners' begins: the GPU times of begins and
/// ends are each within a few µs (the clock anchor), and an under-estimated transfer would put a
/// grant on a transferring kernel.
const MATCHED_BOUND_MARGIN_NS: Ns = 20_000;

struct Tl {
    timeline: Timeline,
    /// When the agent first saw it.
    since: Ns,
}

#[derive(Default)]
pub struct Gpus {
    timelines: BTreeMap<(u32, GpuId), Tl>,
    /// The GPU each process's records named last (for records that name none).
    last_gpu: HashMap<u32, GpuId>,
    closed: Vec<(u32, GpuId, Bubble)>,
    matcher: Matcher,
    partners: Partners,
    anchors: Anchors,
    /// Every GPU's trainers' open bubbles ([`Gpus::open_on`]), computed at most once between
    /// two changes: they are a function of the timelines, partners and anchors alone, and the
    /// agent asks for them at every step (every 50 µs while a bubble is open) though most steps
    /// read no record. Emptied by every `&mut self` method that changes state.
    opens: OnceCell<Vec<(GpuId, Vec<Option<OpenBubble>>)>>,
}

impl Gpus {
    pub fn new() -> Gpus {
        Gpus::default()
    }

    /// Routes one observation of process `pid` (on `gpu`, when its record names one).
    pub fn observe(&mut self, pid: u32, gpu: Option<GpuId>, obs: Obs, now: Ns) {
        self.opens.take();
        let owner = |f: &dyn Fn(&Timeline) -> bool, tl: &BTreeMap<(u32, GpuId), Tl>| {
            tl.range((pid, GpuId(0))..=(pid, GpuId(u32::MAX)))
                .find(|(_, t)| f(&t.timeline))
                .map(|(k, _)| *k)
        };
        let key = match obs {
            Obs::CommBegin { id, .. }
            | Obs::CommEnd { id, .. }
            | Obs::CommUntimed { id }
            | Obs::CommMatch { id, .. } => owner(&|t| t.has_op(id), &self.timelines),
            Obs::WaitReached { wait, .. } | Obs::WaitReleased { wait, .. } => {
                owner(&|t| t.has_wait(wait), &self.timelines)
            }
            Obs::Exit { .. } | Obs::Lost { .. } => {
                let keys: Vec<_> = self
                    .timelines
                    .range((pid, GpuId(0))..=(pid, GpuId(u32::MAX)))
                    .map(|(k, _)| *k)
                    .collect();
                for k in keys {
                    self.observe_on(k, obs, now);
                }
                return;
            }
            _ => {
                let g = gpu
                    .or_else(|| self.last_gpu.get(&pid).copied())
                    .unwrap_or(GpuId::UNKNOWN);
                self.last_gpu.insert(pid, g);
                Some((pid, g))
            }
        };
        if let Some(k) = key {
            self.observe_on(k, obs, now);
        }
    }

    fn observe_on(&mut self, key: (u32, GpuId), obs: Obs, now: Ns) {
        let t = self.timelines.entry(key).or_insert_with(|| Tl {
            timeline: Timeline::labelled(key.0),
            since: now,
        });
        if let Obs::CommEnd { id, .. } = obs {
            if let Some(f) = self.partners.floor(key, id) {
                t.timeline.transfer_floor(id, f);
            }
        }
        t.timeline.observe(obs, now);
        let closed = t.timeline.take_closed();
        self.anchors.observed(key, &t.timeline, &closed);
        for b in closed {
            self.closed.push((key.0, key.1, b));
        }
        let ended = t.timeline.take_ended();
        // An op matched exactly learns its transfer from its partners: the guesses of the
        // matcher (by size and time) are for the others, and for ops that send (their partners'
        // begins say nothing of when their data moved, see the timeline).
        let keyed = match obs {
            Obs::CommEnd { id, .. } => {
                self.partners.has(key, id) && ended.iter().all(|e| !e.0.has_send())
            }
            _ => false,
        };
        match obs {
            Obs::CommMatch {
                id,
                key: k,
                parties,
                receives,
            } => self.partners.matched(key, id, k, parties, receives),
            Obs::CommBegin { id, t, .. } => {
                let taught = self.partners.began(key, id, t);
                self.apply(taught);
            }
            Obs::CommEnd { id, .. } => {
                let timed = ended.first().map(|&(sig, _, end)| (end, sig));
                let taught = self.partners.ended(key, id, timed);
                self.apply(taught);
            }
            Obs::CommUntimed { id } => {
                self.partners.ended(key, id, None);
            }
            _ => {}
        }
        if self.timelines.len() < 2 || keyed {
            return;
        }
        for (sig, begin, end) in ended {
            for (who, s, ns) in self.matcher.on_end(key, sig, begin, end) {
                if let Some(t) = self.timelines.get_mut(&who) {
                    t.timeline.bound_transfer(&s, ns + PEER_BOUND_MARGIN_NS);
                }
            }
        }
    }

    /// Hands what the partners taught to the timelines concerned.
    fn apply(&mut self, taught: Vec<Taught>) {
        for t in taught {
            match t {
                Taught::Transferring { who, id, t } => {
                    let receiver = self.partners.receiver_began(who, id);
                    if let Some(x) = self.timelines.get_mut(&who) {
                        x.timeline.partners_transferring(id, t);
                        if let Some(r) = receiver {
                            x.timeline.receiver_began(id, r);
                        }
                    }
                }
                Taught::Transferred { who, sig, ns } => {
                    if let Some(x) = self.timelines.get_mut(&who) {
                        x.timeline
                            .bound_transfer(&sig, ns + MATCHED_BOUND_MARGIN_NS);
                    }
                }
            }
        }
    }

    /// Bubbles closed since the last call: (process, GPU, bubble).
    pub fn take_closed(&mut self) -> Vec<(u32, GpuId, Bubble)> {
        std::mem::take(&mut self.closed)
    }

    /// Keeps the timelines of the processes `live` says are still there.
    pub fn retain(&mut self, live: impl Fn(u32) -> bool) {
        self.opens.take();
        self.timelines.retain(|k, _| live(k.0));
        self.last_gpu.retain(|p, _| live(*p));
        self.partners.retain(&live);
        self.anchors.retain(|k| live(k.0));
    }

    /// Every GPU with a trainer timeline, in order.
    pub fn gpus(&self) -> Vec<GpuId> {
        self.opens().iter().map(|(g, _)| *g).collect()
    }

    /// The timelines on `gpu`: (process, timeline, first seen).
    pub fn on(&self, gpu: GpuId) -> impl Iterator<Item = (u32, &Timeline, Ns)> {
        self.timelines
            .iter()
            .filter(move |(k, _)| k.1 == gpu)
            .map(|(k, t)| (k.0, &t.timeline, t.since))
    }

    /// Each trainer's open bubble on `gpu` (`None` for a trainer that is busy), in process order.
    pub fn open_on(&self, gpu: GpuId) -> Vec<Option<OpenBubble>> {
        self.opens()
            .iter()
            .find(|(g, _)| *g == gpu)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }

    /// Every GPU's trainers' open bubbles, by GPU: from the cache, computed if it was emptied.
    fn opens(&self) -> &[(GpuId, Vec<Option<OpenBubble>>)] {
        self.opens.get_or_init(|| {
            let mut by_gpu: BTreeMap<GpuId, Vec<Option<OpenBubble>>> = BTreeMap::new();
            for (&k, t) in &self.timelines {
                by_gpu
                    .entry(k.1)
                    .or_default()
                    .push(self.open_of_timeline(k, &t.timeline));
            }
            by_gpu.into_iter().collect()
        })
    }

    /// The open bubble of one trainer's timeline, its end anchored on other stages and its
    /// transfers bounded by its parties where they can (see [`Gpus::anchor`]).
    fn open_of_timeline(&self, k: (u32, GpuId), tl: &Timeline) -> Option<OpenBubble> {
        let mut b = tl.open_now()?;
        self.anchor(k, tl, &mut b);
        if let Some(x) = self.parties_may_begin(k, tl) {
            b.busy_from = Some(b.busy_from.map_or(x, |y| y.min(x)));
        }
        Some(b)
    }

    /// Where a close of another timeline predicts the end of `who`'s open bubble `b` (a position
    /// learnt from its start too) more steadily than its start does, or with more confidence
    /// ([`super::anchors`]): that end, shortest recent end and spread replace those measured from
    /// the start, the bubble is trusted as much as the anchor is, and of the ops in flight only
    /// what their partners say of their transfers bounds it (the waits learnt at their positions,
    /// measured from their begins or issues, carry the same upstream jitter as the bubble's length
    /// from its start). Until 2026-12-07 an anchor set the end and kept the length's confidence:
    /// a bubble whose length from its start varies with its upstream stage (torchtitan's ZBV job:
    /// the later stages' first bubbles of an iteration, 6-12 ms, their ends 10.5 ms after the
    /// stage before resumed) stayed below the grants' bar however steady its anchor.
    fn anchor(&self, who: (u32, GpuId), tl: &Timeline, b: &mut OpenBubble) {
        if b.predicted_end.is_none() {
            return;
        }
        let Some(a) = self
            .anchors
            .predict(who, tl)
            .filter(|a| a.spread_ns < b.spread_ns || a.confidence > b.confidence)
        else {
            return;
        };
        b.predicted_end = Some(a.end);
        b.shortest_end = Some(a.shortest_end);
        b.spread_ns = a.spread_ns;
        b.confidence = b.confidence.max(a.confidence);
        b.busy_from = tl.busy_known();
    }

    /// When an op of `who` in flight, or issued and able to begin now, may start transferring
    /// because the parties it waits for may have begun unseen: a key all of whose parties were
    /// issued here, each of those that was not seen to begin able to begin now on its own
    /// timeline (see [`Timeline::may_begin_from`]), can complete as soon as the last of them was
    /// issued, and its data move from then. The begin records of those parties come a fraction
    /// of a millisecond later, their issues at once: on torchtitan's ZBV job with noise, grants
    /// opened as the last party of an all-gather launched it ran 1-2 ms over its transfer (those
    /// that still do were opened just before the agent went 4 ms without a step). An op of `who`
    /// itself not seen to begin counts as one of those parties: until 2026-12-07 such an op was
    /// bounded only by its issue plus the shortest wait learnt at its position: on the same job
    /// with noise, an iteration's first all-gathers whose partner came 0.24 ms after them (over
    /// 1.1 ms in the iterations before) transferred under a grant for 0.6 ms.
    fn parties_may_begin(&self, who: (u32, GpuId), tl: &Timeline) -> Option<Ns> {
        tl.in_flight_ops()
            .chain(tl.may_begin_ops())
            .flat_map(|id| self.partners.waiting_for(who, id))
            .filter_map(|unbegun| {
                let mut latest = None;
                for (w, i) in unbegun {
                    let t = self.timelines.get(&w)?.timeline.may_begin_from(i)?;
                    latest = Some(latest.map_or(t, |l: Ns| l.max(t)));
                }
                latest
            })
            .min()
    }

    /// The GPU's bubble: the time all its trainers are idle, with the earliest predicted end.
    pub fn open_of(&self, gpu: GpuId) -> Option<OpenBubble> {
        intersect(&self.open_on(gpu))
    }

    /// Comm ops waiting for their GPU times, over all timelines.
    pub fn pending_ops(&self) -> usize {
        self.timelines
            .values()
            .map(|t| t.timeline.pending_ops())
            .sum()
    }

    /// How many ops were matched across processes.
    pub fn match_stats(&self) -> super::partners::MatchStats {
        self.partners.stats()
    }

    /// Whether any timeline has a bubble open.
    pub fn any_open(&self) -> bool {
        self.opens()
            .iter()
            .any(|(_, v)| v.iter().any(Option::is_some))
    }
}

/// The bubble of several trainers sharing a GPU: open while all are, ending at the earliest end.
pub fn intersect(v: &[Option<OpenBubble>]) -> Option<OpenBubble> {
    let mut out: Option<OpenBubble> = None;
    for b in v {
        let b = (*b)?;
        out = Some(match out {
            None => b,
            Some(o) => {
                let min = |a: Option<Ns>, b: Option<Ns>| match (a, b) {
                    (Some(x), Some(y)) => Some(x.min(y)),
                    (x, y) => x.or(y),
                };
                OpenBubble {
                    start: o.start.max(b.start),
                    opened_seen: o.opened_seen.max(b.opened_seen),
                    predicted_end: min(o.predicted_end, b.predicted_end),
                    shortest_end: min(o.shortest_end, b.shortest_end),
                    spread_ns: o.spread_ns.max(b.spread_ns),
                    confidence: o.confidence.min(b.confidence),
                    blocked: o.blocked || b.blocked,
                    busy_from: min(o.busy_from, b.busy_from),
                }
            }
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::obs::{CommKind, CommSig, SyncOn};

    #[test]
    fn one_process_on_two_gpus_has_a_timeline_per_gpu() {
        let mut g = Gpus::new();
        let (a, b) = (GpuId(0x3b00), GpuId(0x5e00));
        let sig = CommSig {
            comm: 1,
            kind: CommKind::Recv,
            peer: 0,
            bytes: 4,
            largest_send: 0,
        };
        g.observe(7, Some(a), Obs::Launch { t: 1, stream: 1 }, 1);
        g.observe(7, Some(b), Obs::Launch { t: 2, stream: 1 }, 2);
        g.observe(
            7,
            Some(b),
            Obs::CommIssue {
                t: 3,
                id: 9,
                stream: 2,
                sig,
            },
            3,
        );
        // The poller's record names no GPU (or another): routed by the op.
        g.observe(
            7,
            None,
            Obs::CommBegin {
                id: 9,
                t: 100,
                seen: 110,
            },
            110,
        );
        assert_eq!(g.gpus(), vec![a, b]);
        assert!(g.open_of(a).is_none(), "GPU A ran nothing that drained");
        assert_eq!(g.open_of(b).map(|x| x.start), Some(100));
        g.observe(
            7,
            Some(a),
            Obs::Sync {
                t0: 5,
                t1: 50,
                on: SyncOn::Device,
            },
            50,
        );
        assert_eq!(g.open_of(a).map(|x| x.start), Some(50));
        g.observe(7, None, Obs::Exit { t: 200 }, 200);
        assert!(!g.any_open());
        assert_eq!(g.take_closed().len(), 2);
    }

    #[test]
    fn open_bubbles_are_recomputed_after_every_change() {
        let mut g = Gpus::new();
        let (a, b) = (GpuId(0x3b00), GpuId(0x5e00));
        let sync = |t0, t1| Obs::Sync {
            t0,
            t1,
            on: SyncOn::Device,
        };
        g.observe(7, Some(a), Obs::Launch { t: 1, stream: 1 }, 1);
        g.observe(8, Some(b), Obs::Launch { t: 1, stream: 1 }, 1);
        assert_eq!(g.gpus(), vec![a, b]);
        assert!(!g.any_open());
        // Asked again and again between records: the same answer (from the cache).
        g.observe(7, Some(a), sync(5, 50), 50);
        for _ in 0..3 {
            assert_eq!(g.open_of(a).map(|x| x.start), Some(50));
            assert!(g.any_open());
        }
        // The next record closes it.
        g.observe(7, Some(a), Obs::Launch { t: 60, stream: 1 }, 60);
        assert!(g.open_of(a).is_none());
        assert!(!g.any_open());
        // A process gone: its GPU is no longer listed.
        g.observe(8, Some(b), sync(5, 70), 70);
        assert_eq!(g.open_on(b).len(), 1);
        g.retain(|pid| pid == 7);
        assert_eq!(g.gpus(), vec![a]);
        assert!(g.open_on(b).is_empty());
        assert!(!g.any_open());
    }

    #[test]
    fn trainers_sharing_a_gpu_are_idle_only_together() {
        let b = |start, end| {
            Some(OpenBubble {
                start,
                opened_seen: start,
                predicted_end: end,
                shortest_end: end,
                spread_ns: 0,
                confidence: 1.0,
                blocked: false,
                busy_from: None,
            })
        };
        let both = intersect(&[b(10, Some(100)), b(30, Some(80))]).unwrap();
        assert_eq!((both.start, both.predicted_end), (30, Some(80)));
        assert_eq!(intersect(&[b(10, Some(100)), None]), None);
        assert_eq!(intersect(&[]), None);
    }

    #[test]
    fn a_receive_transfers_from_its_matched_senders_begin() {
        let run = |matched: bool| {
            let mut g = Gpus::new();
            let (a, b) = (GpuId(0x1100), GpuId(0x1200));
            let sig = |kind, peer| CommSig {
                comm: 0x50,
                kind,
                peer,
                bytes: 1 << 20,
                largest_send: 0,
            };
            g.observe(1, Some(a), Obs::Launch { t: 100, stream: 1 }, 100);
            g.observe(2, Some(b), Obs::Launch { t: 100, stream: 1 }, 100);
            for (pid, gpu, id, s) in [
                (1, a, 11, sig(CommKind::Recv, 1)),
                (2, b, 22, sig(CommKind::Send, 0)),
            ] {
                let issue = Obs::CommIssue {
                    t: 200,
                    id,
                    stream: 2,
                    sig: s,
                };
                g.observe(pid, Some(gpu), issue, 200);
                if matched {
                    let m = Obs::CommMatch {
                        id,
                        key: 0xfeed,
                        parties: 2,
                        receives: s.kind == CommKind::Recv,
                    };
                    g.observe(pid, Some(gpu), m, 200);
                }
            }
            let at = |id, t| Obs::CommBegin { id, t, seen: t };
            g.observe(1, None, at(11, 1_000), 1_000);
            g.observe(2, None, at(22, 6_000), 6_000);
            let end = |id, t| Obs::CommEnd { id, t, seen: t };
            g.observe(1, None, end(11, 30_000), 30_000);
            g.observe(2, None, end(22, 30_000), 30_000);
            g.observe(
                1,
                Some(a),
                Obs::Launch {
                    t: 30_200,
                    stream: 1,
                },
                30_200,
            );
            g.take_closed()
                .into_iter()
                .filter(|x| x.0 == 1)
                .map(|x| (x.2.start, x.2.end))
                .collect::<Vec<_>>()
        };
        // Matched: idle until the sender began; without, nothing known of the transfer, the
        // whole receive counts as transferring.
        assert_eq!(run(true), vec![(1_000, 6_000), (30_000, 30_200)]);
        assert_eq!(run(false), vec![(30_000, 30_200)]);
    }

    #[test]
    fn a_collective_whose_last_party_can_begin_is_busy_from_its_issue() {
        let mut g = Gpus::new();
        let (a, b) = (GpuId(0x1100), GpuId(0x1200));
        let all_reduce = CommSig {
            comm: 0x60,
            kind: CommKind::AllReduce,
            peer: -1,
            bytes: 1 << 20,
            largest_send: 0,
        };
        let issue = |id, t| Obs::CommIssue {
            t,
            id,
            stream: 2,
            sig: all_reduce,
        };
        let matched = |id| Obs::CommMatch {
            id,
            key: 0xabc,
            parties: 2,
            receives: false,
        };
        // A: compute, then the all-reduce, begun at 1 µs and waiting (a long wait learnt).
        g.observe(1, Some(a), Obs::Launch { t: 100, stream: 1 }, 100);
        g.observe(1, Some(a), issue(11, 200), 200);
        g.observe(1, Some(a), matched(11), 200);
        g.observe(
            1,
            None,
            Obs::CommBegin {
                id: 11,
                t: 1_000,
                seen: 1_000,
            },
            1_000,
        );
        g.timelines
            .get_mut(&(1, a))
            .expect("A's timeline")
            .timeline
            .set_learnt(11, 50_000);
        // B: an op on its comm stream that began and ended (the stream is timed), then compute.
        let other = CommSig {
            comm: 0x61,
            ..all_reduce
        };
        g.observe(2, Some(b), Obs::Launch { t: 100, stream: 1 }, 100);
        g.observe(
            2,
            Some(b),
            Obs::CommIssue {
                t: 150,
                id: 21,
                stream: 2,
                sig: other,
            },
            150,
        );
        g.observe(
            2,
            None,
            Obs::CommBegin {
                id: 21,
                t: 300,
                seen: 300,
            },
            300,
        );
        g.observe(
            2,
            None,
            Obs::CommEnd {
                id: 21,
                t: 400,
                seen: 400,
            },
            400,
        );
        let busy = |g: &Gpus| g.open_on(a)[0].expect("A idle").busy_from;
        assert_eq!(busy(&g), Some(50_000));
        // B issues its party at 5 µs, first on its stream with its compute run: the all-reduce
        // may be transferring from then, before B's begin record is read.
        g.observe(2, Some(b), issue(22, 5_000), 5_000);
        g.observe(2, Some(b), matched(22), 5_000);
        assert_eq!(busy(&g), Some(5_000));
        // Its begin read (at 6 µs): every party began, the key itself says so.
        g.observe(
            2,
            None,
            Obs::CommBegin {
                id: 22,
                t: 6_000,
                seen: 6_000,
            },
            6_000,
        );
        assert_eq!(busy(&g), Some(6_000));
    }

    #[test]
    fn a_collective_issued_by_every_party_is_busy_from_the_last_issue_before_any_begin_is_read() {
        let mut g = Gpus::new();
        let (a, b) = (GpuId(0x1100), GpuId(0x1200));
        let sig = |comm| CommSig {
            comm,
            kind: CommKind::AllGather,
            peer: -1,
            bytes: 1 << 20,
            largest_send: 0,
        };
        let issue = |id, t, comm| Obs::CommIssue {
            t,
            id,
            stream: 2,
            sig: sig(comm),
        };
        let matched = |id| Obs::CommMatch {
            id,
            key: 0xabc,
            parties: 2,
            receives: true,
        };
        // Each process: compute, an op on its comm stream that began and ended (the stream is
        // timed), then a device synchronize: drained and idle from 1 µs.
        for (pid, gpu) in [(1, a), (2, b)] {
            let mut at = |obs, t| g.observe(pid, Some(gpu), obs, t);
            at(Obs::Launch { t: 100, stream: 1 }, 100);
            at(issue(10 * pid as u64, 150, 0x61), 150);
            at(
                Obs::CommBegin {
                    id: 10 * pid as u64,
                    t: 300,
                    seen: 300,
                },
                300,
            );
            at(
                Obs::CommEnd {
                    id: 10 * pid as u64,
                    t: 400,
                    seen: 400,
                },
                400,
            );
            at(
                Obs::Sync {
                    t0: 450,
                    t1: 1_000,
                    on: SyncOn::Device,
                },
                1_000,
            );
        }
        // A issues the all-gather at 5 µs, first on its comm stream: its begin record is not
        // read yet, and 50 µs were learnt between its begin and its transfer.
        g.observe(1, Some(a), issue(11, 5_000, 0x60), 5_000);
        g.observe(1, Some(a), matched(11), 5_000);
        g.timelines
            .get_mut(&(1, a))
            .expect("A's timeline")
            .timeline
            .set_learnt_wait(50_000);
        let busy = |g: &Gpus| g.open_on(a)[0].expect("A idle").busy_from;
        assert_eq!(busy(&g), Some(55_000));
        // B issues its party at 6 µs and can begin at once: both may have begun unread, and the
        // data may move from then, long before the wait learnt at A's position.
        g.observe(2, Some(b), issue(22, 6_000, 0x60), 6_000);
        g.observe(2, Some(b), matched(22), 6_000);
        assert_eq!(busy(&g), Some(6_000));
    }
}
