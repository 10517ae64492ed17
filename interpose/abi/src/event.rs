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
    /// NCCL operation (send, recv, collective). `flags` = ncclDataType_t, `aux` = peer (i32; root
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
    /// Device memory allocation. `p0` = bytes, `p1` = device pointer (0 on failure), `aux` = result.
    MemAlloc = 10,
    /// Device memory free. `p1` = device pointer, `aux` = result.
    MemFree = 11,
    /// Records lost because the ring was full since the last report. `p0` = count.
    Dropped = 12,
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
    // CUDA 13's cuCtxSynchronize (cuGetProcAddress hands it out from 13.0): takes a context.
    CuCtxSynchronizeV2 = 53 => "cuCtxSynchronize_v2",
    // NCCL, exported by libfreeride, forwarding to pncclX.
    NcclSend = 64 => "ncclSend",
    NcclRecv = 65 => "ncclRecv",
    NcclGroupStart = 66 => "ncclGroupStart",
    NcclGroupEnd = 67 => "ncclGroupEnd",
    NcclAllReduce = 68 => "ncclAllReduce",
    NcclReduceScatter = 69 => "ncclReduceScatter",
    NcclAllGather = 70 => "ncclAllGather",
    NcclBroadcast = 71 => "ncclBroadcast",
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

/// `flags` bit of a [`Kind::Launch`]: the kernel was queued from inside a hooked NCCL call.
pub const LAUNCH_FLAG_COMM: u8 = 1;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_roundtrip() {
        let r = Record {
            t_ns: 123,
            kind: Kind::Launch as u8,
            flags: 7,
            api: Api::CuLaunchKernelEx as u16,
            device: -1,
            tid: 99,
            aux: 4096,
            stream: 0xdead,
            p0: 1,
            p1: 2 | 3 << 32,
            p2: 4 | (pack_block(128, 2, 1) as u64) << 32,
        };
        assert_eq!(Record::decode(&r.encode()), r);
        let d = Decoded::from_record(&r).unwrap();
        assert_eq!(
            d.event,
            Event::Launch {
                func: 1,
                grid: [2, 3, 4],
                block: [128, 2, 1],
                shmem: 4096,
                in_comm: true
            }
        );
    }

    #[test]
    fn api_names_unique_and_roundtrip() {
        let mut seen = std::collections::HashSet::new();
        for a in Api::ALL {
            assert!(seen.insert(a.name()));
            assert_eq!(Api::from_name(a.name()), Some(*a));
            assert_eq!(Api::from_u16(*a as u16), Some(*a));
        }
    }

    #[test]
    fn unknown_kind_rejected() {
        let r = Record {
            kind: 200,
            ..Default::default()
        };
        assert!(Decoded::from_record(&r).is_none());
        let r = Record {
            kind: 3,
            api: 9999,
            ..Default::default()
        };
        assert!(Decoded::from_record(&r).is_none());
    }
}
