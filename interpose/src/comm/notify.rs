//! The driver wakes the poller, once per event, instead of the poller waking on a timer.
//!
//! When the hook arms a pair ([`super::end`]), it queues on a private stream of the pool's context
//! (a *lane*: one per user stream the comm ops run on) a wait for the pair's begin event, a host
//! function, a wait for its end event and another host function (`cuStreamWaitEvent`,
//! `cuLaunchHostFunc`: driver calls, no system call of ours). The driver runs each host function
//! once the event before it has completed (the real driver on its own thread, the stand-in on the
//! lane's executor); the host function bumps [`WAKE`], a futex word, and wakes the poller, which
//! sleeps on that word between polls. So the poller wakes about twice per op (a begin, an end) and
//! a begin or end is reported as soon as the driver's thread and the poller are scheduled, however
//! long the op takes; between ops it sleeps [`NOTIFIED_IDLE_NS`] (a safety net) rather than
//! polling every 100 µs-1 ms.
//!
//! Why a lane per user stream: work on one stream completes in order, on different streams in any
//! order; a lane waits for its events in the order they were queued, so one lane shared by two
//! streams would hold the second stream's wake-up behind the first's. Beyond [`LANES`] streams,
//! streams share lanes (wake-ups may then come late, never get lost: the poller's safety net).
//! Why not a host function on the user's stream itself: work queued after it on that stream would
//! wait for the driver's thread to run it.
//!
//! A pair whose wake-ups could not be queued (no `cuLaunchHostFunc`, a driver error,
//! `FREERIDE_COMM_NOTIFY=0`) is polled at the old adaptive cadence (see [`super::poller`]).
use super::{Driver, CUDA_SUCCESS, CU_STREAM_NON_BLOCKING};
use freeride_abi::{env, futex};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// Lanes (private streams) per process.
pub(super) const LANES: usize = 16;
/// Longest sleep of the poller while every armed pair will wake it, or nothing is armed: a safety
/// net (a wake-up the driver never delivered) and the cadence of the poller's housekeeping.
pub(super) const NOTIFIED_IDLE_NS: u64 = 50_000_000;

/// The futex word the host functions bump; the poller sleeps on it.
static WAKE: AtomicU32 = AtomicU32::new(0);

/// 0: not decided yet, 1: wake-ups can be queued, 2: they cannot (or are turned off).
static AVAILABLE: AtomicU8 = AtomicU8::new(0);

