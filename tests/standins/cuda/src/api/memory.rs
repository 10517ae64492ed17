//! Device memory (accounting only, fake addresses) and copies (no-ops; the async ones are ordered
//! on their stream).
use crate::guard::{guard, out, CuResult};
use crate::state;
use crate::types::*;
use simgpu::{Device, Op, SimError};
use std::ffi::c_void;

fn sim_err(e: SimError) -> CUresult {
    match e {
        SimError::OutOfMemory => CUDA_ERROR_OUT_OF_MEMORY,
        SimError::InvalidValue => CUDA_ERROR_INVALID_VALUE,
        SimError::NoDevice => CUDA_ERROR_INVALID_DEVICE,
        SimError::Os(_) => CUDA_ERROR_OPERATING_SYSTEM,
    }
}

fn free(dptr: CUdeviceptr) -> CuResult {
    if dptr == 0 {
        return Ok(());
    }
    let dev = simgpu::memory::device_of(dptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    Device::get(dev)
        .map_err(sim_err)?
        .mem_free(dptr)
        .map_err(sim_err)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult {
    guard(|| {
        if dptr.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let addr = state::current()?
            .device
            .mem_alloc(bytesize as u64)
            .map_err(sim_err)?;
        out(dptr, addr)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    hstream: CUstream,
) -> CUresult {
    guard(|| {
        if dptr.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let stream = state::stream(hstream)?;
        let addr = stream
            .device()
            .mem_alloc(bytesize as u64)
            .map_err(sim_err)?;
        out(dptr, addr)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync_ptsz(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    hstream: CUstream,
) -> CUresult {
    cuMemAllocAsync(dptr, bytesize, hstream)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    guard(|| {
        state::require_init()?;
        free(dptr)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(dptr: CUdeviceptr, hstream: CUstream) -> CUresult {
    guard(|| {
        let stream = state::stream(hstream)?;
        let dev = simgpu::memory::device_of(dptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        Device::get(dev).map_err(sim_err)?;
        // Freed when the stream reaches this point.
        stream.enqueue(vec![Op::Host(Box::new(move || {
            let _ = free(dptr);
        }))]);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync_ptsz(dptr: CUdeviceptr, hstream: CUstream) -> CUresult {
    cuMemFreeAsync(dptr, hstream)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    guard(|| {
        let (f, t) = state::current()?.device.mem_info();
        out(free, f as usize)?;
        out(total, t as usize)
    })
}

fn sync_copy() -> CuResult {
    state::current().map(|_| ())
}

fn async_copy(hstream: CUstream) -> CuResult {
    state::stream(hstream)?.enqueue(vec![Op::Host(Box::new(|| {}))]);
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(
    _dst: CUdeviceptr,
    _src: *const c_void,
    _n: usize,
) -> CUresult {
    guard(sync_copy)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(
    _dst: *mut c_void,
    _src: CUdeviceptr,
    _n: usize,
) -> CUresult {
    guard(sync_copy)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoD_v2(
    _dst: CUdeviceptr,
    _src: CUdeviceptr,
    _n: usize,
) -> CUresult {
    guard(sync_copy)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8_v2(_dst: CUdeviceptr, _uc: u8, _n: usize) -> CUresult {
    guard(sync_copy)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32_v2(_dst: CUdeviceptr, _ui: u32, _n: usize) -> CUresult {
    guard(sync_copy)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    _dst: CUdeviceptr,
    _src: *const c_void,
    _n: usize,
    hstream: CUstream,
) -> CUresult {
    guard(|| async_copy(hstream))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2_ptsz(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
    hstream: CUstream,
) -> CUresult {
    cuMemcpyHtoDAsync_v2(dst, src, n, hstream)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    _dst: *mut c_void,
    _src: CUdeviceptr,
    _n: usize,
    hstream: CUstream,
) -> CUresult {
    guard(|| async_copy(hstream))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2_ptsz(
    dst: *mut c_void,
    src: CUdeviceptr,
    n: usize,
    hstream: CUstream,
) -> CUresult {
    cuMemcpyDtoHAsync_v2(dst, src, n, hstream)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(
    _dst: CUdeviceptr,
    _src: CUdeviceptr,
    _n: usize,
    hstream: CUstream,
) -> CUresult {
    guard(|| async_copy(hstream))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2_ptsz(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
    hstream: CUstream,
) -> CUresult {
    cuMemcpyDtoDAsync_v2(dst, src, n, hstream)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8Async(
    _dst: CUdeviceptr,
    _uc: u8,
    _n: usize,
    hstream: CUstream,
) -> CUresult {
    guard(|| async_copy(hstream))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8Async_ptsz(
    dst: CUdeviceptr,
    uc: u8,
    n: usize,
    hstream: CUstream,
) -> CUresult {
    cuMemsetD8Async(dst, uc, n, hstream)
}
