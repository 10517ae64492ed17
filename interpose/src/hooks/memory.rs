//! Device memory allocation and free: recorded; a side task's budget enforced.

use super::*;

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

pub(super) unsafe extern "C" fn w_cuMemAlloc_v2(dptr: *mut u64, bytes: usize) -> c_int {
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

pub(super) unsafe extern "C" fn w_cuMemAllocAsync(dptr: *mut u64, bytes: usize, s: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_alloc_async(Api::CuMemAllocAsync, dptr, bytes, s) }
}

pub(super) unsafe extern "C" fn w_cuMemAllocAsync_ptsz(
    dptr: *mut u64,
    bytes: usize,
    s: P,
) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_alloc_async(Api::CuMemAllocAsyncPtsz, dptr, bytes, s) }
}

pub(super) unsafe extern "C" fn w_cuMemFree_v2(dptr: u64) -> c_int {
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
