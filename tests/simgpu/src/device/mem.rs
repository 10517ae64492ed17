//! Device memory of a process on a simulated device, accounted across processes.
use super::{Device, SimError};
use crate::memory;
use crate::shm::DeviceShm;
use std::sync::atomic::Ordering::Relaxed;

impl Device {
    /// Allocates `size` bytes of device memory; returns its fake address.
    pub fn mem_alloc(&self, size: u64) -> Result<u64, SimError> {
        if size == 0 {
            return Err(SimError::InvalidValue);
        }
        for attempt in 0..2 {
            if attempt == 1 && !self.reap() {
                break;
            }
            let _g = self.shm.lock();
            let total = self.shm.mem_total.load(Relaxed);
            if !memory::fits(used_memory(&self.shm), total, size) {
                continue;
            }
            self.shm.slots[self.slot].mem_used.fetch_add(size, Relaxed);
            let addr = self
                .shm
                .next_addr
                .fetch_add(memory::footprint(size), Relaxed);
            self.allocs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(addr, size);
            return Ok(addr);
        }
        Err(SimError::OutOfMemory)
    }

    /// Frees an allocation of this process.
    pub fn mem_free(&self, addr: u64) -> Result<(), SimError> {
        let size = self
            .allocs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&addr)
            .ok_or(SimError::InvalidValue)?;
        let _g = self.shm.lock();
        let used = &self.shm.slots[self.slot].mem_used;
        used.store(used.load(Relaxed).saturating_sub(size), Relaxed);
        Ok(())
    }

    /// `(free, total)` device memory in bytes, across all (live) processes.
    pub fn mem_info(&self) -> (u64, u64) {
        self.reap();
        let _g = self.shm.lock();
        let total = self.shm.mem_total.load(Relaxed);
        (total.saturating_sub(used_memory(&self.shm)), total)
    }
}

fn used_memory(shm: &DeviceShm) -> u64 {
    shm.slots
        .iter()
        .filter(|s| s.pid.load(Relaxed) != 0)
        .map(|s| s.mem_used.load(Relaxed))
        .sum()
}
