//! GPU-side timing of NCCL operations.
//!
//! Around each op (or, for a group, around `ncclGroupEnd`, once per stream the group used) the
//! hook records two driver events on the op's stream: `begin` before the op is queued, `end`
//! after. Events come from a preallocated pool of *timing* events created once per process (slow
//! path, on the first comm op) in the caller's context. The hook only records events (no
//! creation, no system call, no lock).
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
//! Since the poll time no longer affects accuracy, only how soon a begin/end is reported, the
//! poller's cadence is adaptive (each wake-up costs a context switch, ~10 µs of CPU on a small VM,
//! which is what observing used to cost). While some op's begin is still pending it polls every
//! `FREERIDE_POLL_US` (default 100 µs) right after a change (a new op armed, a begin or an end
//! seen), backing off to half the time since the last change, capped at 200 µs: a begin opens a
//! bubble in the agent's detector, so it is reported within 200 µs. When every in-flight op has
//! begun (a transfer or a receive waiting on its peer: a bubble in progress) it polls every 250 µs
//! (the end's time is exact anyway; its report closes the bubble and the side tasks' grant); with
//! nothing in flight, every 1 ms. It sleeps
//! with `clock_nanosleep` to an absolute deadline with a 1 ns timer slack; hooks never wake it.
//!
//! After a poll that pushed a begin or an end, the poller rings the session doorbell
//! ([`freeride_abi::doorbell`], mapped by [`Bell`]), so that an agent sleeping between bubbles
//! learns of it at once. Only this thread rings (a system call only while the agent sleeps);
//! hooks never do.

use crate::dl;
use crate::rt;
use freeride_abi::doorbell::{Doorbell, DOORBELL_FILE};
use freeride_abi::shm_file::file_id;
use freeride_abi::{env, now_ns, ring::FEATURE_RINGS_DOORBELL, session, Api, Kind, Record};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
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
type GetProcAddress =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;

const CUDA_SUCCESS: c_int = 0;
const CUDA_ERROR_NOT_READY: c_int = 600;
/// `CU_EVENT_DEFAULT`: timing enabled (needed for `cuEventElapsedTime`).
const CU_EVENT_DEFAULT: u32 = 0;
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
            create(&mut b, CU_EVENT_DEFAULT) == 0 && create(&mut e, CU_EVENT_DEFAULT) == 0
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
    p.state.store(ARMED, Ordering::Release);
}

/// Reference events per anchoring (the tightest window wins); two sets, used alternately, so the
/// current anchor's event is never re-recorded while a new anchor is taken.
const ANCHOR_TRIES: usize = 4;
/// Renew the anchor this often while ops flow (f32 ms resolution ~0.25 µs at 2 s; clock drift).
const ANCHOR_MAX_AGE_NS: u64 = 2_000_000_000;
/// At most one re-anchor this often when a time failed the causality check.
const ANCHOR_RETRY_NS: u64 = 100_000_000;
/// Resolution of `cuEventElapsedTime` (about 0.5 µs), added to every uncertainty.
const ELAPSED_RESOLUTION_NS: u64 = 500;
/// A GPU-clock time further than this outside [queued, now] (beyond its uncertainty) means the
/// anchor is wrong: use the poll midpoint and re-anchor.
const CAUSALITY_SLACK_NS: u64 = 2_000_000;
/// Poll cadence: fastest (default; `FREERIDE_POLL_US`) and slowest.
const POLL_FAST_NS: u64 = 100_000;
const POLL_SLOW_NS: u64 = 1_000_000;
/// Slowest cadence while a begin is pending: a begin opens a bubble, and the agent must learn of it
/// within about 200 µs.
const POLL_BEGIN_MAX_NS: u64 = 200_000;
/// Cadence while every in-flight op has begun (a bubble in progress): its end closes the bubble
/// and the side tasks' grant.
const POLL_END_NS: u64 = 250_000;

