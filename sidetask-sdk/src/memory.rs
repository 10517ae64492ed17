//! The device-memory budget of a side task: the grant's `mem_budget_bytes` (0: the agent set
//! none) and the configured cap, whichever is lower. The SDK accounts only what this task holds
//! through it; the agent's budget covers all side tasks on the GPU, so it is the agent's job to
//! give each GPU's side tasks a budget that fits.
use crate::error::{Result, SdkError};
use std::sync::atomic::{AtomicU64, Ordering};

const NO_LIMIT: u64 = u64::MAX;

#[derive(Debug)]
pub struct MemBudget {
    held: AtomicU64,
    cap: u64,
    grant_limit: AtomicU64,
}

impl MemBudget {
    pub fn new(cap: Option<u64>) -> Self {
        MemBudget {
            held: AtomicU64::new(0),
            cap: cap.unwrap_or(NO_LIMIT),
            grant_limit: AtomicU64::new(NO_LIMIT),
        }
    }

    /// Updates the agent's budget from a grant (0 means "none given": no limit from the agent).
    pub fn set_grant_limit(&self, bytes: u64) {
        let v = if bytes == 0 { NO_LIMIT } else { bytes };
        self.grant_limit.store(v, Ordering::Relaxed);
    }

    /// The lower of the cap and the grant's budget (`u64::MAX`: no limit).
    pub fn limit(&self) -> u64 {
        self.cap.min(self.grant_limit.load(Ordering::Relaxed))
    }

    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Reserves `bytes`, or says why not (nothing is reserved then).
    pub fn reserve(&self, bytes: u64) -> Result<()> {
        let limit = self.limit();
        let mut held = self.held.load(Ordering::Relaxed);
        loop {
            let new = held.checked_add(bytes).filter(|n| *n <= limit);
            let Some(new) = new else {
                return Err(SdkError::OverBudget {
                    requested: bytes,
                    held,
                    limit,
                });
            };
            match self
                .held
                .compare_exchange_weak(held, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(h) => held = h,
            }
        }
    }

    pub fn release(&self, bytes: u64) {
        let _ = self
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |h| {
                Some(h.saturating_sub(bytes))
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_and_grant_limit() {
        let b = MemBudget::new(Some(1000));
        b.reserve(600).unwrap();
        match b.reserve(500) {
            Err(SdkError::OverBudget {
                requested: 500,
                held: 600,
                limit: 1000,
            }) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(b.held(), 600);
        b.set_grant_limit(700);
        assert!(b.reserve(200).is_err());
        b.reserve(100).unwrap();
        b.set_grant_limit(0);
        assert_eq!(b.limit(), 1000);
        b.release(700);
        assert_eq!(b.held(), 0);
        assert!(b.reserve(u64::MAX).is_err());
    }
}

/// Device allocations of one task, checked against its [`MemBudget`] (freed by `free`, or all at
/// once by `free_all` when the task ends).
#[derive(Debug)]
pub struct DeviceMemory {
    budget: std::sync::Arc<MemBudget>,
    live: std::collections::HashMap<u64, u64>,
}

impl DeviceMemory {
    pub fn new(budget: std::sync::Arc<MemBudget>) -> Self {
        DeviceMemory {
            budget,
            live: Default::default(),
        }
    }

    pub fn budget(&self) -> &MemBudget {
        &self.budget
    }

    /// Allocates `bytes` of device memory, or fails with `OverBudget` before touching the GPU.
    pub fn alloc(&mut self, gpu: &crate::gpu::Gpu, bytes: u64) -> Result<u64> {
        let size = usize::try_from(bytes.max(1))
            .map_err(|_| SdkError::Driver("allocation size does not fit usize".into()))?;
        self.budget.reserve(bytes)?;
        match gpu.raw_alloc(size) {
            Ok(p) => {
                self.live.insert(p, bytes);
                Ok(p)
            }
            Err(e) => {
                self.budget.release(bytes);
                Err(e)
            }
        }
    }

    pub fn free(&mut self, gpu: &crate::gpu::Gpu, ptr: u64) -> Result<()> {
        let bytes = self
            .live
            .remove(&ptr)
            .ok_or_else(|| SdkError::Driver(format!("0x{ptr:x} was not allocated by this task")))?;
        self.budget.release(bytes);
        gpu.raw_free(ptr)
    }

    pub fn free_all(&mut self, gpu: &crate::gpu::Gpu) {
        for (p, bytes) in std::mem::take(&mut self.live) {
            self.budget.release(bytes);
            let _ = gpu.raw_free(p);
        }
    }

    pub fn live_allocations(&self) -> usize {
        self.live.len()
    }
}
