//! Event kinds, API ids and the fixed-size record.
//!
//! A record is 7 little-endian `u64` words (56 bytes); with its slot's commit word a slot is one
//! 64-byte cache line. Word layout:
//!
//! | word | contents |
//! | --- | --- |
//! | 0 | `t_ns`: CLOCK_MONOTONIC ns (host clock; for comm begin/end the estimated GPU-side time) |
//! | 1 | `kind` (u8) \| `flags` (u8) << 8 \| `api` (u16) << 16 \| `device` (i32) << 32 |
//! | 2 | `tid` (u32) \| `aux` (u32) << 32 |
//! | 3 | `stream` (the `CUstream`/`cudaStream_t` handle value; 0 = legacy default stream) |
//! | 4..=6 | `p0`, `p1`, `p2`: kind-specific, see [`Kind`] |
//!
//! `device` is the physical GPU ([`crate::gpu::GpuId`]: the packed PCI bus id; -1 unknown), the
//! same in every process whatever its ordinals are (ring layout version 2; version 1 carried the
//! process's device ordinal there).
//!
//! An *op key* names one communication op's GPU work, as [`Kind::CommBegin`] and the other
//! timing records do ([`op_key`]): `op` for an op outside a group, `group << 32` for a group's
//! work (timed per stream at `ncclGroupEnd`). 0 is none.

