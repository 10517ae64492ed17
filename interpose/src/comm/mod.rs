//! GPU-side timing of NCCL operations.
//!
//! Around each op (or, for a group, around `ncclGroupEnd`, once per stream the group used) the
//! hook records two driver events on the op's stream: `begin` before the op is queued, `end`
//! after. Events come from a preallocated pool of *timing* events created once per process (slow
//! path, on the first comm op) in the caller's context. The hook only makes driver calls (records
//! events, queues the poller's wake-ups; the first op on a stream creates that stream's lane): no
//! system call of ours, no lock.
//!
//! A poller thread, started lazily with the pool, owns a private non-blocking stream and a few
//! reference events. It anchors the GPU clock to the host clock: it records a reference event on
//! its idle stream, waits for it, and takes the host time window [before the record call, when
//! completion was seen] (the tightest of a few tries; `ref_host_ns` = the window's midpoint,
//! uncertainty = its half-width). When it sees a pool event complete, the event's host time is
//! `ref_host_ns + cuEventElapsedTime(ref, ev)`: exact up to the anchor's uncertainty and the
//! elapsed-time resolution, however late the poll. The anchor is renewed every 2 s while ops flow
//! (an f32 of milliseconds keeps ~0.25 µs resolution up to 2 s, and GPU/host clock drift stays
//! small). When the elapsed time is unavailable (no anchor, another context, an error) or fails a
//! causality check, the record falls back to the midpoint of the poll interval that saw the event
//! complete (`uncertainty_ns` = half that interval) and a re-anchor is requested.
//!
//! Since the poll time no longer affects accuracy, only how soon a begin/end is reported, nothing
//! polls on a timer where the driver can wake a thread instead ([`notify`]): per user stream a
//! waiter thread blocks in `cuEventSynchronize` on the running op's end event (blocking-sync),
//! and learns of each op's begin from a host function (`cuLaunchHostFunc`) the hook queues on a
//! private stream behind a wait for the begin event. So the waiter wakes about twice per op,
//! however long the op, and sleeps between ops (a 50 ms safety net); the poller thread anchors the
//! clock and otherwise sleeps. Each wake-up costs a context switch (~10 µs of CPU on a small VM,
//! which is what observing used to cost at one every 100-250 µs). Pairs without a waiter (no
//! `cuLaunchHostFunc`, a driver error, `FREERIDE_COMM_NOTIFY=0`, more streams than lanes' waiters
//! could start) are polled by the poller at the old adaptive cadence: while some op's begin is
//! still pending, every `FREERIDE_POLL_US` (default 100 µs) right after a change (a new op armed,
//! a begin or an end seen), backing off to half the time since the last change, capped at 200 µs
//! (a begin opens a bubble in the agent's detector); while every such op has begun, every 250 µs;
//! with nothing in flight, every 1 ms. Threads sleep on futex words with a timeout and a 1 ns
//! timer slack; hooks never wake them themselves (no system call on the hook path).
//!
//! After a poll that pushed a begin or an end, the thread that polled rings the session doorbell
//! ([`freeride_abi::doorbell`], mapped by the poller's `Bell`), so that an agent sleeping
//! between bubbles learns of it at once (a system call only while the agent sleeps); hooks never
//! ring.
//!
//! Modules: [`anchor`] (the GPU clock's anchor to the host clock), [`notify`] (lanes: the driver
//! wakes the threads per event), [`poller`] (the poller and waiter threads, one poll).

mod anchor;
mod notify;
mod poller;

use crate::dl;
use crate::rt;
use anchor::{ANCHOR_EV, ANCHOR_STALE};
use freeride_abi::{env, Api};
use poller::{locked_poll, poller, Lock, POLLING};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;

pub const GROUP_STREAMS: usize = 8;
const PAIRS: usize = 256;

