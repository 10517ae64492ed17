//! Which lane of the process's ring a thread pushes to, and whether it owns it.
//!
//! The ring's last lane is the service lane: freeride's own threads (comm poller and waiters) and
//! every thread that finds no lane free push there, by compare-and-swap. Each other lane is
//! owned by at most one launching thread at a time, which pushes with plain stores
//! ([`freeride_abi::ring::RingView::push_lane_owned`]): no read-modify-write on the hook path.
//! A thread claims the lowest free lane the first time it pushes (slow path) and gives it back
//! when it exits: a POSIX thread-specific key's destructor (run after the thread's C++ and Rust
//! thread-local destructors, which may still launch) first moves the thread's own later pushes
//! to the service lane, then frees the lane. The key is created once, at the process's
//! initialization; setting a thread's value for it allocates nothing while the process has fewer
//! than 32 keys (glibc's first-level array; beyond, the C library allocates once per thread). The
//! main thread never runs key destructors (the process is ending). A fork child starts with every
//! lane free (only the forking thread is left, and it claims again).
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};

/// The bit of a thread's lane word that says it owns the lane.
pub const OWNED: u32 = 1 << 31;

/// Bit k: lane k has an owner thread.
static OWNED_LANES: AtomicU32 = AtomicU32::new(0);
/// The thread-specific key whose destructor gives a lane back, plus one (0: none, no lane is
/// ever owned).
static KEY: AtomicU32 = AtomicU32::new(0);

/// At thread exit, for a thread that owned a lane (its value for [`KEY`] is not null).
extern "C" fn release(_: *mut c_void) {
    crate::rt::give_back_lane();
}

/// Creates the key (process initialization, before the ring is published; later calls do
/// nothing). Without it no thread owns a lane: all share the service lane's compare-and-swap.
pub fn init() {
    if KEY.load(Ordering::Acquire) != 0 {
        return;
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is our own local; `release` is an extern "C" fn that lives as long as the
    // process (the library is linked -z nodelete).
    if unsafe { libc::pthread_key_create(&mut key, Some(release)) } == 0 {
        KEY.store(key + 1, Ordering::Release);
    }
}

/// Claims the lowest free lane of the `n` lanes (all but the last can be owned) for the calling
/// thread; None when all are owned, or when the thread could not arrange to give it back at
/// exit. Slow path: once per thread.
pub fn claim(n: u32) -> Option<u32> {
    let ownable = n.saturating_sub(1).min(31);
    let key = KEY.load(Ordering::Acquire);
    if ownable == 0 || key == 0 {
        return None;
    }
    let all = (1u32 << ownable) - 1;
    let mut cur = OWNED_LANES.load(Ordering::Relaxed);
    let lane = loop {
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
            Ok(_) => break lane,
            Err(now) => cur = now,
        }
    };
    // Any non-null value: the key's destructor runs at this thread's exit.
    // SAFETY: the key was created by `init` and is never deleted; the value is not dereferenced.
    if unsafe { libc::pthread_setspecific(key - 1, std::ptr::dangling::<c_void>()) } != 0 {
        free(lane);
        return None;
    }
    Some(lane)
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
