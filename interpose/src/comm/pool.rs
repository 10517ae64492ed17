//! The timing pools: one per CUDA context the process queues timed work in (up to [`POOLS`]),
//! each with [`PAIRS`] pairs of timing events created in that context (slow path: on the first
//! timed op or wait there), its GPU and its clock anchor ([`super::anchor`]). A pair times one op
//! (or a group's work on one stream) or one wait: its `begin` event is recorded on the stream
//! before, its `end` event after, then it is *armed* and the poller threads report both.
//!
//! Hook path: the pool of the context the stream's work runs in (`cuStreamGetCtx`: a process that
//! drives several GPUs from one thread queues on streams of contexts that are not current) is
//! found by comparing its handle with at most [`POOLS`] slots; a pair is claimed with a CAS; the
//! events are recorded with the real driver, and an armed pair's bit is set in its pool's bitmap
//! (the poller and the waiters look at those pairs only). No lock, no allocation, no system call
//! of ours. Work that cannot be timed is told why
//! ([`Untimed`]), so that the caller says so at once ([`super::untimed_op`]).
use super::anchor::Anchor;
use super::driver::{Driver, CU_EVENT_BLOCKING_SYNC, DRIVER};
use super::notify;
use freeride_abi::event::Untimed;
use freeride_abi::{env, Api};
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, AtomicUsize};

/// Pairs per pool.
pub(super) const PAIRS: usize = 256;
/// Words of a pool's bitmap of armed pairs.
const ARMED_WORDS: usize = PAIRS / 64;
/// Contexts timed per process (one per GPU for a process that drives several).
pub(super) const POOLS: usize = 8;

const FREE: u32 = 0;
const CLAIMED: u32 = 1;
const ARMED: u32 = 2;

/// What a pair times.
pub(super) const WHAT_OP: u32 = 0;
pub(super) const WHAT_WAIT: u32 = 1;

pub(super) struct Pair {
    pub(super) state: AtomicU32,
    pub(super) begin_done: AtomicU32,
    /// 0 until the poller has seen this arming (poller's cadence: a new op is a change).
    pub(super) seen: AtomicU32,
    /// The lane + 1 whose waiter reports this pair ([`notify`]); 0: the poller polls for it.
    pub(super) lane: AtomicU32,
    /// Arming order: a lane's waiter takes its pairs oldest first.
    pub(super) arm_seq: AtomicU64,
    /// Poller-private: the reported begin time (the end is never reported before it).
    pub(super) t_begin: AtomicU64,
    pub(super) ev_b: AtomicUsize,
    pub(super) ev_e: AtomicUsize,
    /// [`WHAT_OP`] or [`WHAT_WAIT`].
    pub(super) what: AtomicU32,
    pub(super) api: AtomicU32,
    /// An op's `op | group << 32`, a wait's id.
    pub(super) ids: AtomicU64,
    pub(super) stream: AtomicU64,
    pub(super) queued: AtomicU64,
    pub(super) pending_b: AtomicU64,
    pub(super) pending_e: AtomicU64,
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
    what: AtomicU32::new(WHAT_OP),
    api: AtomicU32::new(0),
    ids: AtomicU64::new(0),
    stream: AtomicU64::new(0),
    queued: AtomicU64::new(0),
    pending_b: AtomicU64::new(0),
    pending_e: AtomicU64::new(0),
};

/// A pool's life: its slot claimed (its `ctx` set) while `EMPTY`, then `CREATING`, `READY`, or
/// `FAILED` (its context is not timed; its ops are untimed, [`Untimed::NoPool`]).
const EMPTY: u8 = 0;
const CREATING: u8 = 1;
pub(super) const READY: u8 = 2;
const FAILED: u8 = 3;

pub(super) struct Pool {
    pub(super) state: AtomicU8,
    /// The context (0: the slot is free).
    pub(super) ctx: AtomicUsize,
    /// Its GPU ([`freeride_abi::GpuId`] field).
    pub(super) gpu: AtomicI32,
    next: AtomicUsize,
    pub(super) anchor: Anchor,
    pub(super) pairs: [Pair; PAIRS],
    /// Bit `j` set: pair `j` is armed (set after its state, cleared before it is freed). The
    /// poller and the waiters look at the armed pairs only: a scan of every pair's state touched
    /// 256 cache lines at each wake-up, several times per op.
    armed: [AtomicU64; ARMED_WORDS],
}

