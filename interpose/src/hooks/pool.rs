//! Stream-ordered allocations (`cuMemAllocAsync`, `cuMemAllocFromPoolAsync`, `cuMemFreeAsync`,
//! each with its `_ptsz` flavour), and the pool look-ups that say which device a pool's memory is
//! on (`cuMemPoolCreate`, `cuDeviceGetDefaultMemPool`, `cuDeviceGetMemPool`: remembered in a
//! lock-free table, for trainers and side tasks alike, so that an allocation from a pool is
//! recorded, and charged, on its own GPU). A pool this process never saw handed out (imported
//! from another process) counts as the caller's GPU's.
//!
//! A stream-ordered free gives its bytes back at the call (the stream reaches it later). Memory a
//! pool keeps after frees (its release threshold) is the pool's, not an allocation's: it is not
//! counted (it never exceeds what the task's allocations once held within their budget).

use super::memory::{alloc_dptr, caller_device, free_dptr};
use super::*;
use crate::memtable::Table;

/// Pool handle -> [device, 0, 0].
static POOL_DEVICE: Table<1024> = Table::new();

fn pool_device(pool: P) -> i32 {
    POOL_DEVICE
        .get(pool as u64)
        .map_or_else(caller_device, |[d, _, _]| d as i32)
}

fn note_pool(r: c_int, pool: PP, dev: c_int) {
    if r == 0 && !pool.is_null() && dev >= 0 {
        // SAFETY: on success the driver wrote *pool.
        let p = unsafe { *pool } as u64;
        POOL_DEVICE.insert(p, [dev as u64, 0, 0]);
    }
}

pub(super) unsafe extern "C" fn w_cuMemPoolCreate(pool: PP, props: *const MemLocated) -> c_int {
    let Some(real) = real_fn::<DrvPoolCreate>(Api::CuMemPoolCreate) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    // SAFETY: pass-through.
    let r = unsafe { real(pool, props) };
    // SAFETY: the caller's props, which the driver just read.
    note_pool(r, pool, unsafe { MemLocated::device_of(props) });
    r
}

pub(super) unsafe extern "C" fn w_cuDeviceGetDefaultMemPool(pool: PP, dev: c_int) -> c_int {
    let Some(real) = real_fn::<DrvDevicePool>(Api::CuDeviceGetDefaultMemPool) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    // SAFETY: pass-through.
    let r = unsafe { real(pool, dev) };
    note_pool(r, pool, dev);
    r
}

pub(super) unsafe extern "C" fn w_cuDeviceGetMemPool(pool: PP, dev: c_int) -> c_int {
    let Some(real) = real_fn::<DrvDevicePool>(Api::CuDeviceGetMemPool) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    // SAFETY: pass-through.
    let r = unsafe { real(pool, dev) };
    note_pool(r, pool, dev);
    r
}

/// `cuMemAllocAsync` allocates from the current pool of the stream's device: the caller's
/// context's device for its own streams.
#[inline(always)]
unsafe fn drv_alloc_async(api: Api, dptr: *mut u64, bytes: usize, s: P) -> c_int {
    let Some(real) = real_fn::<DrvAllocAsync>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let b = bytes as u64;
    // SAFETY: pass-through of the caller's arguments.
    unsafe {
        alloc_dptr(
            api,
            caller_device(),
            s,
            dptr,
            b,
            || real(dptr, bytes, s),
            || b,
        )
    }
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

#[inline(always)]
unsafe fn drv_alloc_pool(api: Api, dptr: *mut u64, bytes: usize, pool: P, s: P) -> c_int {
    let Some(real) = real_fn::<DrvAllocPool>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let b = bytes as u64;
    // SAFETY: pass-through of the caller's arguments.
    unsafe {
        alloc_dptr(
            api,
            pool_device(pool),
            s,
            dptr,
            b,
            || real(dptr, bytes, pool, s),
            || b,
        )
    }
}

pub(super) unsafe extern "C" fn w_cuMemAllocFromPoolAsync(
    dptr: *mut u64,
    bytes: usize,
    pool: P,
    s: P,
) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_alloc_pool(Api::CuMemAllocFromPoolAsync, dptr, bytes, pool, s) }
}

pub(super) unsafe extern "C" fn w_cuMemAllocFromPoolAsync_ptsz(
    dptr: *mut u64,
    bytes: usize,
    pool: P,
    s: P,
) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_alloc_pool(Api::CuMemAllocFromPoolAsyncPtsz, dptr, bytes, pool, s) }
}

#[inline(always)]
fn drv_free_async(api: Api, dptr: u64, s: P) -> c_int {
    let Some(real) = real_fn::<DrvFreeAsync>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    // SAFETY: pass-through.
    free_dptr(api, s, dptr, || unsafe { real(dptr, s) })
}

pub(super) unsafe extern "C" fn w_cuMemFreeAsync(dptr: u64, s: P) -> c_int {
    drv_free_async(Api::CuMemFreeAsync, dptr, s)
}

pub(super) unsafe extern "C" fn w_cuMemFreeAsync_ptsz(dptr: u64, s: P) -> c_int {
    drv_free_async(Api::CuMemFreeAsyncPtsz, dptr, s)
}
