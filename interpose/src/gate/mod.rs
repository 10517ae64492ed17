//! The side-task gate (issue 5): holds a side task's launches outside their GPU's grant and keeps
//! its queued GPU work within the predicted remainder of the bubble; enforces its device-memory
//! budget on every allocation path ([`membudget`], [`vmm`]).
//!
//! Only processes whose role is `sidetask` get here ([`crate::rt::launch`] and the graph hook call
//! [`before_launch`] after recording the launch, the NCCL hooks [`before_comm`], the allocation
//! hooks [`mem_reserve`] & co); a trainer's hook path is untouched apart from the role check that
//! already existed, and one thread-local byte tested when a hook's guard is dropped
//! ([`after_launch`]).
//!
//! # Which GPU
//! A launch goes to the device of the calling thread's current context ([`caller_device`], as
//! CUDA runs it); each GPU has its own grant block, named by the physical GPU (`grant-<bus id>`:
//! the gate reads the block of its device ordinal's PCI bus id, [`crate::gpus`], so a side task
//! under other `CUDA_VISIBLE_DEVICES` than the trainer's is held by the grant of the GPU it really
//! runs on), its own work in flight and its own admitted GPU time, so a side task on several GPUs
//! is held on each by that GPU's grant. The gate's own tables are indexed by the process's device
//! ordinal (a one-to-one name of the GPU within the process).
//!
//! # Admission
//! On every launch (kernel, or a graph as one launch keyed by its exec handle) the gate, under a
//! small spin lock shared by the side task's threads (never held while waiting):
//! 1. retires completed launches from the in-flight table ([`inflight`]) and learns their GPU
//!    durations ([`durations`]: `cuEventElapsedTime` between an event recorded just before the
//!    launch and one recorded just after it, per function; never the kernel's arguments);
//! 2. reads its GPU's grant ([`grant`], lock-free): open, heartbeat fresh
//!    (<= `FREERIDE_GATE_STALE_MS`, default 100 ms: the agent touches it every ~50 µs) and before
//!    its deadline. A missing file or a
//!    stale heartbeat means CLOSED: a side task never runs ungoverned; so does a grant whose
//!    `min_priority` is above this task's `FREERIDE_PRIORITY` (default 0: such grants are kept
//!    for more important side tasks);
//! 3. admits the launch iff, with `q` = the estimated GPU ns of its unfinished launches on that
//!    GPU and `e` = this launch's estimate (`FREERIDE_GATE_DEFAULT_US`, default 1000 µs, until
//!    the function has completed once):
//!    * `now + q + e <= open_until_ns` (its work drains before the predicted end of the bubble);
//!    * `q + e <= FREERIDE_GATE_AHEAD_US` (default 2000 µs) unless nothing is in flight: the work
//!      queued ahead stays bounded whatever the grant's length, so a grant closed EARLY (the
//!      trainer came back sooner than predicted) drains within about that bound plus one
//!      mis-estimated launch;
//!    * the GPU ns admitted in this grant (told apart by `(open_until_ns, budget_ns)`, as the SDK
//!      does) plus `e` stay within `budget_ns` when nonzero.
//!
//!    Otherwise it waits and checks again: spinning for ~20 µs, then, while the grant is closed,
//!    waiting on the block's epoch word (a futex the agent wakes after every publish, so a grant
//!    that opens admits at once; 1 ms at most, to go on retiring work in flight and to notice a
//!    dead agent; with no grant block at all, 1 ms sleeps), and while the grant is open but the
//!    launch does not fit, sleeping 50 µs steps with `clock_nanosleep` (the work in flight ends
//!    on the GPU: nothing wakes the gate then). Timer slack 1 ns. All of it on the side task's
//!    threads, never the trainer's.
//! 4. Starvation: a launch that can never fit (its estimate exceeds every grant) is admitted after
//!    it has waited `FREERIDE_GATE_STARVE_MS` (default 200 ms), at the start of a grant (within
//!    1 ms of the gate first seeing it open) and only when nothing else is in flight. It may
//!    overrun that grant: the price of never starving.
//!
//! A launch into a stream being captured into a graph is admitted untracked (it runs later, as a
//! graph launch, which is gated). If the event pool cannot be made (no context yet: retried on
//! later launches) or an event cannot be recorded (another context), the launch is tracked on the
//! host instead: in flight until a modelled end (a serial queue of estimates).
//!
//! # NCCL
//! A collective or a group of point-to-point ops runs on every GPU it names at once, and NCCL's
//! kernel on one GPU waits (spins) until its peers' kernels run. So a side task's NCCL call (an op
//! outside a group, or the outermost `ncclGroupEnd` with the ops it gathered) is admitted as one:
//! [`before_comm`] waits until the work fits the grant of every GPU its communicators are on
//! (`ncclCommCuDevice`), estimated per (first op, communicator) from what those kernels took
//! before; NCCL's kernels launched inside the call are then admitted without waiting and tracked
//! as that work. A kernel is never left spinning on one GPU for a peer held on another (a side
//! task of one process; the ranks of a side task of several processes are held each by its own
//! GPU's grant).
//!
//! `FREERIDE_GATE=off` disables the launch gate (debugging only: the side task then runs
//! ungoverned). The memory budget ([`membudget`]) is independent of it.
//!
//! # What the agent's watchdog sees
//! After every look at its in-flight table (each launch, each synchronize call's return, and every
//! 100 ms by the [`looker`] thread while the task's threads make no CUDA call) the gate publishes
//! in its ring header ([`freeride_abi::ring::GateStatus`]): how many admitted launches it has not
//! seen complete, when the oldest of them should have finished by its own estimate (the serial
//! model end of its admission; for a launch whose call has not returned, no earlier than its
//! estimate from the look), and when it looked. A side task stuck inside a kernel, or one whose
//! kernel runs far longer than admitted, leaves that `due` time in the past; the agent evicts it
//! when it is overdue by its hang deadline (agent/src/watchdog.rs).
//!
//! # Counters
//! Launches held (that had to wait at least once), total wait ns, the in-flight maximum, and
//! starvation admissions: in the side task's process-exit record (`p1` = launches held, `p2` =
//! wait ns, `aux` = in-flight max; the ring layout is unchanged) and, with
//! `FREERIDE_GATE_VERBOSE=1`, one line on stderr at exit.
pub mod drv;
pub mod durations;
pub mod grant;
pub mod inflight;
pub mod looker;
pub mod membudget;
pub mod vmm;

