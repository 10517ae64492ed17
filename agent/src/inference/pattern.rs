//! Learns the iteration's repeating sequence of communication ops and how long the bubble at each
//! position of it lasts.
//!
//! An iteration ends with a collective (the gradient all-reduce every data- or pipeline-parallel job
//! does); positions count the ops since the last one. The bubble length seen at (position, signature)
//! is kept as a running mean and spread. When an iteration's sequence of signatures differs from the
//! previous one (another micro-batch count, another schedule), everything learnt for the old sequence is
//! dropped and the iteration just finished becomes the new reference: predictions are back after one
//! full iteration of the new job.
use super::obs::{CommSig, Ns};
use std::collections::HashMap;

/// Where an op sits in the iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Position {
    /// Iterations completed before this op was issued.
    pub iteration: u64,
    /// Index of the op in its iteration.
    pub index: usize,
}

/// What the pattern expects of the bubble that opens at a position.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    pub expected_ns: Ns,
    /// The shortest of the recent lengths at this position (what a grant must not outlast).
    pub shortest_ns: Ns,
    pub spread_ns: Ns,
    /// 0..=1: grows with the number of matching observations, shrinks with their spread.
    pub confidence: f64,
}

/// Observations per position the prediction is made from (the newest ones).
const WINDOW: usize = 5;

#[derive(Clone, Copy, Debug)]
struct Stat {
    /// The newest observations (a ring of `min(count, WINDOW)` values).
    recent: [f64; WINDOW],
    count: u32,
    last_iteration: u64,
    /// The newest observation: what is kept when the job changes.
    last: f64,
}

impl Stat {
    fn new(d: f64, iteration: u64) -> Stat {
        Stat {
            recent: [d; WINDOW],
            count: 1,
            last_iteration: iteration,
            last: d,
        }
    }

    fn add(&mut self, d: f64) {
        self.recent[self.count as usize % WINDOW] = d;
        self.count += 1;
        self.last = d;
    }

    fn window(&self) -> &[f64] {
        &self.recent[..(self.count as usize).min(WINDOW)]
    }

    /// The median of the newest observations: one late host wake-up does not move it.
    fn median(&self) -> f64 {
        let mut v = [0.0; WINDOW];
        let w = self.window();
        v[..w.len()].copy_from_slice(w);
        let v = &mut v[..w.len()];
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    }

    /// Mean absolute deviation of the newest observations from their median.
    fn spread(&self) -> f64 {
        let m = self.median();
        let w = self.window();
        w.iter().map(|x| (x - m).abs()).sum::<f64>() / w.len() as f64
    }
}
/// Observations after which a position is trusted fully (before the spread is taken into account).
const FULL_CONFIDENCE_COUNT: u32 = 3;
/// Iteration boundaries kept for the period estimate.
const PERIOD_WINDOW: usize = 8;

/// The learnt iteration pattern of one trainer.
#[derive(Debug, Default)]
pub struct Pattern {
    current: Vec<CommSig>,
    reference: Vec<CommSig>,
    stats: HashMap<(usize, CommSig), Stat>,
    iterations: u64,
    boundaries: Vec<Ns>,
    changes: u64,
}

impl Pattern {
    pub fn new() -> Self {
        Self::default()
    }

    /// An op was issued at `t`: returns its position. A collective closes the iteration.
    pub fn on_issue(&mut self, sig: CommSig, t: Ns) -> Position {
        let pos = Position {
            iteration: self.iterations,
            index: self.current.len(),
        };
        self.current.push(sig);
        if sig.collective() {
            self.end_iteration(t);
        }
        pos
    }

    fn end_iteration(&mut self, t: Ns) {
        let finished = self.iterations;
        if self.current != self.reference {
            // The job changed (or this is the first iteration): forget what belonged to the old sequence.
            if !self.reference.is_empty() {
                self.changes += 1;
            }
            self.stats.retain(|_, s| s.last_iteration == finished);
            for s in self.stats.values_mut() {
                *s = Stat::new(s.last, s.last_iteration);
            }
            self.reference = std::mem::take(&mut self.current);
        } else {
            self.current.clear();
        }
        self.iterations += 1;
        if self.boundaries.len() == PERIOD_WINDOW {
            self.boundaries.remove(0);
        }
        self.boundaries.push(t);
    }

    /// The op at `pos` with signature `sig` held the GPU idle for `duration` ns.
    pub fn record(&mut self, pos: Position, sig: CommSig, duration: Ns) {
        let d = duration as f64;
        match self.stats.get_mut(&(pos.index, sig)) {
            Some(s) => {
                s.add(d);
                s.last_iteration = s.last_iteration.max(pos.iteration);
            }
            None => {
                self.stats
                    .insert((pos.index, sig), Stat::new(d, pos.iteration));
            }
        }
    }

