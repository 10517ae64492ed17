//! A built-in schedule's ops (`crate::schedule`) in one of the communication styles:
//! * `batched` (Megatron, non-interleaved): before each op one NCCL group with the previous op's
//!   sends and this op's receives on the pipeline stream, then `cudaDeviceSynchronize` (the host
//!   blocks until the transfer is done);
//! * `blocking` (DeepSpeed): each receive alone on its peer pair's stream, the host waiting for
//!   it (`cudaStreamSynchronize`); each send alone after the op;
//! * `torch` (`torch.distributed.pipelining`'s single-stage schedules): each receive a one-op
//!   group on the peer pair's stream posted just before the op that consumes it, the compute
//!   stream waiting for it (`cudaStreamWaitEvent`); each send a one-op group after its op; the
//!   compute stream waits for the sends at the iteration's end;
//! * `overlapped` (Megatron's interleaved schedule with `overlap_p2p_comm`): separate
//!   `ncclSend`/`ncclRecv` (no group) on the peer pair's stream; after each op its sends and the
//!   receives of the next op of the same kind (forward or backward), which then overlap the ops
//!   in between; the compute stream waits for a receive just before the op that needs it.
//!
//! Every op on the pipeline streams first waits for the compute queued before it (PyTorch's
//! ProcessGroupNCCL makes its stream wait for the current stream).
use super::compute::{Pass, Work};
use super::{pipeline_name, Builder};
use crate::config::Style;
use crate::program::{Action, EventId, Origin, P2pOp, StreamRole, Tensor, COMPUTE};
use crate::schedule::{Op, OpKind, Payload, PhaseName, Transfer};

impl Builder<'_> {
    /// Global rank of pipeline rank `pp` in this rank's pipeline.
    fn peer(&self, pp: u32) -> u32 {
        self.topo.stage_rank(self.rank, pp)
    }

    /// A transfer as an NCCL op of this rank.
    fn p2p_op(&self, t: &Transfer, send: bool) -> P2pOp {
        let scale = self.cfg.noise.seq_scale(self.it, t.mb);
        P2pOp {
            send,
            peer: self.peer(t.peer),
            bytes: ((self.cfg.p2p_bytes() as f64 * scale) as u64).max(4),
            tensor: Tensor {
                grad: t.payload == Payload::Gradient,
                stage: t.from_vs,
                mb: t.mb,
            },
        }
    }

    /// Queues `ops` alone or as one group on the peer pair's stream (`--p2p-streams shared`: the
    /// rank's pipeline stream), after the compute queued so far; returns the event recorded
    /// after them.
    fn pair_p2p(&mut self, ops: Vec<P2pOp>, grouped: bool) -> Result<EventId, String> {
        let peer = ops[0].peer;
        let (stream, comm) = self.p2p_link(peer)?;
        self.hop(COMPUTE, stream);
        self.push(Action::P2p {
            comm,
            stream,
            grouped,
            ops,
        });
        Ok(self.record(stream))
    }

    /// Megatron's step: one group of `sends` and `recvs`, then a device synchronize.
    fn batched_group(&mut self, sends: &[Transfer], recvs: &[Transfer]) -> Result<(), String> {
        if sends.is_empty() && recvs.is_empty() {
            return Ok(());
        }
        let stream = self.stream(StreamRole::Pipeline)?;
        let comm = self.comm(&pipeline_name(&self.topo, self.rank))?;
        let mut ops: Vec<P2pOp> = sends.iter().map(|t| self.p2p_op(t, true)).collect();
        ops.extend(recvs.iter().map(|t| self.p2p_op(t, false)));
        self.hop(COMPUTE, stream);
        self.push(Action::P2p {
            comm,
            stream,
            grouped: true,
            ops,
        });
        self.push(Action::SyncDevice);
        if !recvs.is_empty() {
            self.hop(stream, COMPUTE);
        }
        Ok(())
    }

    /// Posts an op's receives (one NCCL call each); returns their events.
    fn post_recvs(&mut self, op: &Op, grouped: bool) -> Result<Vec<EventId>, String> {
        let mut evs = vec![];
        for t in &op.recvs {
            let o = self.p2p_op(t, false);
            evs.push(self.pair_p2p(vec![o], grouped)?);
        }
        Ok(evs)
    }

    fn post_sends(&mut self, op: &Op, grouped: bool) -> Result<(), String> {
        for t in &op.sends {
            let o = self.p2p_op(t, true);
            let e = self.pair_p2p(vec![o], grouped)?;
            self.pending.push(e);
        }
        Ok(())
    }

    /// The op's compute.
    fn op_compute(&mut self, op: &Op, last_grads: bool) -> Result<(), String> {
        let sum = |name: PhaseName| -> u64 {
            op.phases
                .iter()
                .filter(|p| p.name == name)
                .map(|p| p.ns)
                .sum()
        };
        let (f, i, w) = (
            sum(PhaseName::Forward),
            sum(PhaseName::BackwardInput),
            sum(PhaseName::BackwardWeight),
        );
        let pass = match op.kind {
            OpKind::F => Pass::Forward,
            OpKind::W => Pass::Weight,
            OpKind::B
                if op
                    .phases
                    .iter()
                    .any(|p| p.name == PhaseName::BackwardWeight) =>
            {
                Pass::Full
            }
            OpKind::B if self.cfg.shape_at(self.it).split_backward() => Pass::Input,
            OpKind::B => Pass::Full,
        };
        self.compute(Work {
            pass,
            f_ns: f,
            i_ns: i,
            w_ns: w,
            mb: op.mb,
            last_grads,
        })
    }
}

