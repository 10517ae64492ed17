//! The C ABI (`libfreeride_sidetask.so`, header `include/freeride_sidetask.h`). Every function
//! catches panics (returning `FRST_ERR_PANIC` or NULL) and checks its handle for NULL; errors
//! leave a message for `frst_last_error()` on the calling thread. A handle may be used from any
//! thread, one call at a time per handle (calls are serialized by a lock). The functions are
//! `unsafe` for Rust callers: they trust the pointers they are given, as C functions do.
use crate::config::TaskConfig;
use crate::error::SdkError;
use crate::gpu::Gpu;
use crate::lifecycle::State;
use crate::memory::DeviceMemory;
use crate::pacer::{Pacer, WaitOutcome, Window};
use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;
use std::time::Duration;

pub const FRST_OK: i64 = 0;
pub const FRST_ERR_TIMEOUT: i64 = -1;
pub const FRST_ERR_STOPPED: i64 = -2;
pub const FRST_ERR_INVALID: i64 = -3;
pub const FRST_ERR_TRANSITION: i64 = -4;
pub const FRST_ERR_OVER_BUDGET: i64 = -5;
pub const FRST_ERR_GPU: i64 = -6;
pub const FRST_ERR_PANIC: i64 = -7;
pub const FRST_ERR_STATE: i64 = -8;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
    static LAST_JSON: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

fn code_of(e: &SdkError) -> i64 {
    match e {
        SdkError::Transition(_) => FRST_ERR_TRANSITION,
        SdkError::OverBudget { .. } => FRST_ERR_OVER_BUDGET,
        SdkError::NoDriver | SdkError::Driver(_) => FRST_ERR_GPU,
        SdkError::WrongState { .. } => FRST_ERR_STATE,
        SdkError::Config(_) | SdkError::Task(_) | SdkError::Io(_) => FRST_ERR_INVALID,
    }
}

fn fail(e: SdkError) -> i64 {
    set_error(&e.to_string());
    code_of(&e)
}

/// The object behind a `frst_task*`.
pub struct FfiTask {
    pacer: Pacer,
    gpu: Option<Gpu>,
    memory: DeviceMemory,
    window: Option<Window>,
    /// What the last `frst_step_fraction_fits` found: the grant and the share of a step that fits.
    partial_offer: Option<(Window, f64)>,
    /// The share of a full step the step begun does (< 1: `frst_step_begin_partial`).
    fraction: f64,
}

pub struct FrstTask(Mutex<FfiTask>);

impl FfiTask {
    /// Starts timing a step in grant window `w` (the task is running).
    fn begin_step(&mut self, w: Window, fraction: f64) {
        if let Some(g) = &self.gpu {
            g.take_first_launch_ns();
        }
        self.pacer.step_begin(w);
        self.fraction = fraction;
        self.partial_offer = None;
    }

    fn gpu(&mut self) -> Result<&mut Gpu, SdkError> {
        if self.gpu.is_none() {
            self.gpu = Some(Gpu::open(self.pacer.config().device)?);
        }
        Ok(self.gpu.as_mut().expect("opened above"))
    }
}

impl Drop for FfiTask {
    fn drop(&mut self) {
        if let Some(g) = &self.gpu {
            self.memory.free_all(g);
        }
        self.pacer.write_status(true);
    }
}

/// Runs `f` on the task behind `h`, turning NULL handles and panics into error codes.
fn with_task(h: *const FrstTask, f: impl FnOnce(&mut FfiTask) -> i64) -> i64 {
    if h.is_null() {
        set_error("NULL task handle");
        return FRST_ERR_INVALID;
    }
    // SAFETY: a non-NULL handle was returned by frst_create and not yet destroyed (the C
    // contract); the Mutex serializes concurrent calls on it.
    let task = unsafe { &*h };
    match catch_unwind(AssertUnwindSafe(|| {
        let mut t = task.0.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut t)
    })) {
        Ok(v) => v,
        Err(_) => {
            set_error("panic inside freeride_sidetask");
            FRST_ERR_PANIC
        }
    }
}