type CtxGetCurrent = unsafe extern "C" fn(*mut *mut c_void) -> c_int;
type CtxSetCurrent = unsafe extern "C" fn(*mut c_void) -> c_int;
type CtxGetDevice = unsafe extern "C" fn(*mut c_int) -> c_int;
type EventCreate = unsafe extern "C" fn(*mut *mut c_void, u32) -> c_int;
type EventRecord = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
type EventQuery = unsafe extern "C" fn(*mut c_void) -> c_int;
type StreamIsCapturing = unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int;
type StreamCreate = unsafe extern "C" fn(*mut *mut c_void, u32) -> c_int;
type EventSynchronize = unsafe extern "C" fn(*mut c_void) -> c_int;
type EventElapsed = unsafe extern "C" fn(*mut f32, *mut c_void, *mut c_void) -> c_int;
type StreamWaitEvent = unsafe extern "C" fn(*mut c_void, *mut c_void, u32) -> c_int;
type HostFn = unsafe extern "C" fn(*mut c_void);
type LaunchHostFunc = unsafe extern "C" fn(*mut c_void, Option<HostFn>, *mut c_void) -> c_int;
type GetProcAddress =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;

const CUDA_SUCCESS: c_int = 0;
const CUDA_ERROR_NOT_READY: c_int = 600;
/// `CU_EVENT_DEFAULT`: timing enabled (needed for `cuEventElapsedTime`).
const CU_EVENT_DEFAULT: u32 = 0;
/// `CU_EVENT_BLOCKING_SYNC`: `cuEventSynchronize` on the event sleeps instead of spinning (the
/// waiters block on pool events).
const CU_EVENT_BLOCKING_SYNC: u32 = 1;
/// `CU_STREAM_NON_BLOCKING`: the poller's stream never syncs with the legacy default stream.
const CU_STREAM_NON_BLOCKING: u32 = 1;

/// Real driver functions freeride itself calls (never our wrappers).
pub struct Driver {
    ctx_get_current: Option<CtxGetCurrent>,
    ctx_set_current: Option<CtxSetCurrent>,
    ctx_get_device: Option<CtxGetDevice>,
    event_create: Option<EventCreate>,
    event_record: Option<EventRecord>,
    event_query: Option<EventQuery>,
    stream_is_capturing: Option<StreamIsCapturing>,
    stream_create: Option<StreamCreate>,
    event_synchronize: Option<EventSynchronize>,
    get_proc_address: Option<GetProcAddress>,
    dlsym_elapsed: Option<EventElapsed>,
    stream_wait_event: Option<StreamWaitEvent>,
    launch_host_func: Option<LaunchHostFunc>,
}

impl Driver {
    pub fn ctx_device(&self) -> i32 {
        let Some(f) = self.ctx_get_device else {
            return -1;
        };
        let mut d: c_int = -1;
        // SAFETY: real cuCtxGetDevice writing one int we own.
        if unsafe { f(&mut d) } == CUDA_SUCCESS {
            d
        } else {
            -1
        }
    }
}

static DRIVER: OnceLock<Driver> = OnceLock::new();
static DRIVER_TRIES: AtomicU32 = AtomicU32::new(0);

