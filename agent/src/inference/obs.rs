//! What the agent observes of one trainer process on one physical GPU: the contract between the
//! collector (which translates the interposer's ring records, `crate::collect`) and the inference.
//!
//! Times are CLOCK_MONOTONIC ns of the host. Host-side observations (`Launch`, `CommIssue`,
//! `EventRecord`, `StreamWait`, `Sync`, `Exit`) carry the host time of the call; GPU-side ones
//! (`CommBegin`/`CommEnd`, `WaitReached`/`WaitReleased`) carry the GPU time mapped to the host clock
//! and `seen`, when the agent learnt of them. Within one process the observations arrive in the order
//! the interposer pushed them (host calls in call order, GPU-side ones when its poller saw them).
//!
//! The collector (`crate::collect`) translates the rings' records (layout 2) into these: every
//! record names its GPU by bus id; `EventRecord`/`StreamWait` come from the stream-wait hooks,
//! `WaitReached`/`WaitReleased` from the interposer's timing of a wait on an event recorded after
//! communication, `CommUntimed` for an op it cannot time (graph capture, no timing pool). A ring
//! without them (wait timing off, an older producer) is read as PyTorch's ProcessGroupNCCL does
//! its work (see `super::timeline`). A timeline that has seen one `EventRecord` or `StreamWait` trusts them from then
//! on: compute is then tied to communication only by the waits it observed.

/// Nanoseconds of CLOCK_MONOTONIC.
pub type Ns = u64;

/// A stream handle as the process passed it (0: the legacy default stream).
pub type StreamId = u64;

/// A physical GPU: its packed PCI bus id, as the records name it (`freeride_abi::gpu`).
pub use freeride_abi::GpuId;

/// The GPU a ring record's `device` field names, if it names one.
pub fn gpu_of_record(device: i32) -> Option<GpuId> {
    Some(GpuId::from_field(device)).filter(|g| g.is_known())
}

/// What a communication op does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CommKind {
    Send,
    Recv,
    /// An NCCL group with both sends and receives.
    SendRecv,
    AllReduce,
    AllGather,
    ReduceScatter,
    Broadcast,
    /// An NCCL group holding collectives of different kinds (or collectives and point-to-point ops).
    Grouped,
}

impl CommKind {
    pub fn sends(self) -> bool {
        matches!(self, CommKind::Send | CommKind::SendRecv)
    }
    pub fn receives(self) -> bool {
        matches!(self, CommKind::Recv | CommKind::SendRecv)
    }
    pub fn collective(self) -> bool {
        !matches!(self, CommKind::Send | CommKind::Recv | CommKind::SendRecv)
    }
    /// The kind of a group holding ops of kinds `self` and `other`.
    pub fn join(self, other: CommKind) -> CommKind {
        use CommKind::*;
        match (self, other) {
            (a, b) if a == b => a,
            (Send | Recv | SendRecv, Send | Recv | SendRecv) => SendRecv,
            _ => Grouped,
        }
    }
}

/// The signature of a communication op (or of an NCCL group, seen as one op at `ncclGroupEnd`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CommSig {
    /// The communicator handle (0: unknown, or a group over several communicators).
    pub comm: u64,
    pub kind: CommKind,
    /// The peer of point-to-point ops with one peer (the root of a broadcast); -1 otherwise.
    pub peer: i32,
    /// Bytes moved (the sum over a group's ops).
    pub bytes: u64,
    /// Bytes of its largest single send (0: it sends nothing, or that is not known): whether a
    /// send is larger than NCCL's buffer and waits for its receiver before moving the rest.
    pub largest_send: u64,
}

impl CommSig {
    /// The bytes a bubble at this op follows ([`super::sizes`]): what it receives (a group's bytes
    /// less its largest send, where it sends and receives) or moves (a send, a collective).
    pub fn followed_bytes(&self) -> u64 {
        match self.kind {
            CommKind::SendRecv => self.bytes.saturating_sub(self.largest_send),
            _ => self.bytes,
        }
    }

    pub fn has_send(&self) -> bool {
        self.kind.sends()
    }
    pub fn has_recv(&self) -> bool {
        self.kind.receives()
    }
    pub fn collective(&self) -> bool {
        self.kind.collective()
    }

    /// log2 bucket of the size: what the pattern compares (sizes vary between iterations).
    pub fn size_bucket(&self) -> u8 {
        (64 - self.bytes.leading_zeros()) as u8
    }

    /// The signature of a group holding ops `self` and `other`.
    pub fn join(self, other: CommSig) -> CommSig {
        CommSig {
            comm: if self.comm == other.comm {
                self.comm
            } else {
                0
            },
            kind: self.kind.join(other.kind),
            peer: if self.peer == other.peer {
                self.peer
            } else {
                -1
            },
            bytes: self.bytes.saturating_add(other.bytes),
            largest_send: self.largest_send.max(other.largest_send),
        }
    }
}

