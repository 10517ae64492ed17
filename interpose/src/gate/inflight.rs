//! The side task's in-flight launches: a fixed table of [`SLOTS`] entries (atomics, no
//! allocation), each on one GPU. Each entry owns two timing events of its GPU's pool (one pool
//! per device, created once per process, slow path, in the context current at the first gated
//! launch on that device): `start`, recorded on the launch stream
//! just before the launch (it completes when the stream reaches the launch), and `end`, recorded
//! just after it (when the launch's work is done). `cuEventElapsedTime(start, end)` is the GPU time
//! the launch took (it includes waiting for the GPU behind other work, so it errs on the long
//! side), learned per function in [`super::durations`].
//!
//! Life of an entry: `FREE` -> `RESERVED` (gate admitted the launch, start recorded, under the
//! gate lock) -> `ARMED` (the launching thread recorded `end` after the real launch, lock-free)
//! -> `FREE` (retired under the gate lock when `end` completed). An entry whose events could not
//! be recorded (no pool: no context yet, or another context) is tracked on the host instead: it
//! counts as in flight until its modelled end (`model_end_ns`, a serial queue of estimates).
use super::drv::{self, Drv};
use super::membudget::MAX_GPUS;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

pub const SLOTS: usize = 64;

pub const FREE: u32 = 0;
pub const RESERVED: u32 = 1;
pub const ARMED: u32 = 2;

