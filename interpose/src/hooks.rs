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
//! "not found" error. `tests` check the table against the wrappers and the exported symbols.
#![allow(non_snake_case)]

use crate::{comm, dl, rt};
use freeride_abi::{now_ns, Api, Kind};
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
        pk("cuCtxSynchronize", None, 2000, K)
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
type DrvSync0 = unsafe extern "C" fn() -> c_int;
type DrvSync1 = unsafe extern "C" fn(P) -> c_int;
type DrvCtx = unsafe extern "C" fn(P) -> c_int;
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

// ---------------------------------------------------------------------------------------------
// Runtime wrappers (exported).

#[inline(always)]
unsafe fn rt_launch(
    api: Api,
    func: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: PP,
    shmem: usize,
    stream: P,
) -> c_int {
    let Some(real) = real_fn::<RtLaunch>(api) else {
        return CUDART_SYMBOL_NOT_FOUND;
    };
    let g = rt::enter();
    if g.is_some() {
        rt::launch(
            api,
            stream as u64,
            func as u64,
            [grid.x, grid.y, grid.z],
            [block.x, block.y, block.z],
            shmem as u32,
        );
    }
    // SAFETY: forwarding the caller's arguments unchanged to the real function.
    let r = unsafe { real(func, grid, block, args, shmem, stream) };
    drop(g);
    r
}

