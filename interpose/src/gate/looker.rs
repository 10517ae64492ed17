//! The side task's looker: a thread that retires the task's completed launches while none of its
//! own threads gives the gate a chance to (busy on the host between steps: data loading, a first
//! cuBLAS call loading its kernels, Python). The gate looks at completions on every launch and
//! every synchronize call; without the looker, work that finished long ago stays "in flight" in
//! the ring header while the task computes on its host, and the agent's watchdog, which cannot see
//! the GPU, evicts it as hung after its deadline (seen on an H200, 2026-12-04, `docs/real-gpu.md`).
//! A task stuck inside a kernel still reads as hung: its launch never completes, whoever looks.
//!
//! Started once per process at the first launch the gate tracks (a side task's thread, slow
//! path), again in a fork child; it looks only when the gate has not looked for [`QUIET_NS`],
//! each GPU's events with that GPU's pool context made current on it
//! ([`super::inflight::retire_from_looker`]); an entry the driver will not answer for stays in
//! flight (never taken for done).
use std::sync::atomic::{AtomicBool, Ordering};

/// The gate has not looked for this long: the looker looks (a tenth of the watchdog's default
/// deadline of 2 s).
pub const QUIET_NS: u64 = 100_000_000;

static STARTED: AtomicBool = AtomicBool::new(false);

/// Starts the looker if it is not running (cheap once started: one load).
#[inline]
pub fn ensure_started() {
    if !STARTED.load(Ordering::Relaxed) {
        start();
    }
}

#[cold]
#[inline(never)]
fn start() {
    if STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    // A thread that cannot start leaves the gate as it was (looking on launches and synchronizes
    // only); it is not tried again.
    let _ = std::thread::Builder::new()
        .name("freeride-look".into())
        .stack_size(128 << 10)
        .spawn(|| loop {
            let ts = freeride_abi::timespec(QUIET_NS);
            // SAFETY: clock_nanosleep reads the timespec we own; a NULL remainder is allowed.
            unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, 0, &ts, std::ptr::null_mut()) };
            super::look_if_quiet();
        });
}

/// Fork child (async-signal-safe store): the parent's looker does not exist here.
pub fn reset_after_fork() {
    STARTED.store(false, Ordering::Relaxed);
}
