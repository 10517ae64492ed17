//! The real driver functions the comm timing (and [`crate::gpus`]) call themselves, never our
//! wrappers: resolved once from the already-loaded `libcuda.so.1` (`RTLD_NOLOAD`: never loads
//! it) with the real `dlsym`.
use crate::dl;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

pub(super) type CtxGetCurrent = unsafe extern "C" fn(*mut *mut c_void) -> c_int;
pub(super) type CtxSetCurrent = unsafe extern "C" fn(*mut c_void) -> c_int;
pub(super) type CtxGetDevice = unsafe extern "C" fn(*mut c_int) -> c_int;
pub(super) type EventCreate = unsafe extern "C" fn(*mut *mut c_void, u32) -> c_int;
pub(super) type EventRecord = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
pub(super) type EventQuery = unsafe extern "C" fn(*mut c_void) -> c_int;
pub(super) type StreamIsCapturing = unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int;
pub(super) type StreamCreate = unsafe extern "C" fn(*mut *mut c_void, u32) -> c_int;
pub(super) type EventSynchronize = unsafe extern "C" fn(*mut c_void) -> c_int;
pub(super) type EventElapsed = unsafe extern "C" fn(*mut f32, *mut c_void, *mut c_void) -> c_int;
pub(super) type StreamWaitEvent = unsafe extern "C" fn(*mut c_void, *mut c_void, u32) -> c_int;
pub(super) type DeviceGetPciBusId = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
pub(super) type DeviceGetUuid = unsafe extern "C" fn(*mut [u8; 16], c_int) -> c_int;
pub(super) type StreamGetCtx = unsafe extern "C" fn(*mut c_void, *mut *mut c_void) -> c_int;
pub(super) type CtxPushCurrent = unsafe extern "C" fn(*mut c_void) -> c_int;
pub(super) type CtxPopCurrent = unsafe extern "C" fn(*mut *mut c_void) -> c_int;
pub(super) type HostFn = unsafe extern "C" fn(*mut c_void);
pub(super) type LaunchHostFunc =
    unsafe extern "C" fn(*mut c_void, Option<HostFn>, *mut c_void) -> c_int;
pub(super) type GetProcAddress =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;

pub(super) const CUDA_SUCCESS: c_int = 0;
pub(super) const CUDA_ERROR_NOT_READY: c_int = 600;
/// `CU_EVENT_DEFAULT`: timing enabled (needed for `cuEventElapsedTime`).
pub(super) const CU_EVENT_DEFAULT: u32 = 0;
/// `CU_EVENT_BLOCKING_SYNC`: `cuEventSynchronize` on the event sleeps instead of spinning (the
/// waiters block on pool events).
pub(super) const CU_EVENT_BLOCKING_SYNC: u32 = 1;
/// `CU_STREAM_NON_BLOCKING`: the poller's stream never syncs with the legacy default stream.
pub(super) const CU_STREAM_NON_BLOCKING: u32 = 1;

/// Real driver functions freeride itself calls (never our wrappers).
pub struct Driver {
    pub(super) ctx_get_current: Option<CtxGetCurrent>,
    pub(super) ctx_set_current: Option<CtxSetCurrent>,
    pub(super) ctx_get_device: Option<CtxGetDevice>,
    pub(super) event_create: Option<EventCreate>,
    pub(super) event_record: Option<EventRecord>,
    pub(super) event_query: Option<EventQuery>,
    pub(super) stream_is_capturing: Option<StreamIsCapturing>,
    pub(super) stream_create: Option<StreamCreate>,
    pub(super) event_synchronize: Option<EventSynchronize>,
    pub(super) get_proc_address: Option<GetProcAddress>,
    pub(super) dlsym_elapsed: Option<EventElapsed>,
    pub(super) stream_wait_event: Option<StreamWaitEvent>,
    pub(super) launch_host_func: Option<LaunchHostFunc>,
    pub(super) device_get_pci_bus_id: Option<DeviceGetPciBusId>,
    pub(super) device_get_uuid: Option<DeviceGetUuid>,
    pub(super) stream_get_ctx: Option<StreamGetCtx>,
    pub(super) ctx_push: Option<CtxPushCurrent>,
    pub(super) ctx_pop: Option<CtxPopCurrent>,
}

impl Driver {
    /// The PCI bus id of device ordinal `ordinal` (`cuDeviceGetPCIBusId`; no context needed).
    /// Slow path ([`crate::gpus`]): a driver call into a buffer on the stack, no allocation.
    pub fn pci_bus_id(&self, ordinal: i32) -> Option<freeride_abi::GpuId> {
        let f = self.device_get_pci_bus_id?;
        let mut buf = [0u8; 32];
        // SAFETY: real cuDeviceGetPCIBusId writing at most `len` bytes (NUL included) into the
        // buffer we own.
        if unsafe { f(buf.as_mut_ptr() as *mut c_char, buf.len() as c_int, ordinal) }
            != CUDA_SUCCESS
        {
            return None;
        }
        freeride_abi::GpuId::parse_bytes(&buf).filter(|g| g.is_known())
    }

    /// The UUID of device ordinal `ordinal` (`cuDeviceGetUuid_v2`, else `cuDeviceGetUuid`).
    pub fn uuid(&self, ordinal: i32) -> Option<[u8; 16]> {
        let f = self.device_get_uuid?;
        let mut u = [0u8; 16];
        // SAFETY: real cuDeviceGetUuid(_v2) writing one CUuuid (16 bytes) we own.
        (unsafe { f(&mut u, ordinal) } == CUDA_SUCCESS).then_some(u)
    }

