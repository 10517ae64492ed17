//! Pipeline schedules: for every rank, the ordered list of compute ops with what each one receives
//! before it runs and sends after it ran.
//!
//! Virtual stage `vs = chunk * p + rank` (Megatron's interleaving: chunk c of rank r holds layers of
//! virtual stage c·p + r). Forward of micro-batch `mb` flows vs 0 -> vs p·v-1, backward the other way.
use serde::{Deserialize, Serialize};
use std::fmt;

/// The pipeline schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    /// All forwards, then all backwards (torch.distributed.pipelining's ScheduleGPipe).
    Gpipe,
    /// PipeDream-flush 1F1B (Megatron's non-interleaved schedule).
    #[serde(rename = "1f1b")]
    OneFOneB,
    /// Megatron's interleaved 1F1B with `v` model chunks per rank.
    Interleaved,
    /// ZB-H1 (zero bubble, 1F1B memory): backward split into B (input gradient, sent upstream at
    /// once) and W (weight gradient, deferred to fill the cool-down).
    Zbh1,
    /// A `compute_comms` CSV (`JobConfig::csv` has it): no built-in plan.
    Csv,
}

impl Schedule {
    /// The command-line spelling.
    pub fn name(self) -> &'static str {
        match self {
            Schedule::Gpipe => "gpipe",
            Schedule::OneFOneB => "1f1b",
            Schedule::Interleaved => "interleaved",
            Schedule::Zbh1 => "zbh1",
            Schedule::Csv => "csv",
        }
    }

    /// Parses the command-line spelling.
    pub fn parse(s: &str) -> Option<Schedule> {
        match s {
            "gpipe" => Some(Schedule::Gpipe),
            "1f1b" => Some(Schedule::OneFOneB),
            "interleaved" => Some(Schedule::Interleaved),
            "zbh1" => Some(Schedule::Zbh1),
            "csv" => Some(Schedule::Csv),
            _ => None,
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a compute op does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OpKind {
    /// Forward.
    F,
    /// Backward. With a split backward (ZB-H1, `w > 0`) only the input gradient; otherwise the full
    /// backward (input gradient then weight gradient kernels).
    B,
    /// Weight gradient (split backward only).
    W,
}

/// Which tensor a transfer carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Payload {
    /// Forward activation.
    Activation,
    /// Input gradient.
    Gradient,
}

/// One point-to-point transfer, seen from one side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transfer {
    /// The other rank.
    pub peer: u32,
    pub payload: Payload,
    pub mb: u32,
    /// Virtual stage of the producing op.
    pub from_vs: u32,
}

/// One phase of an op: a named slice of its duration (kernels are launched per phase).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Phase {
    pub name: PhaseName,
    pub ns: u64,
}

/// Phase names (they name the kernels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PhaseName {
    Forward,
    BackwardInput,
    BackwardWeight,
}

/// A compute op of one rank.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    pub kind: OpKind,
    pub mb: u32,
    pub chunk: u32,
    /// Virtual stage.
    pub vs: u32,
    /// Phases in order; their sum is the op's duration.
    pub phases: Vec<Phase>,
    /// Received (and waited for) before the op runs.
    pub recvs: Vec<Transfer>,
    /// Sent after the op ran.
    pub sends: Vec<Transfer>,
}

impl Op {
    /// Duration in nanoseconds.
    pub fn dur_ns(&self) -> u64 {
        self.phases.iter().map(|p| p.ns).sum()
    }
}

/// Shape and timing of a pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    pub schedule: Schedule,
    /// p: stages (ranks).
    pub stages: u32,
    /// m: micro-batches per iteration.
    pub microbatches: u32,
    /// v: model chunks per rank (interleaved only; 1 otherwise).
    pub chunks: u32,
    /// Forward time of one micro-batch on one stage (all its chunks together), ns.
    pub f_ns: u64,
    /// Input-gradient backward time, ns.
    pub b_ns: u64,
    /// Weight-gradient backward time, ns.
    pub w_ns: u64,
}

/// Every rank's op list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub shape: Shape,
    /// `ranks[r]`: rank r's ops in execution order.
    pub ranks: Vec<Vec<Op>>,
}

