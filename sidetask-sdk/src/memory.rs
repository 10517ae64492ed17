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