/// What happened. Payload fields per kind (see [`Record`] for the words):
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `aux` = role, `p0` = parent pid, `p1` = ring capacity.
    ProcessStart = 1,
    /// `p0` = records dropped over the process's life (ring full).
    ProcessExit = 2,
    /// Kernel launch. `flags` bit 0 ([`LAUNCH_FLAG_COMM`]): queued by NCCL from inside a hooked
    /// NCCL call (a communication kernel, not the trainer's compute).
    /// `aux` = dynamic shared memory bytes, `p0` = function handle,
    /// `p1` = grid x \| grid y << 32, `p2` = grid z \| packed block << 32
    /// (block x: bits 0..11, y: 11..22, z: 22..32).
    Launch = 3,
    /// Graph launch. `p0` = graph exec handle.
    GraphLaunch = 4,
    /// NCCL operation (send, recv, collective; `device` = its communicator's GPU). `flags` =
    /// ncclDataType_t, `aux` = peer (i32; root
    /// for broadcast, -1 for other collectives), `p0` = bytes, `p1` = communicator handle,
    /// `p2` = op id \| group id << 32 (group 0 = not inside a group).
    CommOp = 5,
    /// `ncclGroupStart` / `ncclGroupEnd` (api tells which). `aux` = nesting depth after the call,
    /// `p2` = group id << 32.
    CommGroup = 6,
    /// GPU-side begin of an op or of a group's work on one stream. `api` = the op's API
    /// (`ncclGroupEnd` for a group), `p0` = host time the op was queued, `p1` = uncertainty (ns,
    /// half the poll interval that saw it), `p2` = op id \| group id << 32.
    CommBegin = 7,
    /// GPU-side end; fields as [`Kind::CommBegin`].
    CommEnd = 8,
    /// A synchronize call. `t_ns` = when it was entered, `p0` = when it returned, `aux` = result
    /// code, `stream` = the stream or event waited on (0 for device/context).
    Sync = 9,
    /// Device memory allocation. `p0` = bytes, `p1` = device pointer (0 on failure), `aux` = result,
    /// `stream` = the stream of a stream-ordered allocation (0 otherwise), `device` = the device the
    /// memory is on (-1: not device memory, or unknown). `api` says what `p1` is (see
    /// [`Decoded::mem_effect`]): a device pointer (`cuMemAlloc_v2`, `cuMemAllocPitch_v2` with
    /// `p0` = pitch x height, `cuMemAllocManaged`, `cuMemAllocAsync(_ptsz)`,
    /// `cuMemAllocFromPoolAsync(_ptsz)`), or a physical allocation handle of the virtual memory
    /// API (`cuMemCreate`; `cuMemRetainAllocationHandle` with `p0` = 0: one more reference to it).
    MemAlloc = 10,
    /// Device memory free. `p1` = device pointer (`cuMemFree_v2`, `cuMemFreeAsync(_ptsz)` with its
    /// `stream`) or physical allocation handle (`cuMemRelease`: one reference fewer), `aux` = result.
    MemFree = 11,
    /// Records lost because the ring was full since the last report. `p0` = count.
    Dropped = 12,
    /// `cuMemMap`: `p0` = bytes, `p1` = virtual address, `p2` = physical allocation handle (the
    /// mapping holds a reference to it), `aux` = result.
    MemMap = 13,
    /// `cuMemUnmap`: `p0` = bytes, `p1` = virtual address (every mapping in the range goes, with
    /// its reference), `aux` = result.
    MemUnmap = 14,
    /// A GPU this process uses, once per device and process, before any other record names it
    /// (the first time the process's thread, a memory record or the comm timing resolves it):
    /// `device` = its [`crate::gpu::GpuId`], `aux` = the device ordinal (i32) as this process
    /// sees it, `p0`, `p1` = its UUID (bytes 0..8 and 8..16, little-endian; all zeros: the
    /// driver gave none), `p2` = 0.
    DeviceInfo = 15,
    /// An event recorded (`cuEventRecord(WithFlags)(_ptsz)`, `cudaEventRecord(WithFlags)(_ptsz)`):
    /// `stream` = the stream it was recorded on, `p0` = the event handle, `p1` = the op key of the
    /// last communication op queued on that stream before this record (0: none seen), `aux` =
    /// the record flags (0 for the calls without), `flags` bit 0 ([`LAUNCH_FLAG_COMM`]): inside a
    /// hooked NCCL call (NCCL's own).
    EventRecord = 16,
    /// A stream made to wait for an event (`cuStreamWaitEvent(_ptsz)`,
    /// `cudaStreamWaitEvent(_ptsz)`): `stream` = the waiting stream, `p0` = the event handle,
    /// `p1` = the op key of the last communication op queued on the stream the event was last
    /// recorded on, before that record (0: none, or the record was not seen), `p2` = the wait id
    /// (low 32 bits; 0: untimed), `aux` = the wait flags, `flags` bit 0: inside a hooked NCCL
    /// call. A wait id != 0 is followed by [`Kind::WaitBegin`] and [`Kind::WaitEnd`], or by
    /// [`Kind::WaitUntimed`].
    /// A *drain mark* is one with no event (`p0` = 0, `p1` = 0) and a wait id: queued by a trainer
    /// just before a host-blocking call (`api` = that synchronize) on the stream it last launched
    /// on; its [`Kind::WaitBegin`] is when that stream had run everything queued before it. It
    /// waits for nothing (its [`Kind::WaitEnd`] follows at once).
    StreamWait = 17,
    /// GPU-side time at which the waiting stream of a timed [`Kind::StreamWait`] reached the wait
    /// (everything queued on it before the wait had run). `stream` = the waiting stream, `api` =
    /// the wait's API, `p0` = host time the wait was queued, `p1` = uncertainty (ns, as
    /// [`Kind::CommBegin`]), `p2` = the wait id.
    WaitBegin = 18,
    /// GPU-side time at which the wait released the waiting stream; fields as [`Kind::WaitBegin`].
    WaitEnd = 19,
    /// A communication op (or a group's work on one stream) that will never be timed: no
    /// [`Kind::CommBegin`]/[`Kind::CommEnd`] follows. `stream` = its stream, `api` = the op's API
    /// (`ncclGroupEnd` for a group), `p2` = op id \| group id << 32 (as the begin would have
    /// had), `aux` = why ([`Untimed`]).
    CommUntimed = 20,
    /// A timed wait whose times will never come (the driver failed to give them): `stream` = the
    /// waiting stream, `p2` = the wait id, `aux` = why ([`Untimed`]).
    WaitUntimed = 21,
    /// A communicator this process joined (`ncclCommInitRank`, `ncclCommInitRankConfig`,
    /// `ncclCommInitAll`: one record per communicator made, `ncclCommSplit`), recorded after the
    /// call succeeded: `device` = its GPU, `p0` = the communicator's identity, the same in every
    /// process that joined it ([`comm_ident_of_id`], [`comm_ident_of_split`],
    /// [`comm_ident_local`]), `p1` = the communicator handle (as [`Kind::CommOp`] names it),
    /// `p2` = its rank count, `aux` = this process's rank in it.
    CommInit = 22,
}