/// Largest supported pipeline (ranks = simulated devices; the test bed has 8 by default).
pub const MAX_STAGES: u32 = 64;

impl Shape {
    /// Checks that the configuration is possible; the message is one line.
    pub fn validate(&self) -> Result<(), String> {
        let (p, m, v) = (self.stages, self.microbatches, self.chunks);
        if p == 0 || p > MAX_STAGES {
            return Err(format!("--stages must be 1..={MAX_STAGES}, got {p}"));
        }
        if m == 0 {
            return Err("--microbatches must be at least 1".into());
        }
        if v == 0 {
            return Err("--chunks must be at least 1".into());
        }
        match self.schedule {
            Schedule::Csv => {}
            Schedule::Interleaved => {
                if v < 2 {
                    return Err("interleaved needs --chunks >= 2".into());
                }
                if m < p || m % p != 0 {
                    return Err(format!(
                        "interleaved needs --microbatches to be a multiple of --stages and >= it (got m={m}, p={p})"
                    ));
                }
            }
            s => {
                if v != 1 {
                    return Err(format!(
                        "--chunks {v} is only valid with --schedule interleaved (got {s})"
                    ));
                }
            }
        }
        if self.f_ns == 0 && self.b_ns == 0 && self.w_ns == 0 {
            return Err("--f, --b and --w are all zero: nothing to run".into());
        }
        Ok(())
    }

    /// True when W is a separate op (ZB-H1 with a non-zero W).
    pub fn split_backward(&self) -> bool {
        self.schedule == Schedule::Zbh1 && self.w_ns > 0
    }

    /// Number of virtual stages.
    pub fn virtual_stages(&self) -> u32 {
        self.stages * self.chunks
    }

    fn rank_of(&self, vs: u32) -> u32 {
        vs % self.stages
    }

    fn phases(&self, kind: OpKind) -> Vec<Phase> {
        let v = u64::from(self.chunks);
        let ph = |name, ns: u64| Phase { name, ns: ns / v };
        match kind {
            OpKind::F => vec![ph(PhaseName::Forward, self.f_ns)],
            OpKind::B if self.split_backward() => vec![ph(PhaseName::BackwardInput, self.b_ns)],
            OpKind::B => vec![
                ph(PhaseName::BackwardInput, self.b_ns),
                ph(PhaseName::BackwardWeight, self.w_ns),
            ],
            OpKind::W => vec![ph(PhaseName::BackwardWeight, self.w_ns)],
        }
        .into_iter()
        .filter(|p| p.ns > 0)
        .collect()
    }

    fn op(&self, rank: u32, kind: OpKind, mb: u32, chunk: u32) -> Op {
        let vs = chunk * self.stages + rank;
        let last = self.virtual_stages() - 1;
        let mut recvs = Vec::new();
        let mut sends = Vec::new();
        match kind {
            OpKind::F => {
                if vs > 0 {
                    let from = vs - 1;
                    recvs.push(Transfer {
                        peer: self.rank_of(from),
                        payload: Payload::Activation,
                        mb,
                        from_vs: from,
                    });
                }
                if vs < last {
                    sends.push(Transfer {
                        peer: self.rank_of(vs + 1),
                        payload: Payload::Activation,
                        mb,
                        from_vs: vs,
                    });
                }
            }
            OpKind::B => {
                if vs < last {
                    let from = vs + 1;
                    recvs.push(Transfer {
                        peer: self.rank_of(from),
                        payload: Payload::Gradient,
                        mb,
                        from_vs: from,
                    });
                }
                if vs > 0 {
                    sends.push(Transfer {
                        peer: self.rank_of(vs - 1),
                        payload: Payload::Gradient,
                        mb,
                        from_vs: vs,
                    });
                }
            }
            OpKind::W => {}
        }
        // A transfer between chunks of the same rank (p == 1) stays local.
        recvs.retain(|t| t.peer != rank);
        sends.retain(|t| t.peer != rank);
        Op {
            kind,
            mb,
            chunk,
            vs,
            phases: self.phases(kind),
            recvs,
            sends,
        }
    }