    /// What is expected of the bubble opening at `pos`, if anything was learnt there.
    pub fn predict(&self, pos: Position, sig: CommSig) -> Option<Prediction> {
        let s = self.stats.get(&(pos.index, sig))?;
        let seen = (s.count.min(FULL_CONFIDENCE_COUNT) as f64) / FULL_CONFIDENCE_COUNT as f64;
        let (median, spread) = (s.median(), s.spread());
        let steadiness = if median > 0.0 {
            1.0 - (spread / median).min(1.0)
        } else {
            1.0
        };
        Some(Prediction {
            expected_ns: median.round() as Ns,
            shortest_ns: s
                .window()
                .iter()
                .copied()
                .fold(f64::INFINITY, f64::min)
                .round() as Ns,
            spread_ns: spread.round() as Ns,
            confidence: seen * steadiness,
        })
    }

    /// Completed iterations.
    pub fn iterations(&self) -> u64 {
        self.iterations
    }

    /// Ops per iteration of the current reference sequence (0 before one full iteration).
    pub fn ops_per_iteration(&self) -> usize {
        self.reference.len()
    }

    /// How often the sequence changed after the first iteration.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Mean iteration period over the last boundaries, once two are known.
    pub fn period_ns(&self) -> Option<Ns> {
        let (first, last) = (self.boundaries.first()?, self.boundaries.last()?);
        let n = self.boundaries.len() as u64 - 1;
        (n > 0).then(|| (last - first) / n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::obs::CommKind;

    fn p2p(has_send: bool, has_recv: bool, peer: i32) -> CommSig {
        CommSig {
            comm: 1,
            kind: match (has_send, has_recv) {
                (true, true) => CommKind::SendRecv,
                (true, false) => CommKind::Send,
                _ => CommKind::Recv,
            },
            peer,
            bytes: 4096,
        }
    }
    const AR: CommSig = CommSig {
        comm: 2,
        kind: CommKind::AllReduce,
        peer: -1,
        bytes: 4,
    };

    /// Runs one iteration of `ops` recv ops (each a bubble of `dur(i)`) plus the all-reduce.
    fn iteration(
        p: &mut Pattern,
        ops: usize,
        t: &mut Ns,
        dur: impl Fn(usize) -> Ns,
    ) -> Vec<Position> {
        let mut out = vec![];
        for i in 0..ops {
            let sig = p2p(false, true, 1);
            let pos = p.on_issue(sig, *t);
            p.record(pos, sig, dur(i));
            out.push(pos);
            *t += 1_000_000;
        }
        out.push(p.on_issue(AR, *t));
        out
    }

    #[test]
    fn learns_per_position_durations_and_period() {
        let mut p = Pattern::new();
        let mut t = 0;
        for _ in 0..4 {
            iteration(&mut p, 3, &mut t, |i| (i as Ns + 1) * 10_000_000);
        }
        assert_eq!(p.ops_per_iteration(), 4);
        assert_eq!(p.period_ns(), Some(3_000_000));
        let pos = Position {
            iteration: 4,
            index: 1,
        };
        let pr = p.predict(pos, p2p(false, true, 1)).unwrap();
        assert_eq!(pr.expected_ns, 20_000_000);
        assert!(pr.confidence > 0.99, "{pr:?}");
        // Another signature at that position is unknown.
        assert!(p.predict(pos, p2p(true, false, 1)).is_none());
    }

    #[test]
    fn a_changed_job_is_relearnt_after_one_iteration() {
        let mut p = Pattern::new();
        let mut t = 0;
        for _ in 0..3 {
            iteration(&mut p, 4, &mut t, |_| 5_000_000);
        }
        // The job now does 6 ops of 7 ms per iteration.
        iteration(&mut p, 6, &mut t, |_| 7_000_000);
        assert_eq!(p.changes(), 1);
        assert_eq!(p.ops_per_iteration(), 7);
        let pr = p
            .predict(
                Position {
                    iteration: 5,
                    index: 2,
                },
                p2p(false, true, 1),
            )
            .unwrap();
        assert_eq!(pr.expected_ns, 7_000_000, "old durations must be forgotten");
        let pr = p
            .predict(
                Position {
                    iteration: 5,
                    index: 5,
                },
                p2p(false, true, 1),
            )
            .unwrap();
        assert_eq!(pr.expected_ns, 7_000_000);
    }

    #[test]
    fn spread_lowers_confidence() {
        let mut p = Pattern::new();
        let mut t = 0;
        for k in 0..6 {
            iteration(&mut p, 1, &mut t, |_| {
                if k % 2 == 0 {
                    2_000_000
                } else {
                    10_000_000
                }
            });
        }
        let pr = p
            .predict(
                Position {
                    iteration: 6,
                    index: 0,
                },
                p2p(false, true, 1),
            )
            .unwrap();
        assert!(pr.confidence < 0.7, "{pr:?}");
        assert!(pr.spread_ns > 1_000_000);
    }
}
