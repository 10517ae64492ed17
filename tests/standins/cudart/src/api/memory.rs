//! Device memory (accounted by the simulated GPU) and copies (no-ops, the async ones ordered on
//! their stream).
use crate::guard::{drv, guard};
use crate::state;
use crate::types::*;
use std::ffi::c_void;

#[no_mangle]
pub unsafe extern "C" fn cudaMalloc(dev_ptr: *mut *mut c_void, size: usize) -> cudaError_t {
    guard(|| {
        if dev_ptr.is_null() {
            return Err(cudaErrorInvalidValue);
        }
        state::ensure_ctx()?;
        drv!(mem_alloc(dev_ptr.cast::<u64>(), size))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaFree(dev_ptr: *mut c_void) -> cudaError_t {
    guard(|| {
        state::ensure_ctx()?;
        if dev_ptr.is_null() {
            return Ok(());
        }
        drv!(mem_free(dev_ptr as u64))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaMemGetInfo(free: *mut usize, total: *mut usize) -> cudaError_t {
    guard(|| {
        state::ensure_ctx()?;
        drv!(mem_get_info(free, total))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaMemcpy(
    _dst: *mut c_void,
    _src: *const c_void,
    _count: usize,
    _kind: i32,
) -> cudaError_t {
    guard(|| state::ensure_ctx().map(|_| ()))
}

#[no_mangle]
pub unsafe extern "C" fn cudaMemset(
    _dev_ptr: *mut c_void,
    _value: i32,
    _count: usize,
) -> cudaError_t {
    guard(|| state::ensure_ctx().map(|_| ()))
}

fn ordered_noop(stream: cudaStream_t) -> crate::guard::RtResult {
    state::ensure_ctx()?;
    drv!(memcpy_htod_async(0, std::ptr::null(), 0, stream))
}

#[no_mangle]
pub unsafe extern "C" fn cudaMemcpyAsync(
    _dst: *mut c_void,
    _src: *const c_void,
    _count: usize,
    _kind: i32,
    stream: cudaStream_t,
) -> cudaError_t {
    guard(|| ordered_noop(stream))
}

#[no_mangle]
pub unsafe extern "C" fn cudaMemsetAsync(
    _dev_ptr: *mut c_void,
    _value: i32,
    _count: usize,
    stream: cudaStream_t,
) -> cudaError_t {
    guard(|| ordered_noop(stream))
}

/// `cudaMallocPitch`: the driver's `cuMemAllocPitch_v2` (the real runtime's path; 4-byte
/// accesses).
#[no_mangle]
pub unsafe extern "C" fn cudaMallocPitch(
    dev_ptr: *mut *mut c_void,
    pitch: *mut usize,
    width: usize,
    height: usize,
) -> cudaError_t {
    guard(|| {
        if dev_ptr.is_null() {
            return Err(cudaErrorInvalidValue);
        }
        state::ensure_ctx()?;
        drv!(mem_alloc_pitch(
            dev_ptr.cast::<u64>(),
            pitch,
            width,
            height,
            4
        ))
    })
}

/// `cudaMallocManaged` (`cudaMemAttachGlobal` = 1, `cudaMemAttachHost` = 2):
/// `cuMemAllocManaged`.
#[no_mangle]
pub unsafe extern "C" fn cudaMallocManaged(
    dev_ptr: *mut *mut c_void,
    size: usize,
    flags: u32,
) -> cudaError_t {
    guard(|| {
        if dev_ptr.is_null() {
            return Err(cudaErrorInvalidValue);
        }
        state::ensure_ctx()?;
        drv!(mem_alloc_managed(dev_ptr.cast::<u64>(), size, flags))
    })
}

/// `cudaMallocAsync`: `cuMemAllocAsync` (the current pool of the stream's device).
#[no_mangle]
pub unsafe extern "C" fn cudaMallocAsync(
    dev_ptr: *mut *mut c_void,
    size: usize,
    stream: cudaStream_t,
) -> cudaError_t {
    guard(|| {
        state::ensure_ctx()?;
        drv!(mem_alloc_async(dev_ptr.cast::<u64>(), size, stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaMallocAsync_ptsz(
    dev_ptr: *mut *mut c_void,
    size: usize,
    stream: cudaStream_t,
) -> cudaError_t {
    guard(|| {
        state::ensure_ctx()?;
        drv!(mem_alloc_async_ptsz(dev_ptr.cast::<u64>(), size, stream))
    })
}

/// `cudaMallocFromPoolAsync`: `cuMemAllocFromPoolAsync` (a `cudaMemPool_t` is a `CUmemoryPool`).
#[no_mangle]
pub unsafe extern "C" fn cudaMallocFromPoolAsync(
    dev_ptr: *mut *mut c_void,
    size: usize,
    pool: *mut c_void,
    stream: cudaStream_t,
) -> cudaError_t {
    guard(|| {
        state::ensure_ctx()?;
        drv!(mem_alloc_from_pool_async(
            dev_ptr.cast::<u64>(),
            size,
            pool,
            stream
        ))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaMallocFromPoolAsync_ptsz(
    dev_ptr: *mut *mut c_void,
    size: usize,
    pool: *mut c_void,
    stream: cudaStream_t,
) -> cudaError_t {
    guard(|| {
        state::ensure_ctx()?;
        drv!(mem_alloc_from_pool_async_ptsz(
            dev_ptr.cast::<u64>(),
            size,
            pool,
            stream
        ))
    })
}

/// `cudaFreeAsync`: `cuMemFreeAsync`.
#[no_mangle]
pub unsafe extern "C" fn cudaFreeAsync(dev_ptr: *mut c_void, stream: cudaStream_t) -> cudaError_t {
    guard(|| {
        state::ensure_ctx()?;
        drv!(mem_free_async(dev_ptr as u64, stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaFreeAsync_ptsz(
    dev_ptr: *mut c_void,
    stream: cudaStream_t,
) -> cudaError_t {
    guard(|| {
        state::ensure_ctx()?;
        drv!(mem_free_async_ptsz(dev_ptr as u64, stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaDeviceGetDefaultMemPool(
    pool: *mut *mut c_void,
    device: i32,
) -> cudaError_t {
    guard(|| drv!(device_get_default_mem_pool(pool, device)))
}

#[no_mangle]
pub unsafe extern "C" fn cudaDeviceGetMemPool(pool: *mut *mut c_void, device: i32) -> cudaError_t {
    guard(|| drv!(device_get_mem_pool(pool, device)))
}

#[no_mangle]
pub unsafe extern "C" fn cudaDeviceSetMemPool(device: i32, pool: *mut c_void) -> cudaError_t {
    guard(|| drv!(device_set_mem_pool(device, pool)))
}

/// `cudaMemPoolCreate`: `cudaMemPoolProps` has the layout of `CUmemPoolProps`.
#[no_mangle]
pub unsafe extern "C" fn cudaMemPoolCreate(
    pool: *mut *mut c_void,
    props: *const c_void,
) -> cudaError_t {
    guard(|| drv!(mem_pool_create(pool, props)))
}

#[no_mangle]
pub unsafe extern "C" fn cudaMemPoolDestroy(pool: *mut c_void) -> cudaError_t {
    guard(|| drv!(mem_pool_destroy(pool)))
}

#[no_mangle]
pub unsafe extern "C" fn cudaMemPoolTrimTo(pool: *mut c_void, min_bytes: usize) -> cudaError_t {
    guard(|| drv!(mem_pool_trim_to(pool, min_bytes)))
}

/// `cudaMemPoolSetAttribute`: `cudaMemPoolAttr` has the values of `CUmemPool_attribute`.
#[no_mangle]
pub unsafe extern "C" fn cudaMemPoolSetAttribute(
    pool: *mut c_void,
    attr: i32,
    value: *mut c_void,
) -> cudaError_t {
    guard(|| drv!(mem_pool_set_attribute(pool, attr, value)))
}

#[no_mangle]
pub unsafe extern "C" fn cudaMemPoolGetAttribute(
    pool: *mut c_void,
    attr: i32,
    value: *mut c_void,
) -> cudaError_t {
    guard(|| drv!(mem_pool_get_attribute(pool, attr, value)))
}