/// Creates a task from a JSON config (NULL or "" = defaults). NULL on error (see frst_last_error).
///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_create(config_json: *const c_char) -> *mut FrstTask {
    let r = catch_unwind(|| {
        let json = if config_json.is_null() {
            String::new()
        } else {
            // SAFETY: the caller passes a NUL-terminated string (C contract), checked non-NULL.
            match unsafe { CStr::from_ptr(config_json) }.to_str() {
                Ok(s) => s.to_string(),
                Err(_) => return Err(SdkError::Config("config is not UTF-8".into())),
            }
        };
        let cfg = TaskConfig::from_json(&json)?;
        let pacer = Pacer::new(cfg, "iterative")?;
        Ok(FfiTask {
            memory: DeviceMemory::new(pacer.budget()),
            pacer,
            gpu: None,
            window: None,
            partial_offer: None,
            fraction: 1.0,
        })
    });
    match r {
        Ok(Ok(t)) => Box::into_raw(Box::new(FrstTask(Mutex::new(t)))),
        Ok(Err(e)) => {
            set_error(&e.to_string());
            std::ptr::null_mut()
        }
        Err(_) => {
            set_error("panic inside frst_create");
            std::ptr::null_mut()
        }
    }
}

/// Frees the task (its device memory too) and writes its final status.
///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_destroy(h: *mut FrstTask) {
    if h.is_null() {
        return;
    }
    let _ = catch_unwind(|| {
        // SAFETY: `h` came from Box::into_raw in frst_create and is destroyed once (C contract).
        drop(unsafe { Box::from_raw(h) });
    });
}

/// The last error message of this thread ("" if none). Valid until the next call on the thread.
#[no_mangle]
pub extern "C" fn frst_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// The state (FRST_STATE_*), or a negative error.
///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_state(h: *const FrstTask) -> i32 {
    with_task(h, |t| t.pacer.state() as i64) as i32
}

/// Moves the life cycle to `state`: 0, or FRST_ERR_TRANSITION for a transition not allowed.
///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_set_state(h: *const FrstTask, state: i32) -> i32 {
    with_task(h, |t| {
        let Some(to) = State::from_i32(state) else {
            set_error(&format!("no state {state}"));
            return FRST_ERR_INVALID;
        };
        match t.pacer.transition(to) {
            Ok(_) => FRST_OK,
            Err(e) => fail(e),
        }
    }) as i32
}

/// Waits until a step of `step_estimate_ns` (0: the learned estimate) fits in the GPU's grant,
/// at most `timeout_ns` (0: check once; UINT64_MAX: forever). Moves created/paused -> running when
/// it fits and running -> paused while it does not. Returns the grant's time left in ns (> 0,
/// INT64_MAX when unbounded), FRST_ERR_TIMEOUT, or FRST_ERR_STOPPED (a stop was requested: the
/// task is now stopped).
///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_wait_for_grant(
    h: *const FrstTask,
    step_estimate_ns: u64,
    timeout_ns: u64,
) -> i64 {
    with_task(h, |t| {
        match wait_for_step(t, step_estimate_ns, 1.0, timeout_ns) {
            Ok((w, _)) => w.time_left_ns.min(i64::MAX as u64).max(1) as i64,
            Err(rc) => rc,
        }
    })
}

/// Like `frst_wait_for_grant` with the learned estimate, for a task that can scale its work: it
/// also returns when only part of a step fits, at least `min_fraction` (0 < min_fraction <= 1).
/// Writes to `out_fraction` 1.0 (run a whole step: `frst_step_begin`) or the share that fits
/// (run it with `frst_step_begin_partial`). Returns the grant's time left in ns (> 0),
/// FRST_ERR_TIMEOUT, FRST_ERR_STOPPED or another error.
///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_wait_for_step(
    h: *const FrstTask,
    min_fraction: f64,
    timeout_ns: u64,
    out_fraction: *mut f64,
) -> i64 {
    if out_fraction.is_null() || !(min_fraction > 0.0 && min_fraction <= 1.0) {
        set_error("frst_wait_for_step: 0 < min_fraction <= 1 and a non-NULL out_fraction");
        return FRST_ERR_INVALID;
    }
    with_task(h, |t| match wait_for_step(t, 0, min_fraction, timeout_ns) {
        Ok((w, f)) => {
            t.partial_offer = (f < 1.0).then_some((w, f));
            // SAFETY: non-NULL (checked above), a valid double (C contract).
            unsafe { *out_fraction = f };
            w.time_left_ns.min(i64::MAX as u64).max(1) as i64
        }
        Err(rc) => rc,
    })
}

