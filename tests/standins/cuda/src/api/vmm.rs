//! The virtual memory management API (what PyTorch's `expandable_segments` and NCCL use):
//! `cuMemGetAllocationGranularity`, `cuMemCreate`, `cuMemRelease`, `cuMemRetainAllocationHandle`,
//! `cuMemAddressReserve`, `cuMemAddressFree`, `cuMemMap`, `cuMemUnmap`, `cuMemSetAccess`.
//!
//! As the real driver does: a physical allocation (`cuMemCreate`, a multiple of the 2 MiB
//! granularity) is counted on its device at creation and freed when nothing refers to it any
//! more: neither its handle (released with `cuMemRelease`; `cuMemRetainAllocationHandle` hands out
//! one more reference) nor any mapping of it (`cuMemMap` .. `cuMemUnmap`). Virtual address ranges
//! are the process's own (`cuMemAddressReserve`, above every device's range of plain
//! allocations); a mapping must lie inside one reservation and overlap no other, and
//! `cuMemUnmap` must cover whole mappings. None of these needs a current context (a location
//! names the device). A host location (`CU_MEM_LOCATION_TYPE_HOST*`) makes host memory: nothing
//! is counted on a device.
use super::memory::sim_err;
use crate::guard::{guard, out, read, CuResult};
use crate::handles::Registry;
use crate::state;
use crate::types::*;
use simgpu::Device;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// `cuMemGetAllocationGranularity` (minimum and recommended, as on current GPUs).
pub const GRANULARITY: u64 = 2 << 20;
/// Where this process's reserved virtual ranges begin (above the 64 devices' ranges of
/// `simgpu::memory`).
const VA_BASE: u64 = 96 << simgpu::memory::ADDR_SHIFT;

/// A physical allocation. Its device memory goes back when the last reference (its registry
/// entry, a mapping) is dropped.
struct Physical {
    size: u64,
    /// The device memory behind it (None: host memory).
    backing: Option<(Arc<Device>, u64)>,
    /// References through handles (`cuMemCreate` + retains - releases).
    handles: AtomicU32,
}

impl Drop for Physical {
    fn drop(&mut self) {
        if let Some((d, addr)) = &self.backing {
            let _ = d.mem_free(*addr);
        }
    }
}

struct Mapping {
    size: u64,
    phys: Arc<Physical>,
}

static HANDLES: Registry<Physical> = Registry::new();
/// Reserved ranges: base -> size.
static RESERVED: Mutex<BTreeMap<u64, u64>> = Mutex::new(BTreeMap::new());
/// Mappings: virtual address -> mapping.
static MAPPED: Mutex<BTreeMap<u64, Mapping>> = Mutex::new(BTreeMap::new());
static NEXT_VA: AtomicU64 = AtomicU64::new(VA_BASE);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn granular(size: u64) -> CuResult<u64> {
    if size == 0 || !size.is_multiple_of(GRANULARITY) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(size)
}

