//! A compute op (a forward, an input-gradient backward, a weight-gradient backward or a full
//! backward of one micro-batch on one model chunk) as the actions a Megatron-style stage queues:
//! `--layers` transformer layers of two blocks each (attention, MLP), every block's kernels of
//! varied lengths, and with `--tp` > 1 its tensor-parallel collectives on the compute stream's
//! order (`real-jobs.md`):
//! * forward block: kernels, then an all-reduce (sequence parallel: an all-gather before the
//!   kernels and a reduce-scatter after), the compute stream waiting for each;
//! * full backward block: the input-gradient kernels, then the all-reduce of the input gradient
//!   issued asynchronously and overlapped with the weight-gradient kernels, waited for after them
//!   (sequence parallel: the all-gather overlaps the input-gradient kernels, the reduce-scatter the
//!   weight-gradient kernels);
//! * input-gradient-only block (a split backward): kernels, then its collectives, waited for at
//!   once (nothing to overlap them with); weight-gradient block: kernels only.
//!
//! The op that produces a model chunk's last weight gradients also posts that chunk's gradient
//! buckets on the data-parallel stream as its blocks finish (last layer first, as backward runs).
use super::{dp_name, tp_name, Builder};
use crate::config::{coll_bytes, JobConfig};
use crate::csv::{Compute, CsvAction};
use crate::program::{CollKind, StreamRole, COMPUTE};
use crate::schedule::PhaseName;

/// Kernels per phase when `--kernels-per-phase` is not given: one per 0.4 ms, 2 to 24 (a real
/// transformer layer's forward is some tens of kernels of varied lengths).
pub fn kernel_count(cfg: &JobConfig, phase_ns: u64) -> usize {
    if cfg.kernels_per_phase > 0 {
        return cfg.kernels_per_phase as usize;
    }
    ((phase_ns / 400_000) as usize).clamp(2, 24)
}

/// Relative lengths of a block's kernels (layer norm, GEMMs, attention, element-wise ops),
/// repeated as needed.
fn pattern(phase: PhaseName) -> &'static [u64] {
    match phase {
        PhaseName::Forward => &[2, 20, 25, 12, 3, 22, 4, 12],
        PhaseName::BackwardInput => &[12, 25, 20, 4, 22, 3],
        PhaseName::BackwardWeight => &[18, 30, 22, 10, 20],
    }
}

/// `ns` split into `k` kernels of varied lengths that sum exactly to `ns`.
pub(super) fn split(ns: u64, k: usize, phase: PhaseName) -> Vec<u64> {
    let k = k.clamp(1, ns.max(1) as usize);
    let p = pattern(phase);
    let w: Vec<u64> = (0..k).map(|i| p[i % p.len()]).collect();
    let total: u64 = w.iter().sum();
    let mut out: Vec<u64> = w
        .iter()
        .map(|&x| ((ns as u128 * x as u128 / total as u128) as u64).max(1))
        .collect();
    let sum: u64 = out.iter().sum();
    let last = out.last_mut().expect("k >= 1");
    *last = (*last + ns).saturating_sub(sum).max(1);
    out
}

/// Layers of one model chunk (`--layers` per stage over its chunks, at least 1).
fn layers(cfg: &JobConfig) -> u32 {
    (cfg.par.layers / cfg.shape.chunks.max(1)).max(1)
}

/// Blocks (attention, MLP) of one op.
fn blocks(cfg: &JobConfig) -> u32 {
    2 * layers(cfg)
}

/// What an op computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pass {
    Forward,
    Input,
    Weight,
    Full,
}

/// One compute op: its pass, the op's total forward, input-gradient and weight-gradient time
/// (before the micro-batch's size factor), its micro-batch, and whether it produces its chunk's
/// last weight gradients (then it posts the gradient buckets).
#[derive(Clone, Copy, Debug)]
pub(super) struct Work {
    pub pass: Pass,
    pub f_ns: u64,
    pub i_ns: u64,
    pub w_ns: u64,
    pub mb: u32,
    pub last_grads: bool,
}

/// The gradient buckets of one op.
struct Buckets {
    posted: u32,
}

