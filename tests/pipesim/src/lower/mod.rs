//! Builds every rank's program ([`crate::program`]) from the job: the pipeline (a built-in
//! schedule in one of the communication styles, `pipeline`, or a CSV, `csv`), each compute op
//! as layers with their tensor-parallel collectives and kernels (`compute`), the data-parallel
//! gradient buckets, and the iteration's end (`finish`).
//!
//! [`plan_job`] fixes the communicators and every rank's streams once; [`program`] builds rank r's
//! iteration `it` from them. Both are pure functions of the configuration: the launcher (which
//! validates every program with the model) and each stage (which runs its own) build the same.
mod compute;
mod csv;
mod finish;
mod interleaved;
mod pipeline;

use crate::config::{JobConfig, Style};
use crate::program::{
    Action, CollKind, CommId, EventId, JobPlan, Origin, Program, RankSetup, Step, StreamId,
    StreamRole, COMPUTE,
};
use crate::schedule::PhaseName;
use crate::topology::Topology;

pub use compute::kernel_count;

/// Communicator names (each unique in the job).
fn world_name() -> String {
    "world".into()
}

fn pipeline_name(topo: &Topology, r: u32) -> String {
    let c = topo.coords(r);
    format!("pp-t{}-d{}", c.tp, c.dp)
}

fn pair_name(a: u32, b: u32) -> String {
    format!("pair-{}-{}", a.min(b), a.max(b))
}

fn tp_name(topo: &Topology, r: u32) -> String {
    let c = topo.coords(r);
    format!("tp-p{}-d{}", c.pp, c.dp)
}

fn dp_name(topo: &Topology, r: u32) -> String {
    let c = topo.coords(r);
    format!("dp-p{}-t{}", c.pp, c.tp)
}

fn mp_name(topo: &Topology, r: u32) -> String {
    format!("mp-d{}", topo.coords(r).dp)
}

/// Whether the job has data-parallel communication (gradient buckets, FSDP).
fn has_dp_comm(cfg: &JobConfig) -> bool {
    cfg.par.dp > 1 || cfg.csv.is_some()
}

/// The communicator the grad-norm all-reduce runs on: the model-parallel group of the replica
/// (every stage and tensor-parallel rank), or every rank with the distributed optimizer (each
/// holds a shard of the gradients).
fn grad_norm_comm(cfg: &JobConfig, topo: &Topology, r: u32) -> String {
    if cfg.par.distributed_optimizer || cfg.par.dp == 1 {
        world_name()
    } else {
        mp_name(topo, r)
    }
}

/// Pipeline-rank pairs (stage ranks) that exchange tensors.
fn stage_pairs(cfg: &JobConfig) -> Result<Vec<(u32, u32)>, String> {
    match &cfg.csv {
        Some(s) => Ok(csv::pairs(s)),
        None => {
            let mut pairs = cfg.shape.plan()?.pairs();
            if let Some(c) = cfg.change {
                pairs.extend(cfg.shape_at(c.at_iteration).plan()?.pairs());
                pairs.sort_unstable();
                pairs.dedup();
            }
            Ok(pairs)
        }
    }
}

/// The communicators (in the global creation order) and every rank's streams.
pub fn plan_job(cfg: &JobConfig) -> Result<JobPlan, String> {
    let topo = cfg.topology();
    topo.validate()?;
    let world = topo.world();
    let mut plan = JobPlan {
        comms: vec![],
        ranks: (0..world).map(|_| RankSetup::default()).collect(),
    };
    for r in plan.ranks.iter_mut() {
        r.stream(StreamRole::Compute);
        r.stream(StreamRole::Loss);
    }
    plan.comm(world_name(), (0..world).collect());
    let pairs = stage_pairs(cfg)?;
    for r in 0..world {
        match cfg.style {
            _ if cfg.style == Style::Batched || cfg.p2p_shared => {
                plan.comm(pipeline_name(&topo, r), topo.pp_group(r));
                if topo.pp > 1 {
                    plan.ranks[r as usize].stream(StreamRole::Pipeline);
                }
            }
            _ => {
                for &(a, b) in &pairs {
                    let (ga, gb) = (topo.stage_rank(r, a), topo.stage_rank(r, b));
                    if r == ga || r == gb {
                        plan.comm(pair_name(ga, gb), vec![ga.min(gb), ga.max(gb)]);
                        let other = if r == ga { gb } else { ga };
                        plan.ranks[r as usize].stream(StreamRole::Peer(other));
                    }
                }
            }
        }
    }
    if topo.tp > 1 {
        for r in 0..world {
            plan.comm(tp_name(&topo, r), topo.tp_group(r));
            plan.ranks[r as usize].stream(StreamRole::Tp);
        }
    }
    if has_dp_comm(cfg) {
        for r in 0..world {
            plan.comm(dp_name(&topo, r), topo.dp_group(r));
            plan.ranks[r as usize].stream(StreamRole::Dp);
        }
    }
    if cfg.par.clip_grad {
        for r in 0..world {
            let name = grad_norm_comm(cfg, &topo, r);
            if name != world_name() {
                plan.comm(name, topo.mp_group(r));
            }
        }
    }
    for r in 0..world {
        plan.ranks[r as usize].graph_ns = compute::first_block_ns(cfg, r)? / 5;
    }
    Ok(plan)
}

