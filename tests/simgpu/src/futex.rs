//! Process-shared futex wait/wake on a `u32` in shared memory (no `FUTEX_PRIVATE_FLAG`).
use std::sync::atomic::AtomicU32;

/// Blocks while `*word == expected`, for at most `timeout_ns`. Spurious returns are allowed.
pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: the futex word is a valid, aligned u32 that lives as long as the mapping we borrow it
    // from; FUTEX_WAIT only reads it, and `ts` outlives the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes up to `n` waiters of `word` in any process.
pub(crate) fn wake(word: &AtomicU32, n: i32) {
    // SAFETY: as in `wait`; FUTEX_WAKE does not touch the word's memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            n,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Whether process `pid` is gone (`kill(pid, 0)` fails with ESRCH) or a zombie (dead, not yet
/// reaped by its parent): a real driver frees a process's GPU context when it dies, not when it is
/// reaped, so a killed side task whose parent has not waited for it yet holds nothing here either.
pub(crate) fn process_dead(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission; it delivers nothing.
    let r = unsafe { libc::kill(pid, 0) };
    if r != 0 {
        return std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    }
    // "pid (comm) S ...": the state follows the last ')'.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|i| stat[i + 1..].trim_start().chars().next())
            .is_some_and(|c| c == 'Z' || c == 'X')
    })
}
