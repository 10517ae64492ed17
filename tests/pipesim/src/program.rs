//! What a rank does, as data: per rank a fixed set of streams and communicators ([`JobPlan`]), and
//! per iteration an ordered list of actions ([`Program`]) that its host thread executes one after
//! the other. The stage process runs programs ([`crate::lower`] builds them, from a built-in
//! schedule and a communication style or from a CSV); the launcher first runs every rank's program
//! through the discrete-event model ([`crate::model`]), which refuses one that cannot complete.
use crate::schedule::PhaseName;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// Index into a rank's [`RankSetup::streams`] (0 is the compute stream).
pub type StreamId = usize;
/// A program's event (recorded once per program, waited on by later actions).
pub type EventId = usize;
/// Index into [`JobPlan::comms`].
pub type CommId = usize;

/// The compute stream of every rank.
pub const COMPUTE: StreamId = 0;

/// What a stream is for (names it in messages and in the truth's stream order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StreamRole {
    /// Compute kernels, and the waits before them.
    Compute,
    /// Every pipeline send and receive of the rank (Megatron's batched P2P).
    Pipeline,
    /// Pipeline sends and receives with one peer rank (ProcessGroupNCCL's per-pair communicator
    /// and stream; DeepSpeed's 2-rank groups).
    Peer(u32),
    /// Tensor-parallel collectives.
    Tp,
    /// Data-parallel collectives (gradient buckets, FSDP all-gathers and reduce-scatters).
    Dp,
    /// Loss and grad-norm all-reduces.
    Loss,
}

/// A communicator: its name (unique in the job) and its members (global ranks, in comm-rank order).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommSpec {
    pub name: String,
    pub members: Vec<u32>,
}

impl CommSpec {
    /// The comm-rank of global rank `r`.
    pub fn index_of(&self, r: u32) -> Option<usize> {
        self.members.iter().position(|&m| m == r)
    }
}

/// A rank's streams and the communicators it joins (in the job's global creation order, so that
/// every process initializes them in the same order and none waits for another forever).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankSetup {
    pub streams: Vec<StreamRole>,
    pub comms: Vec<CommId>,
    /// Duration of the CUDA graph replayed at the start of each iteration, ns.
    pub graph_ns: u64,
}

impl RankSetup {
    /// The stream of `role`, added on first use.
    pub fn stream(&mut self, role: StreamRole) -> StreamId {
        match self.streams.iter().position(|&r| r == role) {
            Some(i) => i,
            None => {
                self.streams.push(role);
                self.streams.len() - 1
            }
        }
    }
}

/// The job's communicators and every rank's setup.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobPlan {
    pub comms: Vec<CommSpec>,
    pub ranks: Vec<RankSetup>,
}

impl JobPlan {
    /// The communicator named `name` with `members`, added on first use.
    pub fn comm(&mut self, name: String, members: Vec<u32>) -> CommId {
        if let Some(i) = self.comms.iter().position(|c| c.name == name) {
            return i;
        }
        for &m in &members {
            if let Some(r) = self.ranks.get_mut(m as usize) {
                r.comms.push(self.comms.len());
            }
        }
        self.comms.push(CommSpec { name, members });
        self.comms.len() - 1
    }
}

/// A collective's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CollKind {
    AllReduce,
    AllGather,
    ReduceScatter,
}

impl CollKind {
    pub fn name(self) -> &'static str {
        match self {
            CollKind::AllReduce => "all-reduce",
            CollKind::AllGather => "all-gather",
            CollKind::ReduceScatter => "reduce-scatter",
        }
    }
}

/// Which tensor a point-to-point transfer carries: a forward activation or an input gradient of
/// virtual stage `stage` (the producer), micro-batch `mb`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Tensor {
    pub grad: bool,
    pub stage: u32,
    pub mb: u32,
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.grad { "gradient" } else { "activation" };
        write!(
            f,
            "the {what} of stage {} micro-batch {}",
            self.stage, self.mb
        )
    }
}

/// One point-to-point op of an NCCL group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct P2pOp {
    pub send: bool,
    /// The other side (global rank).
    pub peer: u32,
    /// Bytes sent (a receive takes what its send sends).
    pub bytes: u64,
    pub tensor: Tensor,
}

/// One thing the host does.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Replay the CUDA graph (of [`RankSetup::graph_ns`]) on the compute stream.
    Graph,
    /// Queue compute kernels of these durations on a stream.
    Kernels {
        stream: StreamId,
        phase: PhaseName,
        ns: Vec<u64>,
    },
    /// `cudaEventRecord(event, stream)`.
    Record { stream: StreamId, event: EventId },
    /// `cudaStreamWaitEvent(stream, event)`: the stream waits on the GPU, the host goes on.
    Wait { stream: StreamId, event: EventId },
    /// Point-to-point ops on `comm`, queued on `stream`: one NCCL group (`grouped`) or each op
    /// alone.
    P2p {
        comm: CommId,
        stream: StreamId,
        grouped: bool,
        ops: Vec<P2pOp>,
    },
    /// A collective of `bytes` (the whole buffer) on `comm`, queued on `stream`.
    Collective {
        comm: CommId,
        stream: StreamId,
        kind: CollKind,
        bytes: u64,
    },
    /// `cudaDeviceSynchronize`: the host blocks until every stream of the rank is done.
    SyncDevice,
    /// `cudaStreamSynchronize`: the host blocks until the stream is done.
    SyncStream(StreamId),
    /// The host sleeps (a stall, an evaluation or checkpoint pause).
    Sleep { ns: u64 },
    /// The iteration's end: the stage writes its mark line into the truth.
    Mark,
}

/// A cell of a CSV schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    pub file: Arc<str>,
    /// 1-based, as an editor shows them.
    pub row: u32,
    pub col: u32,
    pub text: String,
}

impl fmt::Display for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: row {}, column {} ({:?})",
            self.file, self.row, self.col, self.text
        )
    }
}

/// Where an action comes from (for messages).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Origin {
    #[default]
    Job,
    /// A compute op of a built-in schedule: (what, micro-batch, virtual stage).
    Op(&'static str, u32, u32),
    Cell(Arc<Cell>),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Job => f.write_str("the iteration's end"),
            Origin::Op(what, mb, vs) => write!(f, "{what} of micro-batch {mb} (stage {vs})"),
            Origin::Cell(c) => write!(f, "{c}"),
        }
    }
}

/// An action and where it comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub action: Action,
    pub origin: Origin,
}

/// One rank's iteration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    pub rank: u32,
    pub steps: Vec<Step>,
    /// Events used (ids `0..events`).
    pub events: usize,
}

impl Program {
    /// Total compute time queued, ns (the graph included).
    pub fn compute_ns(&self, setup: &RankSetup) -> u64 {
        self.steps
            .iter()
            .map(|s| match &s.action {
                Action::Kernels { ns, .. } => ns.iter().sum(),
                Action::Graph => setup.graph_ns,
                _ => 0,
            })
            .sum()
    }
}
