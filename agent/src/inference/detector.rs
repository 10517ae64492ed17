//! Live bubble detection for one trainer's GPU.
//!
//! A bubble opens when a communication op begins on the GPU and the trainer's compute cannot run beside
//! it: the op holds a receive or is a collective (compute queued after it waits for its data), or it is a
//! send after which the host has queued no compute yet. Because the framework makes the communication
//! stream wait for the compute stream before an op (PyTorch does), the op's GPU begin is the moment the
//! compute queued before it has drained. The bubble closes when the op ends, or, for a send, as soon as
//! the host queues compute (which then runs at once).
use super::obs::{CommSig, Ns, Obs};
use super::pattern::{Pattern, Position, Prediction};
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
}

/// The bubble open now, as the scheduler sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OpenBubble {
    pub start: Ns,
    pub opened_seen: Ns,
    pub predicted_end: Option<Ns>,
    /// Typical deviation of the bubble's length at this position (0 when not predicted).
    pub spread_ns: Ns,
    pub confidence: f64,
}

#[derive(Debug)]
struct Op {
    sig: CommSig,
    pos: Position,
    begin: Option<Ns>,
    compute_after_issue: bool,
}

#[derive(Debug)]
struct Open {
    bubble: OpenBubble,
    /// Ops that keep it open.
    ops: Vec<u64>,
    /// No op holding it blocks compute: a compute launch ends it.
    ends_on_launch: bool,
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
            Obs::Launch { t } => self.on_launch(t),
            Obs::CommIssue { t, id, sig } => {
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
                        compute_after_issue: false,
                    },
                );
            }
            Obs::CommBegin { id, t, seen } => self.on_begin(id, t, seen),
            Obs::CommEnd { id, t, seen } => self.on_end(id, t, seen),
        }
    }

    fn on_launch(&mut self, t: Ns) {
        for op in self.ops.values_mut() {
            op.compute_after_issue = true;
        }
        if self.open.as_ref().is_some_and(|o| o.ends_on_launch) {
            let o = self.open.take().expect("checked above");
            let end = t.max(o.bubble.start);
            self.close(o.bubble, end, t.max(o.bubble.opened_seen));
        }
    }

    fn on_begin(&mut self, id: u64, t: Ns, seen: Ns) {
        let Some(op) = self.ops.get_mut(&id) else {
            return;
        };
        op.begin = Some(t);
        let blocks = op.sig.blocks_compute();
        if !blocks && op.compute_after_issue {
            return;
        }
        let prediction = self.pattern.predict(op.pos, op.sig);
        match &mut self.open {
            Some(o) => {
                o.ops.push(id);
                o.ends_on_launch &= !blocks;
                if let Some(p) = prediction {
                    o.bubble.predicted_end = Some(t + p.expected_ns);
                    o.bubble.spread_ns = p.spread_ns;
                    o.bubble.confidence = p.confidence;
                }
            }
            None => {
                let Prediction {
                    expected_ns,
                    confidence,
                    spread_ns,
                } = prediction.unwrap_or(Prediction {
                    expected_ns: 0,
                    spread_ns: 0,
                    confidence: 0.0,
                });
                self.open = Some(Open {
                    bubble: OpenBubble {
                        start: t,
                        opened_seen: seen,
                        predicted_end: prediction.map(|_| t + expected_ns),
                        spread_ns,
                        confidence,
                    },
                    ops: vec![id],
                    ends_on_launch: !blocks,
                });
            }
        }
    }

    fn on_end(&mut self, id: u64, t: Ns, seen: Ns) {
        let Some(op) = self.ops.remove(&id) else {
            return;
        };
        if let Some(begin) = op.begin {
            self.pattern.record(op.pos, op.sig, t.saturating_sub(begin));
        }
        let Some(o) = &mut self.open else { return };
        o.ops.retain(|&x| x != id);
        if o.ops.is_empty() {
            let o = self.open.take().expect("checked above");
            self.close(o.bubble, t, seen);
        }
    }

    fn close(&mut self, b: OpenBubble, end: Ns, closed_seen: Ns) {
        self.closed.push(Bubble {
            start: b.start,
            end: end.max(b.start),
            opened_seen: b.opened_seen,
            closed_seen: closed_seen.max(b.opened_seen),
            predicted_end: b.predicted_end,
            confidence: b.confidence,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECV: CommSig = CommSig {
        has_send: false,
        has_recv: true,
        collective: false,
        peer: 0,
        bytes: 8,
    };
    const SEND: CommSig = CommSig {
        has_send: true,
        has_recv: false,
        collective: false,
        peer: 1,
        bytes: 8,
    };
    const AR: CommSig = CommSig {
        has_send: false,
        has_recv: false,
        collective: true,
        peer: -1,
        bytes: 8,
    };

    fn op(d: &mut Detector, id: u64, sig: CommSig, issue: Ns, begin: Ns, end: Ns) {
        d.observe(Obs::CommIssue { t: issue, id, sig });
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

    #[test]
    fn a_receive_is_a_bubble_from_begin_to_end() {
        let mut d = Detector::new();
        d.observe(Obs::Launch { t: 10 });
        d.observe(Obs::CommIssue {
            t: 20,
            id: 1,
            sig: RECV,
        });
        // Compute queued after the receive waits for it: the launch must not end the bubble.
        d.observe(Obs::Launch { t: 30 });
        d.observe(Obs::CommBegin {
            id: 1,
            t: 100,
            seen: 150,
        });
        assert_eq!(d.open_now().map(|b| b.start), Some(100));
        d.observe(Obs::Launch { t: 200 });
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
        });
        d.observe(Obs::Launch { t: 30 });
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
        });
        d.observe(Obs::CommBegin {
            id: 1,
            t: 100,
            seen: 150,
        });
        assert!(d.open_now().is_some());
        d.observe(Obs::Launch { t: 400 });
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
            id += 1;
            d.observe(Obs::CommIssue {
                t: t + 20_000,
                id,
                sig: AR,
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
            t += 30_000;
        }
        let closed = d.take_closed();
        assert_eq!(closed.len(), 6);
        assert_eq!(closed[0].predicted_end, None);
        assert_eq!(closed[2].predicted_end, Some(30_000 + 11_000));
        assert_eq!(closed[4].predicted_end, Some(60_000 + 11_000));
        assert_eq!(d.pattern().period_ns(), Some(30_000));
    }
}