/// Rank `rank`'s program for iteration `it`.
pub fn program(cfg: &JobConfig, plan: &JobPlan, rank: u32, it: u32) -> Result<Program, String> {
    let mut b = Builder::new(cfg, plan, rank, it);
    match &cfg.csv {
        Some(s) => csv::lower(&mut b, s)?,
        None => pipeline::lower(&mut b)?,
    }
    finish::end_iteration(&mut b)?;
    Ok(b.finish())
}

/// Builds one program.
pub(crate) struct Builder<'a> {
    cfg: &'a JobConfig,
    plan: &'a JobPlan,
    setup: &'a RankSetup,
    topo: Topology,
    rank: u32,
    it: u32,
    steps: Vec<Step>,
    events: usize,
    origin: Origin,
    /// Kernels queued so far (draws each one's jitter).
    kernel_index: u64,
    graph_pending: bool,
    /// Events the compute stream waits for before the iteration ends (sends still in flight,
    /// gradient buckets).
    pending: Vec<EventId>,
}

impl<'a> Builder<'a> {
    fn new(cfg: &'a JobConfig, plan: &'a JobPlan, rank: u32, it: u32) -> Builder<'a> {
        Builder {
            cfg,
            plan,
            setup: &plan.ranks[rank as usize],
            topo: cfg.topology(),
            rank,
            it,
            steps: vec![],
            events: 0,
            origin: Origin::Job,
            kernel_index: 0,
            graph_pending: true,
            pending: vec![],
        }
    }

    fn finish(mut self) -> Program {
        if let Some((r, at)) = self.cfg.noise.stall(self.it, self.topo.world()) {
            if r == self.rank {
                let i = ((at * self.steps.len() as f64) as usize).min(self.steps.len());
                self.steps.insert(
                    i,
                    Step {
                        action: Action::Sleep {
                            ns: self.cfg.noise.stall_ns,
                        },
                        origin: Origin::Job,
                    },
                );
            }
        }
        Program {
            rank: self.rank,
            steps: self.steps,
            events: self.events,
        }
    }

    fn stream(&self, role: StreamRole) -> Result<StreamId, String> {
        self.setup
            .streams
            .iter()
            .position(|&r| r == role)
            .ok_or_else(|| format!("rank {} has no {role:?} stream (a bug)", self.rank))
    }

    /// The stream and communicator of pipeline traffic with global rank `peer`.
    fn p2p_link(&self, peer: u32) -> Result<(StreamId, CommId), String> {
        if self.cfg.p2p_shared || self.cfg.style == Style::Batched {
            Ok((
                self.stream(StreamRole::Pipeline)?,
                self.comm(&pipeline_name(&self.topo, self.rank))?,
            ))
        } else {
            Ok((
                self.stream(StreamRole::Peer(peer))?,
                self.comm(&pair_name(self.rank, peer))?,
            ))
        }
    }

    fn comm(&self, name: &str) -> Result<CommId, String> {
        self.plan
            .comms
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| format!("no communicator {name} (a bug)"))
    }

    fn push(&mut self, action: Action) {
        self.steps.push(Step {
            action,
            origin: self.origin.clone(),
        });
    }

    fn record(&mut self, stream: StreamId) -> EventId {
        let event = self.events;
        self.events += 1;
        self.push(Action::Record { stream, event });
        event
    }

    fn wait(&mut self, stream: StreamId, event: EventId) {
        self.push(Action::Wait { stream, event });
    }

    /// `to` waits (on the GPU) for everything queued on `from` so far.
    fn hop(&mut self, from: StreamId, to: StreamId) {
        let e = self.record(from);
        self.wait(to, e);
    }

    /// Queues a collective on `stream` after the compute queued so far; returns the event
    /// recorded after it.
    fn collective(
        &mut self,
        comm: CommId,
        stream: StreamId,
        kind: CollKind,
        bytes: u64,
    ) -> EventId {
        self.hop(COMPUTE, stream);
        self.push(Action::Collective {
            comm,
            stream,
            kind,
            bytes,
        });
        self.record(stream)
    }

    /// A collective the compute stream waits for at once (a synchronous one).
    fn collective_sync(&mut self, comm: CommId, stream: StreamId, kind: CollKind, bytes: u64) {
        let e = self.collective(comm, stream, kind, bytes);
        self.wait(COMPUTE, e);
    }

    /// Queues `ns` of phase `phase` on the compute stream as kernels of varied lengths (the
    /// first compute of the iteration also replays the CUDA graph).
    fn kernels(&mut self, phase: PhaseName, ns: u64, kernels: usize) {
        let mut ns = ns;
        if self.graph_pending && self.setup.graph_ns > 0 {
            self.graph_pending = false;
            self.push(Action::Graph);
            ns = ns.saturating_sub(self.setup.graph_ns);
        }
        if ns == 0 {
            return;
        }
        let mut durations = compute::split(ns, kernels, phase);
        for d in durations.iter_mut() {
            let j = self.cfg.noise.jitter(self.it, self.rank, self.kernel_index);
            self.kernel_index += 1;
            *d = ((*d as f64 * j).round() as u64).max(1);
        }
        self.push(Action::Kernels {
            stream: COMPUTE,
            phase,
            ns: durations,
        });
    }
}
