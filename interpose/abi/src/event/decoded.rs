//! A record read back: its header fields checked, its payload decoded by kind ([`Decoded`],
//! [`Event`]), and what a memory record does to the memory its process holds ([`MemEffect`]).
use super::*;

/// A validated, decoded event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    ProcessStart {
        role: Option<Role>,
        ppid: u32,
        capacity: u64,
    },
    ProcessExit {
        dropped: u64,
    },
    Launch {
        func: u64,
        grid: [u32; 3],
        block: [u32; 3],
        shmem: u32,
        /// Queued by NCCL inside a hooked NCCL call ([`LAUNCH_FLAG_COMM`]).
        in_comm: bool,
    },
    GraphLaunch {
        graph: u64,
    },
    CommOp {
        dtype: u8,
        peer: i32,
        bytes: u64,
        comm: u64,
        op: u32,
        group: u32,
    },
    CommGroup {
        depth: u32,
        group: u32,
    },
    CommBegin {
        queued_ns: u64,
        uncertainty_ns: u64,
        op: u32,
        group: u32,
    },
    CommEnd {
        queued_ns: u64,
        uncertainty_ns: u64,
        op: u32,
        group: u32,
    },
    Sync {
        end_ns: u64,
        result: u32,
    },
    MemAlloc {
        bytes: u64,
        ptr: u64,
        result: u32,
    },
    MemFree {
        ptr: u64,
        result: u32,
    },
    Dropped {
        count: u64,
    },
    MemMap {
        bytes: u64,
        va: u64,
        handle: u64,
        result: u32,
    },
    MemUnmap {
        bytes: u64,
        va: u64,
        result: u32,
    },
    DeviceInfo {
        /// The device ordinal as the process sees it.
        ordinal: i32,
        /// All zeros: unknown.
        uuid: [u8; 16],
    },
    EventRecord {
        event: u64,
        /// The last comm op queued on the stream before the record (0: none).
        op_key: u64,
        flags: u32,
        in_comm: bool,
    },
    StreamWait {
        event: u64,
        /// The last comm op queued, before the event's latest record, on its stream (0: none).
        op_key: u64,
        /// 0: untimed.
        wait: u32,
        flags: u32,
        in_comm: bool,
    },
    WaitBegin {
        queued_ns: u64,
        uncertainty_ns: u64,
        wait: u32,
    },
    WaitEnd {
        queued_ns: u64,
        uncertainty_ns: u64,
        wait: u32,
    },
    CommUntimed {
        op: u32,
        group: u32,
        /// [`Untimed`] (a value unknown to this reader: `None`).
        why: Option<Untimed>,
    },
    WaitUntimed {
        wait: u32,
        why: Option<Untimed>,
    },
    CommInit {
        /// The communicator's identity, the same in every process that joined it.
        ident: u64,
        /// Its handle in this process.
        comm: u64,
        nranks: u32,
        rank: u32,
    },
}

/// What a successful memory event does to the device memory its process holds: the one reading
/// of the memory records that every consumer shares (the agent's accounting, the gate's budget
/// follows the same rules in its own tables).
///
/// Device memory is held from an allocation of a device pointer until its free; a physical
/// allocation of the virtual memory API (`cuMemCreate`) is held while anything refers to it: its
/// handle (until `cuMemRelease`; `cuMemRetainAllocationHandle` adds one more) and every mapping
/// of it (`cuMemMap` until `cuMemUnmap`), as the driver keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemEffect {
    /// `bytes` at device pointer `ptr` are held.
    Alloc { ptr: u64, bytes: u64 },
    /// The allocation at `ptr` is freed.
    Free { ptr: u64 },
    /// A physical allocation of `bytes` with one reference (its handle).
    Create { handle: u64, bytes: u64 },
    /// One more reference to physical allocation `handle`.
    Retain { handle: u64 },
    /// One reference fewer (the handle released).
    Release { handle: u64 },
    /// A mapping of `handle` at `va` (one more reference).
    Map { va: u64, bytes: u64, handle: u64 },
    /// Every mapping in `[va, va + bytes)` goes (one reference fewer each).
    Unmap { va: u64, bytes: u64 },
}

/// A record with its header fields checked and its payload decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    pub t_ns: u64,
    pub kind: Kind,
    pub api: Api,
    pub device: i32,
    pub tid: u32,
    pub stream: u64,
    pub event: Event,
}