struct Lane {
    /// The user stream's handle + 1 (0: free).
    key: AtomicU64,
    /// The private stream (0: being created, `usize::MAX`: could not be created).
    private: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const LANE_INIT: Lane = Lane {
    key: AtomicU64::new(0),
    private: AtomicUsize::new(0),
};

static LANE_TABLE: [Lane; LANES] = [LANE_INIT; LANES];

/// Whether pairs get wake-ups (decided once per process; the poller polls on a timer without).
pub(super) fn available(d: &Driver) -> bool {
    match AVAILABLE.load(Ordering::Acquire) {
        1 => true,
        2 => false,
        _ => {
            let on = d.stream_wait_event.is_some()
                && d.launch_host_func.is_some()
                && d.stream_create.is_some()
                && std::env::var(env::COMM_NOTIFY).map_or(true, |v| v != "0");
            AVAILABLE.store(if on { 1 } else { 2 }, Ordering::Release);
            on
        }
    }
}

/// Hook path, after a pair's wake-ups could not be queued: the poller polls from now on (pairs
/// armed meanwhile would otherwise wait for its safety net).
pub(super) fn turn_off() {
    AVAILABLE.store(2, Ordering::Release);
}

/// Hook path: queues the wake-ups of a pair armed on `stream` (begin event `ev_b`, end event
/// `ev_e`, both recorded on `stream` in the current context, the pool's). False if they could
/// not be queued: the poller must poll for this pair. Driver calls only (the first op on a stream
/// creates its lane: `cuStreamCreate`, once).
pub(super) fn arm(d: &Driver, stream: u64, ev_b: usize, ev_e: usize) -> bool {
    if !available(d) {
        return false;
    }
    let (Some(wait), Some(host)) = (d.stream_wait_event, d.launch_host_func) else {
        return false;
    };
    let Some(lane) = lane_for(d, stream) else {
        return false;
    };
    let lane = lane as *mut c_void;
    // SAFETY: real cuStreamWaitEvent / cuLaunchHostFunc on our own lane stream and pool events of
    // the current context; `wake` is a host function that makes no driver call, lives as long as
    // the process (the library is never unloaded) and ignores its argument.
    unsafe {
        wait(lane, ev_b as *mut c_void, 0) == CUDA_SUCCESS
            && host(lane, Some(wake), std::ptr::null_mut()) == CUDA_SUCCESS
            && wait(lane, ev_e as *mut c_void, 0) == CUDA_SUCCESS
            && host(lane, Some(wake), std::ptr::null_mut()) == CUDA_SUCCESS
    }
}

/// The lane of user stream `stream`: its own if it has one or a free one is left (created now).
/// Else (the table is full, or another thread is still creating this stream's lane) a lane that
/// is ready, shared: wake-ups may come late then, never get lost. None if there is none.
fn lane_for(d: &Driver, stream: u64) -> Option<usize> {
    let key = stream.wrapping_add(1).max(1);
    let ready = |l: &Lane| match l.private.load(Ordering::Acquire) {
        0 | usize::MAX => None,
        p => Some(p),
    };
    let own = LANE_TABLE
        .iter()
        .find(|l| l.key.load(Ordering::Acquire) == key)
        .or_else(|| {
            let l = LANE_TABLE.iter().find(|l| {
                l.key
                    .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            })?;
            l.private
                .store(create_lane(d).unwrap_or(usize::MAX), Ordering::Release);
            Some(l)
        });
    own.and_then(ready).or_else(|| {
        let start = (key as usize).wrapping_mul(0x9e37_79b9) % LANES;
        (0..LANES).find_map(|i| ready(&LANE_TABLE[(start + i) % LANES]))
    })
}

#[cold]
fn create_lane(d: &Driver) -> Option<usize> {
    let create = d.stream_create?;
    let mut s: *mut c_void = std::ptr::null_mut();
    // SAFETY: real cuStreamCreate writing a handle we own, in the current (pool) context.
    if unsafe { create(&mut s, CU_STREAM_NON_BLOCKING) } != CUDA_SUCCESS || s.is_null() {
        return None;
    }
    Some(s as usize)
}

/// The host function: runs on the driver's thread once the event queued before it completed.
/// No driver call (the driver forbids them here), no panic: one atomic add and a futex wake.
unsafe extern "C" fn wake(_: *mut c_void) {
    WAKE.fetch_add(1, Ordering::Release);
    // SAFETY: WAKE is a static aligned 32-bit word, live for the process.
    unsafe { futex::wake_all(WAKE.as_ptr()) };
}

/// The wake-up count, read before a poll: [`sleep`] returns at once if it moved since.
pub(super) fn seq() -> u32 {
    WAKE.load(Ordering::Acquire)
}

/// Poller: sleeps until a host function runs after `seq` was read, or for `timeout_ns`.
pub(super) fn sleep(seq: u32, timeout_ns: u64) {
    // SAFETY: WAKE is a static aligned 32-bit word, live for the process.
    unsafe { futex::wait(WAKE.as_ptr(), seq, timeout_ns) };
}

/// Fork child: the parent's lanes are streams of the parent's context.
pub(super) fn reset_after_fork() {
    for l in LANE_TABLE.iter() {
        l.key.store(0, Ordering::Relaxed);
        l.private.store(0, Ordering::Relaxed);
    }
    AVAILABLE.store(0, Ordering::Release);
}
