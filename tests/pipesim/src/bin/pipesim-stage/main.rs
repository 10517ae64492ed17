//! pipesim-stage: one rank of the simulated pipeline-parallel training job, written like an
//! unmodified training process that knows nothing of freeride: it links the CUDA runtime and
//! cuBLAS dynamically, reaches NCCL through a dlopen'ed (RTLD_LOCAL) library, and runs its rank's
//! ops of the schedule for N iterations, each ending with an all-reduce and a device synchronize.
//! Started by `pipesim`; prints nothing to stdout.
mod comm;
mod cuda;
mod kernels;

use comm::{Comm, PipeComm};
use cuda::{check, Event, Stream};
use kernels::Kernels;
use pipesim::config::{env, JobConfig, Style};
use pipesim::schedule::{Op, Plan, Transfer};
use std::collections::HashMap;
use std::path::PathBuf;

fn main() {
    let rank = std::env::var(env::RANK)
        .ok()
        .and_then(|v| v.parse::<usize>().ok());
    let label = rank
        .map(|r| format!("rank {r}"))
        .unwrap_or_else(|| "?".into());
    if let Err(e) = run() {
        eprintln!("pipesim-stage {label}: {e}");
        std::process::exit(1);
    }
}

fn var(name: &str) -> Result<String, String> {
    std::env::var(name)
        .map_err(|_| format!("{name} is not set (pipesim-stage is started by pipesim)"))
}

/// A stream and an event recorded on it.
struct Lane {
    stream: Stream,
    event: Event,
}

impl Lane {
    fn new() -> Result<Lane, String> {
        let (mut stream, mut event) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: out-pointers to locals.
        unsafe {
            check(
                "cudaStreamCreateWithFlags",
                cuda::cudaStreamCreateWithFlags(&mut stream, cuda::STREAM_NON_BLOCKING),
            )?;
            check(
                "cudaEventCreateWithFlags",
                cuda::cudaEventCreateWithFlags(&mut event, cuda::EVENT_DISABLE_TIMING),
            )?;
        }
        Ok(Lane { stream, event })
    }

    /// `other` waits (on the GPU) for everything queued on `self` so far.
    fn then(&self, other: &Lane) -> Result<(), String> {
        // SAFETY: live stream and event handles.
        unsafe {
            check(
                "cudaEventRecord",
                cuda::cudaEventRecord(self.event, self.stream),
            )?;
            check(
                "cudaStreamWaitEvent",
                cuda::cudaStreamWaitEvent(other.stream, self.event, 0),
            )
        }
    }

    fn synchronize(&self) -> Result<(), String> {
        // SAFETY: live stream.
        check("cudaStreamSynchronize", unsafe {
            cuda::cudaStreamSynchronize(self.stream)
        })
    }
}

fn device_synchronize() -> Result<(), String> {
    // SAFETY: no arguments.
    check("cudaDeviceSynchronize", unsafe {
        cuda::cudaDeviceSynchronize()
    })
}

/// A communicator, this rank's index in it, and the stream its operations run on.
struct Link {
    comm: Comm,
    /// Global rank -> rank in this communicator.
    index: HashMap<usize, usize>,
    lane: Lane,
}

struct Stage {
    rank: usize,
    cfg: JobConfig,
    plan: Plan,
    /// The plan from the configured change of micro-batch count on.
    plan_after: Option<Plan>,
    nccl: PipeComm,
    compute: Lane,
    kernels: Kernels,
    /// All ranks (the data-parallel all-reduce at the end of each iteration).
    allreduce: Link,
    /// Batched style: all ranks. Blocking style: one per neighbour (2-rank communicators).
    p2p: Vec<Link>,
    p2p_bytes: u64,
}

fn run() -> Result<(), String> {
    let rank: usize = var(env::RANK)?
        .parse()
        .map_err(|_| format!("bad {}", env::RANK))?;
    let world: usize = var(env::WORLD_SIZE)?
        .parse()
        .map_err(|_| format!("bad {}", env::WORLD_SIZE))?;
    let job_dir = PathBuf::from(var(env::JOB_DIR)?);
    // Sleep-based simulated kernels overshoot by the timer slack (50 µs by default); the stream
    // threads the runtime starts inherit this thread's slack.
    // SAFETY: PR_SET_TIMERSLACK only changes this thread's timer slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    let cfg: JobConfig = serde_json::from_str(&var(env::CONFIG)?)
        .map_err(|e| format!("bad {}: {e}", env::CONFIG))?;
    let plan = cfg.shape.plan()?;
    if world != plan.ranks.len() || rank >= world {
        return Err(format!(
            "rank {rank} of {world} does not fit a {}-stage plan",
            plan.ranks.len()
        ));
    }
    // SAFETY: plain runtime calls; cudaFree(NULL) initializes the context, as PyTorch does.
    unsafe {
        check("cudaSetDevice", cuda::cudaSetDevice(rank as i32))?;
        check("cudaFree", cuda::cudaFree(std::ptr::null_mut()))?;
    }
    let compute = Lane::new()?;
    let first_ns = plan.ranks[rank]
        .first()
        .and_then(|op| op.phases.first())
        .map(|p| p.ns)
        .unwrap_or(0);
    let kernels = Kernels::new(compute.stream, first_ns / 5)?;
    let nccl = PipeComm::load()?;

    let all: HashMap<usize, usize> = (0..world).map(|r| (r, r)).collect();
    let allreduce = Link {
        comm: nccl.init(&job_dir, "allreduce", world, rank)?,
        index: all.clone(),
        lane: Lane::new()?,
    };
    let mut p2p = Vec::new();
    match cfg.style {
        Style::Batched => {
            p2p.push(Link {
                comm: nccl.init(&job_dir, "pipeline", world, rank)?,
                index: all,
                lane: Lane::new()?,
            });
        }
        Style::Blocking => {
            // Every rank creates its pair communicators in the same global order: no deadlock.
            for (a, b) in plan.pairs() {
                if rank != a as usize && rank != b as usize {
                    continue;
                }
                let index: HashMap<usize, usize> = [(a as usize, 0), (b as usize, 1)].into();
                let comm = nccl.init(&job_dir, &format!("pair-{a}-{b}"), 2, index[&rank])?;
                p2p.push(Link {
                    comm,
                    index,
                    lane: Lane::new()?,
                });
            }
        }
    }
    let p2p_bytes = cfg.p2p_bytes();
    let plan_after = match cfg.change {
        Some(c) => Some(cfg.shape_at(c.at_iteration).plan()?),
        None => None,
    };
    let stage = Stage {
        plan_after,
        rank,
        cfg,
        plan,
        nccl,
        compute,
        kernels,
        allreduce,
        p2p,
        p2p_bytes,
    };
    let result = stage.train();
    stage.nccl.destroy(stage.allreduce.comm);
    for l in &stage.p2p {
        stage.nccl.destroy(l.comm);
    }
    result
}