/// Waits (`timeout_ns`: 0 checks once, u64::MAX forever) until a step of `step_estimate_ns`
/// (0: the learned estimate), or at least `min_fraction` of one, fits; moves the task to running
/// then, to paused while nothing fits. The window and the share that fits, or the error code.
fn wait_for_step(
    t: &mut FfiTask,
    step_estimate_ns: u64,
    min_fraction: f64,
    timeout_ns: u64,
) -> Result<(Window, f64), i64> {
    let p = &mut t.pacer;
    if p.state() == State::Created {
        p.transition(State::Paused).map_err(fail)?;
    }
    if !matches!(p.state(), State::Paused | State::Running) {
        return Err(fail(SdkError::WrongState {
            expected: "created, paused or running",
            actual: p.state(),
        }));
    }
    let fits = match p.check(step_estimate_ns) {
        Some(w) => Some((w, 1.0)),
        None => match p.check_partial(min_fraction) {
            Some(wf) => Some(wf),
            None => {
                if p.state() == State::Running {
                    let _ = p.transition(State::Paused);
                }
                let timeout = (timeout_ns != u64::MAX).then(|| Duration::from_nanos(timeout_ns));
                match p.wait(step_estimate_ns, min_fraction, timeout) {
                    WaitOutcome::Fits(w, f) => Some((w, f)),
                    WaitOutcome::TimedOut => {
                        set_error("no grant fitting the step before the timeout");
                        return Err(FRST_ERR_TIMEOUT);
                    }
                    WaitOutcome::Stopped => None,
                }
            }
        },
    };
    if p.stop_requested() {
        let _ = p.transition(State::Stopped);
        set_error("stop requested");
        return Err(FRST_ERR_STOPPED);
    }
    let (w, f) = fits.expect("None only when stopped");
    if p.state() == State::Paused {
        p.transition(State::Running).map_err(fail)?;
    }
    t.window = Some(w);
    Ok((w, f))
}

/// Starts timing a step (the task must be running: call frst_wait_for_grant first).
///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_step_begin(h: *const FrstTask) -> i32 {
    with_task(h, |t| {
        if t.pacer.state() != State::Running {
            return fail(SdkError::WrongState {
                expected: "running",
                actual: t.pacer.state(),
            });
        }
        let w = t.window.unwrap_or_else(Window::unbounded);
        t.begin_step(w, 1.0);
        FRST_OK
    }) as i32
}

/// Where a full step does not fit the grant: the share of a step that still does. Writes to
/// `out_fraction` 1.0 when a full step fits, the share (`min_fraction` <= share < 1) when only
/// part of one does, 0.0 when not even `min_fraction` does, no grant is open or the step
/// estimates are not learned yet. Does not wait. FRST_OK or an error.
///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_step_fraction_fits(
    h: *const FrstTask,
    min_fraction: f64,
    out_fraction: *mut f64,
) -> i32 {
    if out_fraction.is_null() || !(min_fraction > 0.0 && min_fraction < 1.0) {
        set_error("frst_step_fraction_fits: 0 < min_fraction < 1 and a non-NULL out_fraction");
        return FRST_ERR_INVALID as i32;
    }
    with_task(h, |t| {
        let p = &mut t.pacer;
        t.partial_offer = None;
        let f = if p.check(0).is_some() {
            1.0
        } else {
            match p.check_partial(min_fraction) {
                Some((w, f)) => {
                    t.partial_offer = Some((w, f));
                    f
                }
                None => 0.0,
            }
        };
        // SAFETY: non-NULL (checked above), a valid double (C contract).
        unsafe { *out_fraction = f };
        FRST_OK
    }) as i32
}

