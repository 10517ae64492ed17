//! The poller thread and the lanes' waiter threads (see the [`super`] and [`notify`] docs): the
//! anchors (one per timing pool), one poll of the armed pairs, the doorbell, the cadence.
use super::anchor::{
    gpu_time, Clock, ANCHOR_MAX_AGE_NS, ANCHOR_RETRY_NS, CAUSALITY_SLACK_NS, TIGHT_ANCHOR_NS,
};
use super::driver::{Driver, CUDA_ERROR_NOT_READY, CUDA_SUCCESS, DRIVER};
use super::notify;
use super::pool::{self, Pair, Pool, POOL, POOLS, POOL_GEN, WHAT_WAIT};
use crate::rt;
use freeride_abi::doorbell::{Doorbell, DOORBELL_FILE};
use freeride_abi::event::Untimed;
use freeride_abi::shm_file::file_id;
use freeride_abi::{env, now_ns, ring::FEATURE_RINGS_DOORBELL, session, Kind, Record};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Poll cadence: fastest (default; `FREERIDE_POLL_US`) and slowest.
const POLL_FAST_NS: u64 = 100_000;
const POLL_SLOW_NS: u64 = 1_000_000;
/// Slowest cadence while a begin is pending: a begin opens a bubble, and the agent must learn of it
/// within about 200 µs.
const POLL_BEGIN_MAX_NS: u64 = 200_000;
/// Cadence while every in-flight op has begun (a bubble in progress): its end closes the bubble
/// and the side tasks' grant.
const POLL_END_NS: u64 = 250_000;

/// Held by whoever polls (the poller thread, a waiter, `flush_at_exit`): one poll at a time.
pub(super) static POLLING: AtomicBool = AtomicBool::new(false);

fn any_armed() -> bool {
    POOL.iter().filter(|p| p.ready()).any(pool::any_armed)
}

/// How often the poller looks for the doorbell while it has none, and checks that the one it has
/// is still the file in the session directory (an agent replaces only an invalid one).
const BELL_CHECK_NS: u64 = 500_000_000;

/// The doorbell every thread of this process that reports rings (the poller's [`Bell`] maps it).
static DOOR: Mutex<Option<Arc<Doorbell>>> = Mutex::new(None);

/// Rings the doorbell, if there is one (after a poll that pushed a begin or an end).
fn ring_bell() {
    let door = DOOR.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some(d) = door {
        d.ring();
    }
}

/// The poller's doorbell: mapped once an agent has made it; this process's ring then says so.
#[derive(Default)]
struct Bell {
    door: Option<Arc<Doorbell>>,
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
            self.set(None);
            rt::set_ring_feature(FEATURE_RINGS_DOORBELL, false);
        }
        if let Ok(d) = Doorbell::open(&dir) {
            if rt::set_ring_feature(FEATURE_RINGS_DOORBELL, true) {
                self.set(Some(Arc::new(d)));
            }
        }
    }

    fn set(&mut self, door: Option<Arc<Doorbell>>) {
        *DOOR.lock().unwrap_or_else(|e| e.into_inner()) = door.clone();
        self.door = door;
    }
}

/// The poller's per-pool clock state.
#[derive(Default)]
struct PoolClock {
    clock: Option<Clock>,
    /// A clock was tried (made once per pool: a driver that refuses it will refuse it again).
    tried_clock: bool,
    anchored_at: u64,
    tried_at: u64,
}

/// A pool's anchor as the poller sees it at `now`.
#[derive(Clone, Copy, Debug)]
struct AnchorState {
    /// There is one and no time has failed the causality check with it.
    usable: bool,
    /// Its uncertainty (ns) and when it was taken.
    unc_ns: u64,
    anchored_at: u64,
    /// When anchoring was last tried (0: never).
    tried_at: u64,
    /// Work is being timed in the pool.
    armed: bool,
}

/// Whether to anchor now, and if so whether only a tighter anchor may replace the current one:
/// none or an unusable one (at once), one past [`ANCHOR_MAX_AGE_NS`] while work is timed, or a
/// loose one (wider than [`TIGHT_ANCHOR_NS`], taken while the host was busy) while work is timed,
/// kept unless the new one is tighter; at most one try every [`ANCHOR_RETRY_NS`].
fn anchor_now(a: AnchorState, now: u64) -> Option<bool> {
    let must = !a.usable || (now.saturating_sub(a.anchored_at) > ANCHOR_MAX_AGE_NS && a.armed);
    let loose = a.unc_ns > TIGHT_ANCHOR_NS && a.armed;
    let retried = a.tried_at != 0 && now.saturating_sub(a.tried_at) <= ANCHOR_RETRY_NS;
    ((must || loose) && !retried).then_some(!must)
}