use crate::rt;
use freeride_abi::grant::GrantBlock;
use freeride_abi::{now_ns, Api};
use membudget::{gpu, MAX_GPUS};
use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

/// Configuration, read once (slow path).
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub default_ns: u64,
    pub ahead_ns: u64,
    pub stale_ns: u64,
    pub starve_ns: u64,
    /// `FREERIDE_PRIORITY` (default 0): grants reserved for more important side tasks read closed.
    pub priority: u64,
    pub verbose: bool,
}

const SPIN_NS: u64 = 20_000;
const SLEEP_NS: u64 = 50_000;
/// The longest wait for a closed grant to be published again, or for a grant block to appear.
const CLOSED_WAIT_NS: u64 = 1_000_000;
/// A starving launch goes only this soon after the gate first saw a grant open.
const STARVE_GRANT_AGE_NS: u64 = 1_000_000;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(default)
}

/// 0 unread, 1 on, 2 off.
static ENABLED: AtomicU8 = AtomicU8::new(0);
static CONFIG: std::sync::OnceLock<Config> = std::sync::OnceLock::new();

fn config() -> Option<&'static Config> {
    match ENABLED.load(Ordering::Relaxed) {
        1 => CONFIG.get(),
        2 => None,
        _ => {
            let off = std::env::var("FREERIDE_GATE")
                .map(|v| matches!(v.trim(), "off" | "0" | "false"))
                .unwrap_or(false);
            let c = CONFIG.get_or_init(|| Config {
                default_ns: env_u64("FREERIDE_GATE_DEFAULT_US", 1000).max(1) * 1000,
                ahead_ns: env_u64("FREERIDE_GATE_AHEAD_US", 2000).max(1) * 1000,
                stale_ns: env_u64("FREERIDE_GATE_STALE_MS", 100).max(1) * 1_000_000,
                starve_ns: env_u64("FREERIDE_GATE_STARVE_MS", 200) * 1_000_000,
                priority: env_u64("FREERIDE_PRIORITY", 0),
                verbose: std::env::var("FREERIDE_GATE_VERBOSE").is_ok_and(|v| v == "1"),
            });
            ENABLED.store(if off { 2 } else { 1 }, Ordering::Relaxed);
            (!off).then_some(c)
        }
    }
}

