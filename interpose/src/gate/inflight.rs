//! The side task's in-flight launches: a fixed table of [`SLOTS`] entries (atomics, no
//! allocation). Each entry owns two timing events from a pool created once per process (slow
//! path, in the context current at the first gated launch): `start`, recorded on the launch stream
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
    pub ev_start: AtomicUsize,
    pub ev_end: AtomicUsize,
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
    ev_start: AtomicUsize::new(0),
    ev_end: AtomicUsize::new(0),
    stream: AtomicU64::new(0),
    key: AtomicU64::new(0),
    est_ns: AtomicU64::new(0),
    model_end_ns: AtomicU64::new(0),
    admitted_ns: AtomicU64::new(0),
};

pub static TABLE: [Entry; SLOTS] = [ENTRY_INIT; SLOTS];

/// Event pool: 0 not created, 1 ready, 2 given up (host model only).
pub static POOL: AtomicU8 = AtomicU8::new(0);
static POOL_TRIES: AtomicU32 = AtomicU32::new(0);

/// Creates the event pool in the current context (gate lock held). Retries on later launches
/// while no context is current (the runtime creates it inside the first real call), gives up
/// after a bounded number of tries.
pub fn ensure_pool(d: &Drv) {
    if POOL.load(Ordering::Relaxed) != 0 {
        return;
    }
    if drv::current_ctx(d) == 0 {
        if POOL_TRIES.fetch_add(1, Ordering::Relaxed) > 10_000 {
            POOL.store(2, Ordering::Relaxed);
        }
        return;
    }
    for e in TABLE.iter() {
        let mut s: *mut c_void = std::ptr::null_mut();
        let mut t: *mut c_void = std::ptr::null_mut();
        // SAFETY: real cuEventCreate writing handles we own, in the current context.
        let ok = unsafe {
            (d.event_create)(&mut s, drv::CU_EVENT_DEFAULT) == drv::CUDA_SUCCESS
                && (d.event_create)(&mut t, drv::CU_EVENT_DEFAULT) == drv::CUDA_SUCCESS
        };
        if !ok {
            POOL.store(2, Ordering::Relaxed);
            return;
        }
        e.ev_start.store(s as usize, Ordering::Relaxed);
        e.ev_end.store(t as usize, Ordering::Relaxed);
    }
    POOL.store(1, Ordering::Release);
}

/// Reserves an entry for an admitted launch and records its start event (gate lock held).
/// Returns the slot, or `None` if the table is full.
pub fn reserve(
    d: Option<&Drv>,
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
    e.stream.store(stream, Ordering::Relaxed);
    e.key.store(key, Ordering::Relaxed);
    e.est_ns.store(est_ns, Ordering::Relaxed);
    e.model_end_ns.store(model_end, Ordering::Relaxed);
    e.admitted_ns.store(now, Ordering::Relaxed);
    let mut tracked = 0;
    if let (Some(d), 1) = (d, POOL.load(Ordering::Acquire)) {
        // SAFETY: real cuEventRecord of a pool event on the caller's stream; an event of another
        // context fails cleanly (host model then).
        let rc = unsafe {
            (d.event_record)(
                e.ev_start.load(Ordering::Relaxed) as *mut c_void,
                stream as *mut c_void,
            )
        };
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
            let rc = unsafe {
                (d.event_record)(
                    e.ev_end.load(Ordering::Relaxed) as *mut c_void,
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
pub struct Pending {
    pub ns: u64,
    pub count: usize,
    pub due_ns: u64,
    /// When the oldest unfinished entry was admitted (0: none).
    pub admitted_ns: u64,
}

/// Retires completed entries (gate lock held), feeding each measured duration to `learn`.
pub fn retire(d: Option<&Drv>, now: u64, mut learn: impl FnMut(u64, u64)) -> Pending {
    let mut p = Pending {
        ns: 0,
        count: 0,
        due_ns: 0,
        admitted_ns: 0,
    };
    for e in TABLE.iter() {
        let st = e.state.load(Ordering::Acquire);
        if st == FREE {
            continue;
        }
        if st == ARMED {
            if e.tracked.load(Ordering::Relaxed) == 1 {
                if let Some(d) = d {
                    let end = e.ev_end.load(Ordering::Relaxed) as *mut c_void;
                    // SAFETY: real cuEventQuery of a recorded pool event.
                    match unsafe { (d.event_query)(end) } {
                        drv::CUDA_SUCCESS => {
                            let mut ms: f32 = 0.0;
                            let start = e.ev_start.load(Ordering::Relaxed) as *mut c_void;
                            // SAFETY: real cuEventElapsedTime of two completed pool events of one
                            // context, writing a float we own.
                            let rc = unsafe { (d.elapsed)(&mut ms, start, end) };
                            if rc == drv::CUDA_SUCCESS && ms.is_finite() && ms >= 0.0 {
                                learn(e.key.load(Ordering::Relaxed), (ms as f64 * 1e6) as u64);
                            }
                            e.state.store(FREE, Ordering::Release);
                            continue;
                        }
                        drv::CUDA_ERROR_NOT_READY => {}
                        _ => {
                            e.state.store(FREE, Ordering::Release);
                            continue;
                        }
                    }
                }
            } else if now >= e.model_end_ns.load(Ordering::Relaxed) {
                e.state.store(FREE, Ordering::Release);
                continue;
            }
        }
        p.ns = p.ns.saturating_add(e.est_ns.load(Ordering::Relaxed));
        p.count += 1;
        let due = e.model_end_ns.load(Ordering::Relaxed);
        if p.due_ns == 0 || due < p.due_ns {
            p.due_ns = due;
        }
        let admitted = e.admitted_ns.load(Ordering::Relaxed);
        if p.admitted_ns == 0 || admitted < p.admitted_ns {
            p.admitted_ns = admitted;
        }
    }
    p
}

/// Fork child: the parent's events are not ours; everything is free, the pool is made again.
pub fn reset_after_fork() {
    for e in TABLE.iter() {
        e.state.store(FREE, Ordering::Relaxed);
        e.tracked.store(0, Ordering::Relaxed);
    }
    POOL.store(0, Ordering::Relaxed);
    POOL_TRIES.store(0, Ordering::Relaxed);
}