/// The current anchor: reference event (0 = none), its host time and that time's uncertainty.
static ANCHOR_EV: AtomicUsize = AtomicUsize::new(0);
static ANCHOR_HOST_NS: AtomicU64 = AtomicU64::new(0);
static ANCHOR_UNC_NS: AtomicU64 = AtomicU64::new(0);
/// Set when a time failed the causality check: the poller re-anchors soon.
static ANCHOR_STALE: AtomicBool = AtomicBool::new(false);
/// cuEventElapsedTime as the driver hands it out for CUDA 13.0 (0 = unavailable).
static ELAPSED_FN: AtomicUsize = AtomicUsize::new(0);
/// Held by whoever polls (the poller thread, or `flush_at_exit`): one poll at a time.
static POLLING: AtomicBool = AtomicBool::new(false);

/// The poller's private clock-anchoring resources.
struct Clock {
    stream: usize,
    events: [usize; 2 * ANCHOR_TRIES],
    set: usize,
}

/// `cuEventElapsedTime` through the driver's `cuGetProcAddress` at CUDA 13.0 (-> `_v2`, same
/// signature), else the exported symbol.
fn resolve_elapsed(d: &Driver) -> Option<EventElapsed> {
    if let Some(gpa) = d.get_proc_address {
        let mut f: *mut c_void = std::ptr::null_mut();
        let mut status: c_int = 0;
        // SAFETY: real cuGetProcAddress_v2 with a valid C string, writing a pointer and an int
        // we own; CU_GET_PROC_ADDRESS_DEFAULT flags.
        let rc = unsafe {
            gpa(
                c"cuEventElapsedTime".as_ptr(),
                &mut f,
                13000,
                0,
                &mut status,
            )
        };
        if rc == CUDA_SUCCESS && !f.is_null() {
            // SAFETY: the driver's cuEventElapsedTime for 13.0 is cuEventElapsedTime_v2:
            // CUresult (float*, CUevent, CUevent), the type transmuted to.
            return Some(unsafe { std::mem::transmute::<*mut c_void, EventElapsed>(f) });
        }
    }
    d.dlsym_elapsed
}

impl Clock {
    /// Poller thread, pool context current: a private stream and reference events.
    fn new(d: &Driver) -> Option<Clock> {
        let elapsed = resolve_elapsed(d)?;
        let (Some(sc), Some(create)) = (d.stream_create, d.event_create) else {
            return None;
        };
        let mut s: *mut c_void = std::ptr::null_mut();
        // SAFETY: real cuStreamCreate writing a handle we own, in the current (pool) context.
        if unsafe { sc(&mut s, CU_STREAM_NON_BLOCKING) } != CUDA_SUCCESS {
            return None;
        }
        let mut events = [0usize; 2 * ANCHOR_TRIES];
        for e in events.iter_mut() {
            let mut h: *mut c_void = std::ptr::null_mut();
            // SAFETY: real cuEventCreate writing a handle we own, in the current context.
            if unsafe { create(&mut h, CU_EVENT_DEFAULT) } != CUDA_SUCCESS {
                return None;
            }
            *e = h as usize;
        }
        ELAPSED_FN.store(elapsed as usize, Ordering::Relaxed);
        Some(Clock {
            stream: s as usize,
            events,
            set: 0,
        })
    }

