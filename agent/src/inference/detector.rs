//! Live bubble detection for one trainer's GPU.
//!
//! A bubble opens when a communication op begins on the GPU and the trainer's compute cannot run beside
//! it: the op holds a receive or is a collective (compute queued after it waits for its data), or it is a
//! send after which the host has queued no compute yet. Because the framework makes the communication
//! stream wait for the compute stream before an op (PyTorch does), the op's GPU begin is the moment the
//! compute queued before it has drained. The bubble closes when the op ends, or, for a send, as soon as
//! the host queues compute (which then runs at once).
use super::obs::{CommSig, Ns, Obs};
use super::pattern::{Pattern, Position};
use std::collections::HashMap;

/// A bubble, once closed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bubble {
    /// GPU-side begin and end (host clock).
    pub start: Ns,
    pub end: Ns,
    /// When the agent learnt of its begin and of its end.
    pub opened_seen: Ns,
    pub closed_seen: Ns,
    /// The end predicted when it opened, if the position was learnt.
    pub predicted_end: Option<Ns>,
    pub confidence: f64,
    /// Cut short by the process's exit (its forecast voided).
    pub cut_by_exit: bool,
}

/// The bubble open now, as the scheduler sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OpenBubble {
    pub start: Ns,
    pub opened_seen: Ns,
    pub predicted_end: Option<Ns>,
    /// The earliest end seen lately at this position (`start` + the shortest recent length).
    pub shortest_end: Option<Ns>,
    /// Typical deviation of the bubble's length at this position (0 when not predicted).
    pub spread_ns: Ns,
    pub confidence: f64,
}

#[derive(Debug)]
struct Op {
    sig: CommSig,
    pos: Position,
    begin: Option<Ns>,
    /// Host time of the first compute launch after the op was issued.
    compute_after_issue: Option<Ns>,
}

/// An op that took part in the open bubble: what the pattern learns when the bubble closes.
#[derive(Debug, Clone, Copy)]
struct Member {
    pos: Position,
    sig: CommSig,
    begin: Ns,
}

#[derive(Debug)]
struct Open {
    bubble: OpenBubble,
    /// Ops in flight in it, and whether each blocks compute (only those keep it open past a launch).
    ops: Vec<(u64, bool)>,
    members: Vec<Member>,
    /// No op holding it blocks compute, or every op has ended with no compute queued: the next
    /// compute launch ends it.
    ends_on_launch: bool,
    /// Host time of the first compute launch since the bubble's first op was issued: compute that
    /// runs as soon as the ops end.
    compute_queued: Option<Ns>,
}

/// Bubbles of one trainer, from its observations in the order the agent sees them.
#[derive(Debug, Default)]
pub struct Detector {
    pattern: Pattern,
    ops: HashMap<u64, Op>,
    open: Option<Open>,
    closed: Vec<Bubble>,
}

/// Ops issued but never seen to begin or end are forgotten past this many (a lost record must not grow
/// the table without bound).
const MAX_PENDING_OPS: usize = 4096;

impl Detector {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn pattern(&self) -> &Pattern {
        &self.pattern
    }

    /// The bubble open now, if any.
    pub fn open_now(&self) -> Option<OpenBubble> {
        self.open.as_ref().map(|o| o.bubble)
    }

    /// Bubbles closed since the last call.
    pub fn take_closed(&mut self) -> Vec<Bubble> {
        std::mem::take(&mut self.closed)
    }

    pub fn observe(&mut self, obs: Obs) {
        match obs {
            Obs::Launch { t, .. } => self.on_launch(t),
            Obs::CommIssue { t, id, sig, .. } => {
                if self.ops.len() >= MAX_PENDING_OPS {
                    self.ops.clear();
                }
                let pos = self.pattern.on_issue(sig, t);
                self.ops.insert(
                    id,
                    Op {
                        sig,
                        pos,
                        begin: None,
                        compute_after_issue: None,
                    },
                );
            }
            Obs::CommBegin { id, t, seen } => self.on_begin(id, t, seen),
            Obs::CommEnd { id, t, seen } => self.on_end(id, t, seen),
            Obs::Exit { t } => {
                self.ops.clear();
                if let Some(mut o) = self.open.take() {
                    // Cut short by the exit: what was forecast did not get the chance to happen,
                    // and the pattern learns nothing from it.
                    o.bubble.predicted_end = None;
                    o.bubble.shortest_end = None;
                    o.members.clear();
                    self.close_as(o, t, t, true);
                }
            }
            // Not part of today's model.
            _ => {}
        }
    }

