//! The driver, found as cuBLAS finds it: `dlopen("libcuda.so.1")`, `dlsym("cuGetProcAddress_v2")`,
//! then `cuLaunchKernelEx` and friends through it.
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

pub type CUresult = c_int;
pub type CUcontext = *mut c_void;
pub type CUmodule = *mut c_void;
pub type CUfunction = *mut c_void;

/// `CUlaunchConfig` (cuda.h).
#[repr(C)]
pub struct LaunchConfig {
    pub grid_dim_x: c_uint,
    pub grid_dim_y: c_uint,
    pub grid_dim_z: c_uint,
    pub block_dim_x: c_uint,
    pub block_dim_y: c_uint,
    pub block_dim_z: c_uint,
    pub shared_mem_bytes: c_uint,
    pub h_stream: *mut c_void,
    pub attrs: *mut c_void,
    pub num_attrs: c_uint,
}

type GetProcAddress =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CUresult;

pub struct Driver {
    pub launch_kernel_ex: unsafe extern "C" fn(
        *const LaunchConfig,
        CUfunction,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> CUresult,
    pub module_load_data: unsafe extern "C" fn(*mut CUmodule, *const c_void) -> CUresult,
    pub module_get_function:
        unsafe extern "C" fn(*mut CUfunction, CUmodule, *const c_char) -> CUresult,
    pub ctx_get_current: unsafe extern "C" fn(*mut CUcontext) -> CUresult,
}

/// The two GEMM kernels.
#[derive(Clone, Copy)]
pub enum GemmKernel {
    Sgemm = 0,
    GemmEx = 1,
}

const KERNELS: [&CStr; 2] = [
    c"sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_cublas",
    c"sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_cublas",
];
static IMAGE: &[u8] = b"\x7fELF stand-in cuBLAS kernels\0";

pub fn get() -> Option<&'static Driver> {
    static DRIVER: OnceLock<Option<Driver>> = OnceLock::new();
    DRIVER.get_or_init(load).as_ref()
}

fn load() -> Option<Driver> {
    // SAFETY: dlopen/dlsym with NUL-terminated names; the handle is never closed.
    let gpa: GetProcAddress = unsafe {
        let h = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if h.is_null() {
            return None;
        }
        let p = libc::dlsym(h, c"cuGetProcAddress_v2".as_ptr());
        if p.is_null() {
            return None;
        }
        std::mem::transmute::<*mut c_void, GetProcAddress>(p)
    };
    let sym = |name: &CStr| -> Option<*mut c_void> {
        let mut p: *mut c_void = std::ptr::null_mut();
        let mut status: c_int = 0;
        // SAFETY: gpa is the driver's cuGetProcAddress_v2; out-pointers are valid locals.
        let r = unsafe { gpa(name.as_ptr(), &mut p, 13000, 0, &mut status) };
        (r == 0 && !p.is_null()).then_some(p)
    };
    // SAFETY: each pointer is the driver's entry point of that name, with the signature of cuda.h.
    unsafe {
        Some(Driver {
            launch_kernel_ex: fn_ptr(sym(c"cuLaunchKernelEx")?),
            module_load_data: fn_ptr(sym(c"cuModuleLoadData")?),
            module_get_function: fn_ptr(sym(c"cuModuleGetFunction")?),
            ctx_get_current: fn_ptr(sym(c"cuCtxGetCurrent")?),
        })
    }
}

/// Loads the GEMM kernels in the current context.
pub fn load_kernels(drv: &Driver) -> Result<[CUfunction; 2], CUresult> {
    let mut ctx: CUcontext = std::ptr::null_mut();
    let mut module: CUmodule = std::ptr::null_mut();
    let mut funcs = [std::ptr::null_mut(); 2];
    // SAFETY: out-pointers are valid locals; IMAGE and names are NUL-terminated statics.
    unsafe {
        let r = (drv.ctx_get_current)(&mut ctx);
        if r != 0 || ctx.is_null() {
            return Err(if r != 0 { r } else { 201 });
        }
        let r = (drv.module_load_data)(&mut module, IMAGE.as_ptr().cast());
        if r != 0 {
            return Err(r);
        }
        for (f, name) in funcs.iter_mut().zip(KERNELS) {
            let r = (drv.module_get_function)(f, module, name.as_ptr());
            if r != 0 {
                return Err(r);
            }
        }
    }
    Ok(funcs)
}

/// Reinterprets a symbol address as the function pointer type `F`.
///
/// # Safety
/// `F` must be an `extern "C" fn` type matching the symbol's C signature.
unsafe fn fn_ptr<F: Copy>(p: *mut c_void) -> F {
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: per the contract, F is a pointer-sized function pointer type for this address.
    unsafe { std::mem::transmute_copy(&p) }
}