#[allow(clippy::declare_interior_mutable_const)]
const POOL_INIT: Pool = Pool {
    state: AtomicU8::new(EMPTY),
    ctx: AtomicUsize::new(0),
    gpu: AtomicI32::new(-1),
    next: AtomicUsize::new(0),
    anchor: Anchor::new(),
    pairs: [PAIR_INIT; PAIRS],
    armed: [const { AtomicU64::new(0) }; ARMED_WORDS],
};

pub(super) static POOL: [Pool; POOLS] = [POOL_INIT; POOLS];

/// Bumped at fork: the poller and waiter threads of an older generation stop.
pub(super) static POOL_GEN: AtomicU32 = AtomicU32::new(0);
/// 0 not read, 1 on, 2 off (`FREERIDE_COMM_TIMING=0`).
static TIMING: AtomicU8 = AtomicU8::new(0);
static POLLER_STARTED: AtomicBool = AtomicBool::new(false);
static ARM_SEQ: AtomicU64 = AtomicU64::new(1);

impl Pool {
    pub(super) fn ready(&self) -> bool {
        self.state.load(Ordering::Acquire) == READY
    }
}

/// The pool and pair of a global pair index (as [`begin`] hands out).
pub(super) fn pair(i: usize) -> Option<(&'static Pool, &'static Pair)> {
    let p = POOL.get(i / PAIRS)?;
    Some((p, &p.pairs[i % PAIRS]))
}

/// The armed pairs of every ready pool, in index order, each with its pool and its index there.
pub(super) fn armed_pairs() -> impl Iterator<Item = (&'static Pool, usize, &'static Pair)> {
    POOL.iter()
        .filter(|p| p.ready())
        .flat_map(|p| armed_in(p).map(move |(j, q)| (p, j, q)))
}

/// The armed pairs of `pool`, in index order, with their index: those whose bit was set when
/// its word was read and whose state is still `ARMED`.
pub(super) fn armed_in(pool: &Pool) -> impl Iterator<Item = (usize, &Pair)> + '_ {
    pool.armed
        .iter()
        .enumerate()
        .flat_map(|(w, word)| Bits(word.load(Ordering::Acquire)).map(move |b| w * 64 + b))
        .map(move |j| (j, &pool.pairs[j]))
        .filter(|(_, p)| p.state.load(Ordering::Acquire) == ARMED)
}

/// The set bits of a word, lowest first.
struct Bits(u64);

impl Iterator for Bits {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let b = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(b)
    }
}

/// Frees armed pair `j` of `pool` (poller side): its bit first, then its state. The pair can be
/// claimed again only once it reads `FREE`, so the bit its next arming sets comes after the one
/// cleared here.
pub(super) fn free_armed(pool: &Pool, j: usize) {
    pool.armed[j / 64].fetch_and(!(1u64 << (j % 64)), Ordering::Relaxed);
    pool.pairs[j].state.store(FREE, Ordering::Release);
}

fn timing_on() -> bool {
    match TIMING.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let off = std::env::var(env::COMM_TIMING).is_ok_and(|v| v == "0");
            TIMING.store(if off { 2 } else { 1 }, Ordering::Relaxed);
            !off
        }
    }
}

/// The pool of context `ctx` (made now if it has none and a slot is free).
fn pool_for(d: &'static Driver, ctx: usize) -> Result<usize, Untimed> {
    if ctx == 0 {
        return Err(Untimed::NoPool);
    }
    for (k, p) in POOL.iter().enumerate() {
        if p.ctx.load(Ordering::Acquire) == ctx {
            return match p.state.load(Ordering::Acquire) {
                READY => Ok(k),
                // Another thread is making it, or it could not be made.
                _ => Err(Untimed::NoPool),
            };
        }
    }
    for (k, p) in POOL.iter().enumerate() {
        if p.ctx
            .compare_exchange(0, ctx, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return create(d, k).then_some(k).ok_or(Untimed::NoPool);
        }
    }
    Err(Untimed::NoPool)
}