/// One GPU's admission state.
#[derive(Clone, Copy)]
struct GpuGate {
    /// Host model of the queue (for launches tracked without events).
    model_end_ns: u64,
    /// The grant admitted into: (open_until_ns, budget_ns), when first seen, GPU ns admitted.
    grant_id: (u64, u64),
    grant_seen_ns: u64,
    used_ns: u64,
}

const GPU_GATE_INIT: GpuGate = GpuGate {
    model_end_ns: 0,
    grant_id: (0, 0),
    grant_seen_ns: 0,
    used_ns: 0,
};

/// State under the gate lock.
struct Inner {
    dur: durations::Durations,
    gpus: [GpuGate; MAX_GPUS],
}

/// A spin lock that a fork child can reset (a side task's threads only; never held while
/// waiting for a grant or across a call that can block).
struct Gate {
    locked: AtomicBool,
    inner: UnsafeCell<Inner>,
}

// SAFETY: `inner` is only accessed through `lock()`, which gives one thread at a time exclusive
// access (Acquire/Release on `locked`).
unsafe impl Sync for Gate {}

static GATE: Gate = Gate {
    locked: AtomicBool::new(false),
    inner: UnsafeCell::new(Inner {
        dur: durations::Durations::new(),
        gpus: [GPU_GATE_INIT; MAX_GPUS],
    }),
};

struct Locked(());

impl Drop for Locked {
    fn drop(&mut self) {
        GATE.locked.store(false, Ordering::Release);
    }
}

impl Locked {
    #[allow(clippy::mut_from_ref)]
    fn inner(&mut self) -> &mut Inner {
        // SAFETY: the lock is held (this value exists) and `&mut self` gives one borrow at a time.
        unsafe { &mut *GATE.inner.get() }
    }
}

fn lock() -> Locked {
    let mut n = 0u32;
    while GATE
        .locked
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        n += 1;
        if n < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    Locked(())
}

// Counters.
static HELD: AtomicU64 = AtomicU64::new(0);
static WAIT_NS: AtomicU64 = AtomicU64::new(0);
static INFLIGHT_MAX: AtomicU64 = AtomicU64::new(0);
static ADMITTED: AtomicU64 = AtomicU64::new(0);
static STARVED: AtomicU64 = AtomicU64::new(0);

/// (launches held, total wait ns, in-flight max) for the process-exit record.
pub fn stats() -> (u64, u64, u64) {
    (
        HELD.load(Ordering::Relaxed),
        WAIT_NS.load(Ordering::Relaxed),
        INFLIGHT_MAX.load(Ordering::Relaxed),
    )
}

enum Decision {
    /// Admitted; the in-flight slot whose end event is recorded after the launch.
    Admit(Option<usize>),
    Wait(Hold),
}

