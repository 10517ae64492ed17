//! A built-in schedule's ops (`crate::schedule`) in one of the communication styles (the
//! interleaved schedule in every style: module `interleaved`, with Megatron's own calls):
//! * `batched` (Megatron, non-interleaved): before each op one NCCL group with the previous op's
//!   sends and this op's receives on the pipeline stream, then `cudaDeviceSynchronize` (the host
//!   blocks until the transfer is done);
//! * `blocking` (DeepSpeed): before each op, peer by peer, the previous op's sends and this op's
//!   receives, each alone on the peer pair's stream in the pair's order (below), the host
//!   waiting for the receives (`cudaStreamSynchronize`), as DeepSpeed's steps do; sends followed
//!   by ops without transfers (ZB-H1's W) go out at once with the receives of the op after them;
//! * `torch` (`torch.distributed.pipelining`'s single-stage schedules): before each op, peer by
//!   peer, one group of the previous op's sends and this op's receives on the peer pair's stream
//!   (`_sorted_batch_p2p`), the compute stream waiting for it (`cudaStreamWaitEvent`); the
//!   compute stream waits for the sends at the iteration's end;
//! * `overlapped` (Megatron's interleaved schedule with `overlap_p2p_comm`): module
//!   `interleaved`.
//!
//! Ungrouped ops with one peer go in the pair's order: first the transfer from the stage whose
//! next stage the other is (lower to higher, the last stage to the first of an interleaved
//! ring), then the other way, as Megatron's `_p2p_ops` orders them by rank parity. Both sides
//! then meet each other's sends in the same order, which NCCL needs once a send is larger than
//! its buffer and waits for its receiver.
//!
//! Every op on the pipeline streams first waits for the compute queued before it (PyTorch's
//! ProcessGroupNCCL makes its stream wait for the current stream).
use super::compute::{Pass, Work};
use super::{pipeline_name, Builder};
use crate::config::Style;
use crate::program::{Action, EventId, Origin, P2pOp, StreamRole, Tensor, COMPUTE};
use crate::schedule::{Op, OpKind, Payload, PhaseName, Schedule, Transfer};