/// The real driver, once libcuda.so.1 is loaded (looked up with RTLD_NOLOAD; never loads it).
pub fn driver() -> Option<&'static Driver> {
    if let Some(d) = DRIVER.get() {
        return Some(d);
    }
    // Bounded retries: the driver may be loaded later, but never pay this forever.
    if DRIVER_TRIES.fetch_add(1, Ordering::Relaxed) > 10_000 {
        return None;
    }
    let h = dl::noload(c"libcuda.so.1");
    if h.is_null() {
        return None;
    }
    let get = |n: &CStr| {
        let p = dl::sym(h, n);
        if p.is_null() {
            None
        } else {
            Some(p as usize)
        }
    };
    // SAFETY: each address is the real driver function of that exact name, whose C signature
    // matches the type it is transmuted to (cuda.h).
    let d = unsafe {
        Driver {
            ctx_get_current: get(c"cuCtxGetCurrent")
                .map(|p| std::mem::transmute::<usize, CtxGetCurrent>(p)),
            ctx_set_current: get(c"cuCtxSetCurrent")
                .map(|p| std::mem::transmute::<usize, CtxSetCurrent>(p)),
            ctx_get_device: get(c"cuCtxGetDevice")
                .map(|p| std::mem::transmute::<usize, CtxGetDevice>(p)),
            event_create: get(c"cuEventCreate")
                .map(|p| std::mem::transmute::<usize, EventCreate>(p)),
            event_record: get(c"cuEventRecord")
                .map(|p| std::mem::transmute::<usize, EventRecord>(p)),
            event_query: get(c"cuEventQuery").map(|p| std::mem::transmute::<usize, EventQuery>(p)),
            stream_is_capturing: get(c"cuStreamIsCapturing")
                .map(|p| std::mem::transmute::<usize, StreamIsCapturing>(p)),
            stream_create: get(c"cuStreamCreate")
                .map(|p| std::mem::transmute::<usize, StreamCreate>(p)),
            event_synchronize: get(c"cuEventSynchronize")
                .map(|p| std::mem::transmute::<usize, EventSynchronize>(p)),
            get_proc_address: get(c"cuGetProcAddress_v2")
                .map(|p| std::mem::transmute::<usize, GetProcAddress>(p)),
            dlsym_elapsed: get(c"cuEventElapsedTime_v2")
                .or_else(|| get(c"cuEventElapsedTime"))
                .map(|p| std::mem::transmute::<usize, EventElapsed>(p)),
            stream_wait_event: get(c"cuStreamWaitEvent")
                .map(|p| std::mem::transmute::<usize, StreamWaitEvent>(p)),
            launch_host_func: get(c"cuLaunchHostFunc")
                .map(|p| std::mem::transmute::<usize, LaunchHostFunc>(p)),
        }
    };
    // SAFETY: h came from a successful dlopen; the library stays loaded (someone else holds it).
    unsafe { libc::dlclose(h) };
    Some(DRIVER.get_or_init(|| d))
}

const FREE: u32 = 0;
const CLAIMED: u32 = 1;
const ARMED: u32 = 2;