    fn on_launch(&mut self, t: Ns) {
        for op in self.ops.values_mut() {
            op.compute_after_issue.get_or_insert(t);
        }
        let Some(o) = &mut self.open else { return };
        if o.ends_on_launch {
            let o = self.open.take().expect("checked above");
            let end = t.max(o.bubble.start);
            self.close(o, end, t);
        } else {
            o.compute_queued.get_or_insert(t);
        }
    }

    fn on_begin(&mut self, id: u64, t: Ns, seen: Ns) {
        let Some(op) = self.ops.get_mut(&id) else {
            return;
        };
        op.begin = Some(t);
        let blocks = op.sig.has_recv() || op.sig.collective();
        let member = Member {
            pos: op.pos,
            sig: op.sig,
            begin: t,
        };
        let compute = op.compute_after_issue;
        if !blocks {
            match (compute, &self.open) {
                // Compute queued before the op began runs beside it: no bubble.
                (Some(c), _) if c <= t => return,
                // The host queued compute only after the op began (the agent learnt of the begin
                // late): the GPU was idle from the begin to that launch.
                (Some(c), None) => {
                    let o = self.new_open(id, member, t, seen, true, None);
                    self.close(o, c, seen);
                    return;
                }
                (Some(_), Some(_)) => return,
                (None, _) => {}
            }
        }
        let prediction = self.pattern.predict(op.pos, op.sig);
        match &mut self.open {
            Some(o) => {
                o.ops.push((id, blocks));
                o.members.push(member);
                o.ends_on_launch &= !blocks;
                if let Some(p) = prediction {
                    o.bubble.predicted_end = Some(t + p.expected_ns);
                    o.bubble.shortest_end = Some(t + p.shortest_ns);
                    o.bubble.spread_ns = p.spread_ns;
                    o.bubble.confidence = p.confidence;
                }
            }
            None => {
                let o = self.new_open(id, member, t, seen, !blocks, compute);
                self.open = Some(o);
            }
        }
    }

    fn new_open(
        &self,
        id: u64,
        member: Member,
        t: Ns,
        seen: Ns,
        ends_on_launch: bool,
        compute_queued: Option<Ns>,
    ) -> Open {
        let prediction = self.pattern.predict(member.pos, member.sig);
        Open {
            bubble: OpenBubble {
                start: t,
                opened_seen: seen,
                predicted_end: prediction.map(|p| t + p.expected_ns),
                shortest_end: prediction.map(|p| t + p.shortest_ns),
                spread_ns: prediction.map_or(0, |p| p.spread_ns),
                confidence: prediction.map_or(0.0, |p| p.confidence),
            },
            ops: vec![(id, !ends_on_launch)],
            members: vec![member],
            ends_on_launch,
            compute_queued,
        }
    }

    fn on_end(&mut self, id: u64, t: Ns, seen: Ns) {
        if self.ops.remove(&id).is_none() {
            return;
        }
        let Some(o) = &mut self.open else { return };
        let blocked_before = o.ops.iter().any(|&(_, b)| b);
        o.ops.retain(|&(x, _)| x != id);
        // The last op compute waits for has ended (sends still in flight do not hold compute back).
        if blocked_before && !o.ops.iter().any(|&(_, b)| b) {
            match o.compute_queued {
                // Compute queued behind the ops runs as soon as they end.
                Some(c) => {
                    let o = self.open.take().expect("checked above");
                    self.close(o, t.max(c), seen);
                }
                // Nothing queued (the host waits in a synchronize): idle until the next launch.
                None => o.ends_on_launch = true,
            }
        }
    }

