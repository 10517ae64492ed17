//! Runtime state: the calling thread's device and last error, launch configurations pushed by
//! nvcc-generated stubs, registered kernels, and the driver objects the runtime made.
use crate::driver::{check, driver};
use crate::guard::RtResult;
use crate::types::*;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::Mutex;

thread_local! {
    static DEVICE: Cell<i32> = const { Cell::new(0) };
    static LAST_ERROR: Cell<i32> = const { Cell::new(0) };
    static CALL_CONFIGS: RefCell<Vec<CallConfig>> = const { RefCell::new(Vec::new()) };
}

/// A `<<<grid, block, smem, stream>>>` configuration.
#[derive(Clone, Copy)]
pub struct CallConfig {
    pub grid: dim3,
    pub block: dim3,
    pub smem: usize,
    pub stream: cudaStream_t,
}

pub fn set_last_error(e: cudaError_t) {
    let _ = LAST_ERROR.try_with(|l| l.set(e));
}

/// The last error; `reset` clears it (`cudaGetLastError`).
pub fn last_error(reset: bool) -> cudaError_t {
    LAST_ERROR
        .try_with(|l| if reset { l.replace(0) } else { l.get() })
        .unwrap_or(0)
}

pub fn push_call_config(c: CallConfig) {
    let _ = CALL_CONFIGS.try_with(|s| s.borrow_mut().push(c));
}

pub fn pop_call_config() -> Option<CallConfig> {
    CALL_CONFIGS
        .try_with(|s| s.borrow_mut().pop())
        .ok()
        .flatten()
}

/// Host stub address -> device function name (`__cudaRegisterFunction`).
static KERNELS: Mutex<Option<HashMap<usize, CString>>> = Mutex::new(None);
/// Primary context handle per device.
static PRIMARY: Mutex<Vec<(i32, usize)>> = Mutex::new(Vec::new());
/// Per context: the module the runtime loaded and the functions got from it.
static MODULES: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);
static FUNCTIONS: Mutex<Option<HashMap<(usize, usize), usize>>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn register_kernel(host_fun: usize, name: CString) {
    lock(&KERNELS)
        .get_or_insert_with(HashMap::new)
        .insert(host_fun, name);
}

/// The device name of a host stub (`kernel_0x<addr>` if it was never registered).
pub fn kernel_name(host_fun: usize) -> CString {
    lock(&KERNELS)
        .get_or_insert_with(HashMap::new)
        .get(&host_fun)
        .cloned()
        .unwrap_or_else(|| CString::new(format!("kernel_0x{host_fun:x}")).unwrap_or_default())
}

/// The device the calling thread works on (`cudaSetDevice`, default 0).
pub fn thread_device() -> i32 {
    DEVICE.try_with(|d| d.get()).unwrap_or(0)
}

fn primary_ctx(dev: i32) -> RtResult<usize> {
    let mut p = lock(&PRIMARY);
    if let Some(&(_, h)) = p.iter().find(|(d, _)| *d == dev) {
        return Ok(h);
    }
    let d = driver()?;
    let mut ctx: *mut c_void = std::ptr::null_mut();
    // SAFETY: driver function with a valid out-pointer.
    check(unsafe { (d.primary_ctx_retain)(&mut ctx, dev) })?;
    p.push((dev, ctx as usize));
    Ok(ctx as usize)
}

/// `cudaSetDevice`: makes `dev`'s primary context current on this thread.
pub fn set_device(dev: i32) -> RtResult {
    let d = driver()?;
    let mut n = 0;
    // SAFETY: driver function with a valid out-pointer.
    check(unsafe { (d.device_get_count)(&mut n) })?;
    if dev < 0 || dev >= n {
        return Err(cudaErrorInvalidDevice);
    }
    let ctx = primary_ctx(dev)?;
    // SAFETY: ctx is a context handle the driver gave us.
    check(unsafe { (d.ctx_set_current)(ctx as *mut c_void) })?;
    let _ = DEVICE.try_with(|c| c.set(dev));
    Ok(())
}

/// Makes sure a context is current on this thread (the driver's current one, else the primary
/// context of the thread's device); returns its handle.
pub fn ensure_ctx() -> RtResult<usize> {
    let d = driver()?;
    let mut cur: *mut c_void = std::ptr::null_mut();
    // SAFETY: driver function with a valid out-pointer.
    check(unsafe { (d.ctx_get_current)(&mut cur) })?;
    if !cur.is_null() {
        return Ok(cur as usize);
    }
    set_device(thread_device())?;
    primary_ctx(thread_device())
}

/// The driver function for host stub `host_fun` in the current context.
pub fn function(host_fun: *const c_void) -> RtResult<*mut c_void> {
    let ctx = ensure_ctx()?;
    let key = (ctx, host_fun as usize);
    if let Some(&f) = lock(&FUNCTIONS).get_or_insert_with(HashMap::new).get(&key) {
        return Ok(f as *mut c_void);
    }
    let d = driver()?;
    let module = {
        let mut mods = lock(&MODULES);
        let mods = mods.get_or_insert_with(HashMap::new);
        match mods.get(&ctx) {
            Some(&m) => m,
            None => {
                let mut m: *mut c_void = std::ptr::null_mut();
                static IMAGE: [u8; 8] = *b"fatbin\0\0";
                // SAFETY: driver function with a valid out-pointer and image.
                check(unsafe { (d.module_load_data)(&mut m, IMAGE.as_ptr().cast()) })?;
                mods.insert(ctx, m as usize);
                m as usize
            }
        }
    };
    let name = kernel_name(host_fun as usize);
    let mut f: *mut c_void = std::ptr::null_mut();
    // SAFETY: driver function with a valid out-pointer, module handle and C string.
    check(unsafe { (d.module_get_function)(&mut f, module as *mut c_void, name.as_ptr()) })?;
    lock(&FUNCTIONS)
        .get_or_insert_with(HashMap::new)
        .insert(key, f as usize);
    Ok(f)
}
