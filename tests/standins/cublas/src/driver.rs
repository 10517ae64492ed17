//! The driver, found as cuBLAS finds it: `dlopen("libcuda.so.1")`, `dlsym("cuGetProcAddress_v2")`,
//! then `cuLaunchKernelEx` and friends through it.
use simgpu::driver_entry::{fn_ptr, DriverEntry};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

/// The CUDA version the library asks the driver's entry points for.
const CUDA_VERSION: c_int = 13000;

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
    let entry = DriverEntry::open().ok()?;
    let sym = |name: &CStr| entry.get(name, CUDA_VERSION, 0).ok();
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