impl Kind {
    pub fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::ProcessStart,
            2 => Kind::ProcessExit,
            3 => Kind::Launch,
            4 => Kind::GraphLaunch,
            5 => Kind::CommOp,
            6 => Kind::CommGroup,
            7 => Kind::CommBegin,
            8 => Kind::CommEnd,
            9 => Kind::Sync,
            10 => Kind::MemAlloc,
            11 => Kind::MemFree,
            12 => Kind::Dropped,
            13 => Kind::MemMap,
            14 => Kind::MemUnmap,
            15 => Kind::DeviceInfo,
            16 => Kind::EventRecord,
            17 => Kind::StreamWait,
            18 => Kind::WaitBegin,
            19 => Kind::WaitEnd,
            20 => Kind::CommUntimed,
            21 => Kind::WaitUntimed,
            22 => Kind::CommInit,
            _ => return None,
        })
    }
    /// The `kind` string of the JSON trace.
    pub fn name(self) -> &'static str {
        match self {
            Kind::ProcessStart => "process_start",
            Kind::ProcessExit => "process_exit",
            Kind::Launch => "launch",
            Kind::GraphLaunch => "graph_launch",
            Kind::CommOp => "comm",
            Kind::CommGroup => "comm_group",
            Kind::CommBegin => "comm_begin",
            Kind::CommEnd => "comm_end",
            Kind::Sync => "sync",
            Kind::MemAlloc => "mem_alloc",
            Kind::MemFree => "mem_free",
            Kind::Dropped => "dropped",
            Kind::MemMap => "mem_map",
            Kind::MemUnmap => "mem_unmap",
            Kind::DeviceInfo => "device_info",
            Kind::EventRecord => "event_record",
            Kind::StreamWait => "stream_wait",
            Kind::WaitBegin => "wait_begin",
            Kind::WaitEnd => "wait_end",
            Kind::CommUntimed => "comm_untimed",
            Kind::WaitUntimed => "wait_untimed",
            Kind::CommInit => "comm_init",
        }
    }
}

macro_rules! apis {
    ($($v:ident = $n:literal => $s:literal,)*) => {
        /// Every function freeride hooks, by the C name of the symbol (the `api` of an event).
        /// Ids are part of the ring layout: never renumber, only append.
        #[repr(u16)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Api { $($v = $n,)* }
        impl Api {
            /// All ids, in id order.
            pub const ALL: &'static [Api] = &[$(Api::$v,)*];
            pub fn from_u16(v: u16) -> Option<Api> {
                match v { $($n => Some(Api::$v),)* _ => None }
            }
            /// The C symbol name.
            pub fn name(self) -> &'static str {
                match self { $(Api::$v => $s,)* }
            }
            pub fn from_name(s: &str) -> Option<Api> {
                match s { $($s => Some(Api::$v),)* _ => None }
            }
        }
    };
}