/// Why a launch is held, which says how to wait.
enum Hold {
    /// The grant is closed, as read from this block at this epoch: the agent's next publish.
    Closed(&'static GrantBlock, u64),
    /// No grant block to read (no agent, or not readable now).
    NoBlock,
    /// The grant is open but the launch does not fit beside the work in flight.
    Work,
}

/// The device a side task's launch goes to (and an allocation that names none is made on): the
/// calling thread's current context's device ordinal, as CUDA runs it (-1 unknown: counted as
/// ordinal 0's). The grant read for it is its physical GPU's ([`grant::now`], by bus id).
pub fn caller_device() -> i32 {
    rt::THREAD.try_with(rt::device).unwrap_or(-1)
}

/// Whether `est` ns more of work fit GPU `dev`'s grant now, beside `pend` in flight there (gate
/// lock held).
enum Fit {
    Fits,
    /// It does not, but it has waited long enough (see the module docs): it goes.
    Starving,
    Wait(Hold),
}

fn fit(
    st: &mut Inner,
    cfg: &Config,
    now: u64,
    dev: i32,
    pend: &inflight::Pending,
    est: u64,
    waited_ns: u64,
) -> Fit {
    let g = grant::now(dev, now, cfg.stale_ns, cfg.priority);
    if !g.open {
        return Fit::Wait(match g.read_at {
            Some((block, epoch)) => Hold::Closed(block, epoch),
            None => Hold::NoBlock,
        });
    }
    let gg = &mut st.gpus[gpu(dev)];
    let id = (g.open_until_ns, g.budget_ns);
    if id != gg.grant_id {
        gg.grant_id = id;
        gg.grant_seen_ns = now;
        gg.used_ns = 0;
    }
    let fits_grant = now.saturating_add(pend.ns).saturating_add(est) <= g.open_until_ns;
    let fits_ahead = pend.count == 0 || pend.ns.saturating_add(est) <= cfg.ahead_ns;
    let fits_budget = g.budget_ns == 0 || gg.used_ns.saturating_add(est) <= g.budget_ns;
    if fits_grant && fits_ahead && fits_budget {
        return Fit::Fits;
    }
    let starving = pend.count == 0
        && waited_ns >= cfg.starve_ns
        && now.saturating_sub(gg.grant_seen_ns) <= STARVE_GRANT_AGE_NS;
    if starving {
        Fit::Starving
    } else {
        Fit::Wait(Hold::Work)
    }
}

/// Retires what completed (learning its durations) and publishes what is left in flight for the
/// watchdog (gate lock held).
fn look(st: &mut Inner, d: Option<&'static drv::Drv>, now: u64) -> inflight::InFlight {
    let dur = &mut st.dur;
    let fl = inflight::retire(d, now, |k, ns| dur.learn(k, ns));
    publish_status(fl.all.count as u64, fl.all.due_ns, fl.all.admitted_ns, now);
    fl
}

/// When the gate last looked ([`look`], or a launch it admitted).
static LAST_LOOK_NS: AtomicU64 = AtomicU64::new(0);

/// The looker's round ([`looker`]): looks if no thread of the task has for [`looker::QUIET_NS`].
fn look_if_quiet() {
    let now = now_ns();
    if now.saturating_sub(LAST_LOOK_NS.load(Ordering::Relaxed)) < looker::QUIET_NS {
        return;
    }
    let mut l = lock();
    let st = l.inner();
    if let Some(d) = drv::get() {
        let dur = &mut st.dur;
        inflight::retire_from_looker(d, |k, ns| dur.learn(k, ns));
    }
    // What is left, counted and published (no driver call from this thread).
    look(st, None, now);
}

/// A launch of `key` on `stream`: admitted, or why it waits. `admitted_with` (a launch inside an
/// admitted NCCL call): it goes at once, tracked as that call's work.
fn decide(
    cfg: &Config,
    now: u64,
    stream: u64,
    key: u64,
    waited_ns: u64,
    admitted_with: bool,
) -> Decision {
    let mut l = lock();
    let st = l.inner();
    let d = drv::get();
    let dev = caller_device();
    let gi = gpu(dev);
    if let Some(d) = d {
        inflight::ensure_pool(d, gi);
    }
    let fl = look(st, d, now);
    let pend = fl.gpu[gi];
    let est = st.dur.estimate(key).unwrap_or(cfg.default_ns);
    if !admitted_with {
        match fit(st, cfg, now, dev, &pend, est, waited_ns) {
            Fit::Fits => {}
            Fit::Starving => {
                STARVED.fetch_add(1, Ordering::Relaxed);
            }
            Fit::Wait(h) => return Decision::Wait(h),
        }
    }
    if d.is_some_and(|d| drv::capturing(d, stream)) {
        return Decision::Admit(None);
    }
    let gg = &mut st.gpus[gi];
    let model_end = gg.model_end_ns.max(now).saturating_add(est);
    let Some(slot) = inflight::reserve(d, gi, stream, key, est, model_end, now) else {
        return Decision::Wait(Hold::Work); // table full: wait for a retirement
    };
    gg.model_end_ns = model_end;
    gg.used_ns = gg.used_ns.saturating_add(est);
    looker::ensure_started();
    let all = fl.all;
    let (due, admitted) = if all.count == 0 {
        (model_end, now)
    } else {
        (all.due_ns.min(model_end), all.admitted_ns.min(now))
    };
    publish_status(all.count as u64 + 1, due, admitted, now);
    INFLIGHT_MAX.fetch_max(all.count as u64 + 1, Ordering::Relaxed);
    Decision::Admit(Some(slot))
}

/// An NCCL call's work (estimated by `key`) on the GPUs of `gpus` (a bit per GPU index): admitted
/// when it fits every one of their grants (or starves on all), else why it waits.
fn decide_comm(cfg: &Config, now: u64, gpus: u64, key: u64, waited_ns: u64) -> Decision {
    let mut l = lock();
    let st = l.inner();
    let fl = look(st, drv::get(), now);
    let est = st.dur.estimate(key).unwrap_or(cfg.default_ns);
    let mut starving = false;
    for g in (0..MAX_GPUS).filter(|g| gpus >> g & 1 == 1) {
        match fit(st, cfg, now, g as i32, &fl.gpu[g], est, waited_ns) {
            Fit::Fits => {}
            Fit::Starving => starving = true,
            Fit::Wait(h) => return Decision::Wait(h),
        }
    }
    if starving {
        STARVED.fetch_add(1, Ordering::Relaxed);
    }
    Decision::Admit(None)
}

/// The in-flight summary for the agent's watchdog (ring header words; atomic stores).
fn publish_status(inflight: u64, due_ns: u64, admitted_ns: u64, now: u64) {
    LAST_LOOK_NS.store(now, Ordering::Relaxed);
    let busy = inflight > 0;
    rt::publish_gate_status(freeride_abi::ring::GateStatus {
        inflight,
        due_ns: if busy { due_ns } else { 0 },
        admitted_ns: if busy { admitted_ns } else { 0 },
        checked_ns: now,
    });
}

/// After a synchronize call of a side task returned: retires what completed, so that a task that
/// waits for its work and then stops launching does not look as if its work were still running.
pub fn after_sync() {
    if config().is_none() {
        return;
    }
    let mut l = lock();
    look(l.inner(), drv::get(), now_ns());
}

thread_local! {
    static SLACK_SET: Cell<bool> = const { Cell::new(false) };
    /// Inside an admitted NCCL call: the key its work is tracked by (0: none).
    static COMM_SCOPE: Cell<u64> = const { Cell::new(0) };
    /// The NCCL group being built on this thread: the GPUs it names (a bit each) and its key.
    static GROUP: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// Sets this thread's timer slack to 1 ns once, so that its waits end on time.
fn set_timer_slack() {
    if !SLACK_SET.try_with(|s| s.replace(true)).unwrap_or(true) {
        // SAFETY: prctl(PR_SET_TIMERSLACK) sets this thread's timer slack (1 ns): wake on time.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    }
}

/// Sleeps `ns`.
/// With `FREERIDE_GATE_VERBOSE=1`, a launch held this long says why on stderr, and again as often.
const HELD_REPORT_NS: u64 = 1_000_000_000;

/// Why a launch is still held, with the gate's launches in flight (`FREERIDE_GATE_VERBOSE=1`;
/// cold: it allocates and writes to stderr, on a side task's waiting path only).
#[cold]
fn report_held(hold: &Hold, waited_ns: u64) {
    let why = match hold {
        Hold::Closed(..) => "grant closed",
        Hold::NoBlock => "no grant block",
        Hold::Work => "grant open, the launch does not fit beside the work in flight",
    };
    let d = drv::get();
    let dev = caller_device();
    let g = grant::now(dev, now_ns(), config().map_or(0, |c| c.stale_ns), u64::MAX);
    eprintln!(
        "freeride gate: a launch held {} ms ({why}); GPU {dev}: grant open={} until_in_us={} budget_us={}; in flight:{}",
        waited_ns / 1_000_000,
        g.open,
        (g.open_until_ns as i64 - now_ns() as i64) / 1000,
        g.budget_ns / 1000,
        inflight::describe(d),
    );
}

fn sleep_ns(ns: u64) {
    let ts = freeride_abi::timespec(ns);
    // SAFETY: clock_nanosleep reads the timespec we own; a NULL remainder is allowed.
    unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, 0, &ts, std::ptr::null_mut()) };
}

/// Waits, holding the caller, until `decide` admits: spinning for ~20 µs, then sleeping on what
/// holds it (see the module docs).
fn wait_until_admitted(mut decide: impl FnMut(u64, u64) -> Decision) -> Option<usize> {
    let t0 = now_ns();
    let mut now = t0;
    let mut held = false;
    let mut report_at = if config().is_some_and(|c| c.verbose) {
        t0 + HELD_REPORT_NS
    } else {
        u64::MAX
    };
    loop {
        let hold = match decide(now, now - t0) {
            Decision::Admit(slot) => {
                ADMITTED.fetch_add(1, Ordering::Relaxed);
                if held {
                    WAIT_NS.fetch_add(now_ns().saturating_sub(t0), Ordering::Relaxed);
                }
                return slot;
            }
            Decision::Wait(hold) => hold,
        };
        if !held {
            held = true;
            HELD.fetch_add(1, Ordering::Relaxed);
        }
        if now >= report_at {
            report_held(&hold, now - t0);
            report_at = now + HELD_REPORT_NS;
        }
        if now - t0 < SPIN_NS {
            for _ in 0..64 {
                std::hint::spin_loop();
            }
        } else {
            set_timer_slack();
            match hold {
                // The agent's next publish (a grant opening) wakes us at once; the timeout keeps
                // retiring work in flight and notices a dead agent or a replaced file.
                Hold::Closed(block, epoch) => block.wait_for_change(epoch, CLOSED_WAIT_NS),
                Hold::NoBlock => sleep_ns(CLOSED_WAIT_NS),
                Hold::Work => sleep_ns(SLEEP_NS),
            }
        }
        now = now_ns();
    }
}

/// Called on the hook path of a side task before the real launch (after it was recorded).
/// `key` identifies what is launched (function handle / host stub, or graph exec). Returns when
/// the launch is admitted; the caller's guard, when dropped after the real launch, calls
/// [`after_launch`]. Inside an admitted NCCL call ([`before_comm`]) it is admitted at once.
pub fn before_launch(_api: Api, stream: u64, key: u64) {
    let Some(cfg) = config() else { return };
    let scope = COMM_SCOPE.try_with(|c| c.get()).unwrap_or(0);
    let (key, admitted) = if scope != 0 {
        (scope, true)
    } else {
        (key, false)
    };
    let slot = wait_until_admitted(|now, waited| decide(cfg, now, stream, key, waited, admitted));
    if let Some(i) = slot {
        let _ = rt::THREAD.try_with(|t| t.gate_slot.set(i as u32 + 1));
    }
}

/// The key an NCCL call's work is estimated and tracked by: its (first) op and communicator.
fn comm_key(api: Api, comm: u64) -> u64 {
    (comm ^ (api as u64) << 56 ^ 0xC044_0000_0000_0001).max(1)
}

/// A side task's NCCL op `api` on communicator `comm` (on GPU `dev`), `in_group`: gathered for
/// the group's end; otherwise it is admitted now ([`before_comm`]). Call [`after_comm`] after
/// the real call in both cases.
pub fn comm_op(api: Api, comm: u64, dev: i32, in_group: bool) {
    let bit = 1u64 << gpu(dev);
    if in_group {
        let _ = GROUP.try_with(|g| {
            let (m, k) = g.get();
            g.set((m | bit, if k == 0 { comm_key(api, comm) } else { k }));
        });
    } else {
        before_comm(bit, comm_key(api, comm));
    }
}

/// The outermost `ncclGroupEnd` of a side task, before the real call: admits what the group
/// gathered (nothing gathered: nothing to wait for).
pub fn group_end() {
    let (mask, key) = GROUP.try_with(|g| g.replace((0, 0))).unwrap_or((0, 0));
    if mask != 0 {
        before_comm(mask, key);
    }
}

/// Waits until NCCL work estimated by `key` fits the grants of all the GPUs of `gpus` (a bit per
/// GPU index), then lets the kernels NCCL launches until [`after_comm`] go at once.
pub fn before_comm(gpus: u64, key: u64) {
    let Some(cfg) = config() else { return };
    wait_until_admitted(|now, waited| decide_comm(cfg, now, gpus, key, waited));
    let _ = COMM_SCOPE.try_with(|c| c.set(key));
}

/// After the real NCCL call: its kernels are queued.
pub fn after_comm() {
    let _ = COMM_SCOPE.try_with(|c| c.set(0));
}

/// After the real launch of an admitted launch (from the hook guard's drop, `slot` as set by
/// [`before_launch`]): records its completion event. Lock-free.
pub fn after_launch(slot: u32) {
    inflight::arm(slot as usize);
}

/// Allocation hook of a side task, before the real allocator: `bytes` more on device `dev`; false
/// = over budget (the hook returns `CUDA_ERROR_OUT_OF_MEMORY` without calling it). Lock-free,
/// no driver call.
pub fn mem_reserve(dev: i32, bytes: u64) -> bool {
    let stale = config().map_or(100_000_000, |c| c.stale_ns);
    // Memory is not a matter of priority: any task may allocate within the GPU's budget.
    let g = grant::now(dev, now_ns(), stale, u64::MAX);
    let lim = membudget::limit(g.mem_limit_for(membudget::held(dev)));
    membudget::reserve(dev, bytes, lim)
}

/// After the real allocation of device pointer `ptr` (`ok`), `reserved` bytes having been
/// reserved on `dev` and `bytes` taken (more than reserved for a pitched allocation whose rows
/// were padded more than the hook assumed).
pub fn mem_done(dev: i32, reserved: u64, bytes: u64, ok: bool, ptr: u64) {
    if ok {
        if bytes > reserved {
            membudget::add(dev, bytes - reserved);
        } else {
            membudget::cancel(dev, reserved - bytes);
        }
        membudget::commit(ptr, bytes, dev);
    } else {
        membudget::cancel(dev, reserved);
    }
}

/// After a successful free of device pointer `ptr`.
pub fn mem_freed(ptr: u64) {
    membudget::release(ptr);
}

/// Fork child (async-signal-safe stores only): the parent's events and memory are not ours; the
/// lock may have been held by a thread that does not exist here.
pub fn reset_after_fork() {
    inflight::reset_after_fork();
    looker::reset_after_fork();
    membudget::reset_after_fork();
    vmm::reset_after_fork();
    GATE.locked.store(false, Ordering::Release);
}

/// At exit, with `FREERIDE_GATE_VERBOSE=1`: one summary line on stderr.
pub fn report_at_exit() {
    if CONFIG.get().is_some_and(|c| c.verbose) {
        eprintln!(
            "freeride gate: admitted={} held={} wait_ms={:.3} inflight_max={} starved={} mem_held={} mem_refused={}",
            ADMITTED.load(Ordering::Relaxed),
            HELD.load(Ordering::Relaxed),
            WAIT_NS.load(Ordering::Relaxed) as f64 / 1e6,
            INFLIGHT_MAX.load(Ordering::Relaxed),
            STARVED.load(Ordering::Relaxed),
            membudget::held_total(),
            membudget::REFUSED.load(Ordering::Relaxed),
        );
    }
}