/// Keeps pool `pool`'s anchor fresh (its context made current on the poller thread).
fn keep_anchor(d: &Driver, pool: &Pool, c: &mut PoolClock, now: u64) {
    let a = &pool.anchor;
    let state = AnchorState {
        usable: a.ev.load(Ordering::Relaxed) != 0 && !a.stale.load(Ordering::Relaxed),
        unc_ns: a.uncertainty_ns(),
        anchored_at: c.anchored_at,
        tried_at: c.tried_at,
        armed: pool::any_armed(pool),
    };
    let Some(only_tighter) = anchor_now(state, now) else {
        return;
    };
    c.tried_at = now;
    d.set_current(pool.ctx.load(Ordering::Acquire));
    if !c.tried_clock {
        c.tried_clock = true;
        c.clock = Clock::new(d);
    }
    let Some(clock) = c.clock.as_mut() else {
        return;
    };
    while POLLING.swap(true, Ordering::Acquire) {
        std::thread::yield_now();
    }
    if clock.anchor(d, a, only_tighter) {
        c.anchored_at = now;
    }
    POLLING.store(false, Ordering::Release);
}

pub(super) fn poller(gen: u32) {
    crate::rt::set_service_lane();
    let Some(d) = DRIVER.get() else { return };
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
    let mut clocks: [PoolClock; POOLS] = Default::default();
    let mut last_change = now_ns();
    let mut bell = Bell::default();
    while POOL_GEN.load(Ordering::Relaxed) == gen {
        // Read before the poll: a wake-up after it makes the sleep below return at once.
        let seq = notify::seq(None);
        bell.refresh(now_ns());
        for (p, c) in POOL.iter().zip(clocks.iter_mut()) {
            if p.ready() {
                keep_anchor(d, p, c, now_ns());
            }
        }
        let st = locked_poll(d, tid, Lock::Try);
        if st.reported {
            ring_bell();
        }
        notify::start_waiters(|lane| {
            std::thread::Builder::new()
                .name("freeride-wait".into())
                .stack_size(256 << 10)
                .spawn(move || waiter(lane, gen))
                .is_ok()
        });
        let now = now_ns();
        if st.changed {
            last_change = now;
        }
        let delay = if st.begin_pending {
            (now.saturating_sub(last_change) / 2).clamp(fast, begin_max)
        } else if st.polled_pending || (!notify::available(d) && any_armed()) {
            POLL_END_NS.max(fast)
        } else if notify::available(d) {
            // Every armed pair has a waiter (or none is armed): the safety net only.
            notify::NOTIFIED_IDLE_NS
        } else {
            slow
        };
        notify::sleep(None, seq, delay);
    }
}

/// A lane's waiter thread ([`notify`]): reports the begins and ends of the lane's pairs as they
/// happen. It blocks in `cuEventSynchronize` on the lane's oldest pair's begin event, then on its
/// end event (blocking-sync: the thread sleeps until the GPU gets there); with no pair armed it
/// sleeps on the lane's futex word, which the host function of a begin queued meanwhile bumps.
fn waiter(lane: usize, gen: u32) {
    crate::rt::set_service_lane();
    let Some((d, sync)) = DRIVER.get().and_then(|d| Some((d, d.event_synchronize?))) else {
        notify::waiter_gone(lane);
        return;
    };
    // The lane's pool's context (its private stream's, its events').
    if let Some(p) = POOL.get(notify::pool_of(lane)) {
        d.set_current(p.ctx.load(Ordering::Acquire));
    }
    // SAFETY: prctl(PR_SET_TIMERSLACK) sets this thread's timer slack (1 ns): accurate wake-ups.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    let tid = rt::THREAD.try_with(rt::tid).unwrap_or(0);
    let me = lane as u32 + 1;
    // The (pair, arming) last waited for: if the wait returned without its end completing (a
    // driver error), the pair is polled from here instead of waited for again and again.
    let mut waited = None;
    // Likewise the (pair, arming) whose begin was last waited for.
    let mut waited_begin = None;
    while POOL_GEN.load(Ordering::Relaxed) == gen {
        let seq = notify::seq(Some(lane));
        if locked_poll(d, tid, Lock::Wait).reported {
            ring_bell();
        }
        let now = now_ns();
        if notify::ends_lazy(now) {
            // Nobody harvests: the lane's ends are read in one poll every LAZY_NS. The agent is
            // told how late they may come first (it grants nothing meanwhile), then its word is
            // read once more: if it asked for prompt ends in between, this thread does not sleep
            // on them (RingHeader's ends words say why that is enough). Busy, so that the hooks
            // queue no begin wake-ups; back to prompt at the next look.
            rt::say_ends_late_until(now + notify::LAZY_NS + notify::LAZY_SLACK_NS);
            if notify::ends_lazy(now) {
                notify::set_busy(lane);
                notify::sleep(Some(lane), seq, notify::LAZY_NS);
                continue;
            }
        }
        let mut next = oldest_armed(me);
        if next.is_none() {
            // Idle: pairs armed from now on queue a wake-up; one armed before is found here.
            notify::set_idle(lane);
            next = oldest_armed(me);
        }
        let Some((i, arm, p)) = next.and_then(|(i, arm)| Some((i, arm, pool::pair(i)?.1))) else {
            notify::sleep(Some(lane), seq, notify::NOTIFIED_IDLE_NS);
            continue;
        };
        notify::set_busy(lane);
        let (ev, last) = if p.begin_done.load(Ordering::Relaxed) == 1 {
            (&p.ev_e, &mut waited)
        } else {
            (&p.ev_b, &mut waited_begin)
        };
        if *last == Some((i, arm)) {
            notify::sleep(Some(lane), seq, POLL_SLOW_NS);
        } else {
            *last = Some((i, arm));
            // SAFETY: real cuEventSynchronize on a pool event of the pool's context.
            unsafe { sync(ev.load(Ordering::Relaxed) as *mut c_void) };
        }
    }
}