apis! {
    None = 0 => "none",
    // Runtime (libcudart), exported by libfreeride.
    CudaLaunchKernelStub = 1 => "__cudaLaunchKernel",
    CudaLaunchKernelStubPtsz = 2 => "__cudaLaunchKernel_ptsz",
    CudaLaunchKernel = 3 => "cudaLaunchKernel",
    CudaLaunchKernelPtsz = 4 => "cudaLaunchKernel_ptsz",
    CudaLaunchKernelExC = 5 => "cudaLaunchKernelExC",
    CudaLaunchKernelExCPtsz = 6 => "cudaLaunchKernelExC_ptsz",
    CudaGraphLaunch = 7 => "cudaGraphLaunch",
    CudaGraphLaunchPtsz = 8 => "cudaGraphLaunch_ptsz",
    CudaGetDriverEntryPoint = 9 => "cudaGetDriverEntryPoint",
    CudaGetDriverEntryPointByVersion = 10 => "cudaGetDriverEntryPointByVersion",
    CudaDeviceSynchronize = 11 => "cudaDeviceSynchronize",
    CudaStreamSynchronize = 12 => "cudaStreamSynchronize",
    CudaStreamSynchronizePtsz = 13 => "cudaStreamSynchronize_ptsz",
    CudaEventSynchronize = 14 => "cudaEventSynchronize",
    CudaStreamWaitEvent = 15 => "cudaStreamWaitEvent",
    CudaStreamWaitEventPtsz = 16 => "cudaStreamWaitEvent_ptsz",
    CudaEventRecord = 17 => "cudaEventRecord",
    CudaEventRecordPtsz = 18 => "cudaEventRecord_ptsz",
    CudaEventRecordWithFlags = 19 => "cudaEventRecordWithFlags",
    CudaEventRecordWithFlagsPtsz = 20 => "cudaEventRecordWithFlags_ptsz",
    // Driver (libcuda), handed out by dlsym / cuGetProcAddress.
    CuLaunchKernel = 32 => "cuLaunchKernel",
    CuLaunchKernelPtsz = 33 => "cuLaunchKernel_ptsz",
    CuLaunchKernelEx = 34 => "cuLaunchKernelEx",
    CuLaunchKernelExPtsz = 35 => "cuLaunchKernelEx_ptsz",
    CuLaunchCooperativeKernel = 36 => "cuLaunchCooperativeKernel",
    CuLaunchCooperativeKernelPtsz = 37 => "cuLaunchCooperativeKernel_ptsz",
    CuGraphLaunch = 38 => "cuGraphLaunch",
    CuGraphLaunchPtsz = 39 => "cuGraphLaunch_ptsz",
    CuMemAllocV2 = 40 => "cuMemAlloc_v2",
    CuMemAllocAsync = 41 => "cuMemAllocAsync",
    CuMemAllocAsyncPtsz = 42 => "cuMemAllocAsync_ptsz",
    CuMemFreeV2 = 43 => "cuMemFree_v2",
    CuStreamSynchronize = 44 => "cuStreamSynchronize",
    CuStreamSynchronizePtsz = 45 => "cuStreamSynchronize_ptsz",
    CuCtxSynchronize = 46 => "cuCtxSynchronize",
    CuEventSynchronize = 47 => "cuEventSynchronize",
    CuGetProcAddress = 48 => "cuGetProcAddress",
    CuGetProcAddressV2 = 49 => "cuGetProcAddress_v2",
    CuCtxSetCurrent = 50 => "cuCtxSetCurrent",
    CuCtxPushCurrentV2 = 51 => "cuCtxPushCurrent_v2",
    CuCtxPopCurrentV2 = 52 => "cuCtxPopCurrent_v2",
    CuMemAllocPitchV2 = 53 => "cuMemAllocPitch_v2",
    CuMemAllocManaged = 54 => "cuMemAllocManaged",
    CuMemAllocFromPoolAsync = 55 => "cuMemAllocFromPoolAsync",
    CuMemAllocFromPoolAsyncPtsz = 56 => "cuMemAllocFromPoolAsync_ptsz",
    CuMemFreeAsync = 57 => "cuMemFreeAsync",
    CuMemFreeAsyncPtsz = 58 => "cuMemFreeAsync_ptsz",
    CuMemCreate = 59 => "cuMemCreate",
    CuMemRelease = 60 => "cuMemRelease",
    CuMemMap = 61 => "cuMemMap",
    CuMemUnmap = 62 => "cuMemUnmap",
    CuMemRetainAllocationHandle = 63 => "cuMemRetainAllocationHandle",
    // NCCL, exported by libfreeride, forwarding to pncclX.
    NcclSend = 64 => "ncclSend",
    NcclRecv = 65 => "ncclRecv",
    NcclGroupStart = 66 => "ncclGroupStart",
    NcclGroupEnd = 67 => "ncclGroupEnd",
    NcclAllReduce = 68 => "ncclAllReduce",
    NcclReduceScatter = 69 => "ncclReduceScatter",
    NcclAllGather = 70 => "ncclAllGather",
    NcclBroadcast = 71 => "ncclBroadcast",
    // Driver (continued): memory pools (which device a pool's memory is on).
    CuMemPoolCreate = 72 => "cuMemPoolCreate",
    CuDeviceGetDefaultMemPool = 73 => "cuDeviceGetDefaultMemPool",
    CuDeviceGetMemPool = 74 => "cuDeviceGetMemPool",
    // Driver (continued): what `cuCtxSynchronize` is from CUDA 13.0 (it takes the context).
    CuCtxSynchronizeV2 = 75 => "cuCtxSynchronize_v2",
    // Driver (continued): which stream waits for what.
    CuStreamWaitEvent = 76 => "cuStreamWaitEvent",
    CuStreamWaitEventPtsz = 77 => "cuStreamWaitEvent_ptsz",
    CuEventRecord = 78 => "cuEventRecord",
    CuEventRecordPtsz = 79 => "cuEventRecord_ptsz",
    CuEventRecordWithFlags = 80 => "cuEventRecordWithFlags",
    CuEventRecordWithFlagsPtsz = 81 => "cuEventRecordWithFlags_ptsz",
    // NCCL (continued): communicators, for their identity across processes.
    NcclCommInitRank = 82 => "ncclCommInitRank",
    NcclCommInitRankConfig = 83 => "ncclCommInitRankConfig",
    NcclCommInitAll = 84 => "ncclCommInitAll",
    NcclCommSplit = 85 => "ncclCommSplit",
    // libc
    Dlsym = 96 => "dlsym",
}

