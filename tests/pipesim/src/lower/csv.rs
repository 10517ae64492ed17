//! A `compute_comms` CSV with the semantics of PyTorch's `_PipelineScheduleRuntime`
//! (`shared/reference/torch-schedules/README.md`):
//! * `SEND_*` / `RECV_*`: a one-op NCCL group on the peer pair's communicator and stream, after
//!   that stream waits for the compute queued so far; nothing blocks the host;
//! * a compute that consumes a received tensor first makes the compute stream wait for the
//!   receive (`work.wait()` is a `cudaStreamWaitEvent`); `WAIT_SEND_*` likewise for a send;
//! * `UNSHARD`: the stage's FSDP all-gather on the data-parallel stream, waited for by the stage's
//!   next compute; `RESHARD`: frees the parameters (no GPU work);
//! * `REDUCE_GRAD`: the stage's gradient reduce-scatter on the data-parallel stream, overlapping
//!   what follows; `WAIT_REDUCE_GRAD`: the compute stream waits for it;
//! * `F`, `I`, `W`, `B` of stage s take `--f`, `--b`, `--w`, `--b` + `--w` (per stage);
//!   `OVERLAP_F_B` runs the forward, then the backward.
//!
//! Adjacent stages on one rank pass tensors locally (the V shapes): no send, no receive.
use super::compute::{Pass, Work};
use super::{dp_name, Builder};
use crate::config::coll_bytes;
use crate::csv::{Compute, CsvAction, CsvSchedule};
use crate::program::{Action, CollKind, EventId, Origin, P2pOp, StreamRole, Tensor, COMPUTE};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Pipeline-rank pairs that exchange tensors.
pub(super) fn pairs(s: &CsvSchedule) -> Vec<(u32, u32)> {
    let ranks = s.stage_ranks();
    let mut v: Vec<(u32, u32)> = s
        .rows
        .iter()
        .flatten()
        .filter_map(|c| match c.action {
            CsvAction::Send { stage, grad, .. } => {
                let to = if grad { stage - 1 } else { stage + 1 };
                let (a, b) = (ranks[&stage], ranks[&to]);
                Some((a.min(b), a.max(b)))
            }
            _ => None,
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// What a row's earlier actions left for later ones.
#[derive(Default)]
struct Pending {
    recvs: HashMap<(u32, bool, u32), EventId>,
    sends: BTreeMap<(u32, bool, u32), EventId>,
    unshard: HashMap<u32, EventId>,
    reduce: BTreeMap<u32, EventId>,
}

impl Builder<'_> {
    /// The compute of one CSV compute action (after the waits for its inputs).
    fn csv_compute(
        &mut self,
        p: &mut Pending,
        stage: u32,
        kind: Compute,
        mb: u32,
    ) -> Result<(), String> {
        let key = match kind {
            Compute::F => Some((stage, false, mb)),
            Compute::I | Compute::B => Some((stage, true, mb)),
            Compute::W => None,
        };
        if let Some(e) = key.and_then(|k| p.recvs.remove(&k)) {
            self.wait(COMPUTE, e);
        }
        if let Some(e) = p.unshard.remove(&stage) {
            self.wait(COMPUTE, e);
        }
        let s = self.cfg.shape;
        let pass = match kind {
            Compute::F => Pass::Forward,
            Compute::I => Pass::Input,
            Compute::W => Pass::Weight,
            Compute::B => Pass::Full,
        };
        self.compute(Work {
            pass,
            f_ns: s.f_ns,
            i_ns: s.b_ns,
            w_ns: s.w_ns,
            mb,
            last_grads: false,
        })
    }

    fn csv_p2p(
        &mut self,
        ranks: &HashMap<u32, u32>,
        stage: u32,
        grad: bool,
        mb: u32,
        send: bool,
    ) -> Result<EventId, String> {
        let other = match (send, grad) {
            (true, false) | (false, true) => stage + 1,
            (true, true) | (false, false) => stage - 1,
        };
        let peer = self.topo.stage_rank(self.rank, ranks[&other]);
        let scale = self.cfg.noise.seq_scale(self.it, mb);
        let producer = if send { stage } else { other };
        let op = P2pOp {
            send,
            peer,
            bytes: ((self.cfg.p2p_bytes() as f64 * scale) as u64).max(4),
            tensor: Tensor {
                grad,
                stage: producer,
                mb,
            },
        };
        let (stream, comm) = self.p2p_link(peer)?;
        self.hop(COMPUTE, stream);
        self.push(Action::P2p {
            comm,
            stream,
            grouped: true,
            ops: vec![op],
        });
        Ok(self.record(stream))
    }

    /// An FSDP collective of the stage on the data-parallel stream.
    fn fsdp(&mut self, kind: CollKind) -> Result<EventId, String> {
        let comm = self.comm(&dp_name(&self.topo, self.rank))?;
        let stream = self.stream(StreamRole::Dp)?;
        let bytes = coll_bytes(self.cfg.par.dp_comm_ns, self.cfg.par.dp);
        Ok(self.collective(comm, stream, kind, bytes))
    }
}

/// Queues this rank's row of the CSV.
pub(super) fn lower(b: &mut Builder, s: &CsvSchedule) -> Result<(), String> {
    let ranks = s.stage_ranks();
    let row = b.topo.coords(b.rank).pp as usize;
    let mut p = Pending::default();
    for (c, cell) in s.rows[row].iter().enumerate() {
        b.origin = Origin::Cell(Arc::new(s.cell((row, c))));
        match cell.action {
            CsvAction::Compute { stage, kind, mb } => b.csv_compute(&mut p, stage, kind, mb)?,
            CsvAction::OverlapFB {
                f_stage,
                f_mb,
                b_stage,
                b_mb,
            } => {
                if let Some(e) = p.recvs.remove(&(b_stage, true, b_mb)) {
                    b.wait(COMPUTE, e);
                }
                b.csv_compute(&mut p, f_stage, Compute::F, f_mb)?;
                b.csv_compute(&mut p, b_stage, Compute::B, b_mb)?;
            }
            CsvAction::Send { stage, grad, mb } => {
                let e = b.csv_p2p(&ranks, stage, grad, mb, true)?;
                p.sends.insert((stage, grad, mb), e);
            }
            CsvAction::Recv { stage, grad, mb } => {
                let e = b.csv_p2p(&ranks, stage, grad, mb, false)?;
                p.recvs.insert((stage, grad, mb), e);
            }
            CsvAction::WaitSend { stage, grad, mb } => {
                if let Some(e) = p.sends.remove(&(stage, grad, mb)) {
                    b.wait(COMPUTE, e);
                }
            }
            CsvAction::Unshard { stage } => {
                let e = b.fsdp(CollKind::AllGather)?;
                p.unshard.insert(stage, e);
            }
            CsvAction::Reshard { .. } => {}
            CsvAction::ReduceGrad { stage } => {
                let e = b.fsdp(CollKind::ReduceScatter)?;
                p.reduce.insert(stage, e);
            }
            CsvAction::WaitReduceGrad { stage } => {
                if let Some(e) = p.reduce.remove(&stage) {
                    b.wait(COMPUTE, e);
                }
            }
        }
    }
    // Like the runtime's end of step: every send still in flight is waited for.
    b.pending.extend(p.sends.into_values());
    b.pending.extend(p.reduce.into_values());
    b.origin = Origin::Job;
    Ok(())
}
