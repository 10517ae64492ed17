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