/// Role of a process, from `FREERIDE_ROLE`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    Trainer = 0,
    Sidetask = 1,
}

impl Role {
    pub fn parse(s: &str) -> Option<Role> {
        match s.trim().to_ascii_lowercase().as_str() {
            "trainer" | "" => Some(Role::Trainer),
            "sidetask" | "side-task" | "side_task" => Some(Role::Sidetask),
            _ => None,
        }
    }
    pub fn from_u32(v: u32) -> Option<Role> {
        match v {
            0 => Some(Role::Trainer),
            1 => Some(Role::Sidetask),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Role::Trainer => "trainer",
            Role::Sidetask => "sidetask",
        }
    }
}

/// `flags` bit of a [`Kind::Launch`] (and of [`Kind::EventRecord`], [`Kind::StreamWait`]): the
/// kernel (record, wait) was queued from inside a hooked NCCL call.
pub const LAUNCH_FLAG_COMM: u8 = 1;

/// The op key of op `op` in group `group` (see the module docs): the group's when it has one.
pub const fn op_key(op: u32, group: u32) -> u64 {
    if group != 0 {
        (group as u64) << 32
    } else {
        op as u64
    }
}

/// FNV-1a, 64 bits: the one hash of communicator identities (stable across processes and
/// releases: it is part of the record format).
const fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h
}
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// The identity of a communicator made from an `ncclUniqueId` (its 128 bytes, which every rank
/// passes to `ncclCommInitRank(Config)`): [`Kind::CommInit`]'s `p0`.
pub const fn comm_ident_of_id(id: &[u8]) -> u64 {
    fnv1a(FNV_OFFSET, id) | 1
}

/// The identity of the communicator of colour `color` made by the `index`-th `ncclCommSplit` of
/// the communicator `parent` (every rank of the parent calls it, in the same order).
pub const fn comm_ident_of_split(parent: u64, index: u32, color: i32) -> u64 {
    let h = fnv1a(FNV_OFFSET, &parent.to_le_bytes());
    let h = fnv1a(h, &index.to_le_bytes());
    fnv1a(h, &color.to_le_bytes()) | 1
}

