//! The driver wakes the comm poller's threads once per event, instead of a timer.
//!
//! * The end of an op: a *waiter* thread per user stream blocks in `cuEventSynchronize` on the
//!   pair's end event (created with `CU_EVENT_BLOCKING_SYNC`, so the real driver puts the thread
//!   to sleep until the GPU reaches it instead of spinning), then reports it.
//! * The begin of an op, which is also how a waiter learns that there is a new op at all: when the
//!   hook arms a pair ([`super::end`]), it queues on a private stream of the pool's context (a
//!   *lane*, one per user stream) a wait for the pair's begin event and a host function
//!   (`cuStreamWaitEvent`, `cuLaunchHostFunc`: driver calls, no system call of ours). The driver
//!   runs the host function once the begin has happened (the real driver on its own thread, the
//!   stand-in on the lane's executor); it bumps the lane's futex word and wakes the lane's
//!   waiter (and the poller, while the lane has no waiter yet: the poller starts it).
//!
//! * While the lane's waiter is busy with an earlier pair (blocked on its begin or end), the hook
//!   queues no wake-up at all: the waiter finds the new pair once the earlier one is reported, and
//!   blocks in `cuEventSynchronize` on its begin event if that has not completed yet (the ops of a
//!   stream run in order, so it is usually done: the earlier op's end released it). Only a pair
//!   armed while the waiter is idle needs the driver's thread ([`doorbell_needed`]; the waiter
//!   says it is idle, then looks for pairs once more, and the hook arms, then reads that: with a
//!   fence on each side one of the two sees the other).
//!
//! So a waiter wakes about once per op when its stream's ops queue back to back (the end) and
//! twice for an op queued to an idle stream (its begin, its end), however long the op takes, and
//! sleeps between ops ([`NOTIFIED_IDLE_NS`], a safety net); the poller thread only anchors the GPU
//! clock and polls pairs that have no waiter.
//!
//! Why not a host function after the end event too (one mechanism for both): `cuCtxSynchronize`
//! (`cudaDeviceSynchronize`) waits for every stream of the context, lanes included, so it would
//! return only once the driver's thread has run that host function, after the op's end: on the
//! stress job that delayed every step's device synchronize by the host function's wake-up (+1.3 %
//! iteration time). A begin's host function runs while its op is still in flight, and a blocking
//! event wait adds no work to any stream. Why a lane per user stream: work on one stream completes
//! in order, on different streams in any order, and a lane waits for its events in the order they
//! were queued. A lane belongs to one timing pool (its private stream is of that pool's context,
//! its waiter runs in it). Beyond [`LANES`] streams, streams of one pool share lanes (a begin may then be reported late,
//! never lost). Why not a host function on the user's stream: the work queued after it would wait
//! for the driver's thread.
//!
//! A pair without a lane (no `cuLaunchHostFunc`, a driver error, `FREERIDE_COMM_NOTIFY=0`) and a
//! lane without a running waiter are polled at the old adaptive cadence (see [`super::poller`]).
use super::driver::{Driver, CUDA_SUCCESS, CU_STREAM_NON_BLOCKING};
use freeride_abi::{env, futex};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// Lanes (private streams, waiter threads) per process.
pub(super) const LANES: usize = 8;
/// Longest sleep of a waiter between ops, and of the poller while every armed pair has a waiter:
/// a safety net (a wake-up that never came) and the poller's housekeeping cadence.
pub(super) const NOTIFIED_IDLE_NS: u64 = 50_000_000;

/// How long a waiter sleeps between looks while ends may be reported lazily ([`ends_lazy`]).
pub(super) const LAZY_NS: u64 = 50_000_000;
/// What a lazy waiter adds to [`LAZY_NS`] when it says how late its ends may come: its poll after
/// the sleep, and a late wake-up.
pub(super) const LAZY_SLACK_NS: u64 = 20_000_000;

