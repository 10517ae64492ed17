//! Waiting across processes: futex on shared-memory words (no FUTEX_PRIVATE_FLAG).
use std::sync::atomic::AtomicU32;

/// Blocks while `*word == expected`, at most `timeout_ns`; spurious returns are fine.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `word` is an aligned u32 inside a live mapping; FUTEX_WAIT only reads it; `ts`
    // outlives the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            0usize,
            0u32,
        );
    }
}

/// Wakes every waiter of `word`, in any process.
pub fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: as in futex_wait; FUTEX_WAKE does not touch the memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            0usize,
            0usize,
            0u32,
        );
    }
}

/// Whether process `pid` is gone.
pub fn process_dead(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    // SAFETY: signal 0 delivers nothing; it only checks that the process exists.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}