/// Index of each chunk's last op that produces weight gradients.
fn last_grad_ops(ops: &[Op]) -> Vec<usize> {
    let mut seen = std::collections::HashSet::new();
    let mut out = vec![];
    for (i, op) in ops.iter().enumerate().rev() {
        let grads = op.kind == OpKind::W
            || (op.kind == OpKind::B
                && op
                    .phases
                    .iter()
                    .any(|p| p.name == PhaseName::BackwardWeight));
        if grads && seen.insert(op.chunk) {
            out.push(i);
        }
    }
    out
}

fn origin(op: &Op) -> Origin {
    let what = match op.kind {
        OpKind::F => "forward",
        OpKind::B => "backward",
        OpKind::W => "weight-gradient backward",
    };
    Origin::Op(what, op.mb, op.vs)
}

/// Queues this rank's ops of the built-in schedule.
pub(super) fn lower(b: &mut Builder) -> Result<(), String> {
    let plan = b.cfg.shape_at(b.it).plan()?;
    let pp = b.topo.coords(b.rank).pp as usize;
    let ops = &plan.ranks[pp];
    let last = last_grad_ops(ops);
    match b.cfg.style {
        Style::Batched => {
            let mut pending: &[Transfer] = &[];
            for (i, op) in ops.iter().enumerate() {
                b.origin = origin(op);
                b.batched_group(pending, &op.recvs)?;
                b.op_compute(op, last.contains(&i))?;
                pending = &op.sends;
            }
            b.batched_group(pending, &[])?;
        }
        Style::Blocking => {
            for (i, op) in ops.iter().enumerate() {
                b.origin = origin(op);
                for t in &op.recvs {
                    let o = b.p2p_op(t, false);
                    let stream = b.stream(StreamRole::Peer(o.peer))?;
                    b.pair_p2p(vec![o], false)?;
                    b.push(Action::SyncStream(stream));
                    b.hop(stream, COMPUTE);
                }
                b.op_compute(op, last.contains(&i))?;
                for t in &op.sends {
                    let o = b.p2p_op(t, true);
                    b.pair_p2p(vec![o], false)?;
                }
            }
        }
        Style::Torch => {
            for (i, op) in ops.iter().enumerate() {
                b.origin = origin(op);
                for e in b.post_recvs(op, true)? {
                    b.wait(COMPUTE, e);
                }
                b.op_compute(op, last.contains(&i))?;
                b.post_sends(op, true)?;
            }
        }
        Style::Overlapped => {
            // Megatron: the first forward's receive up front; after each op, its sends and
            // the receives of the next op of the same kind (forward or backward), which then
            // overlap the ops in between.
            let mut waiting: Vec<Option<Vec<EventId>>> = vec![None; ops.len()];
            let next_of_kind =
                |i: usize, kind: OpKind| (i..ops.len()).find(|&j| ops[j].kind == kind);
            if let Some(j) = next_of_kind(0, OpKind::F) {
                b.origin = origin(&ops[j]);
                waiting[j] = Some(b.post_recvs(&ops[j], false)?);
            }
            for (i, op) in ops.iter().enumerate() {
                b.origin = origin(op);
                let evs = match waiting[i].take() {
                    Some(e) => e,
                    None => b.post_recvs(op, false)?,
                };
                for e in evs {
                    b.wait(COMPUTE, e);
                }
                b.op_compute(op, last.contains(&i))?;
                b.post_sends(op, false)?;
                if let Some(j) = next_of_kind(i + 1, op.kind) {
                    if waiting[j].is_none() {
                        b.origin = origin(&ops[j]);
                        waiting[j] = Some(b.post_recvs(&ops[j], false)?);
                    }
                }
            }
        }
    }
    Ok(())
}