/// [`env::COMM_ENDS`], read once: 0 not read yet, then [`ENDS_AUTO`], [`ENDS_PROMPT`] or
/// [`ENDS_LAZY`].
static ENDS: AtomicU8 = AtomicU8::new(0);
const ENDS_AUTO: u8 = 1;
const ENDS_PROMPT: u8 = 2;
const ENDS_LAZY: u8 = 3;

/// Whether a waiter may leave its lane's ends to be read in a batch every [`LAZY_NS`] instead of
/// waking at each: the agent says nobody on the node harvests bubbles (the ring header's
/// `lazy_ends_until_ns`, renewed while so; it runs out if the agent dies), or
/// `FREERIDE_COMM_ENDS=lazy` says so; never with `FREERIDE_COMM_ENDS=prompt`. The GPU's times of
/// a lazily read end are exact; only their arrival at the agent waits. A waiter thread's call,
/// never the hook path's.
pub(super) fn ends_lazy(now: u64) -> bool {
    let mode = match ENDS.load(Ordering::Relaxed) {
        0 => {
            let m = match std::env::var(env::COMM_ENDS).as_deref() {
                Ok("prompt") => ENDS_PROMPT,
                Ok("lazy") => ENDS_LAZY,
                _ => ENDS_AUTO,
            };
            ENDS.store(m, Ordering::Relaxed);
            m
        }
        m => m,
    };
    match mode {
        ENDS_PROMPT => false,
        ENDS_LAZY => true,
        _ => crate::rt::ends_lazy(now),
    }
}

/// The poller's futex word: bumped by a lane's host function while the lane has no waiter.
static WAKE: AtomicU32 = AtomicU32::new(0);

/// 0: not decided yet, 1: pairs get lanes, 2: they do not (unavailable or turned off).
static AVAILABLE: AtomicU8 = AtomicU8::new(0);

const NO_WAITER: u8 = 0;
const WAITER_RUNNING: u8 = 1;
const WAITER_FAILED: u8 = 2;

pub(super) struct Lane {
    /// The user stream's handle + 1, with its pool in the top byte ([`key_of`]; 0: free).
    key: AtomicU64,
    /// Its timing pool (an index of [`super::pool::POOL`]).
    pool: AtomicU32,
    /// The private stream (0: being created, `usize::MAX`: could not be created).
    private: AtomicUsize,
    /// The waiter's futex word, bumped by the host function after each begin.
    word: AtomicU32,
    /// [`NO_WAITER`], [`WAITER_RUNNING`] or [`WAITER_FAILED`].
    waiter: AtomicU8,
    /// 1 while the waiter is busy with a pair of this lane (it will look for new pairs before it
    /// sleeps), 0 while it is idle or about to be.
    busy: AtomicU8,
}

#[allow(clippy::declare_interior_mutable_const)]
const LANE_INIT: Lane = Lane {
    key: AtomicU64::new(0),
    pool: AtomicU32::new(0),
    private: AtomicUsize::new(0),
    word: AtomicU32::new(0),
    waiter: AtomicU8::new(NO_WAITER),
    busy: AtomicU8::new(0),
};

static LANE_TABLE: [Lane; LANES] = [LANE_INIT; LANES];

/// Whether pairs get lanes (decided once per process; the poller polls on a timer without).
pub(super) fn available(d: &Driver) -> bool {
    match AVAILABLE.load(Ordering::Acquire) {
        1 => true,
        2 => false,
        _ => {
            let on = d.stream_wait_event.is_some()
                && d.launch_host_func.is_some()
                && d.stream_create.is_some()
                && d.event_synchronize.is_some()
                && std::env::var(env::COMM_NOTIFY).map_or(true, |v| v != "0");
            AVAILABLE.store(if on { 1 } else { 2 }, Ordering::Release);
            on
        }
    }
}

/// Hook path, after a lane could not be made or a pair's begin wake-up not be queued: the process
/// polls from now on.
pub(super) fn turn_off() {
    AVAILABLE.store(2, Ordering::Release);
}