/// What a host-blocking synchronize waited for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncOn {
    /// The device (context): every stream.
    Device,
    Stream(StreamId),
    /// An event's latest record.
    Event(u64),
}

/// One observation, in the order the agent sees them (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Obs {
    /// The host queued a compute kernel or graph on `stream` at `t`.
    Launch { t: Ns, stream: StreamId },
    /// The host issued communication op `id` on `stream` at `t` (an op outside a group, or a whole
    /// NCCL group's work on one stream, at `ncclGroupEnd`).
    CommIssue {
        t: Ns,
        id: u64,
        stream: StreamId,
        sig: CommSig,
    },
    /// Op `id` (issued just before) shares match key `key` with the ops of `parties - 1` other
    /// processes: they are one collective or one send/receive pair ([`crate::comm_match`]);
    /// `receives`: op `id` is the pair's receive.
    CommMatch {
        id: u64,
        key: u64,
        parties: u32,
        receives: bool,
    },
    /// Op `id` began on the GPU at `t`; the agent learnt it at `seen`.
    CommBegin { id: u64, t: Ns, seen: Ns },
    /// Op `id` ended on the GPU at `t`; the agent learnt it at `seen`.
    CommEnd { id: u64, t: Ns, seen: Ns },
    /// Op `id` will never be timed (captured into a graph, queued in another context, the timing
    /// pool was full): forget it.
    CommUntimed { id: u64 },
    /// The host recorded `event` on `stream` at `t` (after everything queued there so far).
    EventRecord { t: Ns, event: u64, stream: StreamId },
    /// The host made `stream` wait for `event`'s latest record at `t`. `wait` != 0: the interposer
    /// times this wait (`WaitReached`/`WaitReleased` follow); it does so when the event's latest
    /// record was on a stream that carries communication.
    StreamWait {
        t: Ns,
        stream: StreamId,
        event: u64,
        wait: u64,
    },
    /// The waiting stream reached wait `wait` at GPU time `t`: everything queued on it before had run.
    WaitReached { wait: u64, t: Ns, seen: Ns },
    /// Wait `wait` released its stream at GPU time `t`.
    WaitReleased { wait: u64, t: Ns, seen: Ns },
    /// The host was blocked in a synchronize from `t0` to `t1`.
    Sync { t0: Ns, t1: Ns, on: SyncOn },
    /// Records of the process were lost before `t` (its ring was full): what the GPU did since
    /// the last records is unknown.
    Lost { t: Ns },
    /// The process is exiting (at `t`): whatever bubble is open ends there.
    Exit { t: Ns },
}

impl Obs {
    /// The latest time this observation tells of (the host time, or the GPU time of GPU-side ones).
    pub fn time(&self) -> Ns {
        match *self {
            Obs::Launch { t, .. }
            | Obs::CommIssue { t, .. }
            | Obs::CommBegin { t, .. }
            | Obs::CommEnd { t, .. }
            | Obs::EventRecord { t, .. }
            | Obs::StreamWait { t, .. }
            | Obs::WaitReached { t, .. }
            | Obs::WaitReleased { t, .. }
            | Obs::Lost { t }
            | Obs::Exit { t } => t,
            Obs::Sync { t1, .. } => t1,
            Obs::CommUntimed { .. } | Obs::CommMatch { .. } => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_join_kinds_and_sizes() {
        let send = CommSig {
            comm: 7,
            kind: CommKind::Send,
            peer: 1,
            bytes: 100,
            largest_send: 0,
        };
        let recv = CommSig {
            kind: CommKind::Recv,
            peer: 2,
            ..send
        };
        let g = send.join(recv);
        assert_eq!(
            (g.comm, g.kind, g.peer, g.bytes),
            (7, CommKind::SendRecv, -1, 200)
        );
        let ar = CommSig {
            comm: 8,
            kind: CommKind::AllReduce,
            peer: -1,
            bytes: 4,
            largest_send: 0,
        };
        assert_eq!(ar.join(ar).kind, CommKind::AllReduce);
        assert_eq!(g.join(ar).kind, CommKind::Grouped);
        assert_eq!(g.join(ar).comm, 0);
        assert!(g.has_send() && g.has_recv() && !g.collective());
    }

    #[test]
    fn sizes_are_bucketed_by_powers_of_two() {
        let s = |bytes| CommSig {
            comm: 0,
            kind: CommKind::Send,
            peer: 0,
            bytes,
            largest_send: 0,
        };
        assert_eq!(s(0).size_bucket(), 0);
        assert_eq!(s(1).size_bucket(), 1);
        assert_eq!(s(1000).size_bucket(), s(1023).size_bucket());
        assert_ne!(s(1023).size_bucket(), s(1024).size_bucket());
    }

    #[test]
    fn a_record_names_its_gpu_or_none() {
        assert_eq!(
            gpu_of_record(GpuId::new(0, 0x3b, 0, 0).field()),
            Some(GpuId(0x3b00))
        );
        assert_eq!(gpu_of_record(-1), None);
    }
}