    fn close(&mut self, o: Open, end: Ns, closed_seen: Ns) {
        self.close_as(o, end, closed_seen, false)
    }

    fn close_as(&mut self, o: Open, end: Ns, closed_seen: Ns, cut_by_exit: bool) {
        let b = o.bubble;
        let end = end.max(b.start);
        for m in &o.members {
            self.pattern
                .record(m.pos, m.sig, end.saturating_sub(m.begin));
        }
        self.closed.push(Bubble {
            start: b.start,
            end,
            opened_seen: b.opened_seen,
            closed_seen: closed_seen.max(b.opened_seen),
            predicted_end: b.predicted_end,
            confidence: b.confidence,
            cut_by_exit,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::obs::CommKind;

    const RECV: CommSig = CommSig {
        comm: 1,
        kind: CommKind::Recv,
        peer: 0,
        bytes: 8,
    };
    const SEND: CommSig = CommSig {
        comm: 1,
        kind: CommKind::Send,
        peer: 1,
        bytes: 8,
    };
    const AR: CommSig = CommSig {
        comm: 2,
        kind: CommKind::AllReduce,
        peer: -1,
        bytes: 8,
    };

    fn op(d: &mut Detector, id: u64, sig: CommSig, issue: Ns, begin: Ns, end: Ns) {
        d.observe(Obs::CommIssue {
            t: issue,
            id,
            sig,
            stream: 0,
        });
        op_begin_end(d, id, begin, end);
    }

    #[test]
    fn a_receive_is_a_bubble_from_begin_to_end() {
        let mut d = Detector::new();
        d.observe(Obs::Launch { t: 10, stream: 0 });
        d.observe(Obs::CommIssue {
            t: 20,
            id: 1,
            sig: RECV,
            stream: 0,
        });
        // Compute queued after the receive waits for it: the launch must not end the bubble.
        d.observe(Obs::Launch { t: 30, stream: 0 });
        d.observe(Obs::CommBegin {
            id: 1,
            t: 100,
            seen: 150,
        });
        assert_eq!(d.open_now().map(|b| b.start), Some(100));
        d.observe(Obs::Launch { t: 200, stream: 0 });
        assert!(d.open_now().is_some());
        d.observe(Obs::CommEnd {
            id: 1,
            t: 1_000,
            seen: 1_040,
        });
        assert!(d.open_now().is_none());
        let b = d.take_closed();
        assert_eq!(b.len(), 1);
        assert_eq!(
            (b[0].start, b[0].end, b[0].opened_seen, b[0].closed_seen),
            (100, 1_000, 150, 1_040)
        );
    }

    #[test]
    fn a_send_with_compute_queued_after_it_is_no_bubble() {
        let mut d = Detector::new();
        d.observe(Obs::CommIssue {
            t: 20,
            id: 1,
            sig: SEND,
            stream: 0,
        });
        d.observe(Obs::Launch { t: 30, stream: 0 });
        d.observe(Obs::CommBegin {
            id: 1,
            t: 100,
            seen: 150,
        });
        assert!(d.open_now().is_none());
        d.observe(Obs::CommEnd {
            id: 1,
            t: 900,
            seen: 950,
        });
        assert!(d.take_closed().is_empty());
    }

    #[test]
    fn a_send_is_a_bubble_until_compute_is_queued() {
        let mut d = Detector::new();
        d.observe(Obs::CommIssue {
            t: 20,
            id: 1,
            sig: SEND,
            stream: 0,
        });
        d.observe(Obs::CommBegin {
            id: 1,
            t: 100,
            seen: 150,
        });
        assert!(d.open_now().is_some());
        d.observe(Obs::Launch { t: 400, stream: 0 });
        assert!(d.open_now().is_none());
        let b = d.take_closed();
        assert_eq!((b[0].start, b[0].end), (100, 400));
    }

    #[test]
    fn predictions_come_after_one_iteration() {
        let mut d = Detector::new();
        let mut t = 0;
        let mut id = 0;
        for it in 0..3 {
            id += 1;
            op(&mut d, id, RECV, t, t + 1_000, t + 11_000);
            // The host was waiting for the receive: it queues compute as soon as it returns.
            d.observe(Obs::Launch {
                t: t + 11_000,
                stream: 0,
            });
            id += 1;
            d.observe(Obs::CommIssue {
                t: t + 20_000,
                id,
                sig: AR,
                stream: 0,
            });
            d.observe(Obs::CommBegin {
                id,
                t: t + 20_000,
                seen: t + 20_050,
            });
            if it == 2 {
                let open = d.open_now().unwrap();
                assert_eq!(open.predicted_end, Some(t + 20_000 + 3_000));
            }
            d.observe(Obs::CommEnd {
                id,
                t: t + 23_000,
                seen: t + 23_050,
            });
            d.observe(Obs::Launch {
                t: t + 23_000,
                stream: 0,
            });
            t += 30_000;
        }
        let closed = d.take_closed();
        assert_eq!(closed.len(), 6);
        assert_eq!(closed[0].predicted_end, None);
        assert_eq!(closed[2].predicted_end, Some(30_000 + 11_000));
        assert_eq!(closed[4].predicted_end, Some(60_000 + 11_000));
        assert_eq!(d.pattern().period_ns(), Some(30_000));
    }

    #[test]
    fn a_receive_the_host_waits_for_stays_a_bubble_until_compute_is_queued() {
        let mut d = Detector::new();
        op(&mut d, 1, RECV, 0, 100, 1_000);
        // The host sleeps in a synchronize: the GPU stays idle after the receive ends.
        assert!(d.open_now().is_some());
        assert!(d.take_closed().is_empty());
        d.observe(Obs::Launch {
            t: 1_300,
            stream: 0,
        });
        assert!(d.open_now().is_none());
        let b = d.take_closed();
        assert_eq!((b[0].start, b[0].end), (100, 1_300));
    }

    #[test]
    fn compute_queued_behind_a_receive_ends_the_bubble_with_it() {
        let mut d = Detector::new();
        d.observe(Obs::CommIssue {
            t: 0,
            id: 1,
            sig: RECV,
            stream: 0,
        });
        d.observe(Obs::Launch { t: 10, stream: 0 });
        op_begin_end(&mut d, 1, 100, 1_000);
        let b = d.take_closed();
        assert_eq!((b[0].start, b[0].end), (100, 1_000));
        assert!(d.open_now().is_none());
    }

    #[test]
    fn a_send_seen_late_is_a_bubble_until_the_launch_that_followed_it() {
        let mut d = Detector::new();
        d.observe(Obs::CommIssue {
            t: 0,
            id: 1,
            sig: SEND,
            stream: 0,
        });
        // The launch is seen before the poller reports the send's GPU begin (at 100).
        d.observe(Obs::Launch { t: 400, stream: 0 });
        op_begin_end(&mut d, 1, 100, 200);
        let b = d.take_closed();
        assert_eq!(b.len(), 1);
        assert_eq!((b[0].start, b[0].end), (100, 400));
        assert!(d.open_now().is_none());
    }

    #[test]
    fn the_open_bubble_ends_when_the_process_exits() {
        let mut d = Detector::new();
        op(&mut d, 1, AR, 0, 100, 1_000);
        assert!(d.take_closed().is_empty());
        d.observe(Obs::Exit { t: 1_500 });
        assert!(d.open_now().is_none());
        let b = d.take_closed();
        assert_eq!(
            (b[0].start, b[0].end, b[0].predicted_end, b[0].cut_by_exit),
            (100, 1_500, None, true)
        );
    }

    fn op_begin_end(d: &mut Detector, id: u64, begin: Ns, end: Ns) {
        d.observe(Obs::CommBegin {
            id,
            t: begin,
            seen: begin + 50,
        });
        d.observe(Obs::CommEnd {
            id,
            t: end,
            seen: end + 50,
        });
    }
}