/// Hook path: the lane (+ 1) for a pair of pool `pool` on user stream `stream` (the first op on a
/// stream creates its lane: `cuStreamCreate`, once, in the current context: the pool's). None if
/// there is none.
pub(super) fn lane_of(d: &Driver, pool: usize, stream: u64) -> Option<u32> {
    lane_for(d, pool, stream).map(|i| i as u32 + 1)
}

/// The pool of lane `lane` (an index of the table).
pub(super) fn pool_of(lane: usize) -> usize {
    LANE_TABLE
        .get(lane)
        .map_or(0, |l| l.pool.load(Ordering::Acquire) as usize)
}

/// A lane's key: stream handles are user-space addresses (below 2^56) or small constants.
fn key_of(pool: usize, stream: u64) -> u64 {
    (stream.wrapping_add(1) & ((1 << 56) - 1) | (pool as u64) << 56).max(1)
}

/// Hook path: queues the begin wake-up of a pair armed on lane `lane` (+ 1), whose begin event
/// `ev_b` was recorded on its stream in the current context (the pool's). False if it could not
/// be queued (the poller polls for this pair). Driver calls only.
pub(super) fn arm(d: &Driver, lane: u32, ev_b: usize) -> bool {
    let (Some(wait), Some(host)) = (d.stream_wait_event, d.launch_host_func) else {
        return false;
    };
    let Some(lane) = LANE_TABLE.get((lane as usize).wrapping_sub(1)) else {
        return false;
    };
    let private = lane.private.load(Ordering::Acquire) as *mut c_void;
    let data = lane as *const Lane as *mut c_void;
    // SAFETY: real cuStreamWaitEvent / cuLaunchHostFunc on our own lane stream and a pool event of
    // the current context; `wake` is a host function that makes no driver call, lives as long as
    // the process (the library is never unloaded), and its argument points to a static lane.
    unsafe {
        wait(private, ev_b as *mut c_void, 0) == CUDA_SUCCESS
            && host(private, Some(wake), data) == CUDA_SUCCESS
    }
}