    /// Maps a fresh reference event to the host clock. Slow path (poller thread only): records
    /// on the idle private stream, waits for completion, keeps the tightest of a few windows.
    fn anchor(&mut self, d: &Driver) -> bool {
        let (Some(rec), Some(query)) = (d.event_record, d.event_query) else {
            return false;
        };
        let mut best: Option<(usize, u64, u64)> = None;
        for k in 0..ANCHOR_TRIES {
            let ev = self.events[self.set * ANCHOR_TRIES + k];
            let t0 = now_ns();
            // SAFETY: real cuEventRecord of our own event on our own stream.
            if unsafe { rec(ev as *mut c_void, self.stream as *mut c_void) } != CUDA_SUCCESS {
                break;
            }
            // Spin (yielding) so completion is seen promptly; block after 1 ms.
            let mut ok = false;
            loop {
                // SAFETY: real cuEventQuery of our own event.
                match unsafe { query(ev as *mut c_void) } {
                    CUDA_SUCCESS => {
                        ok = true;
                        break;
                    }
                    CUDA_ERROR_NOT_READY => {}
                    _ => break,
                }
                if now_ns().saturating_sub(t0) > 1_000_000 {
                    if let Some(sync) = d.event_synchronize {
                        // SAFETY: real cuEventSynchronize of our own recorded event.
                        ok = unsafe { sync(ev as *mut c_void) } == CUDA_SUCCESS;
                    }
                    break;
                }
                std::thread::yield_now();
            }
            let t2 = now_ns();
            if !ok {
                break;
            }
            let w = t2.saturating_sub(t0);
            if best.is_none_or(|b| w < b.2) {
                best = Some((ev, t0 + w / 2, w));
            }
            if w < 10_000 {
                break;
            }
        }
        let Some((ev, host, w)) = best else {
            return false;
        };
        ANCHOR_HOST_NS.store(host, Ordering::Relaxed);
        ANCHOR_UNC_NS.store(w.div_ceil(2), Ordering::Relaxed);
        ANCHOR_EV.store(ev, Ordering::Relaxed);
        ANCHOR_STALE.store(false, Ordering::Relaxed);
        self.set ^= 1;
        true
    }
}

/// GPU-side host time of a completed pool event: (t_ns, uncertainty_ns), or None without a
/// usable anchor / elapsed time.
fn gpu_time(ev: usize) -> Option<(u64, u64)> {
    let a = ANCHOR_EV.load(Ordering::Relaxed);
    let f = ELAPSED_FN.load(Ordering::Relaxed);
    if a == 0 || f == 0 {
        return None;
    }
    // SAFETY: f was stored from a driver cuEventElapsedTime(_v2) pointer of that exact type.
    let f = unsafe { std::mem::transmute::<usize, EventElapsed>(f) };
    let mut ms: f32 = 0.0;
    // SAFETY: real cuEventElapsedTime on two events of the pool's context, writing a float we own.
    if unsafe { f(&mut ms, a as *mut c_void, ev as *mut c_void) } != CUDA_SUCCESS || !ms.is_finite()
    {
        return None;
    }
    let ms = ms as f64;
    let t = ANCHOR_HOST_NS.load(Ordering::Relaxed) as i64 + (ms * 1e6).round() as i64;
    if t <= 0 {
        return None;
    }
    // Half an f32 ulp of the elapsed milliseconds, in ns.
    let quant = (ms.abs() * 1e6 * f32::EPSILON as f64 / 2.0) as u64;
    let unc = ANCHOR_UNC_NS.load(Ordering::Relaxed) + ELAPSED_RESOLUTION_NS + quant;
    Some((t as u64, unc))
}

fn sleep_until(t_ns: u64) {
    let ts = freeride_abi::timespec(t_ns);
    // SAFETY: clock_nanosleep reads the timespec we own; no remainder with TIMER_ABSTIME.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
}

fn any_armed() -> bool {
    POOL.iter()
        .any(|p| p.state.load(Ordering::Relaxed) == ARMED)
}

/// How often the poller looks for the doorbell while it has none, and checks that the one it has
/// is still the file in the session directory (an agent replaces only an invalid one).
const BELL_CHECK_NS: u64 = 500_000_000;

/// The poller's doorbell: mapped once an agent has made it; this process's ring then says so.
#[derive(Default)]
struct Bell {
    door: Option<Doorbell>,
    checked_at: u64,
}

