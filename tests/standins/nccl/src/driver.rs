//! The CUDA driver, found the way real NCCL finds it: `dlopen("libcuda.so.1")`, `dlsym` of
//! `cuGetProcAddress_v2` only, then every other entry point through it. Nothing is imported.
use simgpu::driver_entry::{fn_ptr, DriverEntry};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

pub type CUresult = c_int;
pub type CUcontext = *mut c_void;
pub type CUmodule = *mut c_void;
pub type CUfunction = *mut c_void;
pub type CUstream = *mut c_void;
pub type CUdevice = c_int;

pub type LaunchKernel = unsafe extern "C" fn(
    CUfunction,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    CUstream,
    *mut *mut c_void,
    *mut *mut c_void,
) -> CUresult;

/// The driver entry points NCCL uses.
pub struct Driver {
    pub launch_kernel: LaunchKernel,
    pub module_load_data: unsafe extern "C" fn(*mut CUmodule, *const c_void) -> CUresult,
    pub module_get_function:
        unsafe extern "C" fn(*mut CUfunction, CUmodule, *const c_char) -> CUresult,
    pub ctx_get_current: unsafe extern "C" fn(*mut CUcontext) -> CUresult,
    pub ctx_set_current: unsafe extern "C" fn(CUcontext) -> CUresult,
    /// `cuCtxGetDevice` as CUDA 13 versions it (PFN_cuCtxGetDevice_v13000: device, ctx).
    pub ctx_get_device: unsafe extern "C" fn(*mut CUdevice, CUcontext) -> CUresult,
    pub device_get: unsafe extern "C" fn(*mut CUdevice, c_int) -> CUresult,
    pub primary_ctx_retain: unsafe extern "C" fn(*mut CUcontext, CUdevice) -> CUresult,
}

/// CUDA version NCCL asks the driver for.
const CUDA_VERSION: c_int = 13000;

/// The driver, loaded once; None when libcuda.so.1 or an entry point is missing.
pub fn get() -> Option<&'static Driver> {
    static DRIVER: OnceLock<Option<Driver>> = OnceLock::new();
    DRIVER.get_or_init(load).as_ref()
}

fn load() -> Option<Driver> {
    let entry = DriverEntry::open().ok()?;
    let sym = |name: &CStr| entry.get(name, CUDA_VERSION, 0).ok();
    // SAFETY: each pointer comes from the driver for that exact name, whose C signature the field's
    // type spells (cuda.h).
    unsafe {
        Some(Driver {
            launch_kernel: fn_ptr(sym(c"cuLaunchKernel")?),
            module_load_data: fn_ptr(sym(c"cuModuleLoadData")?),
            module_get_function: fn_ptr(sym(c"cuModuleGetFunction")?),
            ctx_get_current: fn_ptr(sym(c"cuCtxGetCurrent")?),
            ctx_set_current: fn_ptr(sym(c"cuCtxSetCurrent")?),
            ctx_get_device: fn_ptr(sym(c"cuCtxGetDevice")?),
            device_get: fn_ptr(sym(c"cuDeviceGet")?),
            primary_ctx_retain: fn_ptr(sym(c"cuDevicePrimaryCtxRetain")?),
        })
    }
}

/// Names of NCCL's kernels (communication kernels: the `nccl` prefix of simgpu::abi).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelName {
    SendRecv = 0,
    AllReduce = 1,
    ReduceScatter = 2,
    AllGather = 3,
    Broadcast = 4,
}

pub const KERNEL_NAMES: [&CStr; 5] = [
    c"ncclDevKernel_SendRecv",
    c"ncclDevKernel_AllReduce",
    c"ncclDevKernel_ReduceScatter",
    c"ncclDevKernel_AllGather",
    c"ncclDevKernel_Broadcast",
];

/// A context and NCCL's kernels loaded in it.
pub struct DeviceKernels {
    pub ctx: CUcontext,
    pub device: CUdevice,
    pub funcs: [CUfunction; 5],
}

// SAFETY: CUcontext/CUfunction are opaque driver handles, valid from any thread.
unsafe impl Send for DeviceKernels {}
// SAFETY: as above; the handles are never mutated after creation.
unsafe impl Sync for DeviceKernels {}

/// The "cubin" NCCL hands to cuModuleLoadData (the stand-in driver accepts any image).
static IMAGE: &[u8] = b"\x7fELF stand-in NCCL device code\0";

impl DeviceKernels {
    /// Uses the calling thread's current context, or device `device`'s primary context when
    /// `device` is given (ncclCommInitAll) or nothing is current.
    pub fn load(drv: &Driver, device: Option<c_int>) -> Result<DeviceKernels, CUresult> {
        let mut ctx: CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointers are valid locals; handles come from the driver.
        unsafe {
            if device.is_none() {
                check((drv.ctx_get_current)(&mut ctx))?;
            }
            if ctx.is_null() {
                let mut dev: CUdevice = 0;
                check((drv.device_get)(&mut dev, device.unwrap_or(0)))?;
                check((drv.primary_ctx_retain)(&mut ctx, dev))?;
            }
            let _guard = CtxGuard::push(drv, ctx)?;
            let mut dev: CUdevice = 0;
            check((drv.ctx_get_device)(&mut dev, ctx))?;
            let mut module: CUmodule = std::ptr::null_mut();
            check((drv.module_load_data)(&mut module, IMAGE.as_ptr().cast()))?;
            let mut funcs = [std::ptr::null_mut(); 5];
            for (f, name) in funcs.iter_mut().zip(KERNEL_NAMES) {
                check((drv.module_get_function)(f, module, name.as_ptr()))?;
            }
            Ok(DeviceKernels {
                ctx,
                device: dev,
                funcs,
            })
        }
    }
}

/// Makes a context current for a scope and restores the previous one (as NCCL does around its
/// launches).
pub struct CtxGuard<'a> {
    drv: &'a Driver,
    old: Option<CUcontext>,
}

impl<'a> CtxGuard<'a> {
    pub fn push(drv: &'a Driver, ctx: CUcontext) -> Result<CtxGuard<'a>, CUresult> {
        let mut old: CUcontext = std::ptr::null_mut();
        // SAFETY: valid out-pointer; ctx is a driver handle.
        unsafe {
            check((drv.ctx_get_current)(&mut old))?;
            if old == ctx {
                return Ok(CtxGuard { drv, old: None });
            }
            check((drv.ctx_set_current)(ctx))?;
        }
        Ok(CtxGuard {
            drv,
            old: Some(old),
        })
    }
}

impl Drop for CtxGuard<'_> {
    fn drop(&mut self) {
        if let Some(old) = self.old {
            // SAFETY: restores the handle the driver gave us (or NULL: no context).
            unsafe { (self.drv.ctx_set_current)(old) };
        }
    }
}

fn check(r: CUresult) -> Result<(), CUresult> {
    if r == 0 {
        Ok(())
    } else {
        Err(r)
    }
}