pub struct Entry {
    pub state: AtomicU32,
    /// 1 if `start` was recorded (events tracked), 0 for the host model.
    pub tracked: AtomicU32,
    /// The GPU (index, [`super::membudget::gpu`]) it was launched on: whose events it uses.
    pub gpu: AtomicU32,
    pub stream: AtomicU64,
    pub key: AtomicU64,
    pub est_ns: AtomicU64,
    pub model_end_ns: AtomicU64,
    /// When the gate admitted it.
    pub admitted_ns: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const ENTRY_INIT: Entry = Entry {
    state: AtomicU32::new(FREE),
    tracked: AtomicU32::new(0),
    gpu: AtomicU32::new(0),
    stream: AtomicU64::new(0),
    key: AtomicU64::new(0),
    est_ns: AtomicU64::new(0),
    model_end_ns: AtomicU64::new(0),
    admitted_ns: AtomicU64::new(0),
};

pub static TABLE: [Entry; SLOTS] = [ENTRY_INIT; SLOTS];

/// One GPU's timing events: `[start, end]` per entry.
struct Pool {
    /// 0 not created, 1 ready, 2 given up (host model only).
    state: AtomicU8,
    tries: AtomicU32,
    /// The context its events were made in (for the looker thread, which has none current).
    ctx: AtomicUsize,
    events: [[AtomicUsize; 2]; SLOTS],
}

static POOLS: [Pool; MAX_GPUS] = [const {
    Pool {
        state: AtomicU8::new(0),
        tries: AtomicU32::new(0),
        ctx: AtomicUsize::new(0),
        events: [const { [const { AtomicUsize::new(0) }; 2] }; SLOTS],
    }
}; MAX_GPUS];

fn event(gpu: usize, i: usize, end: bool) -> *mut c_void {
    POOLS[gpu].events[i][end as usize].load(Ordering::Relaxed) as *mut c_void
}

/// Creates GPU `gpu`'s event pool in the current context (gate lock held; the caller's device is
/// that context's). Retries on later launches while no context is current (the runtime creates
/// it inside the first real call), gives up after a bounded number of tries.
pub fn ensure_pool(d: &Drv, gpu: usize) {
    let pool = &POOLS[gpu];
    if pool.state.load(Ordering::Relaxed) != 0 {
        return;
    }
    let ctx = drv::current_ctx(d);
    if ctx == 0 {
        if pool.tries.fetch_add(1, Ordering::Relaxed) > 10_000 {
            pool.state.store(2, Ordering::Relaxed);
        }
        return;
    }
    pool.ctx.store(ctx, Ordering::Relaxed);
    for pair in pool.events.iter() {
        let mut s: *mut c_void = std::ptr::null_mut();
        let mut t: *mut c_void = std::ptr::null_mut();
        // SAFETY: real cuEventCreate writing handles we own, in the current context.
        let ok = unsafe {
            (d.event_create)(&mut s, drv::CU_EVENT_DEFAULT) == drv::CUDA_SUCCESS
                && (d.event_create)(&mut t, drv::CU_EVENT_DEFAULT) == drv::CUDA_SUCCESS
        };
        if !ok {
            pool.state.store(2, Ordering::Relaxed);
            return;
        }
        pair[0].store(s as usize, Ordering::Relaxed);
        pair[1].store(t as usize, Ordering::Relaxed);
    }
    pool.state.store(1, Ordering::Release);
}

/// Reserves an entry for an admitted launch on GPU `gpu` and records its start event (gate lock
/// held). Returns the slot, or `None` if the table is full.
#[allow(clippy::too_many_arguments)]
pub fn reserve(
    d: Option<&Drv>,
    gpu: usize,
    stream: u64,
    key: u64,
    est_ns: u64,
    model_end: u64,
    now: u64,
) -> Option<usize> {
    let i = TABLE
        .iter()
        .position(|e| e.state.load(Ordering::Acquire) == FREE)?;
    let e = &TABLE[i];
    e.gpu.store(gpu as u32, Ordering::Relaxed);
    e.stream.store(stream, Ordering::Relaxed);
    e.key.store(key, Ordering::Relaxed);
    e.est_ns.store(est_ns, Ordering::Relaxed);
    e.model_end_ns.store(model_end, Ordering::Relaxed);
    e.admitted_ns.store(now, Ordering::Relaxed);
    let mut tracked = 0;
    if let (Some(d), 1) = (d, POOLS[gpu].state.load(Ordering::Acquire)) {
        // SAFETY: real cuEventRecord of a pool event on the caller's stream; an event of another
        // context fails cleanly (host model then).
        let rc = unsafe { (d.event_record)(event(gpu, i, false), stream as *mut c_void) };
        if rc == drv::CUDA_SUCCESS {
            tracked = 1;
        }
    }
    e.tracked.store(tracked, Ordering::Relaxed);
    e.state.store(RESERVED, Ordering::Release);
    Some(i)
}

/// After the real launch (lock-free, by the launching thread): records the end event.
pub fn arm(i: usize) {
    let Some(e) = TABLE.get(i) else { return };
    if e.state.load(Ordering::Acquire) != RESERVED {
        return;
    }
    if e.tracked.load(Ordering::Relaxed) == 1 {
        let ok = drv::get().is_some_and(|d| {
            // SAFETY: real cuEventRecord of this entry's pool event on the launch's stream.
            let gpu = e.gpu.load(Ordering::Relaxed) as usize;
            let rc = unsafe {
                (d.event_record)(
                    event(gpu, i, true),
                    e.stream.load(Ordering::Relaxed) as *mut c_void,
                )
            };
            rc == drv::CUDA_SUCCESS
        });
        if !ok {
            e.tracked.store(0, Ordering::Relaxed);
        }
    }
    e.state.store(ARMED, Ordering::Release);
}

/// What [`retire`] saw: GPU ns still queued (sum of estimates of unfinished entries), count, and
/// the modelled end of the oldest-due unfinished entry (0: none).
#[derive(Clone, Copy, Default)]
pub struct Pending {
    pub ns: u64,
    pub count: usize,
    pub due_ns: u64,
    /// When the oldest unfinished entry was admitted (0: none).
    pub admitted_ns: u64,
}

/// What is still in flight: on all GPUs, and on each.
pub struct InFlight {
    pub all: Pending,
    pub gpu: [Pending; MAX_GPUS],
}

impl Pending {
    /// Adds unfinished entry `e`, due at `due`.
    fn add(&mut self, e: &Entry, due: u64) {
        self.ns = self.ns.saturating_add(e.est_ns.load(Ordering::Relaxed));
        self.count += 1;
        if self.due_ns == 0 || due < self.due_ns {
            self.due_ns = due;
        }
        let admitted = e.admitted_ns.load(Ordering::Relaxed);
        if self.admitted_ns == 0 || admitted < self.admitted_ns {
            self.admitted_ns = admitted;
        }
    }
}

/// Retires completed entries (gate lock held), feeding each measured duration to `learn`.
pub fn retire(d: Option<&Drv>, now: u64, mut learn: impl FnMut(u64, u64)) -> InFlight {
    let mut p = InFlight {
        all: Pending::default(),
        gpu: [Pending::default(); MAX_GPUS],
    };
    for (i, e) in TABLE.iter().enumerate() {
        let st = e.state.load(Ordering::Acquire);
        if st == FREE {
            continue;
        }
        if st == ARMED {
            if e.tracked.load(Ordering::Relaxed) == 1 {
                if let Some(d) = d {
                    // Done, or an error (the event is not one the driver can say more of).
                    if query_end(d, i, e, &mut learn) != Some(false) {
                        e.state.store(FREE, Ordering::Release);
                        continue;
                    }
                }
            } else if now >= e.model_end_ns.load(Ordering::Relaxed) {
                e.state.store(FREE, Ordering::Release);
                continue;
            }
        }
        let due = due(e, st, now);
        p.all.add(e, due);
        p.gpu[(e.gpu.load(Ordering::Relaxed) as usize).min(MAX_GPUS - 1)].add(e, due);
    }
    p
}

/// Whether armed, tracked entry `i` (`e`) is done: `Some(true)` (its duration handed to `learn`)
/// once its end event completed, `Some(false)` while it has not, `None` if the driver answered an
/// error.
fn query_end(d: &Drv, i: usize, e: &Entry, learn: &mut impl FnMut(u64, u64)) -> Option<bool> {
    let gpu = e.gpu.load(Ordering::Relaxed) as usize;
    let end = event(gpu, i, true);
    // SAFETY: real cuEventQuery of a recorded pool event.
    match unsafe { (d.event_query)(end) } {
        drv::CUDA_SUCCESS => {
            let mut ms: f32 = 0.0;
            let start = event(gpu, i, false);
            // SAFETY: real cuEventElapsedTime of two completed pool events of one context,
            // writing a float we own.
            let rc = unsafe { (d.elapsed)(&mut ms, start, end) };
            if rc == drv::CUDA_SUCCESS && ms.is_finite() && ms >= 0.0 {
                learn(e.key.load(Ordering::Relaxed), (ms as f64 * 1e6) as u64);
            }
            Some(true)
        }
        drv::CUDA_ERROR_NOT_READY => Some(false),
        _ => None,
    }
}

/// The [`super::looker`]'s part of a look (gate lock held), on a thread with no context of its
/// own: each GPU's pool context made current in turn, its armed entries whose end completed are
/// retired (durations to `learn`). An error leaves an entry as it is (the driver may refuse a
/// thread it does not know; the task's own threads retire it then), so a stuck task is never
/// taken for done.
pub fn retire_from_looker(d: &Drv, mut learn: impl FnMut(u64, u64)) {
    let Some(set) = d.ctx_set_current else {
        return;
    };
    for (gpu, pool) in POOLS.iter().enumerate() {
        let ctx = pool.ctx.load(Ordering::Relaxed);
        if pool.state.load(Ordering::Acquire) != 1 || ctx == 0 {
            continue;
        }
        // SAFETY: real cuCtxSetCurrent on the looker's own thread, with a context the driver gave
        // this process (the pool's events live in it as long as the process does).
        if unsafe { set(ctx as *mut c_void) } != drv::CUDA_SUCCESS {
            continue;
        }
        for (i, e) in TABLE.iter().enumerate() {
            if e.state.load(Ordering::Acquire) == ARMED
                && e.tracked.load(Ordering::Relaxed) == 1
                && e.gpu.load(Ordering::Relaxed) as usize == gpu
                && query_end(d, i, e, &mut learn) == Some(true)
            {
                e.state.store(FREE, Ordering::Release);
            }
        }
    }
}

/// When unfinished entry `e` (in state `st`) should be done: its modelled end, or for a launch
/// whose call has not returned yet (`RESERVED`: the driver may spend seconds in a first launch,
/// loading the kernel's module) no earlier than its estimate from now: its work is not on the GPU
/// yet, so it cannot be overdue there.
fn due(e: &Entry, st: u32, now: u64) -> u64 {
    let end = e.model_end_ns.load(Ordering::Relaxed);
    if st == RESERVED {
        end.max(now.saturating_add(e.est_ns.load(Ordering::Relaxed)))
    } else {
        end
    }
}

/// One line per launch in flight (state, tracked, stream, estimate, and what the driver says of its
/// events now), for `FREERIDE_GATE_VERBOSE=1` when a launch has been held long (cold: a side task's
/// waiting path, never a trainer's).
pub fn describe(d: Option<&Drv>) -> String {
    let mut out = String::new();
    for (i, e) in TABLE.iter().enumerate() {
        let st = e.state.load(Ordering::Acquire);
        if st == FREE {
            continue;
        }
        let gpu = e.gpu.load(Ordering::Relaxed) as usize;
        let tracked = e.tracked.load(Ordering::Relaxed);
        let q = |end: bool| match d {
            // SAFETY: a pool event of this slot (or null: the driver answers an error).
            Some(d) if tracked == 1 => unsafe { (d.event_query)(event(gpu, i, end)) },
            _ => -1,
        };
        out.push_str(&format!(
            " [slot {i}: {} tracked={tracked} stream={:#x} est_us={} query(start)={} query(end)={}]",
            if st == ARMED { "armed" } else { "reserved" },
            e.stream.load(Ordering::Relaxed),
            e.est_ns.load(Ordering::Relaxed) / 1000,
            q(false),
            if st == ARMED { q(true) } else { -1 },
        ));
    }
    out
}

/// Fork child: the parent's events are not ours; everything is free, the pool is made again.
pub fn reset_after_fork() {
    for e in TABLE.iter() {
        e.state.store(FREE, Ordering::Relaxed);
        e.tracked.store(0, Ordering::Relaxed);
    }
    for p in &POOLS {
        p.state.store(0, Ordering::Relaxed);
        p.tries.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_whose_call_has_not_returned_is_not_overdue_and_one_on_the_gpu_is() {
        // Host-modelled entries (no driver): reserved at t=1000 with an estimate of 500 ns.
        let slot = reserve(None, 0, 7, 42, 500, 1500, 1000).unwrap();
        let now = 10_000_000;
        let fl = retire(None, now, |_, _| {});
        assert_eq!(fl.all.count, 1);
        // Still inside its launch call (a first launch loading its module): due from now.
        assert_eq!(fl.all.due_ns, now + 500);
        arm(slot);
        // Armed (the call returned) and modelled to end at 1500: due then, long past. (`retire`
        // frees a host-modelled entry once its modelled end passed, so look before it.)
        let fl = retire(None, 1200, |_, _| {});
        assert_eq!((fl.all.count, fl.all.due_ns), (1, 1500));
        let fl = retire(None, now, |_, _| {});
        assert_eq!(fl.all.count, 0);
        assert_eq!(TABLE[slot].state.load(Ordering::Relaxed), FREE);
    }
}