/// Makes pool `k`'s events in its context (its slot claimed for it; made current for this if it
/// is not). Slow path, once per context: [`PAIRS`] x 2 `cuEventCreate` on the hook's thread; the
/// poller thread starts with the first pool.
#[cold]
fn create(d: &'static Driver, k: usize) -> bool {
    let pool = &POOL[k];
    pool.state.store(CREATING, Ordering::Release);
    let ctx = pool.ctx.load(Ordering::Acquire);
    let ok = d
        .in_ctx(ctx, || -> Option<()> {
            let create = d.event_create?;
            for p in pool.pairs.iter() {
                let mut b: *mut c_void = std::ptr::null_mut();
                let mut e: *mut c_void = std::ptr::null_mut();
                // SAFETY: real cuEventCreate writing handles we own, in the current context.
                let ok = unsafe {
                    create(&mut b, CU_EVENT_BLOCKING_SYNC) == 0
                        && create(&mut e, CU_EVENT_BLOCKING_SYNC) == 0
                };
                if !ok {
                    return None;
                }
                p.ev_b.store(b as usize, Ordering::Relaxed);
                p.ev_e.store(e as usize, Ordering::Relaxed);
                p.state.store(FREE, Ordering::Relaxed);
            }
            let gpu = crate::gpus::of_ordinal(d.ctx_device());
            pool.gpu.store(gpu.field(), Ordering::Relaxed);
            Some(())
        })
        .is_some()
        && start_poller();
    pool.state
        .store(if ok { READY } else { FAILED }, Ordering::Release);
    ok
}

fn start_poller() -> bool {
    if POLLER_STARTED.swap(true, Ordering::AcqRel) {
        return true;
    }
    let gen = POOL_GEN.load(Ordering::Relaxed);
    let ok = std::thread::Builder::new()
        .name("freeride-poll".into())
        .stack_size(256 << 10)
        .spawn(move || super::poller::poller(gen))
        .is_ok();
    if !ok {
        POLLER_STARTED.store(false, Ordering::Release);
    }
    ok
}

/// Hook path: claims a pair of the current context's pool and records its begin event on
/// `stream`; its global index, or why the work cannot be timed.
pub(super) fn begin(stream: u64) -> Result<usize, Untimed> {
    if !timing_on() {
        return Err(Untimed::Off);
    }
    let d = super::driver().ok_or(Untimed::Off)?;
    if d.event_record.is_none() || d.event_query.is_none() || d.event_create.is_none() {
        return Err(Untimed::Off);
    }
    match d.capturing(stream) {
        Some(false) => {}
        Some(true) => return Err(Untimed::Capturing),
        // A driver without cuStreamIsCapturing cannot capture; an error is the stream's.
        None if d.stream_is_capturing.is_none() => {}
        None => return Err(Untimed::DriverError),
    }
    let k = pool_for(d, d.stream_ctx(stream))?;
    let pool = &POOL[k];
    for _ in 0..8 {
        let i = pool.next.fetch_add(1, Ordering::Relaxed) % PAIRS;
        let p = &pool.pairs[i];
        if p.state
            .compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            if !d.record(p.ev_b.load(Ordering::Relaxed), stream) {
                p.state.store(FREE, Ordering::Release);
                return Err(Untimed::DriverError);
            }
            return Ok(k * PAIRS + i);
        }
    }
    Err(Untimed::PoolFull)
}