    /// The calling thread's current context (0: none, or the driver could not say).
    pub fn current_ctx(&self) -> usize {
        let Some(f) = self.ctx_get_current else {
            return 0;
        };
        let mut c: *mut c_void = std::ptr::null_mut();
        // SAFETY: real cuCtxGetCurrent writing one pointer we own.
        if unsafe { f(&mut c) } == CUDA_SUCCESS {
            c as usize
        } else {
            0
        }
    }

    /// The context work queued on `stream` runs in: `cuStreamGetCtx` (a default stream's is the
    /// calling thread's current context), else the current context (0: none).
    pub(super) fn stream_ctx(&self, stream: u64) -> usize {
        if let Some(f) = self.stream_get_ctx {
            let mut c: *mut c_void = std::ptr::null_mut();
            // SAFETY: real cuStreamGetCtx on the caller's stream, writing one pointer we own.
            if unsafe { f(stream as *mut c_void, &mut c) } == CUDA_SUCCESS && !c.is_null() {
                return c as usize;
            }
        }
        self.current_ctx()
    }

    /// Runs `f` with `ctx` current on the calling thread (pushed and popped again when it is
    /// not the current one already; `f` runs in the current context if it cannot be pushed).
    pub(super) fn in_ctx<R>(&self, ctx: usize, f: impl FnOnce() -> R) -> R {
        let (Some(push), Some(pop)) = (self.ctx_push, self.ctx_pop) else {
            return f();
        };
        if ctx == 0 || ctx == self.current_ctx() {
            return f();
        }
        // SAFETY: real cuCtxPushCurrent with a context handle the driver gave us.
        if unsafe { push(ctx as *mut c_void) } != CUDA_SUCCESS {
            return f();
        }
        let r = f();
        let mut popped: *mut c_void = std::ptr::null_mut();
        // SAFETY: real cuCtxPopCurrent of the context pushed above, writing a pointer we own.
        unsafe { pop(&mut popped) };
        r
    }

    /// Makes `ctx` current on the calling thread (one of freeride's own threads).
    pub(super) fn set_current(&self, ctx: usize) {
        if let Some(f) = self.ctx_set_current {
            // SAFETY: real cuCtxSetCurrent with a context handle the driver gave us.
            unsafe { f(ctx as *mut c_void) };
        }
    }

    /// Whether `stream` is being captured into a graph (`None`: the driver cannot say: no
    /// `cuStreamIsCapturing`, or it failed).
    pub(super) fn capturing(&self, stream: u64) -> Option<bool> {
        let f = self.stream_is_capturing?;
        let mut st: c_int = 0;
        // SAFETY: real cuStreamIsCapturing writing one int we own.
        (unsafe { f(stream as *mut c_void, &mut st) } == CUDA_SUCCESS).then_some(st != 0)
    }

    /// Records event `ev` on `stream` with the real `cuEventRecord`.
    pub(super) fn record(&self, ev: usize, stream: u64) -> bool {
        let Some(f) = self.event_record else {
            return false;
        };
        // SAFETY: real cuEventRecord on an event of ours and the caller's stream.
        unsafe { f(ev as *mut c_void, stream as *mut c_void) == CUDA_SUCCESS }
    }

    /// Whether event `ev` (one of ours) has completed, by the real `cuEventQuery`; false if the
    /// driver cannot say.
    pub(super) fn completed(&self, ev: usize) -> bool {
        let Some(f) = self.event_query else {
            return false;
        };
        // SAFETY: real cuEventQuery on a timing-pool event (created by us, never destroyed while
        // the process runs).
        unsafe { f(ev as *mut c_void) == CUDA_SUCCESS }
    }

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

pub(super) static DRIVER: OnceLock<Driver> = OnceLock::new();
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
            stream_wait_event: get(c"cuStreamWaitEvent")
                .map(|p| std::mem::transmute::<usize, StreamWaitEvent>(p)),
            launch_host_func: get(c"cuLaunchHostFunc")
                .map(|p| std::mem::transmute::<usize, LaunchHostFunc>(p)),
            device_get_pci_bus_id: get(c"cuDeviceGetPCIBusId")
                .map(|p| std::mem::transmute::<usize, DeviceGetPciBusId>(p)),
            device_get_uuid: get(c"cuDeviceGetUuid_v2")
                .or_else(|| get(c"cuDeviceGetUuid"))
                .map(|p| std::mem::transmute::<usize, DeviceGetUuid>(p)),
            stream_get_ctx: get(c"cuStreamGetCtx")
                .map(|p| std::mem::transmute::<usize, StreamGetCtx>(p)),
            ctx_push: get(c"cuCtxPushCurrent_v2")
                .map(|p| std::mem::transmute::<usize, CtxPushCurrent>(p)),
            ctx_pop: get(c"cuCtxPopCurrent_v2")
                .map(|p| std::mem::transmute::<usize, CtxPopCurrent>(p)),
        }
    };
    // SAFETY: h came from a successful dlopen; the library stays loaded (someone else holds it).
    unsafe { libc::dlclose(h) };
    Some(DRIVER.get_or_init(|| d))
}
