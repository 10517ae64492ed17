//! The ONE table of hooked names ([`HOOKS`]) and every wrapper.
//!
//! * `exported` hooks are `#[no_mangle]` symbols of libfreeride.so (runtime, NCCL, `dlsym`): the
//!   preload interposes them; their real function is found lazily with `RTLD_NEXT`, then through
//!   the already-loaded owning library (`RTLD_NOLOAD`), trying the `pncclX` alias for NCCL.
//! * the other hooks (driver) are plain function pointers handed out by our `dlsym`,
//!   `cuGetProcAddress`, `cuGetProcAddress_v2` and `cudaGetDriverEntryPoint(ByVersion)`; their
//!   real function is the pointer the real look-up returned.
//!
//! A wrapper whose real function is unknown never calls NULL: it returns the library's own
//! "not found" error. `tests` check the table against the wrappers, the exported symbols and the
//! driver's own entry points (names, versions, variants: the stand-in driver has the real ones).
#![allow(non_snake_case)]

use crate::rt::now_ns;
use crate::{comm, dl, rt};
use freeride_abi::{Api, Kind};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Runtime,
    Driver,
    Nccl,
    Libc,
}

/// How `cuGetProcAddress(symbol, ..., cudaVersion, flags)` reaches a hook: the base symbol, the
/// stream flavour (`Some(true)` = per-thread default stream, `None` = has no flavours) and the
/// `cudaVersion` range `[min, max)` for which this ABI is the one returned. Versions at or above
/// [`MAX_KNOWN_CUDA`] are unknown: those look-ups pass through untouched.
#[derive(Clone, Copy, Debug)]
pub struct ProcKey {
    pub symbol: &'static str,
    pub ptsz: Option<bool>,
    pub min_ver: i64,
    pub max_ver: i64,
}

pub const MAX_KNOWN_CUDA: i64 = 14000;

pub struct Hook {
    pub api: Api,
    pub class: Class,
    pub exported: bool,
    wrapper: *const (),
    pub alias: Option<&'static CStr>,
    pub proc_key: Option<ProcKey>,
}

// SAFETY: Hook only holds a function address and static data.
unsafe impl Sync for Hook {}

impl Hook {
    pub fn name(&self) -> &'static str {
        self.api.name()
    }
    pub fn wrapper(&self) -> *const () {
        self.wrapper
    }
}

const fn pk(
    symbol: &'static str,
    ptsz: Option<bool>,
    min_ver: i64,
    max_ver: i64,
) -> Option<ProcKey> {
    Some(ProcKey {
        symbol,
        ptsz,
        min_ver,
        max_ver,
    })
}

macro_rules! hook {
    ($api:ident, $class:ident, $exp:expr, $w:expr) => {
        hook!($api, $class, $exp, $w, None, None)
    };
    ($api:ident, $class:ident, $exp:expr, $w:expr, $alias:expr, $pk:expr) => {
        Hook {
            api: Api::$api,
            class: Class::$class,
            exported: $exp,
            wrapper: $w as *const (),
            alias: $alias,
            proc_key: $pk,
        }
    };
}

const K: i64 = MAX_KNOWN_CUDA;

