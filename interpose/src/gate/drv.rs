//! The few real driver functions the gate calls (never our wrappers): resolved once from the
//! already-loaded `libcuda.so.1` (`RTLD_NOLOAD`, like [`crate::comm`]), slow path.
use crate::dl;
use std::ffi::{c_int, c_void, CStr};
use std::sync::OnceLock;

pub type CtxGetCurrent = unsafe extern "C" fn(*mut *mut c_void) -> c_int;
pub type CtxSetCurrent = unsafe extern "C" fn(*mut c_void) -> c_int;
pub type EventCreate = unsafe extern "C" fn(*mut *mut c_void, u32) -> c_int;
pub type EventRecord = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
pub type EventQuery = unsafe extern "C" fn(*mut c_void) -> c_int;
pub type EventElapsed = unsafe extern "C" fn(*mut f32, *mut c_void, *mut c_void) -> c_int;
pub type StreamIsCapturing = unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int;

pub const CUDA_SUCCESS: c_int = 0;
pub const CUDA_ERROR_NOT_READY: c_int = 600;
/// `CU_EVENT_DEFAULT`: timing enabled (needed for `cuEventElapsedTime`).
pub const CU_EVENT_DEFAULT: u32 = 0;

pub struct Drv {
    pub ctx_get_current: CtxGetCurrent,
    /// For the [`super::looker`] thread, which has no context of its own.
    pub ctx_set_current: Option<CtxSetCurrent>,
    pub event_create: EventCreate,
    pub event_record: EventRecord,
    pub event_query: EventQuery,
    pub elapsed: EventElapsed,
    pub stream_is_capturing: Option<StreamIsCapturing>,
}

static DRV: OnceLock<Option<Drv>> = OnceLock::new();

/// The real driver functions, once libcuda.so.1 is loaded. `None` until then (the caller retries
/// a bounded number of times) or if a required function is missing.
pub fn get() -> Option<&'static Drv> {
    if let Some(d) = DRV.get() {
        return d.as_ref();
    }
    let h = dl::noload(c"libcuda.so.1");
    if h.is_null() {
        return None; // not loaded yet: not cached, retried later
    }
    let get = |n: &CStr| {
        let p = dl::sym(h, n);
        (!p.is_null()).then_some(p as usize)
    };
    // SAFETY: each address is the real driver function of that exact name, whose C signature
    // matches the type it is transmuted to (cuda.h).
    let d = unsafe {
        (|| {
            Some(Drv {
                ctx_get_current: std::mem::transmute::<usize, CtxGetCurrent>(get(
                    c"cuCtxGetCurrent",
                )?),
                ctx_set_current: get(c"cuCtxSetCurrent")
                    .map(|p| std::mem::transmute::<usize, CtxSetCurrent>(p)),
                event_create: std::mem::transmute::<usize, EventCreate>(get(c"cuEventCreate")?),
                event_record: std::mem::transmute::<usize, EventRecord>(get(c"cuEventRecord")?),
                event_query: std::mem::transmute::<usize, EventQuery>(get(c"cuEventQuery")?),
                elapsed: std::mem::transmute::<usize, EventElapsed>(
                    get(c"cuEventElapsedTime_v2").or_else(|| get(c"cuEventElapsedTime"))?,
                ),
                stream_is_capturing: get(c"cuStreamIsCapturing")
                    .map(|p| std::mem::transmute::<usize, StreamIsCapturing>(p)),
            })
        })()
    };
    // SAFETY: h came from a successful dlopen(RTLD_NOLOAD); the library stays loaded.
    unsafe { libc::dlclose(h) };
    DRV.get_or_init(|| d).as_ref()
}

/// Whether `stream` is being captured into a graph (launches there run later, as a graph).
pub fn capturing(d: &Drv, stream: u64) -> bool {
    let Some(f) = d.stream_is_capturing else {
        return false;
    };
    let mut st: c_int = 0;
    // SAFETY: real cuStreamIsCapturing writing one int we own.
    let rc = unsafe { f(stream as *mut c_void, &mut st) };
    rc == CUDA_SUCCESS && st != 0
}

/// The current context (0 = none).
pub fn current_ctx(d: &Drv) -> usize {
    let mut c: *mut c_void = std::ptr::null_mut();
    // SAFETY: real cuCtxGetCurrent writing a pointer we own.
    if unsafe { (d.ctx_get_current)(&mut c) } == CUDA_SUCCESS {
        c as usize
    } else {
        0
    }
}