    /// Builds every rank's op list.
    pub fn plan(&self) -> Result<Plan, String> {
        self.validate()?;
        if self.schedule == Schedule::Csv {
            return Err("a CSV schedule has no built-in plan".into());
        }
        let ranks = (0..self.stages)
            .map(|r| match self.schedule {
                Schedule::Gpipe => self.gpipe(r),
                Schedule::OneFOneB => self.one_f_one_b(r),
                Schedule::Interleaved => self.interleaved(r),
                Schedule::Zbh1 => self.zbh1(r),
                Schedule::Csv => unreachable!("refused above"),
            })
            .collect();
        Ok(Plan {
            shape: *self,
            ranks,
        })
    }

    fn gpipe(&self, r: u32) -> Vec<Op> {
        let m = self.microbatches;
        let mut ops: Vec<Op> = (0..m).map(|i| self.op(r, OpKind::F, i, 0)).collect();
        ops.extend((0..m).map(|i| self.op(r, OpKind::B, i, 0)));
        ops
    }

    fn warmup_1f1b(&self, r: u32) -> u32 {
        (self.stages - 1 - r).min(self.microbatches)
    }

    fn one_f_one_b(&self, r: u32) -> Vec<Op> {
        let m = self.microbatches;
        let warm = self.warmup_1f1b(r);
        let mut ops: Vec<Op> = (0..warm).map(|i| self.op(r, OpKind::F, i, 0)).collect();
        for i in 0..m - warm {
            ops.push(self.op(r, OpKind::F, warm + i, 0));
            ops.push(self.op(r, OpKind::B, i, 0));
        }
        ops.extend((m - warm..m).map(|i| self.op(r, OpKind::B, i, 0)));
        ops
    }

    /// ZB-H1: 1F1B order of F and B; rank r keeps its W passes r micro-batches behind its B passes
    /// (W(k) runs right after B(k + r)), and runs the remaining W passes at the end, where they fill
    /// the cool-down that 1F1B leaves idle.
    fn zbh1(&self, r: u32) -> Vec<Op> {
        if !self.split_backward() {
            return self.one_f_one_b(r);
        }
        let mut ops = Vec::new();
        let mut w_next = 0;
        let mut b_done = 0;
        for op in self.one_f_one_b(r) {
            let is_b = op.kind == OpKind::B;
            ops.push(op);
            if is_b {
                b_done += 1;
                if b_done > r {
                    ops.push(self.op(r, OpKind::W, w_next, 0));
                    w_next += 1;
                }
            }
        }
        ops.extend((w_next..self.microbatches).map(|i| self.op(r, OpKind::W, i, 0)));
        ops
    }

    /// Model chunk of the interleaved schedule's virtual micro-batch `k` (its `k`-th forward or
    /// backward; Megatron's `get_model_chunk_id`, micro-batch groups of `p` per chunk).
    pub fn interleaved_chunk(&self, k: u32, forward: bool) -> u32 {
        let (p, v) = (self.stages, self.chunks);
        let c = (k % (p * v)) / p;
        if forward {
            c
        } else {
            v - 1 - c
        }
    }

    /// Forwards rank `r` runs before its first backward in the interleaved schedule (all of them
    /// when `m == p`).
    pub fn interleaved_warmup(&self, r: u32) -> u32 {
        let (p, m, v) = (self.stages, self.microbatches, self.chunks);
        let total = m * v;
        if m == p {
            total
        } else {
            ((p - r - 1) * 2 + (v - 1) * p).min(total)
        }
    }

    /// Megatron-LM's interleaved schedule (forward_backward_pipelining_with_interleaving).
    fn interleaved(&self, r: u32) -> Vec<Op> {
        let (p, m, v) = (self.stages, self.microbatches, self.chunks);
        let total = m * v;
        let mb_of = |k: u32| (k / (p * v)) * p + k % p;
        let warm = self.interleaved_warmup(r);
        let fwd = |k: u32| self.op(r, OpKind::F, mb_of(k), self.interleaved_chunk(k, true));
        let bwd = |k: u32| self.op(r, OpKind::B, mb_of(k), self.interleaved_chunk(k, false));
        let mut ops: Vec<Op> = (0..warm).map(fwd).collect();
        for k in 0..total - warm {
            ops.push(fwd(k + warm));
            ops.push(bwd(k));
        }
        ops.extend((total - warm..total).map(bwd));
        ops
    }
}