/// The lane of user stream `stream`: its own if it has one or a free one is left (created now).
/// Else (the table is full, or another thread is still creating this stream's lane) a lane that
/// is ready, shared. None if there is none.
fn lane_for(d: &Driver, pool: usize, stream: u64) -> Option<usize> {
    let key = key_of(pool, stream);
    let ready = |i: &usize| {
        let l = &LANE_TABLE[*i];
        let p = l.private.load(Ordering::Acquire);
        p != 0 && p != usize::MAX && l.pool.load(Ordering::Acquire) as usize == pool
    };
    let own = (0..LANES)
        .find(|&i| LANE_TABLE[i].key.load(Ordering::Acquire) == key)
        .or_else(|| {
            let i = (0..LANES).find(|&i| {
                LANE_TABLE[i]
                    .key
                    .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            })?;
            LANE_TABLE[i].pool.store(pool as u32, Ordering::Release);
            let private = create_lane(d).unwrap_or_else(|| {
                // The driver refuses a stream: poll instead (pairs without a lane would otherwise
                // wait for the poller's safety net).
                turn_off();
                usize::MAX
            });
            LANE_TABLE[i].private.store(private, Ordering::Release);
            Some(i)
        });
    own.filter(ready).or_else(|| {
        let start = (key as usize).wrapping_mul(0x9e37_79b9) % LANES;
        (0..LANES).map(|k| (start + k) % LANES).find(ready)
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

/// Hook path, after a pair of lane `lane` (+ 1) was armed: whether its begin needs a wake-up
/// queued ([`arm`]): not while the lane's waiter runs and is busy with an earlier pair. The
/// fence pairs with the one in [`set_idle`]: the waiter then finds the pair, or this sees it idle.
pub(super) fn doorbell_needed(lane: u32) -> bool {
    std::sync::atomic::fence(Ordering::SeqCst);
    LANE_TABLE
        .get((lane as usize).wrapping_sub(1))
        .is_none_or(|l| {
            l.waiter.load(Ordering::Acquire) != WAITER_RUNNING
                || l.busy.load(Ordering::Relaxed) == 0
        })
}

/// Waiter of lane `lane`: busy with a pair of the lane (new pairs need no wake-up).
pub(super) fn set_busy(lane: usize) {
    if let Some(l) = LANE_TABLE.get(lane) {
        l.busy.store(1, Ordering::Relaxed);
    }
}

/// Waiter of lane `lane`, about to sleep: idle (new pairs queue a wake-up). It must look for
/// armed pairs once more after this (see [`doorbell_needed`]).
pub(super) fn set_idle(lane: usize) {
    if let Some(l) = LANE_TABLE.get(lane) {
        l.busy.store(0, Ordering::Relaxed);
    }
    std::sync::atomic::fence(Ordering::SeqCst);
}

/// The host function: runs on the driver's thread once a begin event completed. No driver call
/// (the driver forbids them here), no panic: atomic adds and futex wakes.
unsafe extern "C" fn wake(data: *mut c_void) {
    // SAFETY: `data` is the address of a lane of the static LANE_TABLE (see `arm`).
    let lane = unsafe { &*(data as *const Lane) };
    lane.word.fetch_add(1, Ordering::Release);
    // SAFETY: the lane's word is a static aligned 32-bit word, live for the process.
    unsafe { futex::wake_all(lane.word.as_ptr()) };
    if lane.waiter.load(Ordering::Acquire) != WAITER_RUNNING {
        WAKE.fetch_add(1, Ordering::Release);
        // SAFETY: WAKE is a static aligned 32-bit word, live for the process.
        unsafe { futex::wake_all(WAKE.as_ptr()) };
    }
}

/// Whether a waiter runs for lane `lane` + 1 (0: no lane).
pub(super) fn waited(lane: u32) -> bool {
    lane != 0
        && LANE_TABLE
            .get(lane as usize - 1)
            .is_some_and(|l| l.waiter.load(Ordering::Acquire) == WAITER_RUNNING)
}

/// Poller: starts a waiter for every lane that has none (`spawn` starts the thread for lane `i`;
/// false if it could not).
pub(super) fn start_waiters(spawn: impl Fn(usize) -> bool) {
    for (i, l) in LANE_TABLE.iter().enumerate() {
        let p = l.private.load(Ordering::Acquire);
        if p != 0 && p != usize::MAX && l.waiter.load(Ordering::Acquire) == NO_WAITER {
            let st = if spawn(i) {
                WAITER_RUNNING
            } else {
                WAITER_FAILED
            };
            l.waiter.store(st, Ordering::Release);
        }
    }
}

/// A waiter that could not run: its lane's pairs are polled.
pub(super) fn waiter_gone(lane: usize) {
    if let Some(l) = LANE_TABLE.get(lane) {
        l.waiter.store(WAITER_FAILED, Ordering::Release);
    }
}

/// The wake-up count of the poller (`None`) or of lane `Some(i)`'s waiter, read before a poll:
/// [`sleep`] returns at once if it moved since.
pub(super) fn seq(lane: Option<usize>) -> u32 {
    word(lane).load(Ordering::Acquire)
}

/// Sleeps until a wake-up after `seq` was read, or for `timeout_ns`.
pub(super) fn sleep(lane: Option<usize>, seq: u32, timeout_ns: u64) {
    // SAFETY: the word is a static aligned 32-bit word, live for the process.
    unsafe { futex::wait(word(lane).as_ptr(), seq, timeout_ns) };
}

fn word(lane: Option<usize>) -> &'static AtomicU32 {
    match lane {
        Some(i) => &LANE_TABLE[i % LANES].word,
        None => &WAKE,
    }
}

/// Fork child: the parent's lanes are streams of the parent's context, its waiters are gone.
pub(super) fn reset_after_fork() {
    for l in LANE_TABLE.iter() {
        l.key.store(0, Ordering::Relaxed);
        l.pool.store(0, Ordering::Relaxed);
        l.private.store(0, Ordering::Relaxed);
        l.waiter.store(NO_WAITER, Ordering::Relaxed);
        l.busy.store(0, Ordering::Relaxed);
    }
    AVAILABLE.store(0, Ordering::Release);
}