/// `__cudaLaunchKernel`: the `<<<>>>` launch stub of CUDA 13 (how PyTorch launches).
#[no_mangle]
pub unsafe extern "C" fn __cudaLaunchKernel(
    func: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: PP,
    shmem: usize,
    stream: P,
) -> c_int {
    // SAFETY: pass-through of the caller's arguments.
    unsafe {
        rt_launch(
            Api::CudaLaunchKernelStub,
            func,
            grid,
            block,
            args,
            shmem,
            stream,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn __cudaLaunchKernel_ptsz(
    func: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: PP,
    shmem: usize,
    stream: P,
) -> c_int {
    // SAFETY: pass-through of the caller's arguments.
    unsafe {
        rt_launch(
            Api::CudaLaunchKernelStubPtsz,
            func,
            grid,
            block,
            args,
            shmem,
            stream,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn cudaLaunchKernel(
    func: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: PP,
    shmem: usize,
    stream: P,
) -> c_int {
    // SAFETY: pass-through of the caller's arguments.
    unsafe {
        rt_launch(
            Api::CudaLaunchKernel,
            func,
            grid,
            block,
            args,
            shmem,
            stream,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn cudaLaunchKernel_ptsz(
    func: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: PP,
    shmem: usize,
    stream: P,
) -> c_int {
    // SAFETY: pass-through of the caller's arguments.
    unsafe {
        rt_launch(
            Api::CudaLaunchKernelPtsz,
            func,
            grid,
            block,
            args,
            shmem,
            stream,
        )
    }
}

#[inline(always)]
unsafe fn rt_launch_ex(
    api: Api,
    cfg: *const CudaLaunchConfig,
    func: *const c_void,
    args: PP,
) -> c_int {
    let Some(real) = real_fn::<RtLaunchEx>(api) else {
        return CUDART_SYMBOL_NOT_FOUND;
    };
    let g = rt::enter();
    if g.is_some() && !cfg.is_null() {
        // SAFETY: the caller passes a valid config (the real function reads it too).
        let c = unsafe { &*cfg };
        rt::launch(
            api,
            c.stream as u64,
            func as u64,
            [c.grid.x, c.grid.y, c.grid.z],
            [c.block.x, c.block.y, c.block.z],
            c.shmem as u32,
        );
    }
    // SAFETY: pass-through.
    let r = unsafe { real(cfg, func, args) };
    drop(g);
    r
}

#[no_mangle]
pub unsafe extern "C" fn cudaLaunchKernelExC(
    cfg: *const CudaLaunchConfig,
    func: *const c_void,
    args: PP,
) -> c_int {
    // SAFETY: pass-through.
    unsafe { rt_launch_ex(Api::CudaLaunchKernelExC, cfg, func, args) }
}

#[no_mangle]
pub unsafe extern "C" fn cudaLaunchKernelExC_ptsz(
    cfg: *const CudaLaunchConfig,
    func: *const c_void,
    args: PP,
) -> c_int {
    // SAFETY: pass-through.
    unsafe { rt_launch_ex(Api::CudaLaunchKernelExCPtsz, cfg, func, args) }
}

#[inline(always)]
fn graph_event(api: Api, exec: P, stream: P) {
    if rt::active() {
        rt::record(
            Kind::GraphLaunch,
            api,
            now_ns(),
            stream as u64,
            0,
            0,
            [exec as u64, 0, 0],
        );
        if rt::is_sidetask() {
            crate::gate::before_launch(api, stream as u64, exec as u64);
        }
    }
}

#[inline(always)]
unsafe fn rt_graph(api: Api, exec: P, stream: P) -> c_int {
    let Some(real) = real_fn::<RtGraph>(api) else {
        return CUDART_SYMBOL_NOT_FOUND;
    };
    let g = rt::enter();
    if g.is_some() {
        graph_event(api, exec, stream);
    }
    // SAFETY: pass-through.
    let r = unsafe { real(exec, stream) };
    drop(g);
    r
}

#[no_mangle]
pub unsafe extern "C" fn cudaGraphLaunch(exec: P, stream: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { rt_graph(Api::CudaGraphLaunch, exec, stream) }
}

#[no_mangle]
pub unsafe extern "C" fn cudaGraphLaunch_ptsz(exec: P, stream: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { rt_graph(Api::CudaGraphLaunchPtsz, exec, stream) }
}

/// Synchronize call: recorded after it returns, with its start time.
#[inline(always)]
fn sync_event(g: &Option<rt::Entered>, api: Api, t0: u64, handle: P, r: c_int) {
    if g.is_some() && rt::is_sidetask() {
        crate::gate::after_sync();
    }
    if g.is_some() && rt::active() {
        rt::record(
            Kind::Sync,
            api,
            t0,
            handle as u64,
            r as u32,
            0,
            [now_ns(), 0, 0],
        );
    }
}

#[no_mangle]
pub unsafe extern "C" fn cudaDeviceSynchronize() -> c_int {
    let api = Api::CudaDeviceSynchronize;
    let Some(real) = real_fn::<RtSync0>(api) else {
        return CUDART_SYMBOL_NOT_FOUND;
    };
    let g = rt::enter();
    let t0 = now_ns();
    // SAFETY: pass-through.
    let r = unsafe { real() };
    sync_event(&g, api, t0, std::ptr::null_mut(), r);
    r
}

#[inline(always)]
unsafe fn rt_sync1(api: Api, h: P) -> c_int {
    let Some(real) = real_fn::<RtSync1>(api) else {
        return CUDART_SYMBOL_NOT_FOUND;
    };
    let g = rt::enter();
    let t0 = now_ns();
    // SAFETY: pass-through.
    let r = unsafe { real(h) };
    sync_event(&g, api, t0, h, r);
    r
}

#[no_mangle]
pub unsafe extern "C" fn cudaStreamSynchronize(s: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { rt_sync1(Api::CudaStreamSynchronize, s) }
}

#[no_mangle]
pub unsafe extern "C" fn cudaStreamSynchronize_ptsz(s: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { rt_sync1(Api::CudaStreamSynchronizePtsz, s) }
}

#[no_mangle]
pub unsafe extern "C" fn cudaEventSynchronize(e: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { rt_sync1(Api::CudaEventSynchronize, e) }
}

static RUNTIME_VERSION: AtomicI32 = AtomicI32::new(0);

/// CUDA version of the loaded runtime (cudaRuntimeGetVersion), -1 if unknown.
fn runtime_version() -> i64 {
    let v = RUNTIME_VERSION.load(Ordering::Relaxed);
    if v != 0 {
        return v as i64;
    }
    let mut f = dl::sym(dl::RTLD_NEXT, c"cudaRuntimeGetVersion");
    if f.is_null() {
        for lib in [c"libcudart.so.13", c"libcudart.so.12", c"libcudart.so"] {
            f = dl::sym_in_loaded(lib, c"cudaRuntimeGetVersion");
            if !f.is_null() {
                break;
            }
        }
    }
    let mut ver: c_int = -1;
    if !f.is_null() {
        // SAFETY: cudaRuntimeGetVersion(int*) writing one int we own.
        let g: unsafe extern "C" fn(*mut c_int) -> c_int = unsafe { std::mem::transmute(f) };
        // SAFETY: as above.
        if unsafe { g(&mut ver) } != 0 {
            ver = -1;
        }
    }
    RUNTIME_VERSION.store(ver, Ordering::Relaxed);
    ver as i64
}

#[no_mangle]
pub unsafe extern "C" fn cudaGetDriverEntryPoint(
    symbol: *const c_char,
    pfn: PP,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    let Some(real) = real_fn::<RtEntry>(Api::CudaGetDriverEntryPoint) else {
        return CUDART_SYMBOL_NOT_FOUND;
    };
    // SAFETY: pass-through.
    let r = unsafe { real(symbol, pfn, flags, status) };
    if r == 0 {
        let v = runtime_version();
        if v > 0 {
            map_proc(symbol, pfn, v, flags);
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cudaGetDriverEntryPointByVersion(
    symbol: *const c_char,
    pfn: PP,
    ver: u32,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    let Some(real) = real_fn::<RtEntryV>(Api::CudaGetDriverEntryPointByVersion) else {
        return CUDART_SYMBOL_NOT_FOUND;
    };
    // SAFETY: pass-through.
    let r = unsafe { real(symbol, pfn, ver, flags, status) };
    if r == 0 {
        map_proc(symbol, pfn, ver as i64, flags);
    }
    r
}

// ---------------------------------------------------------------------------------------------
// Driver wrappers (handed out by look-ups; not exported).

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn drv_launch(
    api: Api,
    f: P,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    sh: u32,
    s: P,
    kp: PP,
    ex: PP,
) -> c_int {
    let Some(real) = real_fn::<DrvLaunch>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let g = rt::enter();
    if g.is_some() {
        rt::launch(api, s as u64, f as u64, [gx, gy, gz], [bx, by, bz], sh);
    }
    // SAFETY: pass-through.
    let r = unsafe { real(f, gx, gy, gz, bx, by, bz, sh, s, kp, ex) };
    drop(g);
    r
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn w_cuLaunchKernel(
    f: P,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    sh: u32,
    s: P,
    kp: PP,
    ex: PP,
) -> c_int {
    // SAFETY: pass-through.
    unsafe {
        drv_launch(
            Api::CuLaunchKernel,
            f,
            gx,
            gy,
            gz,
            bx,
            by,
            bz,
            sh,
            s,
            kp,
            ex,
        )
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn w_cuLaunchKernel_ptsz(
    f: P,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    sh: u32,
    s: P,
    kp: PP,
    ex: PP,
) -> c_int {
    // SAFETY: pass-through.
    unsafe {
        drv_launch(
            Api::CuLaunchKernelPtsz,
            f,
            gx,
            gy,
            gz,
            bx,
            by,
            bz,
            sh,
            s,
            kp,
            ex,
        )
    }
}

#[inline(always)]
unsafe fn drv_launch_ex(api: Api, cfg: *const CuLaunchConfig, f: P, kp: PP, ex: PP) -> c_int {
    let Some(real) = real_fn::<DrvLaunchEx>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let g = rt::enter();
    if g.is_some() && !cfg.is_null() {
        // SAFETY: the caller passes a valid config (the real function reads it too).
        let c = unsafe { &*cfg };
        rt::launch(api, c.stream as u64, f as u64, c.grid, c.block, c.shmem);
    }
    // SAFETY: pass-through.
    let r = unsafe { real(cfg, f, kp, ex) };
    drop(g);
    r
}

unsafe extern "C" fn w_cuLaunchKernelEx(cfg: *const CuLaunchConfig, f: P, kp: PP, ex: PP) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_launch_ex(Api::CuLaunchKernelEx, cfg, f, kp, ex) }
}

unsafe extern "C" fn w_cuLaunchKernelEx_ptsz(
    cfg: *const CuLaunchConfig,
    f: P,
    kp: PP,
    ex: PP,
) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_launch_ex(Api::CuLaunchKernelExPtsz, cfg, f, kp, ex) }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn drv_coop(
    api: Api,
    f: P,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    sh: u32,
    s: P,
    kp: PP,
) -> c_int {
    let Some(real) = real_fn::<DrvCoop>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let g = rt::enter();
    if g.is_some() {
        rt::launch(api, s as u64, f as u64, [gx, gy, gz], [bx, by, bz], sh);
    }
    // SAFETY: pass-through.
    let r = unsafe { real(f, gx, gy, gz, bx, by, bz, sh, s, kp) };
    drop(g);
    r
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn w_cuLaunchCooperativeKernel(
    f: P,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    sh: u32,
    s: P,
    kp: PP,
) -> c_int {
    // SAFETY: pass-through.
    unsafe {
        drv_coop(
            Api::CuLaunchCooperativeKernel,
            f,
            gx,
            gy,
            gz,
            bx,
            by,
            bz,
            sh,
            s,
            kp,
        )
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn w_cuLaunchCooperativeKernel_ptsz(
    f: P,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    sh: u32,
    s: P,
    kp: PP,
) -> c_int {
    // SAFETY: pass-through.
    unsafe {
        drv_coop(
            Api::CuLaunchCooperativeKernelPtsz,
            f,
            gx,
            gy,
            gz,
            bx,
            by,
            bz,
            sh,
            s,
            kp,
        )
    }
}

#[inline(always)]
unsafe fn drv_graph(api: Api, exec: P, s: P) -> c_int {
    let Some(real) = real_fn::<DrvGraph>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let g = rt::enter();
    if g.is_some() {
        graph_event(api, exec, s);
    }
    // SAFETY: pass-through.
    let r = unsafe { real(exec, s) };
    drop(g);
    r
}

unsafe extern "C" fn w_cuGraphLaunch(exec: P, s: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_graph(Api::CuGraphLaunch, exec, s) }
}

unsafe extern "C" fn w_cuGraphLaunch_ptsz(exec: P, s: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_graph(Api::CuGraphLaunchPtsz, exec, s) }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn mem_event(
    g: &Option<rt::Entered>,
    kind: Kind,
    api: Api,
    t0: u64,
    stream: P,
    bytes: usize,
    ptr: u64,
    r: c_int,
) {
    if g.is_some() && rt::active() {
        rt::record(
            kind,
            api,
            t0,
            stream as u64,
            r as u32,
            0,
            [bytes as u64, ptr, 0],
        );
    }
}

/// Whether this process is a side task (initializes the role on first use): the allocation
/// hooks then enforce its memory budget. A trainer pays the existing role check only.
#[inline(always)]
fn side_task() -> bool {
    rt::active() && rt::is_sidetask()
}

unsafe extern "C" fn w_cuMemAlloc_v2(dptr: *mut u64, bytes: usize) -> c_int {
    let api = Api::CuMemAllocV2;
    let Some(real) = real_fn::<DrvAlloc>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let g = rt::enter();
    let t0 = now_ns();
    // Side tasks: the memory budget (independent of the guard: cudaMalloc arrives here too).
    let side = side_task();
    if side && !crate::gate::mem_reserve(bytes) {
        let r = crate::gate::membudget::CUDA_ERROR_OUT_OF_MEMORY;
        mem_event(
            &g,
            Kind::MemAlloc,
            api,
            t0,
            std::ptr::null_mut(),
            bytes,
            0,
            r,
        );
        return r;
    }
    // SAFETY: pass-through.
    let r = unsafe { real(dptr, bytes) };
    // SAFETY: on success the driver wrote *dptr.
    let p = if r == 0 && !dptr.is_null() {
        unsafe { *dptr }
    } else {
        0
    };
    if side {
        crate::gate::mem_done(bytes, r == 0, p);
    }
    mem_event(
        &g,
        Kind::MemAlloc,
        api,
        t0,
        std::ptr::null_mut(),
        bytes,
        p,
        r,
    );
    r
}

#[inline(always)]
unsafe fn drv_alloc_async(api: Api, dptr: *mut u64, bytes: usize, s: P) -> c_int {
    let Some(real) = real_fn::<DrvAllocAsync>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let g = rt::enter();
    let t0 = now_ns();
    let side = side_task();
    if side && !crate::gate::mem_reserve(bytes) {
        let r = crate::gate::membudget::CUDA_ERROR_OUT_OF_MEMORY;
        mem_event(&g, Kind::MemAlloc, api, t0, s, bytes, 0, r);
        return r;
    }
    // SAFETY: pass-through.
    let r = unsafe { real(dptr, bytes, s) };
    // SAFETY: on success the driver wrote *dptr.
    let p = if r == 0 && !dptr.is_null() {
        unsafe { *dptr }
    } else {
        0
    };
    if side {
        crate::gate::mem_done(bytes, r == 0, p);
    }
    mem_event(&g, Kind::MemAlloc, api, t0, s, bytes, p, r);
    r
}

unsafe extern "C" fn w_cuMemAllocAsync(dptr: *mut u64, bytes: usize, s: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_alloc_async(Api::CuMemAllocAsync, dptr, bytes, s) }
}

unsafe extern "C" fn w_cuMemAllocAsync_ptsz(dptr: *mut u64, bytes: usize, s: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_alloc_async(Api::CuMemAllocAsyncPtsz, dptr, bytes, s) }
}

unsafe extern "C" fn w_cuMemFree_v2(dptr: u64) -> c_int {
    let api = Api::CuMemFreeV2;
    let Some(real) = real_fn::<DrvFree>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let g = rt::enter();
    let t0 = now_ns();
    // SAFETY: pass-through.
    let r = unsafe { real(dptr) };
    if r == 0 && rt::is_sidetask() {
        crate::gate::mem_freed(dptr);
    }
    mem_event(&g, Kind::MemFree, api, t0, std::ptr::null_mut(), 0, dptr, r);
    r
}

#[inline(always)]
unsafe fn drv_sync1(api: Api, h: P) -> c_int {
    let Some(real) = real_fn::<DrvSync1>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let g = rt::enter();
    let t0 = now_ns();
    // SAFETY: pass-through.
    let r = unsafe { real(h) };
    sync_event(&g, api, t0, h, r);
    r
}

unsafe extern "C" fn w_cuStreamSynchronize(s: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_sync1(Api::CuStreamSynchronize, s) }
}

unsafe extern "C" fn w_cuStreamSynchronize_ptsz(s: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_sync1(Api::CuStreamSynchronizePtsz, s) }
}

unsafe extern "C" fn w_cuEventSynchronize(e: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_sync1(Api::CuEventSynchronize, e) }
}

unsafe extern "C" fn w_cuCtxSynchronize() -> c_int {
    let api = Api::CuCtxSynchronize;
    let Some(real) = real_fn::<DrvSync0>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let g = rt::enter();
    let t0 = now_ns();
    // SAFETY: pass-through.
    let r = unsafe { real() };
    sync_event(&g, api, t0, std::ptr::null_mut(), r);
    r
}

unsafe extern "C" fn w_cuGetProcAddress(
    symbol: *const c_char,
    pfn: PP,
    ver: c_int,
    flags: u64,
) -> c_int {
    let Some(real) = real_fn::<GetProcV1>(Api::CuGetProcAddress) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    // SAFETY: pass-through.
    let r = unsafe { real(symbol, pfn, ver, flags) };
    if r == 0 {
        map_proc(symbol, pfn, ver as i64, flags);
    }
    r
}

unsafe extern "C" fn w_cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: PP,
    ver: c_int,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    let Some(real) = real_fn::<GetProcV2>(Api::CuGetProcAddressV2) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    // SAFETY: pass-through.
    let r = unsafe { real(symbol, pfn, ver, flags, status) };
    if r == 0 {
        map_proc(symbol, pfn, ver as i64, flags);
    }
    r
}

unsafe extern "C" fn w_cuCtxSetCurrent(ctx: P) -> c_int {
    let Some(real) = real_fn::<DrvCtx>(Api::CuCtxSetCurrent) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    rt::invalidate_device();
    // SAFETY: pass-through.
    unsafe { real(ctx) }
}

unsafe extern "C" fn w_cuCtxPushCurrent_v2(ctx: P) -> c_int {
    let Some(real) = real_fn::<DrvCtx>(Api::CuCtxPushCurrentV2) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    rt::invalidate_device();
    // SAFETY: pass-through.
    unsafe { real(ctx) }
}

unsafe extern "C" fn w_cuCtxPopCurrent_v2(ctx: PP) -> c_int {
    let Some(real) = real_fn::<DrvCtxPop>(Api::CuCtxPopCurrentV2) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    rt::invalidate_device();
    // SAFETY: pass-through.
    unsafe { real(ctx) }
}

// ---------------------------------------------------------------------------------------------
// NCCL wrappers (exported).

/// Host side of a comm op: records it; outside a group also starts GPU-side timing.
/// Returns (op id, timing pair).
#[inline]
fn comm_pre(
    api: Api,
    stream: P,
    peer: i32,
    bytes: u64,
    dtype: c_int,
    comm_h: P,
) -> (u32, Option<usize>, u64) {
    if !rt::active() {
        return (0, None, 0);
    }
    let t = now_ns();
    let op = comm::next_op();
    let (depth, group) = rt::THREAD
        .try_with(|th| (th.group_depth.get(), th.group_id.get()))
        .unwrap_or((0, 0));
    let group = if depth > 0 { group } else { 0 };
    rt::record(
        Kind::CommOp,
        api,
        t,
        stream as u64,
        peer as u32,
        dtype as u8,
        [bytes, comm_h as u64, op as u64 | (group as u64) << 32],
    );
    if depth > 0 {
        let _ = rt::THREAD.try_with(|th| {
            let mut s = th.group_streams.get();
            let n = th.group_nstreams.get();
            if !s[..n].contains(&(stream as u64)) && n < s.len() {
                s[n] = stream as u64;
                th.group_streams.set(s);
                th.group_nstreams.set(n + 1);
            }
        });
        return (op, None, t);
    }
    (op, comm::begin(stream as u64), t)
}

#[inline]
fn comm_post(api: Api, stream: P, op: u32, pair: Option<usize>, t: u64) {
    if let Some(i) = pair {
        comm::end(i, stream as u64, api, op, 0, t);
    }
}

/// Records an NCCL op around its real call: the op before, its GPU-side timing events after.
/// The guard covers only our own work: NCCL's kernel launches inside the real call must reach the
/// driver wrapper and be recorded (flagged as NCCL's own by the scope).
#[inline(always)]
fn nccl_op(
    api: Api,
    stream: P,
    peer: c_int,
    bytes: u64,
    dtype: c_int,
    comm_h: P,
    call: impl FnOnce() -> c_int,
) -> c_int {
    let pre = rt::enter().map(|_g| comm_pre(api, stream, peer, bytes, dtype, comm_h));
    let nccl = rt::nccl_scope();
    let r = call();
    drop(nccl);
    if let Some((op, pair, t)) = pre {
        let _g = rt::enter();
        comm_post(api, stream, op, pair, t);
    }
    r
}

fn bytes_of(count: usize, dtype: c_int) -> u64 {
    (count as u64).saturating_mul(freeride_abi::event::nccl_type_size(dtype))
}

#[no_mangle]
pub unsafe extern "C" fn ncclSend(
    buf: *const c_void,
    count: usize,
    dtype: c_int,
    peer: c_int,
    comm_h: P,
    stream: P,
) -> c_int {
    let api = Api::NcclSend;
    let Some(real) = real_fn::<NcclP2p>(api) else {
        return NCCL_SYSTEM_ERROR;
    };
    // SAFETY: pass-through (the real function resolved for this api, with the caller's arguments).
    nccl_op(
        api,
        stream,
        peer,
        bytes_of(count, dtype),
        dtype,
        comm_h,
        || unsafe { real(buf, count, dtype, peer, comm_h, stream) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn ncclRecv(
    buf: P,
    count: usize,
    dtype: c_int,
    peer: c_int,
    comm_h: P,
    stream: P,
) -> c_int {
    let api = Api::NcclRecv;
    let Some(real) = real_fn::<NcclP2pRecv>(api) else {
        return NCCL_SYSTEM_ERROR;
    };
    // SAFETY: pass-through (the real function resolved for this api, with the caller's arguments).
    nccl_op(
        api,
        stream,
        peer,
        bytes_of(count, dtype),
        dtype,
        comm_h,
        || unsafe { real(buf, count, dtype, peer, comm_h, stream) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn ncclGroupStart() -> c_int {
    let api = Api::NcclGroupStart;
    let Some(real) = real_fn::<NcclGroup>(api) else {
        return NCCL_SYSTEM_ERROR;
    };
    let Some(g) = rt::enter() else {
        // SAFETY: pass-through.
        return unsafe { real() };
    };
    let t = now_ns();
    let (depth, group) = rt::THREAD
        .try_with(|th| {
            let d = th.group_depth.get() + 1;
            th.group_depth.set(d);
            if d == 1 {
                th.group_id.set(comm::next_group());
                th.group_nstreams.set(0);
                th.group_queued.set(t);
            }
            (d, th.group_id.get())
        })
        .unwrap_or((0, 0));
    if rt::active() {
        rt::record(
            Kind::CommGroup,
            api,
            t,
            0,
            depth,
            0,
            [0, 0, (group as u64) << 32],
        );
    }
    drop(g);
    // SAFETY: pass-through.
    unsafe { real() }
}

#[no_mangle]
pub unsafe extern "C" fn ncclGroupEnd() -> c_int {
    let api = Api::NcclGroupEnd;
    let Some(real) = real_fn::<NcclGroup>(api) else {
        return NCCL_SYSTEM_ERROR;
    };
    let Some(g) = rt::enter() else {
        // SAFETY: pass-through.
        return unsafe { real() };
    };
    let t = now_ns();
    let (depth, group, streams, n) = rt::THREAD
        .try_with(|th| {
            let d = th.group_depth.get();
            (
                d,
                th.group_id.get(),
                th.group_streams.get(),
                th.group_nstreams.get(),
            )
        })
        .unwrap_or((0, 0, [0; comm::GROUP_STREAMS], 0));
    let active = rt::active();
    if active {
        rt::record(
            Kind::CommGroup,
            api,
            t,
            0,
            depth.saturating_sub(1),
            0,
            [0, 0, (group as u64) << 32],
        );
    }
    let mut pairs = [None::<usize>; comm::GROUP_STREAMS];
    let outermost = depth == 1;
    if active && outermost {
        for (p, s) in pairs.iter_mut().zip(&streams[..n]) {
            *p = comm::begin(*s);
        }
    }
    drop(g);
    let nccl = rt::nccl_scope();
    // SAFETY: pass-through (unguarded: NCCL's launches inside must be recorded).
    let r = unsafe { real() };
    drop(nccl);
    let _g = rt::enter();
    if outermost {
        for (p, s) in pairs.iter().zip(&streams[..n]) {
            if let Some(i) = p {
                comm::end(*i, *s, api, 0, group, t);
            }
        }
    }
    let _ = rt::THREAD.try_with(|th| {
        th.group_depth.set(depth.saturating_sub(1));
        if depth <= 1 {
            th.group_nstreams.set(0);
        }
    });
    r
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn nccl_reduce(
    api: Api,
    s: *const c_void,
    d: P,
    count: usize,
    dtype: c_int,
    x: c_int,
    comm_h: P,
    stream: P,
    peer: i32,
) -> c_int {
    let Some(real) = real_fn::<NcclReduce>(api) else {
        return NCCL_SYSTEM_ERROR;
    };
    // SAFETY: pass-through (the real function resolved for this api, with the caller's arguments).
    nccl_op(
        api,
        stream,
        peer,
        bytes_of(count, dtype),
        dtype,
        comm_h,
        || unsafe { real(s, d, count, dtype, x, comm_h, stream) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn ncclAllReduce(
    s: *const c_void,
    d: P,
    count: usize,
    dtype: c_int,
    redop: c_int,
    comm_h: P,
    stream: P,
) -> c_int {
    // SAFETY: pass-through.
    unsafe {
        nccl_reduce(
            Api::NcclAllReduce,
            s,
            d,
            count,
            dtype,
            redop,
            comm_h,
            stream,
            -1,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclReduceScatter(
    s: *const c_void,
    d: P,
    recvcount: usize,
    dtype: c_int,
    redop: c_int,
    comm_h: P,
    stream: P,
) -> c_int {
    // SAFETY: pass-through.
    unsafe {
        nccl_reduce(
            Api::NcclReduceScatter,
            s,
            d,
            recvcount,
            dtype,
            redop,
            comm_h,
            stream,
            -1,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclBroadcast(
    s: *const c_void,
    d: P,
    count: usize,
    dtype: c_int,
    root: c_int,
    comm_h: P,
    stream: P,
) -> c_int {
    // SAFETY: pass-through.
    unsafe {
        nccl_reduce(
            Api::NcclBroadcast,
            s,
            d,
            count,
            dtype,
            root,
            comm_h,
            stream,
            root,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn ncclAllGather(
    s: *const c_void,
    d: P,
    sendcount: usize,
    dtype: c_int,
    comm_h: P,
    stream: P,
) -> c_int {
    let api = Api::NcclAllGather;
    let Some(real) = real_fn::<NcclGather>(api) else {
        return NCCL_SYSTEM_ERROR;
    };
    // SAFETY: pass-through (the real function resolved for this api, with the caller's arguments).
    nccl_op(
        api,
        stream,
        -1,
        bytes_of(sendcount, dtype),
        dtype,
        comm_h,
        || unsafe { real(s, d, sendcount, dtype, comm_h, stream) },
    )
}

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
