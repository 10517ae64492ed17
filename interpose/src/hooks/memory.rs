//! Device memory: every allocation recorded (with the device the memory is on), a side task's
//! budget enforced. This file: the allocations of a device pointer in the current context
//! (`cuMemAlloc_v2`, `cuMemAllocPitch_v2`, `cuMemAllocManaged`) and `cuMemFree_v2`, with the
//! helpers the pool ([`super::pool`]) and virtual-memory ([`super::vmm`]) wrappers share.
//!
//! Nothing here takes a lock or needs a current context: the budget is read lock-free
//! ([`crate::gate::mem_reserve`]), an allocation's device comes from its arguments where the call
//! names one (a `cuMemCreate` location, a pool's device) and otherwise from the caller's context
//! as the launches' ([`crate::gate::caller_device`], -1 when it has none), and a budget check
//! never calls the driver. The check does not depend on the re-entrancy guard (`cudaMalloc*`
//! arrive here from the runtime); the record does.

use super::*;
use crate::gate;
use freeride_abi::Record;

/// Records memory event `kind` of `api` on device ordinal `dev` (the caller holds the guard `g`):
/// the record names the physical GPU of that ordinal ([`crate::gpus`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn mem_record(
    g: &Option<rt::Entered>,
    kind: Kind,
    api: Api,
    t0: u64,
    stream: P,
    p: [u64; 3],
    r: c_int,
    dev: i32,
) {
    if g.is_none() || !rt::active() {
        return;
    }
    let _ = rt::THREAD.try_with(|t| {
        rt::push(&Record {
            t_ns: t0,
            kind: kind as u8,
            api: api as u16,
            device: rt::gpu_of(dev),
            tid: rt::tid(t),
            aux: r as u32,
            stream: stream as u64,
            p0: p[0],
            p1: p[1],
            p2: p[2],
            ..Default::default()
        })
    });
}

/// Whether this process is a side task (initializes the role on first use): the allocation
/// hooks then enforce its memory budget. A trainer pays the existing role check only.
#[inline(always)]
pub(super) fn side_task() -> bool {
    rt::active() && rt::is_sidetask()
}

/// The device a call without a location allocates on: the caller's context's.
#[inline(always)]
pub(super) fn caller_device() -> i32 {
    if rt::active() {
        gate::caller_device()
    } else {
        -1
    }
}

/// An allocation of a device pointer written to `*dptr` by `real`: `reserve` bytes checked
/// against a side task's budget on `dev` before it, `taken()` the bytes it holds after it
/// (`reserve` unless the driver padded more than assumed). Recorded as `MemAlloc`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn alloc_dptr(
    api: Api,
    dev: i32,
    stream: P,
    dptr: *mut u64,
    reserve: u64,
    real: impl FnOnce() -> c_int,
    taken: impl FnOnce() -> u64,
) -> c_int {
    let g = rt::enter();
    let t0 = now_ns();
    let side = side_task();
    if side && !gate::mem_reserve(dev, reserve) {
        let r = gate::membudget::CUDA_ERROR_OUT_OF_MEMORY;
        mem_record(&g, Kind::MemAlloc, api, t0, stream, [reserve, 0, 0], r, dev);
        return r;
    }
    let r = real();
    let p = if r == 0 && !dptr.is_null() {
        // SAFETY: on success the driver wrote *dptr.
        unsafe { *dptr }
    } else {
        0
    };
    let bytes = if r == 0 { taken() } else { reserve };
    if side {
        gate::mem_done(dev, reserve, bytes, r == 0, p);
    }
    mem_record(&g, Kind::MemAlloc, api, t0, stream, [bytes, p, 0], r, dev);
    r
}

/// A free of device pointer `dptr` by `real` (recorded as `MemFree`).
#[inline(always)]
pub(super) fn free_dptr(api: Api, stream: P, dptr: u64, real: impl FnOnce() -> c_int) -> c_int {
    let g = rt::enter();
    let t0 = now_ns();
    let r = real();
    if r == 0 && side_task() {
        gate::mem_freed(dptr);
    }
    mem_record(&g, Kind::MemFree, api, t0, stream, [0, dptr, 0], r, -1);
    r
}

pub(super) unsafe extern "C" fn w_cuMemAlloc_v2(dptr: *mut u64, bytes: usize) -> c_int {
    let api = Api::CuMemAllocV2;
    let Some(real) = real_fn::<DrvAlloc>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let b = bytes as u64;
    // SAFETY: pass-through of the caller's arguments.
    unsafe {
        alloc_dptr(
            api,
            caller_device(),
            std::ptr::null_mut(),
            dptr,
            b,
            || real(dptr, bytes),
            || b,
        )
    }
}

/// The row alignment the budget assumes for a pitched allocation before the driver says (the
/// bytes it actually took, `pitch x height`, are charged after).
const PITCH_ALIGN: u64 = 512;

pub(super) unsafe extern "C" fn w_cuMemAllocPitch_v2(
    dptr: *mut u64,
    pitch: *mut usize,
    width: usize,
    height: usize,
    element: u32,
) -> c_int {
    let api = Api::CuMemAllocPitchV2;
    let Some(real) = real_fn::<DrvAllocPitch>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let rows = height as u64;
    let reserve = (width as u64)
        .checked_next_multiple_of(PITCH_ALIGN)
        .and_then(|w| w.checked_mul(rows))
        .unwrap_or(u64::MAX);
    let taken = || {
        if pitch.is_null() {
            reserve
        } else {
            // SAFETY: on success the driver wrote *pitch.
            (unsafe { *pitch } as u64).saturating_mul(rows)
        }
    };
    // SAFETY: pass-through of the caller's arguments.
    unsafe {
        alloc_dptr(
            api,
            caller_device(),
            std::ptr::null_mut(),
            dptr,
            reserve,
            || real(dptr, pitch, width, height, element),
            taken,
        )
    }
}

/// Managed memory is charged whole to the caller's GPU (at most that much of it is resident).
pub(super) unsafe extern "C" fn w_cuMemAllocManaged(
    dptr: *mut u64,
    bytes: usize,
    flags: u32,
) -> c_int {
    let api = Api::CuMemAllocManaged;
    let Some(real) = real_fn::<DrvAllocManaged>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let b = bytes as u64;
    // SAFETY: pass-through of the caller's arguments.
    unsafe {
        alloc_dptr(
            api,
            caller_device(),
            std::ptr::null_mut(),
            dptr,
            b,
            || real(dptr, bytes, flags),
            || b,
        )
    }
}

pub(super) unsafe extern "C" fn w_cuMemFree_v2(dptr: u64) -> c_int {
    let api = Api::CuMemFreeV2;
    let Some(real) = real_fn::<DrvFree>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    // SAFETY: pass-through.
    free_dptr(api, std::ptr::null_mut(), dptr, || unsafe { real(dptr) })
}