impl Builder<'_> {
    /// Queues `work` (see the module docs).
    pub(super) fn compute(&mut self, work: Work) -> Result<(), String> {
        let cfg = self.cfg;
        let scale = self.cfg.noise.seq_scale(self.it, work.mb);
        let scaled = |ns: u64| (ns as f64 * scale).round() as u64;
        let nb = blocks(cfg);
        let per = |ns: u64| scaled(ns) / u64::from(nb);
        let k = |phase_ns: u64| (kernel_count(cfg, scaled(phase_ns)) / nb as usize).max(1);
        let tp = if cfg.par.tp > 1 {
            let comm = self.comm(&tp_name(&self.topo, self.rank))?;
            let stream = self.stream(StreamRole::Tp)?;
            let bytes = coll_bytes(scaled(cfg.par.tp_comm_ns), cfg.par.tp);
            Some((comm, stream, bytes))
        } else {
            None
        };
        let sp = cfg.par.sequence_parallel;
        let mut buckets = (work.last_grads && cfg.par.dp > 1 && self.buckets_in_backward())
            .then_some(Buckets { posted: 0 });
        for blk in 0..nb {
            match work.pass {
                Pass::Forward => {
                    self.sync_block(tp, PhaseName::Forward, per(work.f_ns), k(work.f_ns));
                }
                Pass::Input => {
                    self.sync_block(tp, PhaseName::BackwardInput, per(work.i_ns), k(work.i_ns));
                }
                Pass::Weight => {
                    self.kernels(PhaseName::BackwardWeight, per(work.w_ns), k(work.w_ns));
                }
                Pass::Full => {
                    let gathered = match (tp, sp) {
                        (Some((c, s, b)), true) => {
                            Some(self.collective(c, s, CollKind::AllGather, b))
                        }
                        _ => None,
                    };
                    self.kernels(PhaseName::BackwardInput, per(work.i_ns), k(work.i_ns));
                    if let Some(e) = gathered {
                        self.wait(COMPUTE, e);
                    }
                    let reduced = tp.map(|(c, s, b)| {
                        let kind = if sp {
                            CollKind::ReduceScatter
                        } else {
                            CollKind::AllReduce
                        };
                        self.collective(c, s, kind, b)
                    });
                    self.kernels(PhaseName::BackwardWeight, per(work.w_ns), k(work.w_ns));
                    if let Some(e) = reduced {
                        self.wait(COMPUTE, e);
                    }
                }
            }
            if let Some(bk) = buckets.as_mut() {
                self.post_buckets(bk, blk, nb)?;
            }
        }
        Ok(())
    }

    /// A block whose tensor-parallel collectives the compute stream waits for at once: kernels,
    /// then an all-reduce (sequence parallel: an all-gather before, a reduce-scatter after).
    fn sync_block(
        &mut self,
        tp: Option<(usize, usize, u64)>,
        phase: PhaseName,
        ns: u64,
        kernels: usize,
    ) {
        let sp = self.cfg.par.sequence_parallel;
        if let (Some((c, s, b)), true) = (tp, sp) {
            self.collective_sync(c, s, CollKind::AllGather, b);
        }
        self.kernels(phase, ns, kernels);
        if let Some((c, s, b)) = tp {
            let kind = if sp {
                CollKind::ReduceScatter
            } else {
                CollKind::AllReduce
            };
            self.collective_sync(c, s, kind, b);
        }
    }

    /// Whether gradients are reduced during the backward (Megatron, PyTorch DDP) rather than
    /// after the pipeline (DeepSpeed).
    pub(super) fn buckets_in_backward(&self) -> bool {
        self.cfg.style != crate::config::Style::Blocking && self.cfg.csv.is_none()
    }

    /// The collective kind and bytes of one gradient bucket.
    pub(super) fn bucket(&self) -> (CollKind, u64) {
        let p = &self.cfg.par;
        let kind = if p.distributed_optimizer {
            CollKind::ReduceScatter
        } else {
            CollKind::AllReduce
        };
        (
            kind,
            coll_bytes(p.dp_comm_ns / u64::from(p.dp_buckets.max(1)), p.dp),
        )
    }

    /// Posts the buckets due after block `blk` of `nb` (bucket j after block (j+1) nb / K - 1).
    fn post_buckets(&mut self, bk: &mut Buckets, blk: u32, nb: u32) -> Result<(), String> {
        let k = self.cfg.par.dp_buckets.max(1);
        let due = ((blk + 1) * k) / nb;
        if due <= bk.posted {
            return Ok(());
        }
        let comm = self.comm(&dp_name(&self.topo, self.rank))?;
        let stream = self.stream(StreamRole::Dp)?;
        let (kind, bytes) = self.bucket();
        self.hop(COMPUTE, stream);
        for _ in bk.posted..due {
            self.push(crate::program::Action::Collective {
                comm,
                stream,
                kind,
                bytes,
            });
        }
        bk.posted = due;
        if bk.posted == k {
            let e = self.record(stream);
            self.pending.push(e);
        }
        Ok(())
    }
}

/// The first compute block's time on rank `r` (sizes the CUDA graph replayed in it).
pub(super) fn first_block_ns(cfg: &JobConfig, r: u32) -> Result<u64, String> {
    let nb = u64::from(blocks(cfg));
    let s = &cfg.shape;
    let ns = match &cfg.csv {
        Some(csv) => {
            let row = cfg.topology().coords(r).pp as usize;
            csv.rows[row]
                .iter()
                .find_map(|c| match c.action {
                    CsvAction::Compute { kind, .. } => Some(match kind {
                        Compute::F => s.f_ns,
                        Compute::I | Compute::B => s.b_ns,
                        Compute::W => s.w_ns,
                    }),
                    CsvAction::OverlapFB { .. } => Some(s.f_ns),
                    _ => None,
                })
                .unwrap_or(0)
        }
        None => {
            let plan = s.plan()?;
            let pp = cfg.topology().coords(r).pp as usize;
            plan.ranks[pp]
                .first()
                .and_then(|op| op.phases.first())
                .map_or(0, |p| p.ns)
        }
    };
    Ok(ns / nb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_sum_to_the_phase_and_vary() {
        for (ns, k) in [(10_000_000, 24), (7, 3), (1, 5), (1_000_003, 8)] {
            let v = split(ns, k, PhaseName::Forward);
            assert_eq!(v.iter().sum::<u64>(), ns, "{ns} {k}");
            assert!(v.iter().all(|&d| d >= 1));
        }
        let v = split(10_000_000, 8, PhaseName::Forward);
        assert!(v.iter().max().unwrap() > &(5 * v.iter().min().unwrap()));
    }
}
