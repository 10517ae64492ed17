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
    // libc
    hook!(
        Dlsym,
        Libc,
        true,
        dl::dlsym as unsafe extern "C" fn(_, _) -> _
    ),
];

static REALS: [AtomicUsize; 128] = [const { AtomicUsize::new(0) }; 128];

/// The hook of a C name (`dlsym`'s routing: keep cheap, no allocation).
pub fn find(name: &CStr) -> Option<&'static Hook> {
    let b = name.to_bytes();
    match b.first() {
        Some(b'c' | b'_' | b'n' | b'd') => {}
        _ => return None,
    }
    HOOKS.iter().find(|h| h.name().as_bytes() == b)
}

pub fn by_api(api: Api) -> Option<&'static Hook> {
    HOOKS.iter().find(|h| h.api == api)
}

pub fn is_wrapper(p: *mut c_void) -> bool {
    HOOKS
        .iter()
        .any(|h| std::ptr::eq(h.wrapper, p as *const ()))
}

/// Records `r` as the real function of `h` (first one wins). True if `h`'s real function is `r`.
pub fn set_real(h: &Hook, r: usize) -> bool {
    let slot = &REALS[h.api as usize];
    match slot.compare_exchange(0, r, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            dl::pin_owner(r as *const c_void);
            true
        }
        Err(cur) => cur == r,
    }
}

/// The real function of `h` (0 if unknown); resolves exported hooks lazily.
pub fn real(h: &Hook) -> usize {
    if h.class == Class::Libc {
        return dl::real_dlsym().map(|f| f as usize).unwrap_or(0);
    }
    let v = REALS[h.api as usize].load(Ordering::Acquire);
    if v != 0 || !h.exported {
        return v;
    }
    resolve_exported(h)
}

#[cold]
#[inline(never)]
fn resolve_exported(h: &Hook) -> usize {
    let mut name = [0u8; 64];
    let n = h.name().as_bytes();
    if n.len() >= name.len() {
        return 0;
    }
    name[..n.len()].copy_from_slice(n);
    let Ok(cname) = CStr::from_bytes_until_nul(&name) else {
        return 0;
    };
    let own = h.wrapper as usize;
    let ok = |p: *mut c_void| !p.is_null() && p as usize != own;
    let libs: &[&CStr] = match h.class {
        Class::Runtime => &[c"libcudart.so.13", c"libcudart.so.12", c"libcudart.so"],
        Class::Nccl => &[c"libnccl.so.2", c"libnccl.so"],
        _ => &[],
    };
    let mut found = dl::sym(dl::RTLD_NEXT, cname);
    if !ok(found) {
        if let Some(a) = h.alias {
            found = dl::sym(dl::RTLD_NEXT, a);
        }
    }
    if !ok(found) {
        'outer: for lib in libs {
            for nm in h.alias.into_iter().chain(std::iter::once(cname)) {
                found = dl::sym_in_loaded(lib, nm);
                if ok(found) {
                    break 'outer;
                }
            }
        }
    }
    if !ok(found) {
        return 0;
    }
    set_real(h, found as usize);
    REALS[h.api as usize].load(Ordering::Acquire)
}

/// Typed real function of `api`.
#[inline(always)]
fn real_fn<F: Copy>(api: Api) -> Option<F> {
    let mut v = REALS[api as usize].load(Ordering::Relaxed);
    if v == 0 {
        v = by_api(api).map(real).unwrap_or(0);
        if v == 0 {
            return None;
        }
    }
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<usize>());
    // SAFETY: F is the fn-pointer type of `api`'s C signature; v is that function's address.
    Some(unsafe { std::mem::transmute_copy::<usize, F>(&v) })
}

