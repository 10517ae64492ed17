//! Driver state: initialization, contexts (primary and created), the calling thread's context
//! stack, and the objects of the other handle kinds.
use crate::guard::CuResult;
use crate::handles::Registry;
use crate::types::*;
use simgpu::{Device, Event, Stream};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

static INITIALIZED: AtomicBool = AtomicBool::new(false);

/// A context: a device (`dev` its ordinal, `device` the simulated GPU), its default stream (legacy and per-thread default streams both map to
/// it) and the streams created in it.
pub struct Context {
    pub dev: CUdevice,
    pub device: Arc<Device>,
    pub default_stream: Stream,
    pub streams: Mutex<Vec<Stream>>,
    pub primary: bool,
    /// Primary contexts: retain count.
    pub refs: AtomicI32,
}

impl Context {
    fn new(dev: CUdevice, primary: bool) -> CuResult<Arc<Context>> {
        let phys = crate::visible::physical(dev).ok_or(CUDA_ERROR_INVALID_DEVICE)?;
        let device = Device::get(phys).map_err(|e| match e {
            simgpu::SimError::NoDevice => CUDA_ERROR_INVALID_DEVICE,
            _ => CUDA_ERROR_OPERATING_SYSTEM,
        })?;
        let default_stream =
            Stream::new(device.clone()).map_err(|_| CUDA_ERROR_OPERATING_SYSTEM)?;
        Ok(Arc::new(Context {
            dev,
            device,
            default_stream,
            streams: Mutex::new(Vec::new()),
            primary,
            refs: AtomicI32::new(0),
        }))
    }

    /// Waits for all work of the context (`cuCtxSynchronize`).
    pub fn synchronize(&self) {
        self.default_stream.synchronize();
        let streams = self
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for s in streams {
            s.synchronize();
        }
    }
}

/// A stream created with `cuStreamCreate*`.
pub struct StreamObj {
    pub stream: Stream,
    pub ctx: Arc<Context>,
}

pub static CONTEXTS: Registry<Context> = Registry::new();
pub static STREAMS: Registry<StreamObj> = Registry::new();
pub static EVENTS: Registry<Event> = Registry::new();
static PRIMARY: Mutex<Vec<(CUdevice, Arc<Context>)>> = Mutex::new(Vec::new());

thread_local! {
    /// The calling thread's context stack (handle values); the top is current.
    static CURRENT: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Marks the driver initialized (`cuInit`).
pub fn init() -> CuResult {
    if crate::visible::count() <= 0 {
        return Err(CUDA_ERROR_NO_DEVICE);
    }
    INITIALIZED.store(true, Ordering::Release);
    Ok(())
}

/// `CUDA_ERROR_NOT_INITIALIZED` before `cuInit`.
pub fn require_init() -> CuResult {
    if INITIALIZED.load(Ordering::Acquire) {
        Ok(())
    } else {
        Err(CUDA_ERROR_NOT_INITIALIZED)
    }
}

/// Checks a device ordinal.
pub fn check_device(dev: CUdevice) -> CuResult {
    physical(dev).map(|_| ())
}

/// The physical device (simulated GPU index) behind a valid ordinal.
pub fn physical(dev: CUdevice) -> CuResult<i32> {
    require_init()?;
    crate::visible::physical(dev).ok_or(CUDA_ERROR_INVALID_DEVICE)
}

/// Device `dev`'s primary context and its handle (created on first use).
pub fn primary(dev: CUdevice) -> CuResult<(usize, Arc<Context>)> {
    check_device(dev)?;
    let mut p = PRIMARY.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, c)) = p.iter().find(|(d, _)| *d == dev) {
        return Ok((Arc::as_ptr(c) as usize, c.clone()));
    }
    let c = Context::new(dev, true)?;
    let h = CONTEXTS.insert(c.clone());
    p.push((dev, c.clone()));
    Ok((h, c))
}

/// A new (non-primary) context on `dev`, registered.
pub fn create_context(dev: CUdevice) -> CuResult<(usize, Arc<Context>)> {
    check_device(dev)?;
    let c = Context::new(dev, false)?;
    Ok((CONTEXTS.insert(c.clone()), c))
}

/// The context named by handle `h`.
pub fn context(h: CUcontext) -> CuResult<Arc<Context>> {
    CONTEXTS.get(h as usize).ok_or(CUDA_ERROR_INVALID_CONTEXT)
}

/// The calling thread's current context handle (NULL if none is bound).
pub fn current_handle() -> usize {
    CURRENT
        .try_with(|c| c.borrow().last().copied().unwrap_or(0))
        .unwrap_or(0)
}

/// The context APIs use: the current one, or device 0's primary context if none is bound.
pub fn current() -> CuResult<Arc<Context>> {
    require_init()?;
    match current_handle() {
        0 => Ok(primary(0)?.1),
        h => CONTEXTS.get(h).ok_or(CUDA_ERROR_INVALID_CONTEXT),
    }
}

/// `cuCtxSetCurrent`: replaces the top of the stack (NULL unbinds it).
pub fn set_current(h: usize) {
    let _ = CURRENT.try_with(|c| {
        let mut c = c.borrow_mut();
        c.pop();
        if h != 0 {
            c.push(h);
        }
    });
}

/// `cuCtxPushCurrent`.
pub fn push_current(h: usize) {
    let _ = CURRENT.try_with(|c| c.borrow_mut().push(h));
}

/// `cuCtxPopCurrent`: the popped handle (0 if the stack was empty).
pub fn pop_current() -> usize {
    CURRENT
        .try_with(|c| c.borrow_mut().pop().unwrap_or(0))
        .unwrap_or(0)
}

/// The stream a `CUstream` value names: 0 (legacy), `CU_STREAM_LEGACY` and
/// `CU_STREAM_PER_THREAD` are the current context's default stream.
pub fn stream(h: CUstream) -> CuResult<Stream> {
    require_init()?;
    match h as usize {
        0 | STREAM_LEGACY | STREAM_PER_THREAD => Ok(current()?.default_stream.clone()),
        v => STREAMS
            .get(v)
            .map(|s| s.stream.clone())
            .ok_or(CUDA_ERROR_INVALID_HANDLE),
    }
}

/// The event named by `h`.
pub fn event(h: CUevent) -> CuResult<Arc<Event>> {
    require_init()?;
    EVENTS.get(h as usize).ok_or(CUDA_ERROR_INVALID_HANDLE)
}
