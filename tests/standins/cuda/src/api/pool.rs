//! Stream-ordered memory pools: `cuDeviceGetDefaultMemPool`, `cuDeviceGet/SetMemPool`,
//! `cuMemPoolCreate/Destroy`, `cuMemPoolTrimTo`, `cuMemPoolGet/SetAttribute`,
//! `cuMemAllocAsync` (the current pool of the stream's device), `cuMemAllocFromPoolAsync`,
//! `cuMemFreeAsync`.
//!
//! As the real driver does, a pool keeps the memory freed into it (reserved on the device) while
//! what it keeps stays within its release threshold (`CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`, default
//! 0: a free gives the memory back to the device when the stream reaches it), reuses it for later
//! allocations of about its size (a kept block of `s` bytes serves requests of `s/2..=s`), gives
//! all it keeps back before failing an allocation with `CUDA_ERROR_OUT_OF_MEMORY`, and gives it
//! back on `cuMemPoolTrimTo`. An allocation is counted on the device at once (the stand-in does
//! not defer it to the stream). `cuMemFree_v2` of a pool's pointer frees it into its pool.
//! Device pools only (a host location is `CUDA_ERROR_NOT_SUPPORTED`).
use super::memory::sim_err;
use crate::guard::{guard, out, read, CuResult};
use crate::handles::Registry;
use crate::state;
use crate::types::*;
use simgpu::{Device, Op};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Default)]
struct Stock {
    release_threshold: u64,
    /// Bytes handed out now, and the most ever.
    used: u64,
    used_high: u64,
    reserved_high: u64,
    /// Device allocations the pool keeps, not in use: (address, bytes).
    kept: Vec<(u64, u64)>,
    /// In use: address -> bytes.
    live: HashMap<u64, u64>,
    destroyed: bool,
}

impl Stock {
    fn kept_bytes(&self) -> u64 {
        self.kept.iter().map(|k| k.1).sum()
    }
    fn note_high(&mut self) {
        self.used_high = self.used_high.max(self.used);
        self.reserved_high = self.reserved_high.max(self.used + self.kept_bytes());
    }
}

pub struct Pool {
    pub dev: CUdevice,
    device: Arc<Device>,
    default: bool,
    stock: Mutex<Stock>,
}

