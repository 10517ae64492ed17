//! A side task's device-memory budget, enforced in the allocation hooks (`cuMemAlloc_v2`,
//! `cuMemAllocAsync(_ptsz)`; `cudaMalloc` reaches `cuMemAlloc_v2` through the runtime's driver
//! pointer, which is our wrapper, and the check does not depend on the re-entrancy guard).
//!
//! The limit is `FREERIDE_MEM_BUDGET_MB` (unset or 0: none) and, when nonzero, the grant block's
//! `mem_budget_bytes` less what the GPU's other side tasks hold (the agent's `side_mem_held_bytes`
//! less this process's own bytes; see `Grant::mem_limit_for`), the smaller wins: the agent's
//! figure is for all the GPU's side tasks together. An allocation that would take the bytes held over the
//! limit fails with `CUDA_ERROR_OUT_OF_MEMORY` without reaching the real allocator; a trainer
//! never reaches this module. Bytes are reserved before the real call (so two threads cannot both
//! squeeze under the limit) and given back if it fails. Held bytes per pointer live in a fixed
//! open-addressed table ([`SLOTS`]); an allocation that finds the table full stays charged for
//! the life of the process (conservative). `cuMemFreeAsync` is not hooked by the interposer:
//! memory freed that way stays charged (documented limitation).
use std::sync::atomic::{AtomicU64, Ordering};

const SLOTS: usize = 8192;
const PROBES: usize = 64;
/// Key of a free slot, and of a deleted one.
const EMPTY: u64 = 0;
const TOMB: u64 = u64::MAX;

pub const CUDA_ERROR_OUT_OF_MEMORY: i32 = 2;

struct Slot {
    ptr: AtomicU64,
    bytes: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const SLOT_INIT: Slot = Slot {
    ptr: AtomicU64::new(EMPTY),
    bytes: AtomicU64::new(0),
};

static TABLE: [Slot; SLOTS] = [SLOT_INIT; SLOTS];
static HELD: AtomicU64 = AtomicU64::new(0);
/// Env limit in bytes (u64::MAX = none); 0 = not read yet.
static ENV_LIMIT: AtomicU64 = AtomicU64::new(0);
/// Allocations refused.
pub static REFUSED: AtomicU64 = AtomicU64::new(0);

fn env_limit() -> u64 {
    let v = ENV_LIMIT.load(Ordering::Relaxed);
    if v != 0 {
        return v;
    }
    let l = std::env::var("FREERIDE_MEM_BUDGET_MB")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|&mb| mb > 0)
        .map(|mb| mb.saturating_mul(1 << 20))
        .unwrap_or(u64::MAX);
    ENV_LIMIT.store(l, Ordering::Relaxed);
    l
}

/// The limit now (`grant_bytes`: the grant's `mem_budget_bytes`, 0 = none).
pub fn limit(grant_bytes: u64) -> u64 {
    let e = env_limit();
    if grant_bytes > 0 {
        e.min(grant_bytes)
    } else {
        e
    }
}

pub fn held() -> u64 {
    HELD.load(Ordering::Relaxed)
}

/// Reserves `bytes` under `limit`; false = over budget (the caller fails the allocation).
pub fn reserve(bytes: u64, limit: u64) -> bool {
    let mut cur = HELD.load(Ordering::Relaxed);
    loop {
        let Some(next) = cur.checked_add(bytes).filter(|&n| n <= limit) else {
            REFUSED.fetch_add(1, Ordering::Relaxed);
            return false;
        };
        match HELD.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(c) => cur = c,
        }
    }
}

/// The real allocation failed: give the reservation back.
pub fn cancel(bytes: u64) {
    let _ = HELD.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |h| {
        Some(h.saturating_sub(bytes))
    });
}

fn home(ptr: u64) -> usize {
    ((ptr >> 8).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize % SLOTS
}

/// The real allocation succeeded at `ptr`: remember what it holds.
pub fn commit(ptr: u64, bytes: u64) {
    if ptr == EMPTY || ptr == TOMB {
        return;
    }
    let h = home(ptr);
    for i in 0..PROBES {
        let s = &TABLE[(h + i) % SLOTS];
        let k = s.ptr.load(Ordering::Acquire);
        if (k == EMPTY || k == TOMB)
            && s.ptr
                .compare_exchange(k, ptr, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            s.bytes.store(bytes, Ordering::Release);
            return;
        }
    }
    // Table full around this pointer: the bytes stay charged (conservative).
}

/// `ptr` was freed successfully: its bytes are no longer held.
pub fn release(ptr: u64) {
    if ptr == EMPTY || ptr == TOMB {
        return;
    }
    let h = home(ptr);
    for i in 0..PROBES {
        let s = &TABLE[(h + i) % SLOTS];
        let k = s.ptr.load(Ordering::Acquire);
        if k == ptr {
            let b = s.bytes.swap(0, Ordering::AcqRel);
            s.ptr.store(TOMB, Ordering::Release);
            cancel(b);
            return;
        }
        if k == EMPTY {
            return;
        }
    }
}

/// Fork child: device memory is not inherited.
pub fn reset_after_fork() {
    for s in TABLE.iter() {
        s.ptr.store(EMPTY, Ordering::Relaxed);
        s.bytes.store(0, Ordering::Relaxed);
    }
    HELD.store(0, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_reserve_commit_release() {
        let mib = 1u64 << 20;
        let lim = 64 * mib;
        let base = held();
        assert!(reserve(48 * mib, lim + base));
        commit(0x7000_0000, 48 * mib);
        assert!(!reserve(48 * mib, lim + base));
        release(0x7000_0000);
        assert!(reserve(48 * mib, lim + base));
        cancel(48 * mib);
        assert_eq!(held(), base);
        assert_eq!(limit(0), env_limit());
        assert_eq!(limit(5).min(5), 5);
    }
}