impl Bell {
    /// Maps the doorbell if there is none yet, or if the file was replaced (poller thread only:
    /// system calls are fine here).
    fn refresh(&mut self, now: u64) {
        if self.checked_at != 0 && now.saturating_sub(self.checked_at) < BELL_CHECK_NS {
            return;
        }
        self.checked_at = now.max(1);
        let dir = session::resolve_dir();
        if let Some(d) = &self.door {
            if file_id(&dir.join(DOORBELL_FILE)) == Some(d.file_id()) {
                return;
            }
            self.door = None;
            rt::set_ring_feature(FEATURE_RINGS_DOORBELL, false);
        }
        if let Ok(d) = Doorbell::open(&dir) {
            if rt::set_ring_feature(FEATURE_RINGS_DOORBELL, true) {
                self.door = Some(d);
            }
        }
    }

    fn ring(&self) {
        if let Some(d) = &self.door {
            d.ring();
        }
    }
}

fn poller(gen: u32) {
    let Some(d) = DRIVER.get() else { return };
    if let Some(set) = d.ctx_set_current {
        // SAFETY: making the pool's context current on this (our own) thread.
        unsafe { set(POOL_CTX.load(Ordering::Relaxed) as *mut c_void) };
    }
    // SAFETY: prctl(PR_SET_TIMERSLACK) sets this thread's timer slack (1 ns): accurate wake-ups.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    let fast = std::env::var(env::POLL_US)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(|us| (us * 1000).clamp(10_000, 100_000_000))
        .unwrap_or(POLL_FAST_NS);
    let slow = POLL_SLOW_NS.max(fast);
    let begin_max = POLL_BEGIN_MAX_NS.max(fast);
    let tid = rt::THREAD.try_with(rt::tid).unwrap_or(0);
    let mut clock = Clock::new(d);
    let mut anchored_at = 0u64;
    let mut tried_at = 0u64;
    let mut last_change = now_ns();
    let mut bell = Bell::default();
    while POOL_GEN.load(Ordering::Relaxed) == gen {
        bell.refresh(now_ns());
        if let Some(c) = clock.as_mut() {
            let now = now_ns();
            let want = ANCHOR_EV.load(Ordering::Relaxed) == 0
                || ANCHOR_STALE.load(Ordering::Relaxed)
                || (now.saturating_sub(anchored_at) > ANCHOR_MAX_AGE_NS && any_armed());
            if want && (tried_at == 0 || now.saturating_sub(tried_at) > ANCHOR_RETRY_NS) {
                tried_at = now;
                while POLLING.swap(true, Ordering::Acquire) {
                    std::thread::yield_now();
                }
                if c.anchor(d) {
                    anchored_at = now;
                }
                POLLING.store(false, Ordering::Release);
            }
        }
        let st = locked_poll(d, tid, false);
        if st.reported {
            bell.ring();
        }
        let now = now_ns();
        if st.changed {
            last_change = now;
        }
        let delay = if st.begin_pending {
            (now.saturating_sub(last_change) / 2).clamp(fast, begin_max)
        } else if any_armed() {
            POLL_END_NS.max(fast)
        } else {
            slow
        };
        sleep_until(now + delay);
    }
}

/// What one poll saw.
#[derive(Default, Clone, Copy)]
struct Polled {
    /// An armed op's begin is still pending.
    begin_pending: bool,
    /// Something changed: a new op seen, a begin or an end.
    changed: bool,
    /// A begin or an end was pushed.
    reported: bool,
}

/// One poll under the poll flag. `wait`: wait (bounded) for a poll in progress elsewhere.
fn locked_poll(d: &Driver, tid: u32, wait: bool) -> Polled {
    let t0 = now_ns();
    while POLLING.swap(true, Ordering::Acquire) {
        if !wait || now_ns().saturating_sub(t0) > 50_000_000 {
            if wait {
                break; // The holder is stuck (exiting?): poll anyway.
            }
            return Polled {
                begin_pending: true,
                ..Polled::default()
            };
        }
        std::thread::yield_now();
    }
    let r = poll_once(d, tid);
    POLLING.store(false, Ordering::Release);
    r
}