static POOLS: Registry<Pool> = Registry::new();
/// Per device: its default pool and its current pool (handles).
static DEVICE_POOLS: Mutex<Vec<(CUdevice, usize, usize)>> = Mutex::new(Vec::new());
/// Address -> the pool it came from.
static OWNER: Mutex<Option<HashMap<u64, usize>>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pool {
    fn new(dev: CUdevice, default: bool) -> CuResult<Arc<Pool>> {
        Ok(Arc::new(Pool {
            dev,
            device: Device::get(dev).map_err(sim_err)?,
            default,
            stock: Mutex::new(Stock::default()),
        }))
    }

    /// Gives the kept blocks back to the device until at most `keep` bytes are kept.
    fn trim(&self, st: &mut Stock, keep: u64) {
        st.kept.sort_by_key(|k| k.1);
        while st.kept_bytes() > keep {
            let Some((addr, _)) = st.kept.pop() else {
                break;
            };
            let _ = self.device.mem_free(addr);
            lock(&OWNER).get_or_insert_with(HashMap::new).remove(&addr);
        }
    }

    fn alloc(self: &Arc<Self>, handle: usize, bytes: u64) -> CuResult<u64> {
        if bytes == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let mut st = lock(&self.stock);
        let reuse = st
            .kept
            .iter()
            .position(|&(_, s)| s >= bytes && s / 2 <= bytes);
        let (addr, size) = match reuse {
            Some(i) => st.kept.swap_remove(i),
            None => {
                let a = match self.device.mem_alloc(bytes) {
                    Ok(a) => a,
                    Err(simgpu::SimError::OutOfMemory) => {
                        self.trim(&mut st, 0);
                        self.device.mem_alloc(bytes).map_err(sim_err)?
                    }
                    Err(e) => return Err(sim_err(e)),
                };
                lock(&OWNER)
                    .get_or_insert_with(HashMap::new)
                    .insert(a, handle);
                (a, bytes)
            }
        };
        st.live.insert(addr, size);
        st.used += size;
        st.note_high();
        Ok(addr)
    }

    fn free(&self, addr: u64) -> CuResult {
        let mut st = lock(&self.stock);
        let size = st.live.remove(&addr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        st.used = st.used.saturating_sub(size);
        if !st.destroyed && st.kept_bytes() + size <= st.release_threshold {
            st.kept.push((addr, size));
        } else {
            lock(&OWNER).get_or_insert_with(HashMap::new).remove(&addr);
            self.device.mem_free(addr).map_err(sim_err)?;
        }
        Ok(())
    }
}

fn pool(h: CUmemoryPool) -> CuResult<Arc<Pool>> {
    state::require_init()?;
    POOLS.get(h as usize).ok_or(CUDA_ERROR_INVALID_VALUE)
}

/// Device `dev`'s (default, current) pool handles, the default made on first use.
fn device_pools(dev: CUdevice) -> CuResult<(usize, usize)> {
    state::check_device(dev)?;
    let mut d = lock(&DEVICE_POOLS);
    if let Some(&(_, def, cur)) = d.iter().find(|p| p.0 == dev) {
        return Ok((def, cur));
    }
    let h = POOLS.insert(Pool::new(dev, true)?);
    d.push((dev, h, h));
    Ok((h, h))
}

/// The pool `addr` was allocated from, if any (`cuMemFree_v2` of a pool allocation).
pub fn owner(addr: u64) -> Option<Arc<Pool>> {
    let h = *lock(&OWNER).get_or_insert_with(HashMap::new).get(&addr)?;
    POOLS.get(h)
}

/// Frees a pool allocation now (`cuMemFree_v2`, or when a stream reaches a `cuMemFreeAsync`).
pub fn free_now(addr: u64) -> Option<CuResult> {
    owner(addr).map(|p| p.free(addr))
}

fn alloc_from(h: usize, bytes: usize) -> CuResult<u64> {
    let p = POOLS.get(h).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if lock(&p.stock).destroyed {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    p.alloc(h, bytes as u64)
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetDefaultMemPool(
    pool_out: *mut CUmemoryPool,
    dev: CUdevice,
) -> CUresult {
    guard(|| out(pool_out, device_pools(dev)?.0 as CUmemoryPool))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetMemPool(
    pool_out: *mut CUmemoryPool,
    dev: CUdevice,
) -> CUresult {
    guard(|| out(pool_out, device_pools(dev)?.1 as CUmemoryPool))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceSetMemPool(dev: CUdevice, h: CUmemoryPool) -> CUresult {
    guard(|| {
        device_pools(dev)?;
        if pool(h)?.dev != dev {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let mut d = lock(&DEVICE_POOLS);
        if let Some(e) = d.iter_mut().find(|p| p.0 == dev) {
            e.2 = h as usize;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolCreate(
    pool_out: *mut CUmemoryPool,
    props: *const CUmemPoolProps,
) -> CUresult {
    guard(|| {
        state::require_init()?;
        let p = read(props)?;
        if p.alloc_type != MEM_ALLOCATION_TYPE_PINNED {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if p.location.type_ != MEM_LOCATION_TYPE_DEVICE {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        state::check_device(p.location.id)?;
        let h = POOLS.insert(Pool::new(p.location.id, false)?);
        out(pool_out, h as CUmemoryPool)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolDestroy(h: CUmemoryPool) -> CUresult {
    guard(|| {
        let p = pool(h)?;
        if p.default {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // A device whose current pool this was goes back to its default pool.
        for e in lock(&DEVICE_POOLS).iter_mut() {
            if e.2 == h as usize {
                e.2 = e.1;
            }
        }
        let mut st = lock(&p.stock);
        st.destroyed = true;
        p.trim(&mut st, 0);
        // Allocations still out are freed to the device as they are freed.
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolTrimTo(h: CUmemoryPool, min_bytes_to_keep: usize) -> CUresult {
    guard(|| {
        let p = pool(h)?;
        let mut st = lock(&p.stock);
        p.trim(&mut st, min_bytes_to_keep as u64);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolSetAttribute(
    h: CUmemoryPool,
    attr: i32,
    value: *mut c_void,
) -> CUresult {
    guard(|| {
        let p = pool(h)?;
        if value.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let mut st = lock(&p.stock);
        match attr {
            MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES
            | MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC
            | MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES => Ok(()),
            MEMPOOL_ATTR_RELEASE_THRESHOLD => {
                // SAFETY: this attribute's value is a cuuint64_t (cuda.h).
                st.release_threshold = unsafe { *value.cast::<u64>() };
                let keep = st.release_threshold;
                p.trim(&mut st, keep);
                Ok(())
            }
            MEMPOOL_ATTR_RESERVED_MEM_HIGH | MEMPOOL_ATTR_USED_MEM_HIGH => {
                // SAFETY: a cuuint64_t; only 0 (reset the high watermark) is allowed.
                if unsafe { *value.cast::<u64>() } != 0 {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                if attr == MEMPOOL_ATTR_USED_MEM_HIGH {
                    st.used_high = st.used;
                } else {
                    st.reserved_high = st.used + st.kept_bytes();
                }
                Ok(())
            }
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemPoolGetAttribute(
    h: CUmemoryPool,
    attr: i32,
    value: *mut c_void,
) -> CUresult {
    guard(|| {
        let p = pool(h)?;
        let st = lock(&p.stock);
        let v64 = match attr {
            MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES
            | MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC
            | MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES => {
                return out(value.cast::<i32>(), 1);
            }
            MEMPOOL_ATTR_RELEASE_THRESHOLD => st.release_threshold,
            MEMPOOL_ATTR_RESERVED_MEM_CURRENT => st.used + st.kept_bytes(),
            MEMPOOL_ATTR_RESERVED_MEM_HIGH => st.reserved_high,
            MEMPOOL_ATTR_USED_MEM_CURRENT => st.used,
            MEMPOOL_ATTR_USED_MEM_HIGH => st.used_high,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        };
        out(value.cast::<u64>(), v64)
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
        let (_, cur) = device_pools(stream.device().id())?;
        out(dptr, alloc_from(cur, bytesize)?)
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
pub unsafe extern "C" fn cuMemAllocFromPoolAsync(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    h: CUmemoryPool,
    hstream: CUstream,
) -> CUresult {
    guard(|| {
        if dptr.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        state::stream(hstream)?;
        pool(h)?;
        out(dptr, alloc_from(h as usize, bytesize)?)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync_ptsz(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    h: CUmemoryPool,
    hstream: CUstream,
) -> CUresult {
    cuMemAllocFromPoolAsync(dptr, bytesize, h, hstream)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(dptr: CUdeviceptr, hstream: CUstream) -> CUresult {
    guard(|| {
        let stream = state::stream(hstream)?;
        let dev = simgpu::memory::device_of(dptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        Device::get(dev).map_err(sim_err)?;
        // Freed when the stream reaches this point.
        stream.enqueue(vec![Op::Host(Box::new(move || {
            let _ = super::memory::free(dptr);
        }))]);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync_ptsz(dptr: CUdeviceptr, hstream: CUstream) -> CUresult {
    cuMemFreeAsync(dptr, hstream)
}
