//! The iteration's end, after the pipeline:
//! 1. DeepSpeed (`blocking`) with `--dp` > 1: the gradient all-reduce, after the pipeline, not
//!    overlapped (the compute stream waits for it);
//! 2. the compute stream waits for what is still in flight (sends, the last gradient bucket:
//!    Megatron's `finish_grad_sync`);
//! 3. `--clip-grad`: the grad-norm all-reduce (synchronous) on the replica's model-parallel
//!    group (every rank with the distributed optimizer);
//! 4. `--distributed-optimizer`: the parameter all-gathers after the step, waited for;
//! 5. the loss all-reduce over every rank (`--allreduce`), then the host blocks: a device
//!    synchronize (`batched`, `blocking`) or, for the styles whose host runs ahead, the compute
//!    stream's (`loss.item()`), the all-reduce waited for first;
//! 6. the mark (the truth's iteration boundary), then `--pause-every`'s pause.
use super::{dp_name, grad_norm_comm, world_name, Builder};
use crate::program::{Action, CollKind, Origin, StreamRole, COMPUTE};

/// One `kind` collective per bucket on the data-parallel stream after the compute so far, the
/// compute stream waiting for them.
fn dp_buckets_sync(b: &mut Builder, kind: CollKind) -> Result<(), String> {
    let comm = b.comm(&dp_name(&b.topo, b.rank))?;
    let stream = b.stream(StreamRole::Dp)?;
    let (_, bytes) = b.bucket();
    b.hop(COMPUTE, stream);
    for _ in 0..b.cfg.par.dp_buckets.max(1) {
        b.push(Action::Collective {
            comm,
            stream,
            kind,
            bytes,
        });
    }
    b.hop(stream, COMPUTE);
    Ok(())
}

pub(super) fn end_iteration(b: &mut Builder) -> Result<(), String> {
    b.origin = Origin::Job;
    let p = b.cfg.par;
    if p.dp > 1 && !b.buckets_in_backward() && b.cfg.csv.is_none() {
        dp_buckets_sync(b, CollKind::AllReduce)?;
    }
    for e in std::mem::take(&mut b.pending) {
        b.wait(COMPUTE, e);
    }
    let loss = b.stream(StreamRole::Loss)?;
    if p.clip_grad {
        let comm = b.comm(&grad_norm_comm(b.cfg, &b.topo, b.rank))?;
        b.collective_sync(comm, loss, CollKind::AllReduce, 4);
    }
    if p.distributed_optimizer && p.dp > 1 && b.cfg.csv.is_none() {
        dp_buckets_sync(b, CollKind::AllGather)?;
    }
    let world = b.comm(&world_name())?;
    let bytes = b.cfg.allreduce_bytes();
    b.hop(COMPUTE, loss);
    b.push(Action::Collective {
        comm: world,
        stream: loss,
        kind: CollKind::AllReduce,
        bytes,
    });
    if b.cfg.style.host_runs_ahead() {
        b.hop(loss, COMPUTE);
        b.push(Action::SyncStream(COMPUTE));
    } else {
        b.push(Action::SyncDevice);
    }
    b.push(Action::Mark);
    if b.cfg.noise.pause_after(b.it, b.cfg.iterations) {
        b.push(Action::Sleep {
            ns: b.cfg.noise.pause_ns,
        });
    }
    Ok(())
}