/// The identity of the communicators of the `index`-th `ncclCommInitAll` of process `pid` (all
/// its ranks are in that process).
pub const fn comm_ident_local(pid: u32, index: u32) -> u64 {
    let h = fnv1a(FNV_OFFSET ^ 0x5a, &pid.to_le_bytes());
    fnv1a(h, &index.to_le_bytes()) | 1
}

/// Why an op or a wait is not timed (`aux` of [`Kind::CommUntimed`], [`Kind::WaitUntimed`]).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Untimed {
    /// Queued on a stream being captured into a graph (a timing event there would be captured).
    Capturing = 1,
    /// In a context without a timing pool (more contexts than pools, or its pool could not be
    /// made).
    NoPool = 2,
    /// The context's timing pool had no free pair.
    PoolFull = 3,
    /// Timing is off (`FREERIDE_COMM_TIMING=0`) or unavailable (no driver).
    Off = 4,
    /// The driver refused a timing event (record or query).
    DriverError = 5,
    /// A group's work on a stream beyond the streams a group is timed on (8).
    TooManyStreams = 6,
}

impl Untimed {
    pub fn from_u32(v: u32) -> Option<Untimed> {
        Some(match v {
            1 => Untimed::Capturing,
            2 => Untimed::NoPool,
            3 => Untimed::PoolFull,
            4 => Untimed::Off,
            5 => Untimed::DriverError,
            6 => Untimed::TooManyStreams,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Untimed::Capturing => "capturing",
            Untimed::NoPool => "no_pool",
            Untimed::PoolFull => "pool_full",
            Untimed::Off => "off",
            Untimed::DriverError => "driver_error",
            Untimed::TooManyStreams => "too_many_streams",
        }
    }
}

/// Number of `u64` words in a record.
pub const RECORD_WORDS: usize = 7;

/// One event as stored in the ring (plain values; see the module docs for the word layout).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub t_ns: u64,
    pub kind: u8,
    pub flags: u8,
    pub api: u16,
    pub device: i32,
    pub tid: u32,
    pub aux: u32,
    pub stream: u64,
    pub p0: u64,
    pub p1: u64,
    pub p2: u64,
}

impl Record {
    #[inline(always)]
    pub fn encode(&self) -> [u64; RECORD_WORDS] {
        [
            self.t_ns,
            self.kind as u64
                | (self.flags as u64) << 8
                | (self.api as u64) << 16
                | (self.device as u32 as u64) << 32,
            self.tid as u64 | (self.aux as u64) << 32,
            self.stream,
            self.p0,
            self.p1,
            self.p2,
        ]
    }
    #[inline(always)]
    pub fn decode(w: &[u64; RECORD_WORDS]) -> Record {
        Record {
            t_ns: w[0],
            kind: w[1] as u8,
            flags: (w[1] >> 8) as u8,
            api: (w[1] >> 16) as u16,
            device: (w[1] >> 32) as u32 as i32,
            tid: w[2] as u32,
            aux: (w[2] >> 32) as u32,
            stream: w[3],
            p0: w[4],
            p1: w[5],
            p2: w[6],
        }
    }
}

/// Packs block dimensions into 32 bits (x, y: 11 bits; z: 10 bits; larger values saturate).
#[inline(always)]
pub fn pack_block(x: u32, y: u32, z: u32) -> u32 {
    x.min(0x7ff) | y.min(0x7ff) << 11 | z.min(0x3ff) << 22
}

pub fn unpack_block(b: u32) -> [u32; 3] {
    [b & 0x7ff, (b >> 11) & 0x7ff, b >> 22]
}

/// Size in bytes of an `ncclDataType_t` element (0 for unknown types).
pub fn nccl_type_size(dtype: i32) -> u64 {
    match dtype {
        0 | 1 | 10 | 11 => 1,
        6 | 9 => 2,
        2 | 3 | 7 => 4,
        4 | 5 | 8 => 8,
        _ => 0,
    }
}

mod decoded;
pub use decoded::{Decoded, Event, MemEffect};

#[cfg(test)]
mod tests;
