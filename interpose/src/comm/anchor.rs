//! The GPU clock's anchor to the host clock (see the [`super`] docs): a reference event recorded
//! on the poller's private idle stream, its host time window, and the host time of a completed
//! pool event from `cuEventElapsedTime` against it. One anchor per timing pool (per context: an
//! elapsed time is only defined between two events of one context).
use super::driver::{
    Driver, EventElapsed, CUDA_ERROR_NOT_READY, CUDA_SUCCESS, CU_EVENT_DEFAULT,
    CU_STREAM_NON_BLOCKING,
};
use freeride_abi::now_ns;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Reference events per anchoring (the tightest window wins); two sets, used alternately, so the
/// current anchor's event is never re-recorded while a new anchor is taken.
const ANCHOR_TRIES: usize = 4;
/// Renew the anchor this often while ops flow (f32 ms resolution ~0.25 µs at 2 s; clock drift).
pub(super) const ANCHOR_MAX_AGE_NS: u64 = 2_000_000_000;
/// At most one re-anchor this often when a time failed the causality check.
pub(super) const ANCHOR_RETRY_NS: u64 = 100_000_000;
/// An anchor whose host window was wider than twice this (the poller or the GPU's completion was
/// late: a busy host) is tried again every [`ANCHOR_RETRY_NS`] while ops flow, and replaced by a
/// tighter one: otherwise every time for up to [`ANCHOR_MAX_AGE_NS`] carries its error.
pub(super) const TIGHT_ANCHOR_NS: u64 = 50_000;
/// Resolution of `cuEventElapsedTime` (about 0.5 µs), added to every uncertainty.
const ELAPSED_RESOLUTION_NS: u64 = 500;
/// A GPU-clock time further than this outside [queued, now] (beyond its uncertainty) means the
/// anchor is wrong: use the poll midpoint and re-anchor.
pub(super) const CAUSALITY_SLACK_NS: u64 = 2_000_000;

/// A pool's current anchor: reference event (0 = none), its host time and that time's
/// uncertainty; `stale` is set when a time failed the causality check (the poller re-anchors
/// soon).
pub(super) struct Anchor {
    pub(super) ev: AtomicUsize,
    host_ns: AtomicU64,
    unc_ns: AtomicU64,
    pub(super) stale: AtomicBool,
}

impl Anchor {
    pub(super) const fn new() -> Anchor {
        Anchor {
            ev: AtomicUsize::new(0),
            host_ns: AtomicU64::new(0),
            unc_ns: AtomicU64::new(0),
            stale: AtomicBool::new(false),
        }
    }

    /// The uncertainty of the current anchor's host time (0 without one).
    pub(super) fn uncertainty_ns(&self) -> u64 {
        if self.ev.load(Ordering::Relaxed) == 0 {
            0
        } else {
            self.unc_ns.load(Ordering::Relaxed)
        }
    }

    /// No anchor (fork child: the parent's events are not ours).
    pub(super) fn reset(&self) {
        self.ev.store(0, Ordering::Relaxed);
        self.stale.store(false, Ordering::Relaxed);
    }
}
/// cuEventElapsedTime as the driver hands it out for CUDA 13.0 (0 = unavailable).
static ELAPSED_FN: AtomicUsize = AtomicUsize::new(0);

/// The poller's private clock-anchoring resources.
pub(super) struct Clock {
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
    /// Poller thread, the pool's context current: a private stream and reference events.
    pub(super) fn new(d: &Driver) -> Option<Clock> {
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
    /// `only_tighter`: keep the current anchor unless the new one is tighter (false: not taken).
    pub(super) fn anchor(&mut self, d: &Driver, a: &Anchor, only_tighter: bool) -> bool {
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
        if only_tighter && w.div_ceil(2) >= a.uncertainty_ns() {
            // This set's events hold no anchor in use: the next try records them again.
            return false;
        }
        a.host_ns.store(host, Ordering::Relaxed);
        a.unc_ns.store(w.div_ceil(2), Ordering::Relaxed);
        a.ev.store(ev, Ordering::Relaxed);
        a.stale.store(false, Ordering::Relaxed);
        self.set ^= 1;
        true
    }
}

/// GPU-side host time of a completed event of anchor `an`'s pool: (t_ns, uncertainty_ns), or None
/// without a usable anchor / elapsed time.
pub(super) fn gpu_time(an: &Anchor, ev: usize) -> Option<(u64, u64)> {
    let a = an.ev.load(Ordering::Relaxed);
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
    let t = an.host_ns.load(Ordering::Relaxed) as i64 + (ms * 1e6).round() as i64;
    if t <= 0 {
        return None;
    }
    // Half an f32 ulp of the elapsed milliseconds, in ns.
    let quant = (ms.abs() * 1e6 * f32::EPSILON as f64 / 2.0) as u64;
    let unc = an.unc_ns.load(Ordering::Relaxed) + ELAPSED_RESOLUTION_NS + quant;
    Some((t as u64, unc))
}