/// Starts timing a partial step of `fraction` of a step's work (at most what the last
/// `frst_step_fraction_fits` offered): the task queues about that share of a step's GPU work. Its
/// GPU time counts against the grant and in the totals (`partial_steps`); scaled to a whole step,
/// its duration may lower the step estimates, never raise them. Moves created/paused -> running.
///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_step_begin_partial(h: *const FrstTask, fraction: f64) -> i32 {
    with_task(h, |t| {
        let Some((w, offered)) = t.partial_offer else {
            return fail(SdkError::WrongState {
                expected: "a partial step offered by frst_step_fraction_fits",
                actual: t.pacer.state(),
            });
        };
        if !(fraction > 0.0 && fraction <= offered) {
            set_error(&format!(
                "frst_step_begin_partial: fraction {fraction} is not in (0, {offered}]"
            ));
            return FRST_ERR_INVALID;
        }
        t.partial_offer = None;
        for (from, to) in [
            (State::Created, State::Paused),
            (State::Paused, State::Running),
        ] {
            if t.pacer.state() == from {
                if let Err(e) = t.pacer.transition(to) {
                    return fail(e);
                }
            }
        }
        if t.pacer.state() != State::Running {
            return fail(SdkError::WrongState {
                expected: "created, paused or running",
                actual: t.pacer.state(),
            });
        }
        t.window = Some(w);
        t.begin_step(w, fraction);
        FRST_OK
    }) as i32
}

/// Ends the step: synchronizes the SDK's stream (if frst_launch was used), records the step's
/// duration and returns it in ns. Work queued elsewhere (e.g. by PyTorch) must be synchronized by
/// the caller before this call.
///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_step_end(h: *const FrstTask) -> i64 {
    with_task(h, |t| {
        if !t.pacer.in_step() {
            return fail(SdkError::WrongState {
                expected: "a step begun by frst_step_begin",
                actual: t.pacer.state(),
            });
        }
        let mut gpu_ns = None;
        let mut sync_err = None;
        if let Some(g) = &t.gpu {
            match g.synchronize() {
                Ok(()) => {
                    gpu_ns = g
                        .take_first_launch_ns()
                        .map(|s| freeride_abi::now_ns().saturating_sub(s))
                }
                Err(e) => sync_err = Some(e),
            }
        }
        // A failed synchronize still ends the step (its span, not its GPU time, is charged).
        let timing = t
            .pacer
            .step_end(gpu_ns, std::mem::replace(&mut t.fraction, 1.0));
        if let Some(e) = sync_err {
            return fail(e);
        }
        match timing {
            Some(s) => s.span_ns.min(i64::MAX as u64) as i64,
            None => FRST_ERR_STATE,
        }
    })
}

/// Launches the simulated kernel `name` running `duration_ns` on the task's stream.
///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_launch(
    h: *const FrstTask,
    name: *const c_char,
    duration_ns: u64,
) -> i32 {
    with_task(h, |t| {
        if name.is_null() {
            set_error("NULL kernel name");
            return FRST_ERR_INVALID;
        }
        // SAFETY: non-NULL, NUL-terminated (C contract).
        let Ok(name) = unsafe { CStr::from_ptr(name) }.to_str() else {
            set_error("kernel name is not UTF-8");
            return FRST_ERR_INVALID;
        };
        match t.gpu().and_then(|g| g.launch_ns(name, duration_ns)) {
            Ok(()) => FRST_OK,
            Err(e) => fail(e),
        }
    }) as i32
}

/// Queues C (m x n) = A (m x k) . B (k x n) on the task's stream through cuBLAS (fp32,
/// column-major; `a`, `b`, `c` device buffers from `frst_alloc` of at least those sizes): a real
/// kernel on a GPU, timed by its shape on the test bed.
///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_gemm(
    h: *const FrstTask,
    m: u32,
    n: u32,
    k: u32,
    a: u64,
    b: u64,
    c: u64,
) -> i32 {
    with_task(h, |t| {
        match t.gpu().and_then(|g| g.gemm(m, n, k, a, b, c)) {
            Ok(()) => FRST_OK,
            Err(e) => fail(e),
        }
    }) as i32
}

/// Sets `bytes` bytes of device memory at `ptr` (from `frst_alloc`) to `value`, synchronously.
///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_fill(h: *const FrstTask, ptr: u64, bytes: u64, value: u8) -> i32 {
    with_task(h, |t| {
        match t.gpu().and_then(|g| g.fill(ptr, bytes, value)) {
            Ok(()) => FRST_OK,
            Err(e) => fail(e),
        }
    }) as i32
}