struct Pair {
    state: AtomicU32,
    begin_done: AtomicU32,
    /// 0 until the poller has seen this arming (poller's cadence: a new op is a change).
    seen: AtomicU32,
    /// The lane + 1 whose waiter reports this pair ([`notify`]); 0: the poller polls for it.
    lane: AtomicU32,
    /// Arming order: a lane's waiter takes its pairs oldest first.
    arm_seq: AtomicU64,
    /// Poller-private: the reported begin time (the end is never reported before it).
    t_begin: AtomicU64,
    ev_b: AtomicUsize,
    ev_e: AtomicUsize,
    api: AtomicU32,
    ids: AtomicU64,
    stream: AtomicU64,
    queued: AtomicU64,
    pending_b: AtomicU64,
    pending_e: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const PAIR_INIT: Pair = Pair {
    state: AtomicU32::new(FREE),
    begin_done: AtomicU32::new(0),
    seen: AtomicU32::new(0),
    lane: AtomicU32::new(0),
    arm_seq: AtomicU64::new(0),
    t_begin: AtomicU64::new(0),
    ev_b: AtomicUsize::new(0),
    ev_e: AtomicUsize::new(0),
    api: AtomicU32::new(0),
    ids: AtomicU64::new(0),
    stream: AtomicU64::new(0),
    queued: AtomicU64::new(0),
    pending_b: AtomicU64::new(0),
    pending_e: AtomicU64::new(0),
};

static POOL: [Pair; PAIRS] = [PAIR_INIT; PAIRS];
/// 0 none, 1 creating, 2 ready, 3 unavailable.
static POOL_STATE: AtomicU8 = AtomicU8::new(0);
static POOL_TRIES: AtomicU32 = AtomicU32::new(0);
static POOL_CTX: AtomicUsize = AtomicUsize::new(0);
static POOL_DEVICE: AtomicU32 = AtomicU32::new(u32::MAX);
static POOL_GEN: AtomicU32 = AtomicU32::new(0);
static NEXT_PAIR: AtomicUsize = AtomicUsize::new(0);
static NEXT_OP: AtomicU32 = AtomicU32::new(1);
static NEXT_GROUP: AtomicU32 = AtomicU32::new(1);
static ARM_SEQ: AtomicU64 = AtomicU64::new(1);

pub fn next_op() -> u32 {
    NEXT_OP.fetch_add(1, Ordering::Relaxed)
}

pub fn next_group() -> u32 {
    NEXT_GROUP.fetch_add(1, Ordering::Relaxed)
}

/// Pool ready? Creates it (slow path, once per process) on the first comm op.
fn pool_ready() -> bool {
    match POOL_STATE.load(Ordering::Acquire) {
        2 => true,
        0 => create_pool(),
        _ => false,
    }
}

#[cold]
fn create_pool() -> bool {
    if std::env::var(env::COMM_TIMING)
        .map(|v| v == "0")
        .unwrap_or(false)
    {
        POOL_STATE.store(3, Ordering::Release);
        return false;
    }
    if POOL_STATE
        .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return false;
    }
    let giveup = |retry: bool| {
        let n = POOL_TRIES.fetch_add(1, Ordering::Relaxed);
        POOL_STATE.store(if retry && n < 100 { 0 } else { 3 }, Ordering::Release);
        false
    };
    let Some(d) = driver() else {
        return giveup(true);
    };
    let (Some(get_ctx), Some(create), Some(_), Some(_)) = (
        d.ctx_get_current,
        d.event_create,
        d.event_record,
        d.event_query,
    ) else {
        return giveup(false);
    };
    let mut ctx: *mut c_void = std::ptr::null_mut();
    // SAFETY: real cuCtxGetCurrent writing a pointer we own.
    if unsafe { get_ctx(&mut ctx) } != CUDA_SUCCESS || ctx.is_null() {
        return giveup(true);
    }
    for p in POOL.iter() {
        let mut b: *mut c_void = std::ptr::null_mut();
        let mut e: *mut c_void = std::ptr::null_mut();
        // SAFETY: real cuEventCreate writing handles we own, in the current context.
        let ok = unsafe {
            create(&mut b, CU_EVENT_BLOCKING_SYNC) == 0
                && create(&mut e, CU_EVENT_BLOCKING_SYNC) == 0
        };
        if !ok {
            return giveup(false);
        }
        p.ev_b.store(b as usize, Ordering::Relaxed);
        p.ev_e.store(e as usize, Ordering::Relaxed);
        p.state.store(FREE, Ordering::Relaxed);
    }
    POOL_CTX.store(ctx as usize, Ordering::Relaxed);
    POOL_DEVICE.store(d.ctx_device() as u32, Ordering::Relaxed);
    let gen = POOL_GEN.load(Ordering::Relaxed);
    let spawned = std::thread::Builder::new()
        .name("freeride-poll".into())
        .stack_size(256 << 10)
        .spawn(move || poller(gen));
    if spawned.is_err() {
        return giveup(false);
    }
    POOL_STATE.store(2, Ordering::Release);
    true
}