/// Maps a pointer returned by a `cuGetProcAddress`-style look-up to our wrapper when it is one
/// of the functions we hook under this (symbol, version, flags).
fn map_proc(symbol: *const c_char, pfn: *mut *mut c_void, ver: i64, flags: u64) {
    if symbol.is_null() || pfn.is_null() {
        return;
    }
    // SAFETY: pfn was just written by the real look-up, which returned success.
    let p = unsafe { *pfn };
    if p.is_null() {
        return;
    }
    // SAFETY: the look-up's contract: symbol is a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    let ptsz = flags & 2 != 0;
    for h in HOOKS {
        let Some(k) = h.proc_key else { continue };
        if k.symbol.as_bytes() == s
            && ver >= k.min_ver
            && ver < k.max_ver
            && k.ptsz.is_none_or(|x| x == ptsz)
        {
            // SAFETY: pfn is a valid out-pointer (see above).
            unsafe { *pfn = dl::offer(h, p) };
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Types.

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Dim3 {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

#[repr(C)]
pub struct CudaLaunchConfig {
    pub grid: Dim3,
    pub block: Dim3,
    pub shmem: usize,
    pub stream: *mut c_void,
    pub attrs: *mut c_void,
    pub num_attrs: u32,
}

#[repr(C)]
pub struct CuLaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shmem: u32,
    pub stream: *mut c_void,
    pub attrs: *mut c_void,
    pub num_attrs: u32,
}

/// The head both `CUmemAllocationProp` (`cuMemCreate`) and `CUmemPoolProps` (`cuMemPoolCreate`)
/// begin with: the allocation type, the handle types, then the `CUmemLocation` (type, id) of
/// the memory. Only this head is read.
#[repr(C)]
pub struct MemLocated {
    pub alloc_type: i32,
    pub handle_types: i32,
    pub location_type: i32,
    pub location_id: i32,
}

/// `CU_MEM_LOCATION_TYPE_DEVICE`.
pub const MEM_LOCATION_TYPE_DEVICE: i32 = 1;

impl MemLocated {
    /// The device the memory is on (-1: host memory, or `p` is NULL).
    ///
    /// # Safety
    /// `p` is NULL or points to a props struct the caller handed to the driver.
    pub unsafe fn device_of(p: *const MemLocated) -> i32 {
        if p.is_null() {
            return -1;
        }
        // SAFETY: the caller's contract; the driver reads the same struct.
        let m = unsafe { &*p };
        if m.location_type == MEM_LOCATION_TYPE_DEVICE {
            m.location_id
        } else {
            -1
        }
    }
}

type P = *mut c_void;
type PP = *mut *mut c_void;
type RtLaunch = unsafe extern "C" fn(*const c_void, Dim3, Dim3, PP, usize, P) -> c_int;
type RtLaunchEx = unsafe extern "C" fn(*const CudaLaunchConfig, *const c_void, PP) -> c_int;
type RtGraph = unsafe extern "C" fn(P, P) -> c_int;
type RtSync0 = unsafe extern "C" fn() -> c_int;
type RtSync1 = unsafe extern "C" fn(P) -> c_int;
type RtEntry = unsafe extern "C" fn(*const c_char, PP, u64, *mut c_int) -> c_int;
type RtEntryV = unsafe extern "C" fn(*const c_char, PP, u32, u64, *mut c_int) -> c_int;
type DrvLaunch = unsafe extern "C" fn(P, u32, u32, u32, u32, u32, u32, u32, P, PP, PP) -> c_int;
type DrvLaunchEx = unsafe extern "C" fn(*const CuLaunchConfig, P, PP, PP) -> c_int;
type DrvCoop = unsafe extern "C" fn(P, u32, u32, u32, u32, u32, u32, u32, P, PP) -> c_int;
type DrvGraph = unsafe extern "C" fn(P, P) -> c_int;
type DrvAlloc = unsafe extern "C" fn(*mut u64, usize) -> c_int;
type DrvAllocAsync = unsafe extern "C" fn(*mut u64, usize, P) -> c_int;
type DrvFree = unsafe extern "C" fn(u64) -> c_int;
type DrvAllocPitch = unsafe extern "C" fn(*mut u64, *mut usize, usize, usize, u32) -> c_int;
type DrvAllocManaged = unsafe extern "C" fn(*mut u64, usize, u32) -> c_int;
type DrvAllocPool = unsafe extern "C" fn(*mut u64, usize, P, P) -> c_int;
type DrvFreeAsync = unsafe extern "C" fn(u64, P) -> c_int;
type DrvPoolCreate = unsafe extern "C" fn(PP, *const MemLocated) -> c_int;
type DrvDevicePool = unsafe extern "C" fn(PP, c_int) -> c_int;
type DrvMemCreate = unsafe extern "C" fn(*mut u64, usize, *const MemLocated, u64) -> c_int;
type DrvMemRelease = unsafe extern "C" fn(u64) -> c_int;
type DrvMemRetain = unsafe extern "C" fn(*mut u64, P) -> c_int;
type DrvMemMap = unsafe extern "C" fn(u64, usize, usize, u64, u64) -> c_int;
type DrvMemUnmap = unsafe extern "C" fn(u64, usize) -> c_int;
type DrvSync0 = unsafe extern "C" fn() -> c_int;
type DrvSync1 = unsafe extern "C" fn(P) -> c_int;
type DrvCtx = unsafe extern "C" fn(P) -> c_int;
type DrvRecord = unsafe extern "C" fn(P, P) -> c_int;
type DrvRecordFlags = unsafe extern "C" fn(P, P, u32) -> c_int;
type DrvWait = unsafe extern "C" fn(P, P, u32) -> c_int;
type DrvCtxPop = unsafe extern "C" fn(PP) -> c_int;
type GetProcV1 = unsafe extern "C" fn(*const c_char, PP, c_int, u64) -> c_int;
type GetProcV2 = unsafe extern "C" fn(*const c_char, PP, c_int, u64, *mut c_int) -> c_int;
type NcclP2p = unsafe extern "C" fn(*const c_void, usize, c_int, c_int, P, P) -> c_int;
type NcclP2pRecv = unsafe extern "C" fn(P, usize, c_int, c_int, P, P) -> c_int;
type NcclGroup = unsafe extern "C" fn() -> c_int;
type NcclReduce = unsafe extern "C" fn(*const c_void, P, usize, c_int, c_int, P, P) -> c_int;
type NcclGather = unsafe extern "C" fn(*const c_void, P, usize, c_int, P, P) -> c_int;

const CUDART_SYMBOL_NOT_FOUND: c_int = 500;
const CUDA_ERROR_NOT_FOUND: c_int = 500;
const NCCL_SYSTEM_ERROR: c_int = 2;

mod context;
mod events;
mod launch;
mod lookup;
mod memory;
mod nccl;
mod pool;
mod sync;
mod vmm;

use context::*;
pub use events::*;
pub use launch::*;
use lookup::*;
use memory::*;
pub use nccl::*;
use pool::*;
pub use sync::*;
use vmm::*;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn table_is_consistent() {
        let mut names = HashSet::new();
        let mut wrappers = HashSet::new();
        for h in HOOKS {
            assert!(names.insert(h.name()), "duplicate {}", h.name());
            assert!(
                wrappers.insert(h.wrapper as usize),
                "shared wrapper {}",
                h.name()
            );
            assert!(!h.wrapper.is_null());
            let n = std::ffi::CString::new(h.name()).unwrap();
            assert!(std::ptr::eq(find(&n).unwrap(), h));
            assert_eq!(h.exported, h.class != Class::Driver, "{}", h.name());
            assert_eq!(
                h.proc_key.is_some(),
                h.class == Class::Driver,
                "{}",
                h.name()
            );
            assert_eq!(h.alias.is_some(), h.class == Class::Nccl, "{}", h.name());
            if let Some(k) = h.proc_key {
                // The ABI name is the base name, its _ptsz flavour or a _vN version of it.
                assert!(h.name().starts_with(k.symbol), "{}", h.name());
                assert!(k.max_ver <= MAX_KNOWN_CUDA);
            }
        }
        // Every API id (but the placeholder) is hooked exactly once.
        for a in Api::ALL {
            if *a != Api::None {
                assert!(by_api(*a).is_some(), "{a:?} not in HOOKS");
            }
        }
        assert!(find(c"malloc").is_none());
        assert!(find(c"cuInit").is_none());
    }

    /// Every driver hook's look-up key names an entry point of the driver with the hook's C name
    /// and ABI: asked of the stand-in driver (the real one's names, versions and variants) at the
    /// first and the last version the key covers, `cuGetProcAddress_v2` hands out exactly the
    /// function exported under the hook's name.
    #[test]
    fn driver_hooks_name_entry_points_of_the_driver() {
        let exe = std::env::current_exe().unwrap();
        let so = exe.parent().unwrap().parent().unwrap().join("libcuda.so");
        if !so.exists() {
            eprintln!("skip: {} not built", so.display());
            return;
        }
        let path = std::ffi::CString::new(so.to_str().unwrap()).unwrap();
        // SAFETY: dlopen of the stand-in driver, kept for the test process.
        let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!h.is_null());
        let sym = |n: &str| {
            let c = std::ffi::CString::new(n).unwrap();
            // SAFETY: live handle, valid C string.
            unsafe { libc::dlsym(h, c.as_ptr()) as usize }
        };
        type GetProc = unsafe extern "C" fn(*const c_char, PP, c_int, u64, *mut c_int) -> c_int;
        // SAFETY: cuGetProcAddress_v2 has this signature (cuda.h).
        let get: GetProc = unsafe { std::mem::transmute(sym("cuGetProcAddress_v2")) };
        let mut bad = vec![];
        for hk in HOOKS.iter().filter(|h| h.class == Class::Driver) {
            let k = hk.proc_key.unwrap();
            let want = sym(hk.name());
            assert_ne!(want, 0, "the driver exports no {}", hk.name());
            let flags = if k.ptsz == Some(true) { 2 } else { 0 };
            let c = std::ffi::CString::new(k.symbol).unwrap();
            for ver in [k.min_ver, k.max_ver - 1] {
                let mut p: *mut c_void = std::ptr::null_mut();
                let mut st = -1;
                // SAFETY: valid C string and out-pointers.
                let r = unsafe { get(c.as_ptr(), &mut p, ver as c_int, flags, &mut st) };
                if r != 0 || p as usize != want {
                    bad.push(format!("{} at {ver}", hk.name()));
                }
            }
        }
        assert!(
            bad.is_empty(),
            "the driver hands out other functions: {bad:?}"
        );
    }

    #[test]
    fn exported_symbols_match_table() {
        // target/release/deps/<test> -> target/release/libfreeride.so
        let exe = std::env::current_exe().unwrap();
        let so = exe
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("libfreeride.so");
        if !so.exists() {
            eprintln!("skip: {} not built", so.display());
            return;
        }
        let out = std::process::Command::new("nm")
            .args(["-D", "--defined-only"])
            .arg(&so)
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        let exported: HashSet<&str> = text
            .lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                let (_addr, ty, name) = (it.next()?, it.next()?, it.next()?);
                (ty == "T").then_some(name)
            })
            .collect();
        let want: HashSet<&str> = HOOKS
            .iter()
            .filter(|h| h.exported)
            .map(|h| h.name())
            .collect();
        assert_eq!(
            exported, want,
            "exported functions of libfreeride.so != exported hooks"
        );
    }
}