/// Hook path: records pair `i`'s end event on `stream` and hands the pair to the poller
/// (`what`, `api`, `ids`: what it reports). Err: the end could not be recorded (the pair is
/// freed; nothing will be reported for it).
pub(super) fn end(
    i: usize,
    stream: u64,
    what: u32,
    api: Api,
    ids: u64,
    queued: u64,
) -> Result<(), Untimed> {
    let Some((_, p)) = pair(i) else {
        return Err(Untimed::DriverError);
    };
    let Some(d) = DRIVER.get() else {
        p.state.store(FREE, Ordering::Release);
        return Err(Untimed::DriverError);
    };
    if !d.record(p.ev_e.load(Ordering::Relaxed), stream) {
        p.state.store(FREE, Ordering::Release);
        return Err(Untimed::DriverError);
    }
    if what == WHAT_OP {
        // `ids` (op | group << 32, one of them 0) is the op's key as the hooks noted it.
        let key = super::key(ids as u32, (ids >> 32) as u32);
        crate::waits::comm_timed(stream, key, p.ev_e.load(Ordering::Relaxed) as u64);
    }
    p.what.store(what, Ordering::Relaxed);
    p.api.store(api as u32, Ordering::Relaxed);
    p.ids.store(ids, Ordering::Relaxed);
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
    // None is queued while the lane's waiter is busy: it finds the pair itself.
    // If it cannot be queued, the process falls back to polling (the poller notices at its next
    // wake-up).
    let notified = Some(d).filter(|d| notify::available(d));
    let k = i / PAIRS;
    // A new lane's private stream is made in the pool's context.
    let lane = notified.and_then(|d| {
        d.in_ctx(POOL[k].ctx.load(Ordering::Relaxed), || {
            notify::lane_of(d, k, stream)
        })
    });
    p.lane.store(lane.unwrap_or(0), Ordering::Relaxed);
    p.state.store(ARMED, Ordering::Release);
    // After the state (a pair whose bit is read is armed), before the wake-up (the poll it
    // triggers finds the bit).
    let j = i % PAIRS;
    POOL[k].armed[j / 64].fetch_or(1u64 << (j % 64), Ordering::Release);
    if let (Some(d), Some(lane)) = (notified, lane) {
        if notify::doorbell_needed(lane) && !notify::arm(d, lane, p.ev_b.load(Ordering::Relaxed)) {
            p.lane.store(0, Ordering::Relaxed);
            notify::turn_off();
        }
    }
    Ok(())
}

/// Hook path: frees claimed pair `i` (its begin recorded, its end never to be).
pub(super) fn abandon(i: usize) {
    if let Some((_, p)) = pair(i) {
        p.state.store(FREE, Ordering::Release);
    }
}

/// Whether any pair is armed (the poller renews anchors only while work is timed).
pub(super) fn any_armed(pool: &Pool) -> bool {
    pool.armed.iter().any(|w| w.load(Ordering::Relaxed) != 0)
}

/// Fork child: the parent's events, contexts and poller are not ours.
pub(super) fn reset_after_fork() {
    POOL_GEN.fetch_add(1, Ordering::Relaxed);
    for pool in POOL.iter() {
        for p in pool.pairs.iter() {
            p.state.store(FREE, Ordering::Relaxed);
        }
        for w in pool.armed.iter() {
            w.store(0, Ordering::Relaxed);
        }
        pool.anchor.reset();
        pool.gpu.store(-1, Ordering::Relaxed);
        pool.state.store(EMPTY, Ordering::Relaxed);
        pool.ctx.store(0, Ordering::Relaxed);
    }
    POLLER_STARTED.store(false, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arm(pool: &Pool, j: usize) {
        pool.pairs[j].state.store(ARMED, Ordering::Release);
        pool.armed[j / 64].fetch_or(1u64 << (j % 64), Ordering::Release);
    }

    fn armed(pool: &Pool) -> Vec<usize> {
        armed_in(pool).map(|(j, _)| j).collect()
    }

    #[test]
    fn only_armed_pairs_are_looked_at_in_index_order_until_freed() {
        let pool = POOL_INIT;
        assert!(!any_armed(&pool) && armed(&pool).is_empty());
        for j in [200, 3, 64, 255, 63] {
            arm(&pool, j);
        }
        assert_eq!(armed(&pool), [3, 63, 64, 200, 255]);
        // A bit whose pair is not armed (set before its state, or a claim in progress) is
        // passed over, and a pair armed without its bit yet is found once the bit is set.
        pool.armed[0].fetch_or(1 << 7, Ordering::Release);
        pool.pairs[100].state.store(ARMED, Ordering::Release);
        assert_eq!(armed(&pool), [3, 63, 64, 200, 255]);
        free_armed(&pool, 64);
        assert_eq!(pool.pairs[64].state.load(Ordering::Relaxed), FREE);
        assert_eq!(armed(&pool), [3, 63, 200, 255]);
        for j in [3, 63, 200, 255, 7] {
            free_armed(&pool, j);
        }
        assert!(!any_armed(&pool), "{:?}", pool.armed);
        assert!(armed(&pool).is_empty());
    }
}