impl Stage {
    fn train(&self) -> Result<(), String> {
        for it in 0..self.cfg.iterations {
            let plan = match (&self.plan_after, self.cfg.change) {
                (Some(p), Some(c)) if it >= c.at_iteration => p,
                _ => &self.plan,
            };
            let ops = &plan.ranks[self.rank];
            let mut pending: &[Transfer] = &[];
            let mut slot = 0;
            for (k, op) in ops.iter().enumerate() {
                match self.cfg.style {
                    Style::Batched => {
                        self.batched_step(pending, &op.recvs)?;
                        pending = &op.sends;
                    }
                    Style::Blocking => self.blocking_recvs(&op.recvs)?,
                }
                self.compute_op(op, k == 0, &mut slot)?;
                if self.cfg.style == Style::Blocking {
                    self.blocking_sends(&op.sends)?;
                }
            }
            if self.cfg.style == Style::Batched {
                self.batched_step(pending, &[])?;
            }
            self.compute.then(&self.allreduce.lane)?;
            self.nccl.all_reduce(
                self.allreduce.comm,
                self.cfg.allreduce_bytes(),
                self.allreduce.lane.stream,
            )?;
            device_synchronize()?;
            self.nccl.async_error(self.allreduce.comm)?;
            for l in &self.p2p {
                self.nccl.async_error(l.comm)?;
            }
            if self.rank == 0 {
                eprintln!(
                    "pipesim: iteration {} of {} done",
                    it + 1,
                    self.cfg.iterations
                );
            }
        }
        Ok(())
    }

    /// The op's kernels on the compute stream (the first op of an iteration includes the graph).
    fn compute_op(&self, op: &Op, first: bool, slot: &mut usize) -> Result<(), String> {
        for (i, ph) in op.phases.iter().enumerate() {
            let mut ns = ph.ns;
            if first && i == 0 && self.kernels.graph_ns > 0 {
                self.kernels.launch_graph()?;
                ns -= self.kernels.graph_ns;
            }
            self.kernels.launch_phase(ph.name, ns, *slot)?;
            *slot += 1;
        }
        Ok(())
    }

    fn link_to(&self, peer: usize) -> Result<(&Link, usize), String> {
        self.p2p
            .iter()
            .find_map(|l| l.index.get(&peer).map(|&i| (l, i)))
            .ok_or_else(|| format!("no communicator with rank {peer}"))
    }

    /// Megatron: one group with the previous op's sends and this op's receives, then a device
    /// synchronize.
    fn batched_step(&self, sends: &[Transfer], recvs: &[Transfer]) -> Result<(), String> {
        if sends.is_empty() && recvs.is_empty() {
            return Ok(());
        }
        let link = &self.p2p[0];
        // Like PyTorch's ProcessGroupNCCL: every op's stream first waits for the compute queued so far.
        self.compute.then(&link.lane)?;
        self.nccl.group_start()?;
        for t in sends {
            self.nccl.send(
                link.comm,
                link.index[&(t.peer as usize)],
                self.p2p_bytes,
                link.lane.stream,
            )?;
        }
        for t in recvs {
            self.nccl.recv(
                link.comm,
                link.index[&(t.peer as usize)],
                self.p2p_bytes,
                link.lane.stream,
            )?;
        }
        self.nccl.group_end()?;
        device_synchronize()?;
        if !recvs.is_empty() {
            link.lane.then(&self.compute)?;
        }
        Ok(())
    }

    /// DeepSpeed: a blocking receive per input (the host waits for it).
    fn blocking_recvs(&self, recvs: &[Transfer]) -> Result<(), String> {
        for t in recvs {
            let (link, peer) = self.link_to(t.peer as usize)?;
            // Like PyTorch's ProcessGroupNCCL: the op's stream first waits for the compute queued so far.
            self.compute.then(&link.lane)?;
            self.nccl
                .recv(link.comm, peer, self.p2p_bytes, link.lane.stream)?;
            link.lane.synchronize()?;
            link.lane.then(&self.compute)?;
        }
        Ok(())
    }

    fn blocking_sends(&self, sends: &[Transfer]) -> Result<(), String> {
        for t in sends {
            let (link, peer) = self.link_to(t.peer as usize)?;
            self.compute.then(&link.lane)?;
            self.nccl
                .send(link.comm, peer, self.p2p_bytes, link.lane.stream)?;
        }
        Ok(())
    }
}
