//! A side task's device-memory budget, per GPU, enforced in the allocation hooks
//! (`interpose/src/hooks/{memory,pool,vmm}.rs`: every allocation path of the driver; the runtime's
//! `cudaMalloc*` reach them through its driver pointers, which are our wrappers, and the check does
//! not depend on the re-entrancy guard).
//!
//! The limit on GPU `d` is `FREERIDE_MEM_BUDGET_MB` (per GPU; unset or 0: none) and, when nonzero,
//! GPU `d`'s grant block's `mem_budget_bytes` less what its other side tasks hold (the agent's
//! `side_mem_held_bytes` less this process's own bytes on `d`; see `Grant::mem_limit_for`), the
//! smaller wins: the agent's figure is for all the GPU's side tasks together. An allocation that
//! would take the bytes held on its GPU over the limit fails with `CUDA_ERROR_OUT_OF_MEMORY`
//! without reaching the real allocator; a trainer never reaches this module. Bytes are reserved
//! before the real call (so two threads cannot both squeeze under the limit) and given back if it
//! fails. What each allocation holds lives in fixed lock-free tables ([`crate::memtable`]): device
//! pointers here, physical allocations of the virtual memory API in [`super::vmm`]; an allocation
//! that finds its table full stays charged for the life of the process (conservative). Nothing
//! here takes a lock or calls the driver.
use crate::memtable::Table;
use std::sync::atomic::{AtomicU64, Ordering};

/// GPUs whose memory is counted apart (device ordinals 0..MAX_GPUS; others count as GPU 0's).
pub const MAX_GPUS: usize = 64;

pub const CUDA_ERROR_OUT_OF_MEMORY: i32 = 2;

/// Device pointer -> [bytes, device, 0].
static ALLOCS: Table<8192> = Table::new();
static HELD: [AtomicU64; MAX_GPUS] = [const { AtomicU64::new(0) }; MAX_GPUS];
/// Env limit in bytes (u64::MAX = none); 0 = not read yet.
static ENV_LIMIT: AtomicU64 = AtomicU64::new(0);
/// Allocations refused.
pub static REFUSED: AtomicU64 = AtomicU64::new(0);

/// The index of device `d` in the per-GPU figures.
pub fn gpu(d: i32) -> usize {
    if d >= 0 && (d as usize) < MAX_GPUS {
        d as usize
    } else {
        0
    }
}

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

/// The limit now (`grant_bytes`: the grant's limit for this process, 0 = none).
pub fn limit(grant_bytes: u64) -> u64 {
    let e = env_limit();
    if grant_bytes > 0 {
        e.min(grant_bytes)
    } else {
        e
    }
}

/// Bytes this process holds on device `d`.
pub fn held(d: i32) -> u64 {
    HELD[gpu(d)].load(Ordering::Relaxed)
}

/// Bytes this process holds on all its GPUs.
pub fn held_total() -> u64 {
    HELD.iter().map(|h| h.load(Ordering::Relaxed)).sum()
}

/// Reserves `bytes` on device `d` under `limit`; false = over budget (the caller fails the
/// allocation).
pub fn reserve(d: i32, bytes: u64, limit: u64) -> bool {
    let h = &HELD[gpu(d)];
    let mut cur = h.load(Ordering::Relaxed);
    loop {
        let Some(next) = cur.checked_add(bytes).filter(|&n| n <= limit) else {
            REFUSED.fetch_add(1, Ordering::Relaxed);
            return false;
        };
        match h.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(c) => cur = c,
        }
    }
}

/// Adds `bytes` on device `d` without a limit (an allocation that turned out larger than
/// reserved).
pub fn add(d: i32, bytes: u64) {
    HELD[gpu(d)].fetch_add(bytes, Ordering::AcqRel);
}

/// Gives `bytes` on device `d` back (a failed allocation, a free).
pub fn cancel(d: i32, bytes: u64) {
    let _ = HELD[gpu(d)].fetch_update(Ordering::AcqRel, Ordering::Relaxed, |h| {
        Some(h.saturating_sub(bytes))
    });
}

/// The real allocation succeeded at `ptr` on device `d`: remember what it holds.
pub fn commit(ptr: u64, bytes: u64, d: i32) {
    // A full table: the bytes stay charged (conservative).
    ALLOCS.insert(ptr, [bytes, gpu(d) as u64, 0]);
}

/// `ptr` was freed successfully: its bytes are no longer held.
pub fn release(ptr: u64) {
    if let Some([bytes, d, _]) = ALLOCS.remove(ptr) {
        cancel(d as i32, bytes);
    }
}

/// Fork child: device memory is not inherited.
pub fn reset_after_fork() {
    ALLOCS.clear();
    for h in &HELD {
        h.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_reserve_commit_release_per_gpu() {
        let mib = 1u64 << 20;
        let lim = 64 * mib;
        // Device 7 is this test's own (the other tests of the crate use others).
        let base = held(7);
        assert!(reserve(7, 48 * mib, lim + base));
        commit(0x7000_0000, 48 * mib, 7);
        assert!(!reserve(7, 48 * mib, lim + base));
        // Another GPU has its own figure.
        assert!(reserve(6, 48 * mib, lim + held(6)));
        cancel(6, 48 * mib);
        release(0x7000_0000);
        assert!(reserve(7, 48 * mib, lim + base));
        cancel(7, 48 * mib);
        assert_eq!(held(7), base);
        assert_eq!(gpu(-1), 0);
        assert_eq!(gpu(1000), 0);
        assert_eq!(limit(0), env_limit());
        assert_eq!(limit(5).min(5), 5);
    }
}