impl Builder<'_> {
    /// Global rank of pipeline rank `pp` in this rank's pipeline.
    fn peer(&self, pp: u32) -> u32 {
        self.topo.stage_rank(self.rank, pp)
    }

    /// A transfer as an NCCL op of this rank.
    pub(super) fn p2p_op(&self, t: &Transfer, send: bool) -> P2pOp {
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

    /// Whether a transfer from pipeline rank `from` to `to` goes first in their pair's order
    /// (see the module docs).
    fn goes_first(&self, from: u32, to: u32) -> bool {
        let p = self.topo.pp;
        if p > 2 && (from == p - 1 && to == 0 || from == 0 && to == p - 1) {
            return from == p - 1;
        }
        from < to
    }

    /// `sends` and `recvs` as NCCL ops, peer by peer (in peer order), each peer's in the pair's
    /// order.
    fn by_peer(&self, sends: &[Transfer], recvs: &[Transfer]) -> Vec<Vec<P2pOp>> {
        let me = self.topo.coords(self.rank).pp;
        let mut all: Vec<(u32, bool, P2pOp)> = vec![];
        for t in sends {
            all.push((t.peer, !self.goes_first(me, t.peer), self.p2p_op(t, true)));
        }
        for t in recvs {
            all.push((t.peer, !self.goes_first(t.peer, me), self.p2p_op(t, false)));
        }
        // Stable: a peer's transfers of one direction keep the schedule's order.
        all.sort_by_key(|&(peer, later, _)| (peer, later));
        let mut out: Vec<Vec<P2pOp>> = vec![];
        let mut last = None;
        for (peer, _, op) in all {
            if last != Some(peer) {
                out.push(vec![]);
                last = Some(peer);
            }
            out.last_mut().expect("pushed above").push(op);
        }
        out
    }

    /// One exchange of the `blocking` and `torch` styles (module docs); returns what the compute
    /// stream still waits for before the op that needs the receives. `defer`: the blocking
    /// style's host waits for the receives only then too, not peer by peer at once.
    fn exchange(
        &mut self,
        sends: &[Transfer],
        recvs: &[Transfer],
        defer: bool,
    ) -> Result<Vec<Arrival>, String> {
        let mut out = vec![];
        for ops in self.by_peer(sends, recvs) {
            let receives = ops.iter().any(|o| !o.send);
            let peer = ops[0].peer;
            let (stream, _) = self.p2p_link(peer)?;
            if self.cfg.style == Style::Torch {
                let e = self.pair_p2p(ops, true)?;
                if receives {
                    out.push(Arrival::Event(e));
                } else {
                    self.pending.push(e);
                }
                continue;
            }
            self.pair_p2p(ops, false)?;
            if receives {
                if defer {
                    out.push(Arrival::Stream(stream));
                } else {
                    self.arrive(Arrival::Stream(stream));
                }
            }
        }
        Ok(out)
    }

    /// The compute stream (and for a stream, the host) waits for `a`.
    fn arrive(&mut self, a: Arrival) {
        match a {
            Arrival::Event(e) => self.wait(COMPUTE, e),
            Arrival::Stream(stream) => {
                self.push(Action::SyncStream(stream));
                self.hop(stream, COMPUTE);
            }
        }
    }

    /// `sends` and `recvs` as one call of a style that waits for its receives before the next
    /// op: a group and a device synchronize (`batched`), or an exchange whose receives the
    /// compute stream waits for.
    pub(super) fn send_and_receive(
        &mut self,
        sends: &[Transfer],
        recvs: &[Transfer],
    ) -> Result<(), String> {
        if self.cfg.style == Style::Batched {
            return self.batched_group(sends, recvs);
        }
        for a in self.exchange(sends, recvs, false)? {
            self.arrive(a);
        }
        Ok(())
    }

    /// The overlapped style's ungrouped sends (`sends`) and receives (`recvs`), peer by peer in
    /// the pair's order, each with the event recorded after it (the compute stream waits for
    /// the sends at the iteration's end).
    pub(super) fn post_ungrouped(
        &mut self,
        sends: &[Transfer],
        recvs: &[Transfer],
    ) -> Result<Posted, String> {
        let mut posted = Posted::default();
        for ops in self.by_peer(sends, recvs) {
            for o in ops {
                let e = self.pair_p2p(vec![o], false)?;
                if o.send {
                    self.pending.push(e);
                    posted.sends.push(e);
                } else {
                    posted.recvs.push((o.tensor, e));
                }
            }
        }
        Ok(posted)
    }

    /// The op's compute.
    pub(super) fn op_compute(&mut self, op: &Op, last_grads: bool) -> Result<(), String> {
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

/// What the compute stream waits for before an op that needs a receive.
enum Arrival {
    /// The event recorded after a group (torch).
    Event(EventId),
    /// Everything on a peer pair's stream, the host waiting for it first (blocking).
    Stream(crate::program::StreamId),
}

/// The events of ungrouped sends and receives just queued.
#[derive(Default)]
pub(super) struct Posted {
    pub sends: Vec<EventId>,
    /// Each receive's tensor and event.
    pub recvs: Vec<(Tensor, EventId)>,
}

pub(super) fn origin(op: &Op) -> Origin {
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
    if plan.shape.schedule == Schedule::Interleaved {
        return super::interleaved::lower(b, ops, &last);
    }
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
        Style::Blocking | Style::Torch => {
            // Each op's sends go out with the next op's receives, peer by peer (DeepSpeed's
            // steps send the last step's output beside this step's receive; torch's 1F1B
            // batches them), so that a send too large for NCCL's buffer meets its receive.
            // In the blocking style the sends of an op followed by ops without transfers (ZB-H1's
            // W passes) go out with the receives of the op after those, before them, the host
            // waiting for the receives only before that op: alone, a gradient sent upstream
            // would meet the activation that stage sends it first.
            let none: &[Transfer] = &[];
            let mut sends = none;
            let mut early: Option<(usize, Vec<Arrival>)> = None;
            for (i, op) in ops.iter().enumerate() {
                b.origin = origin(op);
                let arrivals = match early.take() {
                    Some((j, a)) if j == i => a,
                    other => {
                        early = other;
                        b.exchange(sends, &op.recvs, false)?
                    }
                };
                for a in arrivals {
                    b.arrive(a);
                }
                b.op_compute(op, last.contains(&i))?;
                sends = &op.sends;
                if b.cfg.style == Style::Blocking && !sends.is_empty() {
                    let quiet = |o: &Op| o.recvs.is_empty() && o.sends.is_empty();
                    let next = (i + 1..ops.len()).find(|&j| !quiet(&ops[j]));
                    if let Some(j) = next.filter(|&j| j > i + 1 && !ops[j].recvs.is_empty()) {
                        b.origin = origin(&ops[j]);
                        early = Some((j, b.exchange(sends, &ops[j].recvs, true)?));
                        sends = none;
                    }
                }
            }
            b.exchange(sends, none, false)?;
        }
        Style::Overlapped => {
            return Err("the overlapped style is Megatron's interleaved schedule's".into())
        }
    }
    Ok(())
}
