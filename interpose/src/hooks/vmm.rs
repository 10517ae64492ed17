//! The virtual memory API (PyTorch's `expandable_segments`, NCCL's buffers): `cuMemCreate` (the
//! physical allocation, charged to a side task's budget on the device its location names),
//! `cuMemRetainAllocationHandle`, `cuMemRelease`, `cuMemMap`, `cuMemUnmap`, all recorded; a side
//! task's charge lasts while a handle or a mapping refers to the memory ([`crate::gate::vmm`]).
//! `cuMemAddressReserve`/`Free` and `cuMemSetAccess` hold no memory and are not hooked.
//!
//! No current context is needed here (the device comes from the allocation's location: HAMi-core
//! crashed asking `cuCtxGetDevice` on threads that had none), nothing waits, and nothing is held
//! across the real call (NCCL creates its buffers this way while holding its own locks).

use super::memory::{mem_record, side_task};
use super::*;
use crate::gate;

pub(super) unsafe extern "C" fn w_cuMemCreate(
    handle: *mut u64,
    size: usize,
    prop: *const MemLocated,
    flags: u64,
) -> c_int {
    let api = Api::CuMemCreate;
    let Some(real) = real_fn::<DrvMemCreate>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let g = rt::enter();
    let t0 = now_ns();
    // SAFETY: the caller's props, which the driver reads too.
    let dev = unsafe { MemLocated::device_of(prop) };
    let bytes = size as u64;
    // Host memory (a host location) is no GPU's: not charged.
    let charged = dev >= 0 && side_task();
    let none = std::ptr::null_mut();
    if charged && !gate::mem_reserve(dev, bytes) {
        let r = gate::membudget::CUDA_ERROR_OUT_OF_MEMORY;
        mem_record(&g, Kind::MemAlloc, api, t0, none, [bytes, 0, 0], r, dev);
        return r;
    }
    // SAFETY: pass-through.
    let r = unsafe { real(handle, size, prop, flags) };
    let h = if r == 0 && !handle.is_null() {
        // SAFETY: on success the driver wrote *handle.
        unsafe { *handle }
    } else {
        0
    };
    if charged {
        if h != 0 {
            gate::vmm::created(h, bytes, dev);
        } else {
            gate::membudget::cancel(dev, bytes);
        }
    }
    mem_record(&g, Kind::MemAlloc, api, t0, none, [bytes, h, 0], r, dev);
    r
}

pub(super) unsafe extern "C" fn w_cuMemRetainAllocationHandle(handle: *mut u64, addr: P) -> c_int {
    let api = Api::CuMemRetainAllocationHandle;
    let Some(real) = real_fn::<DrvMemRetain>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let g = rt::enter();
    let t0 = now_ns();
    // SAFETY: pass-through.
    let r = unsafe { real(handle, addr) };
    let h = if r == 0 && !handle.is_null() {
        // SAFETY: on success the driver wrote *handle.
        unsafe { *handle }
    } else {
        0
    };
    if h != 0 && side_task() {
        gate::vmm::retained(h);
    }
    let none = std::ptr::null_mut();
    mem_record(&g, Kind::MemAlloc, api, t0, none, [0, h, 0], r, -1);
    r
}

pub(super) unsafe extern "C" fn w_cuMemRelease(handle: u64) -> c_int {
    let api = Api::CuMemRelease;
    let Some(real) = real_fn::<DrvMemRelease>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let g = rt::enter();
    let t0 = now_ns();
    // SAFETY: pass-through.
    let r = unsafe { real(handle) };
    if r == 0 && side_task() {
        gate::vmm::released(handle);
    }
    let none = std::ptr::null_mut();
    mem_record(&g, Kind::MemFree, api, t0, none, [0, handle, 0], r, -1);
    r
}

pub(super) unsafe extern "C" fn w_cuMemMap(
    va: u64,
    size: usize,
    offset: usize,
    handle: u64,
    flags: u64,
) -> c_int {
    let api = Api::CuMemMap;
    let Some(real) = real_fn::<DrvMemMap>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let g = rt::enter();
    let t0 = now_ns();
    // SAFETY: pass-through.
    let r = unsafe { real(va, size, offset, handle, flags) };
    if r == 0 && side_task() {
        gate::vmm::mapped(va, size as u64, handle);
    }
    let none = std::ptr::null_mut();
    mem_record(
        &g,
        Kind::MemMap,
        api,
        t0,
        none,
        [size as u64, va, handle],
        r,
        -1,
    );
    r
}

pub(super) unsafe extern "C" fn w_cuMemUnmap(va: u64, size: usize) -> c_int {
    let api = Api::CuMemUnmap;
    let Some(real) = real_fn::<DrvMemUnmap>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let g = rt::enter();
    let t0 = now_ns();
    // SAFETY: pass-through.
    let r = unsafe { real(va, size) };
    if r == 0 && side_task() {
        gate::vmm::unmapped(va, size as u64);
    }
    let none = std::ptr::null_mut();
    mem_record(
        &g,
        Kind::MemUnmap,
        api,
        t0,
        none,
        [size as u64, va, 0],
        r,
        -1,
    );
    r
}