impl Decoded {
    /// Validates `r`: `None` if its kind or api is unknown (corrupt or from a newer layout).
    pub fn from_record(r: &Record) -> Option<Decoded> {
        let kind = Kind::from_u8(r.kind)?;
        let api = Api::from_u16(r.api)?;
        let lo = |v: u64| v as u32;
        let hi = |v: u64| (v >> 32) as u32;
        let event = match kind {
            Kind::ProcessStart => Event::ProcessStart {
                role: Role::from_u32(r.aux),
                ppid: r.p0 as u32,
                capacity: r.p1,
            },
            Kind::ProcessExit => Event::ProcessExit { dropped: r.p0 },
            Kind::Launch => Event::Launch {
                func: r.p0,
                grid: [lo(r.p1), hi(r.p1), lo(r.p2)],
                block: unpack_block(hi(r.p2)),
                shmem: r.aux,
                in_comm: r.flags & LAUNCH_FLAG_COMM != 0,
            },
            Kind::GraphLaunch => Event::GraphLaunch { graph: r.p0 },
            Kind::CommOp => Event::CommOp {
                dtype: r.flags,
                peer: r.aux as i32,
                bytes: r.p0,
                comm: r.p1,
                op: lo(r.p2),
                group: hi(r.p2),
            },
            Kind::CommGroup => Event::CommGroup {
                depth: r.aux,
                group: hi(r.p2),
            },
            Kind::CommBegin => Event::CommBegin {
                queued_ns: r.p0,
                uncertainty_ns: r.p1,
                op: lo(r.p2),
                group: hi(r.p2),
            },
            Kind::CommEnd => Event::CommEnd {
                queued_ns: r.p0,
                uncertainty_ns: r.p1,
                op: lo(r.p2),
                group: hi(r.p2),
            },
            Kind::Sync => Event::Sync {
                end_ns: r.p0,
                result: r.aux,
            },
            Kind::MemAlloc => Event::MemAlloc {
                bytes: r.p0,
                ptr: r.p1,
                result: r.aux,
            },
            Kind::MemFree => Event::MemFree {
                ptr: r.p1,
                result: r.aux,
            },
            Kind::Dropped => Event::Dropped { count: r.p0 },
            Kind::MemMap => Event::MemMap {
                bytes: r.p0,
                va: r.p1,
                handle: r.p2,
                result: r.aux,
            },
            Kind::MemUnmap => Event::MemUnmap {
                bytes: r.p0,
                va: r.p1,
                result: r.aux,
            },
            Kind::DeviceInfo => {
                let mut uuid = [0u8; 16];
                uuid[..8].copy_from_slice(&r.p0.to_le_bytes());
                uuid[8..].copy_from_slice(&r.p1.to_le_bytes());
                Event::DeviceInfo {
                    ordinal: r.aux as i32,
                    uuid,
                }
            }
            Kind::EventRecord => Event::EventRecord {
                event: r.p0,
                op_key: r.p1,
                flags: r.aux,
                in_comm: r.flags & LAUNCH_FLAG_COMM != 0,
            },
            Kind::StreamWait => Event::StreamWait {
                event: r.p0,
                op_key: r.p1,
                wait: lo(r.p2),
                flags: r.aux,
                in_comm: r.flags & LAUNCH_FLAG_COMM != 0,
            },
            Kind::WaitBegin => Event::WaitBegin {
                queued_ns: r.p0,
                uncertainty_ns: r.p1,
                wait: lo(r.p2),
            },
            Kind::WaitEnd => Event::WaitEnd {
                queued_ns: r.p0,
                uncertainty_ns: r.p1,
                wait: lo(r.p2),
            },
            Kind::CommUntimed => Event::CommUntimed {
                op: lo(r.p2),
                group: hi(r.p2),
                why: Untimed::from_u32(r.aux),
            },
            Kind::WaitUntimed => Event::WaitUntimed {
                wait: lo(r.p2),
                why: Untimed::from_u32(r.aux),
            },
            Kind::CommInit => Event::CommInit {
                ident: r.p0,
                comm: r.p1,
                nranks: r.p2.min(u32::MAX as u64) as u32,
                rank: r.aux,
            },
        };
        Some(Decoded {
            t_ns: r.t_ns,
            kind,
            api,
            device: r.device,
            tid: r.tid,
            stream: r.stream,
            event,
        })
    }
}

impl Decoded {
    /// The physical GPU this record names ([`crate::gpu::GpuId::UNKNOWN`]: none).
    pub fn gpu(&self) -> crate::gpu::GpuId {
        crate::gpu::GpuId::from_field(self.device)
    }

    /// What this event does to the memory its process holds (`None`: nothing, or it failed).
    pub fn mem_effect(&self) -> Option<MemEffect> {
        Some(match self.event {
            Event::MemAlloc {
                bytes,
                ptr,
                result: 0,
            } if ptr != 0 => match self.api {
                Api::CuMemCreate => MemEffect::Create { handle: ptr, bytes },
                Api::CuMemRetainAllocationHandle => MemEffect::Retain { handle: ptr },
                _ => MemEffect::Alloc { ptr, bytes },
            },
            Event::MemFree { ptr, result: 0 } if ptr != 0 => match self.api {
                Api::CuMemRelease => MemEffect::Release { handle: ptr },
                _ => MemEffect::Free { ptr },
            },
            Event::MemMap {
                bytes,
                va,
                handle,
                result: 0,
            } => MemEffect::Map { va, bytes, handle },
            Event::MemUnmap {
                bytes,
                va,
                result: 0,
            } => MemEffect::Unmap { va, bytes },
            _ => return None,
        })
    }
}
