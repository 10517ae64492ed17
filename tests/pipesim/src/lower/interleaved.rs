//! Megatron-LM's interleaved schedule communicating as Megatron does
//! (`forward_backward_pipelining_with_interleaving`, `p2p_communication.py`):
//! * one call after each step (a warm-up forward, a steady forward-and-backward pair, a cool-down
//!   backward) sends what the step produced and receives what the peers send at their matching
//!   step; the first forward's input is received alone before it;
//! * a rank that leads its direction (the first rank in forward, the last in backward) receives,
//!   after its virtual micro-batch `k`, what the other end of the ring produced for virtual
//!   micro-batch `k - (p - 1)` (`recv_tensor_from_previous_stage`), ahead of the op that needs it;
//!   every other rank receives the input of its next op of that direction;
//! * without `overlap_p2p_comm` (the `batched` style) each call is one group and a device
//!   synchronize, the steady call carrying both directions (`send_forward_backward_recv_forward_backward`);
//!   the `blocking` and `torch` styles make the same calls peer by peer (module `pipeline`);
//! * with it (the `overlapped` style): separate sends and receives on the peer pairs' streams; the
//!   warm-up's and cool-down's calls are waited for at once (on the GPU); in the steady state the
//!   forward's call follows the forward and the backward's the backward, their receives are
//!   waited for just before the op that needs them, and each call waits for the send of the
//!   previous call of its direction; the last warm-up step also posts the first backward's
//!   receive.
use std::collections::{HashMap, VecDeque};

use super::pipeline::origin;
use super::Builder;
use crate::config::Style;
use crate::program::{EventId, Tensor, COMPUTE};
use crate::schedule::{Op, OpKind, Shape, Transfer};

/// When one rank posts its receives.
struct Receives {
    /// Before the first forward (`recv_forward`).
    first: Vec<Transfer>,
    /// `fwd[j]`: after the forward of virtual micro-batch `j`.
    fwd: Vec<Vec<Transfer>>,
    /// `bwd[0]`: at the last warm-up step (for the first backward); `bwd[j + 1]`: after the
    /// backward of virtual micro-batch `j`.
    bwd: Vec<Vec<Transfer>>,
}

/// Where the interleaved schedule puts rank `r`'s ops: index of the forward and of the backward
/// of virtual micro-batch `j` (see `Shape::interleaved`).
struct Layout {
    warm: u32,
    total: u32,
}

impl Layout {
    fn new(shape: &Shape, r: u32) -> Layout {
        Layout {
            warm: shape.interleaved_warmup(r),
            total: shape.microbatches * shape.chunks,
        }
    }

    fn steady(&self) -> u32 {
        self.total - self.warm
    }

    fn forward(&self, j: u32) -> usize {
        if j < self.warm {
            j as usize
        } else {
            (self.warm + 2 * (j - self.warm)) as usize
        }
    }

    fn backward(&self, j: u32) -> usize {
        if j < self.steady() {
            (self.warm + 2 * j + 1) as usize
        } else {
            (self.total + j) as usize
        }
    }
}

/// Whether Megatron posts a receive after virtual micro-batch `j` of direction `forward` on rank
/// `r`; `None`: at the last warm-up step, for the first backward.
fn receives_after(shape: &Shape, r: u32, j: Option<u32>, forward: bool) -> bool {
    let (p, v) = (shape.stages, shape.chunks);
    let total = shape.microbatches * v;
    let leading = if forward { r == 0 } else { r == p - 1 };
    let Some(j) = j else {
        return !leading;
    };
    if j + 1 >= total {
        return false;
    }
    if !leading {
        return true;
    }
    // The other end of the ring is p - 1 virtual micro-batches behind; its last chunk in this
    // direction sends nothing round the ring.
    let end_chunk = if forward { v - 1 } else { 0 };
    j >= p - 1 && shape.interleaved_chunk(j - (p - 1), forward) != end_chunk
}

impl Receives {
    fn of(shape: &Shape, r: u32, ops: &[Op]) -> Result<Receives, String> {
        let at = Layout::new(shape, r);
        let queue = |kind: OpKind| -> VecDeque<Transfer> {
            (0..at.total)
                .map(|j| match kind {
                    OpKind::F => at.forward(j),
                    _ => at.backward(j),
                })
                .flat_map(|i| ops[i].recvs.iter().copied())
                .collect()
        };
        let (mut fq, mut bq) = (queue(OpKind::F), queue(OpKind::B));
        let take = |q: &mut VecDeque<Transfer>, post: bool| -> Result<Vec<Transfer>, String> {
            if !post {
                return Ok(vec![]);
            }
            match q.pop_front() {
                Some(t) => Ok(vec![t]),
                // One stage: every transfer stays on the rank.
                None if shape.stages == 1 => Ok(vec![]),
                None => Err(format!(
                    "the interleaved schedule receives more on rank {r} than its ops need (a bug)"
                )),
            }
        };
        let first = ops[0].recvs.clone();
        fq.drain(..first.len());
        let mut fwd = vec![];
        for j in 0..at.total {
            fwd.push(take(&mut fq, receives_after(shape, r, Some(j), true))?);
        }
        let mut bwd = vec![take(&mut bq, receives_after(shape, r, None, false))?];
        for j in 0..at.total {
            bwd.push(take(&mut bq, receives_after(shape, r, Some(j), false))?);
        }
        if !fq.is_empty() || !bq.is_empty() {
            return Err(format!(
                "the interleaved schedule leaves receives of rank {r} unposted (a bug)"
            ));
        }
        Ok(Receives { first, fwd, bwd })
    }
}

