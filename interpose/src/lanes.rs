//! Which lane of the process's ring a thread pushes to, and whether it owns it.
//!
//! The ring's last lane is the service lane: freeride's own threads (comm poller and waiters) and
//! every thread that finds no lane free push there, by compare-and-swap. Each other lane is
//! owned by at most one launching thread at a time, which pushes with plain stores
//! ([`freeride_abi::ring::RingView::push_lane_owned`]): no read-modify-write on the hook path.
//! A thread claims the lowest free lane the first time it pushes (slow path) and gives it back
//! when it exits, through a thread-local destructor that first moves the thread's own later
//! pushes (other destructors may still launch) to the service lane. A fork child starts with
//! every lane free (only the forking thread is left, and it claims again).
use std::sync::atomic::{AtomicU32, Ordering};

/// The bit of a thread's lane word that says it owns the lane.
pub const OWNED: u32 = 1 << 31;

/// Bit k: lane k has an owner thread.
static OWNED_LANES: AtomicU32 = AtomicU32::new(0);

/// Gives the exiting thread's lane back (see the module docs).
struct Release;

impl Drop for Release {
    fn drop(&mut self) {
        crate::rt::give_back_lane();
    }
}

thread_local! {
    static RELEASE: Release = const { Release };
}

/// Claims the lowest free lane of the `n` lanes (all but the last can be owned) for the calling
/// thread; None when all are owned, or when the thread could not arrange to give it back at
/// exit (it is exiting already). Slow path: once per thread (registering the thread-local
/// destructor may allocate, in the C library, once per thread).
pub fn claim(n: u32) -> Option<u32> {
    let ownable = n.saturating_sub(1).min(31);
    if ownable == 0 || RELEASE.try_with(|_| ()).is_err() {
        return None;
    }
    let all = (1u32 << ownable) - 1;
    let mut cur = OWNED_LANES.load(Ordering::Relaxed);
    loop {
        let free = !cur & all;
        if free == 0 {
            return None;
        }
        let lane = free.trailing_zeros();
        // Acquire: the previous owner's pushes (its stores of the lane's head) happen before
        // this thread's first look at the head.
        match OWNED_LANES.compare_exchange_weak(
            cur,
            cur | 1 << lane,
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            Ok(_) => return Some(lane),
            Err(now) => cur = now,
        }
    }
}

/// Frees `lane` (its owner is done pushing to it). Release: the owner's pushes happen before
/// the next owner's.
pub fn free(lane: u32) {
    OWNED_LANES.fetch_and(!(1u32 << lane), Ordering::Release);
}

/// In a fork child: every lane is free. Async-signal-safe (one atomic store).
pub fn reset_after_fork() {
    OWNED_LANES.store(0, Ordering::Release);
}