/// Waits for the work queued on the task's stream.
///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_sync(h: *const FrstTask) -> i32 {
    with_task(h, |t| match &t.gpu {
        None => FRST_OK,
        Some(g) => match g.synchronize() {
            Ok(()) => FRST_OK,
            Err(e) => fail(e),
        },
    }) as i32
}

/// Allocates device memory within the budget; FRST_ERR_OVER_BUDGET (nothing allocated) if over.
///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_alloc(h: *const FrstTask, bytes: u64, out_ptr: *mut u64) -> i32 {
    with_task(h, |t| {
        if out_ptr.is_null() {
            set_error("NULL out_ptr");
            return FRST_ERR_INVALID;
        }
        // Check the budget before opening a GPU, so the error is the budget's.
        if let Err(e) = t.memory.budget().reserve(bytes) {
            return fail(e);
        }
        t.memory.budget().release(bytes);
        let r = t.gpu().map(|_| ());
        let r = r.and_then(|_| {
            let g = t.gpu.as_ref().expect("opened");
            t.memory.alloc(g, bytes)
        });
        match r {
            Ok(p) => {
                // SAFETY: checked non-NULL; the caller gives a writable uint64_t.
                unsafe { *out_ptr = p };
                FRST_OK
            }
            Err(e) => fail(e),
        }
    }) as i32
}

///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_free(h: *const FrstTask, ptr: u64) -> i32 {
    with_task(h, |t| {
        let Some(g) = &t.gpu else {
            set_error("nothing was allocated");
            return FRST_ERR_INVALID;
        };
        match t.memory.free(g, ptr) {
            Ok(()) => FRST_OK,
            Err(e) => fail(e),
        }
    }) as i32
}

/// Requests a clean stop (also what SIGTERM does).
///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_request_stop(h: *const FrstTask) -> i32 {
    with_task(h, |t| {
        t.pacer.stop_flag().request();
        FRST_OK
    }) as i32
}

///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_stop_requested(h: *const FrstTask) -> i32 {
    with_task(h, |t| t.pacer.stop_requested() as i64) as i32
}

/// The learned step estimate in ns (0 until a step was measured).
///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_step_estimate_ns(h: *const FrstTask) -> i64 {
    with_task(h, |t| {
        t.pacer.step_estimate_ns().min(i64::MAX as u64) as i64
    })
}

///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_steps(h: *const FrstTask) -> i64 {
    with_task(h, |t| t.pacer.steps() as i64)
}

///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_mem_held(h: *const FrstTask) -> i64 {
    with_task(h, |t| t.memory.budget().held().min(i64::MAX as u64) as i64)
}

/// The summary as a JSON object (valid until the next call of this function on the thread), or
/// NULL on error. `extra_json` (an object, may be NULL) is merged into it.
///
/// # Safety
/// `task`/`h` is NULL or a live handle from `frst_create` (not yet destroyed); every other pointer
/// is NULL or valid as `include/freeride_sidetask.h` describes.
#[no_mangle]
pub unsafe extern "C" fn frst_summary_json(
    h: *const FrstTask,
    extra_json: *const c_char,
) -> *const c_char {
    let extra = if extra_json.is_null() {
        serde_json::Value::Null
    } else {
        // SAFETY: non-NULL, NUL-terminated (C contract).
        let s = unsafe { CStr::from_ptr(extra_json) }
            .to_string_lossy()
            .into_owned();
        match serde_json::from_str(&s) {
            Ok(v) => v,
            Err(e) => {
                set_error(&format!("extra_json: {e}"));
                return std::ptr::null();
            }
        }
    };
    let r = with_task(h, |t| {
        let s = t.pacer.summary().to_json_with(extra.clone());
        LAST_JSON.with(|j| *j.borrow_mut() = CString::new(s).unwrap_or_default());
        FRST_OK
    });
    if r != FRST_OK {
        return std::ptr::null();
    }
    LAST_JSON.with(|j| j.borrow().as_ptr())
}