impl Plan {
    /// Every unordered pair of ranks that exchanges data, sorted.
    pub fn pairs(&self) -> Vec<(u32, u32)> {
        let mut pairs: Vec<(u32, u32)> = self
            .ranks
            .iter()
            .enumerate()
            .flat_map(|(r, ops)| {
                ops.iter().flat_map(move |op| {
                    op.sends
                        .iter()
                        .map(move |t| ((r as u32).min(t.peer), (r as u32).max(t.peer)))
                })
            })
            .collect();
        pairs.sort_unstable();
        pairs.dedup();
        pairs
    }

    /// Total compute time of rank `r` per iteration, ns.
    pub fn busy_ns(&self, r: usize) -> u64 {
        self.ranks[r].iter().map(Op::dur_ns).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn shape(s: Schedule, p: u32, m: u32, v: u32) -> Shape {
        Shape {
            schedule: s,
            stages: p,
            microbatches: m,
            chunks: v,
            f_ns: 1,
            b_ns: 1,
            w_ns: 1,
        }
    }

    #[test]
    fn every_rank_runs_every_op_once() {
        for (s, v) in [
            (Schedule::Gpipe, 1),
            (Schedule::OneFOneB, 1),
            (Schedule::Interleaved, 2),
            (Schedule::Zbh1, 1),
        ] {
            for p in [1, 2, 3, 4, 8] {
                for m in [p, 2 * p, 4 * p] {
                    let plan = shape(s, p, m, v).plan().unwrap();
                    for ops in &plan.ranks {
                        let per_kind = |k| ops.iter().filter(|o| o.kind == k).count() as u32;
                        assert_eq!(per_kind(OpKind::F), m * v, "{s} p{p} m{m}");
                        assert_eq!(per_kind(OpKind::B), m * v);
                        let w = if s == Schedule::Zbh1 { m } else { 0 };
                        assert_eq!(per_kind(OpKind::W), w);
                    }
                }
            }
        }
    }

    #[test]
    fn sends_match_receives() {
        let plan = shape(Schedule::Interleaved, 4, 8, 2).plan().unwrap();
        let mut sends = Vec::new();
        let mut recvs = Vec::new();
        for (r, ops) in plan.ranks.iter().enumerate() {
            for op in ops {
                sends.extend(
                    op.sends
                        .iter()
                        .map(|t| (r as u32, t.peer, t.payload, t.mb, t.from_vs)),
                );
                recvs.extend(
                    op.recvs
                        .iter()
                        .map(|t| (t.peer, r as u32, t.payload, t.mb, t.from_vs)),
                );
            }
        }
        sends.sort_by_key(|x| format!("{x:?}"));
        recvs.sort_by_key(|x| format!("{x:?}"));
        assert_eq!(sends, recvs);
        assert_eq!(plan.pairs(), vec![(0, 1), (0, 3), (1, 2), (2, 3)]);
    }

    #[test]
    fn bad_configs_are_refused() {
        assert!(shape(Schedule::Interleaved, 4, 6, 2).validate().is_err());
        assert!(shape(Schedule::Interleaved, 4, 2, 2).validate().is_err());
        assert!(shape(Schedule::Interleaved, 4, 8, 1).validate().is_err());
        assert!(shape(Schedule::OneFOneB, 4, 8, 2).validate().is_err());
        assert!(shape(Schedule::OneFOneB, 0, 8, 1).validate().is_err());
        assert!(shape(Schedule::OneFOneB, 4, 0, 1).validate().is_err());
        assert!(shape(Schedule::Gpipe, 4, 3, 1).validate().is_ok());
    }

    #[test]
    fn one_f_one_b_order_of_the_last_stage_alternates() {
        let plan = shape(Schedule::OneFOneB, 4, 4, 1).plan().unwrap();
        let kinds: Vec<OpKind> = plan.ranks[3].iter().map(|o| o.kind).collect();
        use OpKind::*;
        assert_eq!(kinds, vec![F, B, F, B, F, B, F, B]);
        let kinds0: Vec<OpKind> = plan.ranks[0].iter().map(|o| o.kind).collect();
        assert_eq!(kinds0, vec![F, F, F, F, B, B, B, B]);
    }
}