/// The armed pair of lane `lane` (+ 1) armed first: (global index, arming sequence number).
fn oldest_armed(lane: u32) -> Option<(usize, u64)> {
    let k = notify::pool_of(lane as usize - 1);
    let pool = POOL.get(k).filter(|p| p.ready())?;
    pool::armed_in(pool)
        .filter(|(_, p)| p.lane.load(Ordering::Relaxed) == lane)
        .map(|(j, p)| (k * pool::PAIRS + j, p.arm_seq.load(Ordering::Relaxed)))
        .min_by_key(|&(_, arm)| arm)
}

/// What one poll saw.
#[derive(Default, Clone, Copy)]
pub(super) struct Polled {
    /// An armed op the poller must poll for (the driver does not wake it) is still pending...
    polled_pending: bool,
    /// ...and its begin is still pending.
    begin_pending: bool,
    /// Something changed: a new op seen, a begin or an end.
    changed: bool,
    /// A begin or an end was pushed.
    reported: bool,
}

/// How [`locked_poll`] takes the poll flag.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Lock {
    /// Skip the poll if another thread is polling (the poller: it comes back soon).
    Try,
    /// Wait for it (a waiter: it must not miss what it was woken for).
    Wait,
    /// Wait at most 50 ms, then poll anyway (at exit: the holder may be stuck).
    Flush,
}

/// One poll under the poll flag.
pub(super) fn locked_poll(d: &Driver, tid: u32, lock: Lock) -> Polled {
    let t0 = now_ns();
    while POLLING.swap(true, Ordering::Acquire) {
        match lock {
            Lock::Try => {
                return Polled {
                    polled_pending: true,
                    begin_pending: true,
                    ..Polled::default()
                }
            }
            Lock::Flush if now_ns().saturating_sub(t0) > 50_000_000 => break,
            Lock::Flush => std::thread::yield_now(),
            // The holder may be anchoring (a millisecond at most): sleep, do not spin.
            Lock::Wait => std::thread::sleep(std::time::Duration::from_micros(20)),
        }
    }
    let r = poll_once(d, tid, notify::available(d));
    POLLING.store(false, Ordering::Release);
    r
}