/// Receives posted and not yet consumed, and what their op must wait for.
struct Lowering<'o> {
    ops: &'o [Op],
    last_grads: &'o [usize],
    /// A posted receive and the event its op waits for (none: already waited for).
    posted: HashMap<Tensor, Option<EventId>>,
}

impl Lowering<'_> {
    /// Op `i`, after the receives it needs.
    fn compute(&mut self, b: &mut Builder, i: usize) -> Result<(), String> {
        let op = &self.ops[i];
        b.origin = origin(op);
        for t in &op.recvs {
            let key = b.p2p_op(t, false).tensor;
            match self.posted.remove(&key) {
                Some(Some(e)) => b.wait(COMPUTE, e),
                Some(None) => {}
                None => {
                    return Err(format!(
                        "the interleaved schedule reaches {} on rank {} before receiving its {key} (a bug)",
                        b.origin, b.rank
                    ))
                }
            }
        }
        b.op_compute(op, self.last_grads.contains(&i))
    }

    /// One of Megatron's calls after the ops so far: `sends`, then `recvs`; `wait`: the compute
    /// stream waits for all of it at once (a call without `overlap_p2p_comm`). Returns the
    /// sends' events where they are not waited for.
    fn call(
        &mut self,
        b: &mut Builder,
        sends: &[Transfer],
        recvs: &[Transfer],
        wait: bool,
    ) -> Result<Vec<EventId>, String> {
        let keys: Vec<Tensor> = recvs.iter().map(|t| b.p2p_op(t, false).tensor).collect();
        if b.cfg.style != Style::Overlapped {
            b.send_and_receive(sends, recvs)?;
            self.posted.extend(keys.into_iter().map(|k| (k, None)));
            return Ok(vec![]);
        }
        let posted = b.post_ungrouped(sends, recvs)?;
        if wait {
            for &e in posted
                .sends
                .iter()
                .chain(posted.recvs.iter().map(|(_, e)| e))
            {
                b.wait(COMPUTE, e);
            }
            self.posted.extend(keys.into_iter().map(|k| (k, None)));
            return Ok(vec![]);
        }
        self.posted
            .extend(posted.recvs.into_iter().map(|(k, e)| (k, Some(e))));
        Ok(posted.sends)
    }
}

/// Queues rank `b.rank`'s ops of the interleaved schedule with Megatron's calls (module docs).
pub(super) fn lower(b: &mut Builder, ops: &[Op], last_grads: &[usize]) -> Result<(), String> {
    let shape = b.cfg.shape_at(b.it);
    let r = b.topo.coords(b.rank).pp;
    let rx = Receives::of(&shape, r, ops)?;
    let at = Layout::new(&shape, r);
    let overlap = b.cfg.style == Style::Overlapped;
    let mut l = Lowering {
        ops,
        last_grads,
        posted: HashMap::new(),
    };
    b.origin = origin(&ops[0]);
    l.call(b, &[], &rx.first, true)?;
    let steady = at.steady();
    for k in 0..at.warm {
        let i = at.forward(k);
        l.compute(b, i)?;
        let mut recvs = rx.fwd[k as usize].clone();
        let first_backward = k + 1 == at.warm && steady > 0;
        if first_backward && !overlap {
            recvs.extend(rx.bwd[0].iter().copied());
        }
        l.call(b, &ops[i].sends, &recvs, true)?;
        if first_backward && overlap {
            l.call(b, &[], &rx.bwd[0], false)?;
        }
    }
    if steady == 0 {
        l.call(b, &[], &rx.bwd[0], true)?;
    }
    // The sends of the previous steady call of each direction (overlapped).
    let (mut sent_fwd, mut sent_bwd) = (vec![], vec![]);
    for k in 0..steady {
        let (f, bw) = (at.forward(at.warm + k), at.backward(k));
        let (f_rx, b_rx) = (&rx.fwd[(at.warm + k) as usize], &rx.bwd[k as usize + 1]);
        if overlap {
            l.compute(b, f)?;
            let sent = l.call(b, &ops[f].sends, f_rx, false)?;
            for e in std::mem::replace(&mut sent_fwd, sent) {
                b.wait(COMPUTE, e);
            }
            l.compute(b, bw)?;
            let sent = l.call(b, &ops[bw].sends, b_rx, false)?;
            for e in std::mem::replace(&mut sent_bwd, sent) {
                b.wait(COMPUTE, e);
            }
        } else {
            l.compute(b, f)?;
            l.compute(b, bw)?;
            let sends: Vec<Transfer> = ops[f].sends.iter().chain(&ops[bw].sends).copied().collect();
            let recvs: Vec<Transfer> = f_rx.iter().chain(b_rx).copied().collect();
            l.call(b, &sends, &recvs, true)?;
        }
    }
    for k in steady..at.total {
        let i = at.backward(k);
        l.compute(b, i)?;
        l.call(b, &ops[i].sends, &rx.bwd[k as usize + 1], true)?;
    }
    for e in sent_bwd {
        b.wait(COMPUTE, e);
    }
    b.pending.extend(sent_fwd);
    if let Some(t) = l.posted.keys().next() {
        return Err(format!(
            "the interleaved schedule receives {t} on rank {r} and never uses it (a bug)"
        ));
    }
    Ok(())
}
