//! A pure discrete-event model of one iteration of a [`Plan`]: every rank runs its ops in order; an
//! op starts when the rank is free and its inputs arrived (producer's end + transfer time when the
//! producer is another rank). Sends never block (eager), so a plan either completes or deadlocks.
use crate::schedule::{OpKind, Plan};
use std::collections::HashMap;

/// Expected timing of one iteration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimResult {
    /// From the first op's start (time 0) to the last op's end, ns.
    pub makespan_ns: u64,
    /// Per rank: makespan minus compute time.
    pub idle_ns: Vec<u64>,
    /// Per rank: (start, end) of every op in rank order.
    pub ops: Vec<Vec<(u64, u64)>>,
}

impl SimResult {
    /// Mean idle fraction over ranks.
    pub fn idle_fraction(&self) -> f64 {
        if self.makespan_ns == 0 || self.idle_ns.is_empty() {
            return 0.0;
        }
        let total: u64 = self.idle_ns.iter().sum();
        total as f64 / (self.makespan_ns as f64 * self.idle_ns.len() as f64)
    }
}

/// Key of an op's completion: (kind, micro-batch, virtual stage).
type Key = (OpKind, u32, u32);

/// Simulates one iteration; `transfer_ns` is the time from a producer's end to the data's arrival
/// on another rank. Errors when the plan deadlocks.
pub fn simulate(plan: &Plan, transfer_ns: u64) -> Result<SimResult, String> {
    let n = plan.ranks.len();
    let mut next = vec![0usize; n];
    let mut free = vec![0u64; n];
    let mut done: HashMap<Key, (u64, u32)> = HashMap::new();
    let mut ops: Vec<Vec<(u64, u64)>> = vec![Vec::new(); n];
    loop {
        let mut progressed = false;
        for r in 0..n {
            while let Some(op) = plan.ranks[r].get(next[r]) {
                let deps: Vec<Key> = match op.kind {
                    OpKind::F if op.vs > 0 => vec![(OpKind::F, op.mb, op.vs - 1)],
                    OpKind::F => vec![],
                    OpKind::B if op.vs + 1 < plan.shape.virtual_stages() => {
                        vec![(OpKind::B, op.mb, op.vs + 1)]
                    }
                    OpKind::B => vec![(OpKind::F, op.mb, op.vs)],
                    OpKind::W => vec![(OpKind::B, op.mb, op.vs)],
                };
                let mut ready = free[r];
                let mut all = true;
                for d in deps {
                    match done.get(&d) {
                        Some(&(end, rank)) => {
                            let arrive = if rank as usize == r {
                                end
                            } else {
                                end + transfer_ns
                            };
                            ready = ready.max(arrive);
                        }
                        None => all = false,
                    }
                }
                if !all {
                    break;
                }
                let end = ready + op.dur_ns();
                ops[r].push((ready, end));
                free[r] = end;
                done.insert((op.kind, op.mb, op.vs), (end, r as u32));
                next[r] += 1;
                progressed = true;
            }
        }
        if next.iter().zip(&plan.ranks).all(|(i, ops)| *i == ops.len()) {
            break;
        }
        if !progressed {
            return Err(format!("schedule deadlocks: ranks stopped at ops {next:?}"));
        }
    }
    let makespan_ns = free.iter().copied().max().unwrap_or(0);
    let idle_ns = (0..n).map(|r| makespan_ns - plan.busy_ns(r)).collect();
    Ok(SimResult {
        makespan_ns,
        idle_ns,
        ops,
    })
}