/// The single source of truth of what libfreeride hooks.
pub static HOOKS: &[Hook] = &[
    // Runtime: exported.
    hook!(
        CudaLaunchKernelStub,
        Runtime,
        true,
        __cudaLaunchKernel as unsafe extern "C" fn(_, _, _, _, _, _) -> _
    ),
    hook!(
        CudaLaunchKernelStubPtsz,
        Runtime,
        true,
        __cudaLaunchKernel_ptsz as unsafe extern "C" fn(_, _, _, _, _, _) -> _
    ),
    hook!(
        CudaLaunchKernel,
        Runtime,
        true,
        cudaLaunchKernel as unsafe extern "C" fn(_, _, _, _, _, _) -> _
    ),
    hook!(
        CudaLaunchKernelPtsz,
        Runtime,
        true,
        cudaLaunchKernel_ptsz as unsafe extern "C" fn(_, _, _, _, _, _) -> _
    ),
    hook!(
        CudaLaunchKernelExC,
        Runtime,
        true,
        cudaLaunchKernelExC as unsafe extern "C" fn(_, _, _) -> _
    ),
    hook!(
        CudaLaunchKernelExCPtsz,
        Runtime,
        true,
        cudaLaunchKernelExC_ptsz as unsafe extern "C" fn(_, _, _) -> _
    ),
    hook!(
        CudaGraphLaunch,
        Runtime,
        true,
        cudaGraphLaunch as unsafe extern "C" fn(_, _) -> _
    ),
    hook!(
        CudaGraphLaunchPtsz,
        Runtime,
        true,
        cudaGraphLaunch_ptsz as unsafe extern "C" fn(_, _) -> _
    ),
    hook!(
        CudaGetDriverEntryPoint,
        Runtime,
        true,
        cudaGetDriverEntryPoint as unsafe extern "C" fn(_, _, _, _) -> _
    ),
    hook!(
        CudaGetDriverEntryPointByVersion,
        Runtime,
        true,
        cudaGetDriverEntryPointByVersion as unsafe extern "C" fn(_, _, _, _, _) -> _
    ),
    hook!(
        CudaDeviceSynchronize,
        Runtime,
        true,
        cudaDeviceSynchronize as unsafe extern "C" fn() -> _
    ),
    hook!(
        CudaStreamSynchronize,
        Runtime,
        true,
        cudaStreamSynchronize as unsafe extern "C" fn(_) -> _
    ),
    hook!(
        CudaStreamSynchronizePtsz,
        Runtime,
        true,
        cudaStreamSynchronize_ptsz as unsafe extern "C" fn(_) -> _
    ),
    hook!(
        CudaEventSynchronize,
        Runtime,
        true,
        cudaEventSynchronize as unsafe extern "C" fn(_) -> _
    ),
    hook!(
        CudaStreamWaitEvent,
        Runtime,
        true,
        cudaStreamWaitEvent as unsafe extern "C" fn(_, _, _) -> _
    ),
    hook!(
        CudaStreamWaitEventPtsz,
        Runtime,
        true,
        cudaStreamWaitEvent_ptsz as unsafe extern "C" fn(_, _, _) -> _
    ),
    hook!(
        CudaEventRecord,
        Runtime,
        true,
        cudaEventRecord as unsafe extern "C" fn(_, _) -> _
    ),
    hook!(
        CudaEventRecordPtsz,
        Runtime,
        true,
        cudaEventRecord_ptsz as unsafe extern "C" fn(_, _) -> _
    ),
    hook!(
        CudaEventRecordWithFlags,
        Runtime,
        true,
        cudaEventRecordWithFlags as unsafe extern "C" fn(_, _, _) -> _
    ),
    hook!(
        CudaEventRecordWithFlagsPtsz,
        Runtime,
        true,
        cudaEventRecordWithFlags_ptsz as unsafe extern "C" fn(_, _, _) -> _
    ),
    // Driver: handed out by look-ups.
    hook!(
        CuLaunchKernel,
        Driver,
        false,
        w_cuLaunchKernel as DrvLaunch,
        None,
        pk("cuLaunchKernel", Some(false), 4000, K)
    ),
    hook!(
        CuLaunchKernelPtsz,
        Driver,
        false,
        w_cuLaunchKernel_ptsz as DrvLaunch,
        None,
        pk("cuLaunchKernel", Some(true), 7000, K)
    ),
    hook!(
        CuLaunchKernelEx,
        Driver,
        false,
        w_cuLaunchKernelEx as DrvLaunchEx,
        None,
        pk("cuLaunchKernelEx", Some(false), 11060, K)
    ),
    hook!(
        CuLaunchKernelExPtsz,
        Driver,
        false,
        w_cuLaunchKernelEx_ptsz as DrvLaunchEx,
        None,
        pk("cuLaunchKernelEx", Some(true), 11060, K)
    ),
    hook!(
        CuLaunchCooperativeKernel,
        Driver,
        false,
        w_cuLaunchCooperativeKernel as DrvCoop,
        None,
        pk("cuLaunchCooperativeKernel", Some(false), 9000, K)
    ),
    hook!(
        CuLaunchCooperativeKernelPtsz,
        Driver,
        false,
        w_cuLaunchCooperativeKernel_ptsz as DrvCoop,
        None,
        pk("cuLaunchCooperativeKernel", Some(true), 9000, K)
    ),
    hook!(
        CuGraphLaunch,
        Driver,
        false,
        w_cuGraphLaunch as DrvGraph,
        None,
        pk("cuGraphLaunch", Some(false), 10000, K)
    ),
    hook!(
        CuGraphLaunchPtsz,
        Driver,
        false,
        w_cuGraphLaunch_ptsz as DrvGraph,
        None,
        pk("cuGraphLaunch", Some(true), 10000, K)
    ),
    hook!(
        CuMemAllocV2,
        Driver,
        false,
        w_cuMemAlloc_v2 as DrvAlloc,
        None,
        pk("cuMemAlloc", None, 3020, K)
    ),
    hook!(
        CuMemAllocAsync,
        Driver,
        false,
        w_cuMemAllocAsync as DrvAllocAsync,
        None,
        pk("cuMemAllocAsync", Some(false), 11020, K)
    ),
    hook!(
        CuMemAllocAsyncPtsz,
        Driver,
        false,
        w_cuMemAllocAsync_ptsz as DrvAllocAsync,
        None,
        pk("cuMemAllocAsync", Some(true), 11020, K)
    ),
    hook!(
        CuMemFreeV2,
        Driver,
        false,
        w_cuMemFree_v2 as DrvFree,
        None,
        pk("cuMemFree", None, 3020, K)
    ),
    hook!(
        CuMemAllocPitchV2,
        Driver,
        false,
        w_cuMemAllocPitch_v2 as DrvAllocPitch,
        None,
        pk("cuMemAllocPitch", None, 3020, K)
    ),
    hook!(
        CuMemAllocManaged,
        Driver,
        false,
        w_cuMemAllocManaged as DrvAllocManaged,
        None,
        pk("cuMemAllocManaged", None, 6000, K)
    ),
    hook!(
        CuMemAllocFromPoolAsync,
        Driver,
        false,
        w_cuMemAllocFromPoolAsync as DrvAllocPool,
        None,
        pk("cuMemAllocFromPoolAsync", Some(false), 11020, K)
    ),
    hook!(
        CuMemAllocFromPoolAsyncPtsz,
        Driver,
        false,
        w_cuMemAllocFromPoolAsync_ptsz as DrvAllocPool,
        None,
        pk("cuMemAllocFromPoolAsync", Some(true), 11020, K)
    ),
    hook!(
        CuMemFreeAsync,
        Driver,
        false,
        w_cuMemFreeAsync as DrvFreeAsync,
        None,
        pk("cuMemFreeAsync", Some(false), 11020, K)
    ),
    hook!(
        CuMemFreeAsyncPtsz,
        Driver,
        false,
        w_cuMemFreeAsync_ptsz as DrvFreeAsync,
        None,
        pk("cuMemFreeAsync", Some(true), 11020, K)
    ),
    hook!(
        CuMemPoolCreate,
        Driver,
        false,
        w_cuMemPoolCreate as DrvPoolCreate,
        None,
        pk("cuMemPoolCreate", None, 11020, K)
    ),
    hook!(
        CuDeviceGetDefaultMemPool,
        Driver,
        false,
        w_cuDeviceGetDefaultMemPool as DrvDevicePool,
        None,
        pk("cuDeviceGetDefaultMemPool", None, 11020, K)
    ),
    hook!(
        CuDeviceGetMemPool,
        Driver,
        false,
        w_cuDeviceGetMemPool as DrvDevicePool,
        None,
        pk("cuDeviceGetMemPool", None, 11020, K)
    ),
    hook!(
        CuMemCreate,
        Driver,
        false,
        w_cuMemCreate as DrvMemCreate,
        None,
        pk("cuMemCreate", None, 10020, K)
    ),
    hook!(
        CuMemRelease,
        Driver,
        false,
        w_cuMemRelease as DrvMemRelease,
        None,
        pk("cuMemRelease", None, 10020, K)
    ),
    hook!(
        CuMemRetainAllocationHandle,
        Driver,
        false,
        w_cuMemRetainAllocationHandle as DrvMemRetain,
        None,
        pk("cuMemRetainAllocationHandle", None, 11000, K)
    ),
    hook!(
        CuMemMap,
        Driver,
        false,
        w_cuMemMap as DrvMemMap,
        None,
        pk("cuMemMap", None, 10020, K)
    ),
    hook!(
        CuMemUnmap,
        Driver,
        false,
        w_cuMemUnmap as DrvMemUnmap,
        None,
        pk("cuMemUnmap", None, 10020, K)
    ),
    hook!(
        CuStreamSynchronize,
        Driver,
        false,
        w_cuStreamSynchronize as DrvSync1,
        None,
        pk("cuStreamSynchronize", Some(false), 2000, K)
    ),
    hook!(
        CuStreamSynchronizePtsz,
        Driver,
        false,
        w_cuStreamSynchronize_ptsz as DrvSync1,
        None,
        pk("cuStreamSynchronize", Some(true), 7000, K)
    ),
    hook!(
        CuCtxSynchronize,
        Driver,
        false,
        w_cuCtxSynchronize as DrvSync0,
        None,
        pk("cuCtxSynchronize", None, 2000, 13000)
    ),
    hook!(
        CuCtxSynchronizeV2,
        Driver,
        false,
        w_cuCtxSynchronize_v2 as DrvSync1,
        None,
        pk("cuCtxSynchronize", None, 13000, K)
    ),
    hook!(
        CuEventSynchronize,
        Driver,
        false,
        w_cuEventSynchronize as DrvSync1,
        None,
        pk("cuEventSynchronize", None, 2000, K)
    ),
    hook!(
        CuStreamWaitEvent,
        Driver,
        false,
        w_cuStreamWaitEvent as DrvWait,
        None,
        pk("cuStreamWaitEvent", Some(false), 3020, K)
    ),
    hook!(
        CuStreamWaitEventPtsz,
        Driver,
        false,
        w_cuStreamWaitEvent_ptsz as DrvWait,
        None,
        pk("cuStreamWaitEvent", Some(true), 7000, K)
    ),
    hook!(
        CuEventRecord,
        Driver,
        false,
        w_cuEventRecord as DrvRecord,
        None,
        pk("cuEventRecord", Some(false), 2000, K)
    ),
    hook!(
        CuEventRecordPtsz,
        Driver,
        false,
        w_cuEventRecord_ptsz as DrvRecord,
        None,
        pk("cuEventRecord", Some(true), 7000, K)
    ),
    hook!(
        CuEventRecordWithFlags,
        Driver,
        false,
        w_cuEventRecordWithFlags as DrvRecordFlags,
        None,
        pk("cuEventRecordWithFlags", Some(false), 11010, K)
    ),
    hook!(
        CuEventRecordWithFlagsPtsz,
        Driver,
        false,
        w_cuEventRecordWithFlags_ptsz as DrvRecordFlags,
        None,
        pk("cuEventRecordWithFlags", Some(true), 11010, K)
    ),
    hook!(
        CuGetProcAddress,
        Driver,
        false,
        w_cuGetProcAddress as GetProcV1,
        None,
        pk("cuGetProcAddress", None, 11030, 12000)
    ),
    hook!(
        CuGetProcAddressV2,
        Driver,
        false,
        w_cuGetProcAddress_v2 as GetProcV2,
        None,
        pk("cuGetProcAddress", None, 12000, K)
    ),
    hook!(
        CuCtxSetCurrent,
        Driver,
        false,
        w_cuCtxSetCurrent as DrvCtx,
        None,
        pk("cuCtxSetCurrent", None, 4000, K)
    ),
    hook!(
        CuCtxPushCurrentV2,
        Driver,
        false,
        w_cuCtxPushCurrent_v2 as DrvCtx,
        None,
        pk("cuCtxPushCurrent", None, 4000, K)
    ),
    hook!(
        CuCtxPopCurrentV2,
        Driver,
        false,
        w_cuCtxPopCurrent_v2 as DrvCtxPop,
        None,
        pk("cuCtxPopCurrent", None, 4000, K)
    ),
    // NCCL: exported, forwarding to pncclX.
    hook!(
        NcclSend,
        Nccl,
        true,
        ncclSend as NcclP2p,
        Some(c"pncclSend"),
        None
    ),
    hook!(
        NcclRecv,
        Nccl,
        true,
        ncclRecv as NcclP2pRecv,
        Some(c"pncclRecv"),
        None
    ),
    hook!(
        NcclGroupStart,
        Nccl,
        true,
        ncclGroupStart as NcclGroup,
        Some(c"pncclGroupStart"),
        None
    ),
    hook!(
        NcclGroupEnd,
        Nccl,
        true,
        ncclGroupEnd as NcclGroup,
        Some(c"pncclGroupEnd"),
        None
    ),
    hook!(
        NcclAllReduce,
        Nccl,
        true,
        ncclAllReduce as NcclReduce,
        Some(c"pncclAllReduce"),
        None
    ),
    hook!(
        NcclReduceScatter,
        Nccl,
        true,
        ncclReduceScatter as NcclReduce,
        Some(c"pncclReduceScatter"),
        None
    ),
    hook!(
        NcclAllGather,
        Nccl,
        true,
        ncclAllGather as NcclGather,
        Some(c"pncclAllGather"),
        None
    ),
    hook!(
        NcclBroadcast,
        Nccl,
        true,
        ncclBroadcast as NcclReduce,
        Some(c"pncclBroadcast"),
        None
    ),
    hook!(
        NcclCommInitRank,
        Nccl,
        true,
        ncclCommInitRank as NcclInitRank,
        Some(c"pncclCommInitRank"),
        None
    ),
    hook!(
        NcclCommInitRankConfig,
        Nccl,
        true,
        ncclCommInitRankConfig as NcclInitRankConfig,
        Some(c"pncclCommInitRankConfig"),
        None
    ),
    hook!(
        NcclCommInitAll,
        Nccl,
        true,
        ncclCommInitAll as NcclInitAll,
        Some(c"pncclCommInitAll"),
        None
    ),
    hook!(
        NcclCommSplit,
        Nccl,
        true,
        ncclCommSplit as NcclSplit,
        Some(c"pncclCommSplit"),
        None
    ),
    // libc
    hook!(
        Dlsym,
        Libc,
        true,
        dl::dlsym as unsafe extern "C" fn(_, _) -> _
    ),
];

const CUDART_SYMBOL_NOT_FOUND: c_int = 500;
const CUDA_ERROR_NOT_FOUND: c_int = 500;
const NCCL_SYSTEM_ERROR: c_int = 2;

mod context;
mod events;
mod launch;
mod lookup;
mod memory;
mod nccl;
mod nccl_comms;
mod pool;
mod resolve;
mod sync;
mod types;
mod vmm;

use context::*;
pub use events::*;
pub use launch::*;
use lookup::*;
use memory::*;
pub use nccl::*;
pub use nccl_comms::*;
use pool::*;
pub use resolve::*;
pub use sync::*;
pub use types::*;
use vmm::*;

#[cfg(test)]
mod tests;