/// The device a pinned allocation of `prop` is on (None: host memory).
fn location(prop: &CUmemAllocationProp) -> CuResult<Option<CUdevice>> {
    if prop.type_ != MEM_ALLOCATION_TYPE_PINNED {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    match prop.location.type_ {
        MEM_LOCATION_TYPE_DEVICE => {
            state::check_device(prop.location.id)?;
            Ok(Some(prop.location.id))
        }
        MEM_LOCATION_TYPE_HOST
        | MEM_LOCATION_TYPE_HOST_NUMA
        | MEM_LOCATION_TYPE_HOST_NUMA_CURRENT => {
            state::require_init()?;
            Ok(None)
        }
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// Hands out one more handle reference to `phys` (its value: the object's address).
fn register(phys: Arc<Physical>) -> u64 {
    phys.handles.fetch_add(1, Ordering::AcqRel);
    HANDLES.insert(phys) as u64
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetAllocationGranularity(
    granularity: *mut usize,
    prop: *const CUmemAllocationProp,
    _option: i32,
) -> CUresult {
    guard(|| {
        location(read(prop)?)?;
        out(granularity, GRANULARITY as usize)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: u64,
) -> CUresult {
    guard(|| {
        if handle.is_null() || flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let size = granular(size as u64)?;
        let backing = match location(read(prop)?)? {
            Some(dev) => {
                let d = Device::get(dev).map_err(sim_err)?;
                let addr = d.mem_alloc(size).map_err(sim_err)?;
                Some((d, addr))
            }
            None => None,
        };
        let phys = Arc::new(Physical {
            size,
            backing,
            handles: AtomicU32::new(0),
        });
        out(handle, register(phys))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> CUresult {
    guard(|| {
        state::require_init()?;
        let phys = HANDLES
            .get(handle as usize)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if phys.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            HANDLES.remove(handle as usize);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemRetainAllocationHandle(
    handle: *mut CUmemGenericAllocationHandle,
    addr: *mut c_void,
) -> CUresult {
    guard(|| {
        state::require_init()?;
        if handle.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let a = addr as u64;
        let phys = lock(&MAPPED)
            .range(..=a)
            .next_back()
            .filter(|(va, m)| a < *va + m.size)
            .map(|(_, m)| m.phys.clone())
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        out(handle, register(phys))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAddressReserve(
    ptr: *mut CUdeviceptr,
    size: usize,
    alignment: usize,
    _addr: CUdeviceptr,
    flags: u64,
) -> CUresult {
    guard(|| {
        state::require_init()?;
        if ptr.is_null() || flags != 0 || (alignment != 0 && !alignment.is_power_of_two()) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let size = granular(size as u64)?;
        let align = (alignment as u64).max(GRANULARITY);
        // The hint `addr` is not honoured (the real driver may not either).
        let mut base = 0;
        NEXT_VA
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |next| {
                base = next.checked_next_multiple_of(align)?;
                base.checked_add(size)
            })
            .map_err(|_| CUDA_ERROR_OUT_OF_MEMORY)?;
        lock(&RESERVED).insert(base, size);
        out(ptr, base)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) -> CUresult {
    guard(|| {
        state::require_init()?;
        let mut r = lock(&RESERVED);
        if r.get(&ptr) != Some(&(size as u64)) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if lock(&MAPPED).range(ptr..ptr + size as u64).next().is_some() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        r.remove(&ptr);
        Ok(())
    })
}

/// Whether `[va, va + size)` lies inside one reserved range.
fn reserved(va: u64, size: u64) -> bool {
    lock(&RESERVED)
        .range(..=va)
        .next_back()
        .is_some_and(|(b, s)| va + size <= b + s)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemMap(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: CUmemGenericAllocationHandle,
    flags: u64,
) -> CUresult {
    guard(|| {
        state::require_init()?;
        // The offset into the allocation must be 0 (as in the real driver today).
        if flags != 0 || offset != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let size = granular(size as u64)?;
        let phys = HANDLES
            .get(handle as usize)
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if size > phys.size || !ptr.is_multiple_of(GRANULARITY) || !reserved(ptr, size) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let mut m = lock(&MAPPED);
        let before = m
            .range(..ptr)
            .next_back()
            .is_some_and(|(v, x)| v + x.size > ptr);
        if before || m.range(ptr..ptr + size).next().is_some() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        m.insert(ptr, Mapping { size, phys });
        Ok(())
    })
}

/// The mappings that tile `[va, va + size)` exactly, in order (None: the range is not whole
/// mappings back to back).
fn tiling(m: &BTreeMap<u64, Mapping>, va: u64, size: u64) -> Option<Vec<u64>> {
    let end = va.checked_add(size)?;
    let mut at = va;
    let mut v = vec![];
    for (&k, x) in m.range(va..end) {
        if k != at {
            return None;
        }
        at = k + x.size;
        v.push(k);
    }
    (at == end && !v.is_empty()).then_some(v)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CUresult {
    guard(|| {
        state::require_init()?;
        let mut m = lock(&MAPPED);
        let keys = tiling(&m, ptr, size as u64).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let gone: Vec<Mapping> = keys.iter().filter_map(|k| m.remove(k)).collect();
        drop(m);
        // The device memory of an allocation whose handle was released goes with its last mapping.
        drop(gone);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemSetAccess(
    ptr: CUdeviceptr,
    size: usize,
    desc: *const CUmemAccessDesc,
    count: usize,
) -> CUresult {
    guard(|| {
        state::require_init()?;
        if desc.is_null() || count == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        for i in 0..count {
            // SAFETY: the caller passes `count` descriptors (cuda.h's contract).
            let d = unsafe { &*desc.add(i) };
            if d.location.type_ != MEM_LOCATION_TYPE_DEVICE
                || !matches!(
                    d.flags,
                    MEM_ACCESS_FLAGS_PROT_NONE
                        | MEM_ACCESS_FLAGS_PROT_READ
                        | MEM_ACCESS_FLAGS_PROT_READWRITE
                )
            {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            state::check_device(d.location.id)?;
        }
        // The range must be mapped (the stand-in's kernels touch no memory: access is not kept).
        tiling(&lock(&MAPPED), ptr, size as u64)
            .map(|_| ())
            .ok_or(CUDA_ERROR_INVALID_VALUE)
    })
}
