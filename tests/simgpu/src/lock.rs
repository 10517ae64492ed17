//! A small process-shared mutex on one `u32` futex word in shared memory.
//!
//! The word holds the owner's pid (0 = free) and [`WAITERS`] when someone may sleep on it. A waiter
//! that sleeps longer than [`STALE_CHECK_NS`] checks whether the owner still exists and takes the
//! lock over from a dead owner, so a process killed inside the (short) critical section cannot
//! wedge the device.
use crate::futex;
use std::sync::atomic::{AtomicU32, Ordering};

/// Bit set in the lock word while a waiter may be sleeping.
pub const WAITERS: u32 = 0x8000_0000;
/// How long a waiter sleeps before it checks whether the owner died.
pub const STALE_CHECK_NS: u64 = 20_000_000;

/// A mutex whose state is the given shared word. Holds the lock until dropped.
pub struct ShmLockGuard<'a> {
    word: &'a AtomicU32,
}

fn my_pid() -> u32 {
    // SAFETY: getpid has no preconditions.
    (unsafe { libc::getpid() }) as u32
}

/// Locks `word` (a lock word, 0 when free).
pub fn lock(word: &AtomicU32) -> ShmLockGuard<'_> {
    let me = my_pid();
    if word
        .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
    {
        return ShmLockGuard { word };
    }
    loop {
        let cur = word.load(Ordering::Relaxed);
        if cur == 0 {
            // Take it with the waiters bit: others may still sleep on it.
            if word
                .compare_exchange(0, me | WAITERS, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return ShmLockGuard { word };
            }
            continue;
        }
        if cur & WAITERS == 0
            && word
                .compare_exchange(cur, cur | WAITERS, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            continue;
        }
        let t0 = crate::abi::now_ns();
        futex::wait(word, cur | WAITERS, STALE_CHECK_NS);
        if crate::abi::now_ns() - t0 >= STALE_CHECK_NS {
            let owner = (cur & !WAITERS) as i32;
            if futex::process_dead(owner) {
                // The owner died inside the critical section: take the lock over.
                if word
                    .compare_exchange(
                        cur | WAITERS,
                        me | WAITERS,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
                {
                    return ShmLockGuard { word };
                }
            }
        }
    }
}

impl Drop for ShmLockGuard<'_> {
    fn drop(&mut self) {
        if self.word.swap(0, Ordering::Release) & WAITERS != 0 {
            futex::wake(self.word, 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn excludes_threads() {
        let word = Arc::new(AtomicU32::new(0));
        let counter = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (w, c) = (word.clone(), counter.clone());
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        let _g = lock(&w);
                        // A non-atomic read-modify-write: lost updates would show a broken lock.
                        let v = c.load(Ordering::Relaxed);
                        std::hint::spin_loop();
                        c.store(v + 1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(counter.load(Ordering::Relaxed), 8000);
        assert_eq!(word.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn takes_over_from_dead_owner() {
        // pid_max is at most 2^22, so this pid cannot exist.
        let word = AtomicU32::new(0x3FFF_FFF0);
        let g = lock(&word);
        assert_eq!(word.load(Ordering::Relaxed) & !WAITERS, my_pid());
        drop(g);
    }
}