/// Hook path: claims a pair and records its begin event on `stream`. None if timing is
/// unavailable (no pool, pool exhausted, stream capturing, other context).
pub fn begin(stream: u64) -> Option<usize> {
    if !pool_ready() {
        return None;
    }
    let d = DRIVER.get()?;
    if let Some(cap) = d.stream_is_capturing {
        let mut st: c_int = 0;
        // SAFETY: real cuStreamIsCapturing writing one int we own.
        if unsafe { cap(stream as *mut c_void, &mut st) } != CUDA_SUCCESS || st != 0 {
            return None;
        }
    }
    if let Some(get_ctx) = d.ctx_get_current {
        let mut ctx: *mut c_void = std::ptr::null_mut();
        // SAFETY: as above.
        if unsafe { get_ctx(&mut ctx) } != CUDA_SUCCESS
            || ctx as usize != POOL_CTX.load(Ordering::Relaxed)
        {
            return None;
        }
    }
    let rec = d.event_record?;
    for _ in 0..8 {
        let i = NEXT_PAIR.fetch_add(1, Ordering::Relaxed) % PAIRS;
        let p = &POOL[i];
        if p.state
            .compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            // SAFETY: real cuEventRecord on a pool event of the current context.
            if unsafe {
                rec(
                    p.ev_b.load(Ordering::Relaxed) as *mut c_void,
                    stream as *mut c_void,
                )
            } != CUDA_SUCCESS
            {
                p.state.store(FREE, Ordering::Release);
                return None;
            }
            return Some(i);
        }
    }
    None
}

/// Hook path: records the end event and hands the pair to the poller.
pub fn end(i: usize, stream: u64, api: Api, op: u32, group: u32, queued: u64) {
    let Some(p) = POOL.get(i) else { return };
    let Some(rec) = DRIVER.get().and_then(|d| d.event_record) else {
        p.state.store(FREE, Ordering::Release);
        return;
    };
    // SAFETY: real cuEventRecord on a pool event of the current context.
    if unsafe {
        rec(
            p.ev_e.load(Ordering::Relaxed) as *mut c_void,
            stream as *mut c_void,
        )
    } != CUDA_SUCCESS
    {
        p.state.store(FREE, Ordering::Release);
        return;
    }
    p.api.store(api as u32, Ordering::Relaxed);
    p.ids
        .store(op as u64 | (group as u64) << 32, Ordering::Relaxed);
    p.stream.store(stream, Ordering::Relaxed);
    p.queued.store(queued, Ordering::Relaxed);
    p.pending_b.store(queued, Ordering::Relaxed);
    p.pending_e.store(queued, Ordering::Relaxed);
    p.begin_done.store(0, Ordering::Relaxed);
    p.seen.store(0, Ordering::Relaxed);
    p.arm_seq
        .store(ARM_SEQ.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
    // The begin's wake-up is queued after the pair is armed, so that the poll it triggers finds
    // the pair; the lane is published before (the waiter it wakes looks for pairs of its lane).
    // If it cannot be queued, the process falls back to polling (the poller notices at its next
    // wake-up).
    let d = DRIVER.get().filter(|d| notify::available(d));
    let lane = d.and_then(|d| notify::lane_of(d, stream));
    p.lane.store(lane.unwrap_or(0), Ordering::Relaxed);
    p.state.store(ARMED, Ordering::Release);
    if let (Some(d), Some(lane)) = (d, lane) {
        if !notify::arm(d, lane, p.ev_b.load(Ordering::Relaxed)) {
            p.lane.store(0, Ordering::Relaxed);
            notify::turn_off();
        }
    }
}

/// At exit: one last poll so completed ops are reported.
pub fn flush_at_exit() {
    if POOL_STATE.load(Ordering::Acquire) == 2 {
        if let Some(d) = DRIVER.get() {
            let tid = rt::THREAD.try_with(rt::tid).unwrap_or(0);
            locked_poll(d, tid, Lock::Flush);
        }
    }
}

/// Fork child: the parent's events and poller are not ours.
pub fn reset_after_fork() {
    POOL_GEN.fetch_add(1, Ordering::Relaxed);
    for p in POOL.iter() {
        p.state.store(FREE, Ordering::Relaxed);
    }
    ANCHOR_EV.store(0, Ordering::Relaxed);
    ANCHOR_STALE.store(false, Ordering::Relaxed);
    // The parent's poller may have held the poll flag at fork: nobody will release it here.
    POLLING.store(false, Ordering::Relaxed);
    notify::reset_after_fork();
    POOL_STATE.store(0, Ordering::Release);
    POOL_TRIES.store(0, Ordering::Relaxed);
}