/// The closed form of the idle time per rank (schedules.md), with zero transfer time, ns:
/// GPipe and 1F1B (p-1)(F+B+W); interleaved (p-1)(F+B+W)/v; ZB-H1 (p-1)(F+B-W) (when W <= F+B).
pub fn closed_form_idle_ns(plan: &Plan) -> u64 {
    let s = plan.shape;
    let p1 = u64::from(s.stages - 1);
    match s.schedule {
        crate::schedule::Schedule::Gpipe | crate::schedule::Schedule::OneFOneB => {
            p1 * (s.f_ns + s.b_ns + s.w_ns)
        }
        crate::schedule::Schedule::Interleaved => {
            p1 * (s.f_ns + s.b_ns + s.w_ns) / u64::from(s.chunks)
        }
        crate::schedule::Schedule::Zbh1 => p1 * (s.f_ns + s.b_ns).saturating_sub(s.w_ns),
        crate::schedule::Schedule::Csv => 0,
    }
}

/// A 1F1B pipeline with tensor and data parallelism (the shape of `crate::lower`'s programs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreeD {
    pub p: u64,
    pub m: u64,
    pub f_ns: u64,
    pub b_ns: u64,
    pub w_ns: u64,
    /// Layers per stage.
    pub layers: u64,
    /// Tensor parallel (more than one process per stage).
    pub tp: bool,
    pub sequence_parallel: bool,
    /// Transfer time of one tensor-parallel collective.
    pub tp_comm_ns: u64,
    /// Data parallel (more than one replica).
    pub dp: bool,
    pub buckets: u64,
    /// Transfer time of a stage's whole gradient reduction (all buckets).
    pub dp_comm_ns: u64,
    pub distributed_optimizer: bool,
    /// Transfer time of the loss all-reduce.
    pub loss_ns: u64,
}

/// What [`closed_form_3d`] gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreeDTiming {
    pub iteration_ns: u64,
    /// Idle per rank, a transfer counted as busy (the truth's definition).
    pub idle_ns: u64,
    /// Idle per rank when transfers are not told apart from waits (iteration minus compute).
    pub idle_without_transfers_ns: u64,
}

