//! Futex calls on 32-bit words of shared mappings (non-private: the waiter and the waker are
//! different processes mapping the same file): the agent wakes side tasks waiting on a grant block
//! ([`crate::grant`]), trainers' comm pollers wake the agent on the doorbell ([`crate::doorbell`]).
//! System calls: never on a trainer's hook path.

/// Wakes every waiter on `word`.
///
/// # Safety
/// `word` points to an aligned 32-bit word of a mapping that stays live for the call.
pub unsafe fn wake_all(word: *const u32) {
    // SAFETY: FUTEX_WAKE on an aligned 32-bit word of a live mapping (the caller's contract); it
    // only wakes waiters.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word,
            libc::FUTEX_WAKE,
            i32::MAX,
            0usize,
            0usize,
            0u32,
        )
    };
}

/// Sleeps while `*word == expected`, for at most `timeout_ns` (returns at once if it differs
/// already; spurious wake-ups are possible: re-read after).
///
/// # Safety
/// `word` points to an aligned 32-bit word of a mapping that stays live for the call.
pub unsafe fn wait(word: *const u32, expected: u32, timeout_ns: u64) {
    let ts = crate::timespec(timeout_ns);
    // SAFETY: FUTEX_WAIT on an aligned 32-bit word of a live mapping (the caller's contract) with a
    // relative timeout we own; the kernel compares the word with `expected` atomically.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word,
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            0usize,
            0u32,
        )
    };
}
