//! What the agent observes of one trainer process.

/// Nanoseconds of CLOCK_MONOTONIC.
pub type Ns = u64;

/// The signature of a communication op (or of an NCCL group, seen as one op at `ncclGroupEnd`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CommSig {
    /// The op contains at least one send.
    pub has_send: bool,
    /// The op contains at least one receive: compute queued after it waits for the data.
    pub has_recv: bool,
    /// A collective (all-reduce, all-gather...): the iteration's marker; compute waits for it too.
    pub collective: bool,
    /// The peer of a single point-to-point op, -1 for groups and collectives.
    pub peer: i32,
    /// Bytes moved (sum over a group's ops).
    pub bytes: u64,
}

impl CommSig {
    /// Compute queued after this op waits for its result, so the GPU's compute is idle while it runs.
    pub fn blocks_compute(&self) -> bool {
        self.has_recv || self.collective
    }
}

/// One observation, in the order the agent sees them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Obs {
    /// The host queued a compute kernel (any launch that is not communication) at `t`.
    Launch { t: Ns },
    /// The host issued communication op `id` at `t`.
    CommIssue { t: Ns, id: u64, sig: CommSig },
    /// Op `id` began on the GPU at `t` (host clock); the agent learnt it at `seen`.
    CommBegin { id: u64, t: Ns, seen: Ns },
    /// Op `id` ended on the GPU at `t` (host clock); the agent learnt it at `seen`.
    CommEnd { id: u64, t: Ns, seen: Ns },
    /// The process is exiting (at `t`): whatever bubble is open ends there.
    Exit { t: Ns },
}