fn poll_once(d: &Driver, tid: u32) -> Polled {
    let mut r = Polled::default();
    let Some(query) = d.event_query else {
        return r;
    };
    let dev = POOL_DEVICE.load(Ordering::Relaxed) as i32;
    for p in POOL.iter() {
        if p.state.load(Ordering::Acquire) != ARMED {
            continue;
        }
        if p.seen.swap(1, Ordering::Relaxed) == 0 {
            r.changed = true;
        }
        let now = now_ns();
        let queued = p.queued.load(Ordering::Relaxed);
        // The event's time: GPU clock via the anchor, else the poll midpoint.
        let time = |ev: usize, pending: u64, floor: u64| -> (u64, u64) {
            if let Some((t, unc)) = gpu_time(ev) {
                let lo = queued.saturating_sub(unc + CAUSALITY_SLACK_NS);
                if t >= lo && t <= now + unc + CAUSALITY_SLACK_NS {
                    return (t.max(floor), unc);
                }
                ANCHOR_STALE.store(true, Ordering::Relaxed);
            }
            let half = now.saturating_sub(pending) / 2;
            ((pending + half).max(floor), half)
        };
        let emit = |kind: Kind, t: u64, unc: u64| {
            let api = p.api.load(Ordering::Relaxed);
            rt::push(&Record {
                t_ns: t,
                kind: kind as u8,
                flags: 0,
                api: api as u16,
                device: dev,
                tid,
                aux: 0,
                stream: p.stream.load(Ordering::Relaxed),
                p0: queued,
                p1: unc,
                p2: p.ids.load(Ordering::Relaxed),
            });
        };
        if p.begin_done.load(Ordering::Relaxed) == 0 {
            let ev = p.ev_b.load(Ordering::Relaxed);
            // SAFETY: real cuEventQuery on a pool event.
            match unsafe { query(ev as *mut c_void) } {
                CUDA_SUCCESS => {
                    let (t, unc) = time(ev, p.pending_b.load(Ordering::Relaxed), 0);
                    emit(Kind::CommBegin, t, unc);
                    r.changed = true;
                    r.reported = true;
                    p.begin_done.store(1, Ordering::Relaxed);
                    p.t_begin.store(t, Ordering::Relaxed);
                    // The end cannot precede the begin.
                    if p.pending_e.load(Ordering::Relaxed) < t {
                        p.pending_e.store(t, Ordering::Relaxed);
                    }
                }
                CUDA_ERROR_NOT_READY => {
                    r.begin_pending = true;
                    p.pending_b.store(now, Ordering::Relaxed);
                    p.pending_e.store(now, Ordering::Relaxed);
                    continue;
                }
                _ => {
                    p.state.store(FREE, Ordering::Release);
                    continue;
                }
            }
        }
        let ev = p.ev_e.load(Ordering::Relaxed);
        // SAFETY: real cuEventQuery on a pool event.
        match unsafe { query(ev as *mut c_void) } {
            CUDA_SUCCESS => {
                let (t, unc) = time(
                    ev,
                    p.pending_e.load(Ordering::Relaxed),
                    p.t_begin.load(Ordering::Relaxed),
                );
                emit(Kind::CommEnd, t, unc);
                r.changed = true;
                r.reported = true;
                p.state.store(FREE, Ordering::Release);
            }
            CUDA_ERROR_NOT_READY => p.pending_e.store(now_ns(), Ordering::Relaxed),
            _ => p.state.store(FREE, Ordering::Release),
        }
    }
    r
}

/// At exit: one last poll so completed ops are reported.
pub fn flush_at_exit() {
    if POOL_STATE.load(Ordering::Acquire) == 2 {
        if let Some(d) = DRIVER.get() {
            let tid = rt::THREAD.try_with(rt::tid).unwrap_or(0);
            locked_poll(d, tid, true);
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
    POOL_STATE.store(0, Ordering::Release);
    POOL_TRIES.store(0, Ordering::Relaxed);
}