/// One look at every armed pair: reports the begins and ends that completed. `woken`: pairs on a
/// lane with a running waiter are that waiter's ([`notify`]); the others are polled.
fn poll_once(d: &Driver, tid: u32, woken: bool) -> Polled {
    let mut r = Polled::default();
    let Some(query) = d.event_query else {
        return r;
    };
    for (pool, j, p) in pool::armed_pairs() {
        if p.seen.swap(1, Ordering::Relaxed) == 0 {
            r.changed = true;
        }
        let polled = !woken || !notify::waited(p.lane.load(Ordering::Relaxed));
        let now = now_ns();
        let queued = p.queued.load(Ordering::Relaxed);
        // The event's time: GPU clock via the anchor, else the poll midpoint.
        let time = |ev: usize, pending: u64, floor: u64| -> (u64, u64) {
            if let Some((t, unc)) = gpu_time(&pool.anchor, ev) {
                let lo = queued.saturating_sub(unc + CAUSALITY_SLACK_NS);
                if t >= lo && t <= now + unc + CAUSALITY_SLACK_NS {
                    return (t.max(floor), unc);
                }
                pool.anchor.stale.store(true, Ordering::Relaxed);
            }
            let half = now.saturating_sub(pending) / 2;
            ((pending + half).max(floor), half)
        };
        let wait = p.what.load(Ordering::Relaxed) == WHAT_WAIT;
        let emit = |kind: Kind, t: u64, unc: u64| push(pool, p, kind, t, tid, unc);
        let (k_begin, k_end) = if wait {
            (Kind::WaitBegin, Kind::WaitEnd)
        } else {
            (Kind::CommBegin, Kind::CommEnd)
        };
        // A pair given up (the driver failed to say) is reported untimed, never left pending.
        let give_up = || {
            let k = if wait {
                Kind::WaitUntimed
            } else {
                Kind::CommUntimed
            };
            push(pool, p, k, now_ns(), tid, 0);
            pool::free_armed(pool, j);
        };
        if p.begin_done.load(Ordering::Relaxed) == 0 {
            let ev = p.ev_b.load(Ordering::Relaxed);
            // SAFETY: real cuEventQuery on a pool event.
            match unsafe { query(ev as *mut c_void) } {
                CUDA_SUCCESS => {
                    let (t, unc) = time(ev, p.pending_b.load(Ordering::Relaxed), 0);
                    emit(k_begin, t, unc);
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
                    r.begin_pending |= polled;
                    r.polled_pending |= polled;
                    p.pending_b.store(now, Ordering::Relaxed);
                    p.pending_e.store(now, Ordering::Relaxed);
                    continue;
                }
                _ => {
                    give_up();
                    r.reported = true;
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
                emit(k_end, t, unc);
                r.changed = true;
                r.reported = true;
                pool::free_armed(pool, j);
            }
            CUDA_ERROR_NOT_READY => {
                r.polled_pending |= polled;
                p.pending_e.store(now_ns(), Ordering::Relaxed)
            }
            _ => {
                give_up();
                r.reported = true;
            }
        }
    }
    r
}

/// Pushes pair `p`'s record of kind `kind` (a begin or an end at `t` with uncertainty `unc`, or
/// the untimed record of a pair given up: [`Untimed::DriverError`]).
fn push(pool: &Pool, p: &Pair, kind: Kind, t: u64, tid: u32, unc: u64) {
    let untimed = matches!(kind, Kind::CommUntimed | Kind::WaitUntimed);
    let queued = p.queued.load(Ordering::Relaxed);
    rt::push(&Record {
        t_ns: t,
        kind: kind as u8,
        flags: 0,
        api: p.api.load(Ordering::Relaxed) as u16,
        device: pool.gpu.load(Ordering::Relaxed),
        tid,
        aux: if untimed {
            Untimed::DriverError as u32
        } else {
            0
        },
        stream: p.stream.load(Ordering::Relaxed),
        p0: if untimed { 0 } else { queued },
        p1: unc,
        p2: p.ids.load(Ordering::Relaxed),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_loose_anchor_is_retried_soon_and_kept_unless_a_tighter_one_comes() {
        let tight = AnchorState {
            usable: true,
            unc_ns: 5_000,
            anchored_at: 1_000 * MS,
            tried_at: 1_000 * MS,
            armed: true,
        };
        // A tight anchor waits for its age; then any new one replaces it.
        assert_eq!(anchor_now(tight, 1_500 * MS), None);
        assert_eq!(anchor_now(tight, 3_001 * MS), Some(false));
        // A loose one (the host was busy) is tried again 100 ms on, kept unless beaten...
        let loose = AnchorState {
            unc_ns: 2 * MS,
            ..tight
        };
        assert_eq!(anchor_now(loose, 1_050 * MS), None);
        assert_eq!(anchor_now(loose, 1_101 * MS), Some(true));
        // ...and only while work is timed.
        assert_eq!(
            anchor_now(
                AnchorState {
                    armed: false,
                    ..loose
                },
                1_101 * MS
            ),
            None
        );
        // None, or one a time failed the causality check with: at once, any new one.
        let none = AnchorState {
            usable: false,
            tried_at: 0,
            ..tight
        };
        assert_eq!(anchor_now(none, 1_001 * MS), Some(false));
    }
}