/// The closed form of 1F1B with tensor and data parallelism and their communication, with zero
/// point-to-point time. Per micro-batch on a stage (2L blocks, c = `tp_comm_ns`, b = B/2L,
/// w = W/2L):
/// * forward F' = F + 2L c (sequence parallel: + 4L c), the collectives synchronous;
/// * backward B' = 2L (b + max(w, c)) (sequence parallel: 2L (max(b, c) + max(w, c))): the
///   input gradient's collective overlaps the weight-gradient kernels (and the all-gather the
///   input-gradient ones); B' = B + W without tensor parallelism.
///
/// The pipeline then takes (m + p - 1)(F' + B'); the data-parallel buckets (c_b = `dp_comm_ns` /
/// K each) overlap the last backward but for the last one, c_b; the distributed optimizer adds
/// its K parameter all-gathers (K c_b) after the step; the loss all-reduce adds `loss_ns`:
/// iteration = (m + p - 1)(F' + B') + c_b + [K c_b] + loss. Every rank is busy m(F' + B') plus
/// those transfers, so idle per rank = (p - 1)(F' + B'), the closed form of 1F1B with the
/// communication inside F' and B'. (Assumes the buckets do not queue up: c_b at most the
/// backward time of the 2L/K blocks between two buckets.)
pub fn closed_form_3d(x: &ThreeD) -> ThreeDTiming {
    let nb = 2 * x.layers;
    let c = if x.tp { x.tp_comm_ns } else { 0 };
    let (b, w) = (x.b_ns / nb, x.w_ns / nb);
    let f1 = x.f_ns + nb * c * if x.sequence_parallel { 2 } else { 1 };
    let b1 = if !x.tp {
        x.b_ns + x.w_ns
    } else if x.sequence_parallel {
        nb * (b.max(c) + w.max(c))
    } else {
        nb * (b + w.max(c))
    };
    let cb = if x.dp {
        x.dp_comm_ns / x.buckets.max(1)
    } else {
        0
    };
    let ag = if x.dp && x.distributed_optimizer {
        x.buckets * cb
    } else {
        0
    };
    let iteration_ns = (x.m + x.p - 1) * (f1 + b1) + cb + ag + x.loss_ns;
    ThreeDTiming {
        iteration_ns,
        idle_ns: (x.p - 1) * (f1 + b1),
        idle_without_transfers_ns: iteration_ns - x.m * (x.f_ns + x.b_ns + x.w_ns),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{Schedule, Shape};

    fn run(s: Schedule, p: u32, m: u32, v: u32, f: u64, b: u64, w: u64) -> SimResult {
        let shape = Shape {
            schedule: s,
            stages: p,
            microbatches: m,
            chunks: v,
            f_ns: f,
            b_ns: b,
            w_ns: w,
        };
        simulate(&shape.plan().unwrap(), 0).unwrap()
    }

    /// Every row of the reference table (schedules.md), F = B = W = 1.
    #[test]
    fn reference_table() {
        let rows = [
            (Schedule::Gpipe, 4, 8, 33, 9, (3, 11)),
            (Schedule::OneFOneB, 4, 8, 33, 9, (3, 11)),
            (Schedule::OneFOneB, 4, 4, 21, 9, (3, 7)),
            (Schedule::Gpipe, 2, 4, 15, 3, (1, 5)),
            (Schedule::Zbh1, 4, 8, 27, 3, (1, 9)),
        ];
        for (s, p, m, makespan, idle, (num, den)) in rows {
            let r = run(s, p, m, 1, 1, 1, 1);
            assert_eq!(r.makespan_ns, makespan, "{s} p{p} m{m}");
            assert!(
                r.idle_ns.iter().all(|&i| i == idle),
                "{s} p{p} m{m}: {:?}",
                r.idle_ns
            );
            assert!((r.idle_fraction() - num as f64 / den as f64).abs() < 1e-12);
        }
    }

    /// The closed forms over a grid of shapes (times scaled so chunk division is exact).
    #[test]
    fn closed_forms() {
        for p in [1, 2, 3, 4, 8] {
            for m in [p, 2 * p, 3 * p, 4 * p, 16] {
                for s in [Schedule::Gpipe, Schedule::OneFOneB, Schedule::Zbh1] {
                    let r = run(s, p, m, 1, 12, 12, 12);
                    let shape = Shape {
                        schedule: s,
                        stages: p,
                        microbatches: m,
                        chunks: 1,
                        f_ns: 12,
                        b_ns: 12,
                        w_ns: 12,
                    };
                    let want = closed_form_idle_ns(&shape.plan().unwrap());
                    assert!(
                        r.idle_ns.iter().all(|&i| i == want),
                        "{s} p{p} m{m}: {:?} want {want}",
                        r.idle_ns
                    );
                }
                for v in [2, 3, 4] {
                    if m % p != 0 {
                        continue;
                    }
                    let r = run(Schedule::Interleaved, p, m, v, 12, 12, 12);
                    let want = u64::from(p - 1) * 36 / u64::from(v);
                    assert!(
                        r.idle_ns.iter().all(|&i| i == want),
                        "interleaved p{p} m{m} v{v}: {:?} want {want}",
                        r.idle_ns
                    );
                }
            }
        }
    }

    #[test]
    fn without_w_backward_is_b_only() {
        let r = run(Schedule::Zbh1, 4, 8, 1, 1, 2, 0);
        assert_eq!(r.makespan_ns, 33);
        let r = run(Schedule::OneFOneB, 4, 8, 1, 1, 2, 0);
        assert_eq!(r.makespan_ns, 33);
    }

    #[test]
    fn transfer_time_delays_the_pipeline() {
        let shape = Shape {
            schedule: Schedule::OneFOneB,
            stages: 4,
            microbatches: 8,
            chunks: 1,
            f_ns: 1,
            b_ns: 1,
            w_ns: 1,
        };
        let r = simulate(&shape.plan().unwrap(), 1).unwrap();
        assert!(r.makespan_ns > 33);
    }
}
