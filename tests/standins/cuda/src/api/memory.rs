//! Device memory (accounting only, fake addresses): `cuMemAlloc_v2`, `cuMemAllocPitch_v2`,
//! `cuMemAllocManaged`, `cuMemFree_v2`, `cuMemGetInfo_v2`; copies (no-ops; the async ones are
//! ordered on their stream). Pools are in [`super::pool`], the virtual memory API in
//! [`super::vmm`].
use crate::guard::{guard, out, CuResult};
use crate::state;
use crate::types::*;
use simgpu::{Device, Op, SimError};
use std::ffi::c_void;

/// The row alignment of a pitched allocation (`cuMemAllocPitch_v2`).
pub const PITCH_ALIGN: usize = 512;

pub(super) fn sim_err(e: SimError) -> CUresult {
    match e {
        SimError::OutOfMemory => CUDA_ERROR_OUT_OF_MEMORY,
        SimError::InvalidValue => CUDA_ERROR_INVALID_VALUE,
        SimError::NoDevice => CUDA_ERROR_INVALID_DEVICE,
        SimError::Os(_) => CUDA_ERROR_OPERATING_SYSTEM,
    }
}

/// Frees an allocation (a pool's goes back to its pool).
pub(super) fn free(dptr: CUdeviceptr) -> CuResult {
    if dptr == 0 {
        return Ok(());
    }
    if let Some(r) = super::pool::free_now(dptr) {
        return r;
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

/// `cuMemAllocPitch_v2`: rows of `width` bytes padded to [`PITCH_ALIGN`]; `element` (the widest
/// access) must be 4, 8 or 16 bytes, as the real driver requires.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    element: u32,
) -> CUresult {
    guard(|| {
        if dptr.is_null() || pitch.is_null() || width == 0 || height == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if !matches!(element, 4 | 8 | 16) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let p = width
            .checked_next_multiple_of(PITCH_ALIGN)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let bytes = p.checked_mul(height).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
        let addr = state::current()?
            .device
            .mem_alloc(bytes as u64)
            .map_err(sim_err)?;
        out(pitch, p)?;
        out(dptr, addr)
    })
}

/// `cuMemAllocManaged`: counted whole on the current context's device (the stand-in does not
/// migrate pages; a real GPU holds what is resident, at most this).
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    flags: u32,
) -> CUresult {
    guard(|| {
        if dptr.is_null() || bytesize == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if flags != MEM_ATTACH_GLOBAL && flags != MEM_ATTACH_HOST {
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
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    guard(|| {
        state::require_init()?;
        free(dptr)
    })
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
