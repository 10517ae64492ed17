//! The driver, reached like the real runtime does: `dlopen("libcuda.so.1")`, `dlsym` of
//! `cuGetProcAddress_v2` only, and every other function through it (for CUDA 13.0).
use crate::types::*;
use simgpu::driver_entry::{DriverEntry, GetProcAddressV2 as GetProc};
use std::ffi::{c_char, c_void};
use std::sync::OnceLock;

/// `CU_GET_PROC_ADDRESS_DEFAULT`.
const DEFAULT: u64 = 0;
/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
const PER_THREAD: u64 = 2;

macro_rules! driver_table {
    ($( $field:ident = ($name:literal, $flags:expr) : fn($($arg:ty),*); )*) => {
        /// The driver functions the runtime uses.
        pub struct Driver {
            pub get_proc: GetProc,
            $( pub $field: unsafe extern "C" fn($($arg),*) -> CUresult, )*
        }

        fn resolve(get_proc: GetProc) -> Result<Driver, String> {
            Ok(Driver {
                get_proc,
                $( $field: {
                    let p = get_fn(get_proc, $name, $flags)?;
                    // SAFETY: the driver hands out `$name` for CUDA 13.0, whose C signature
                    // (cudaTypedefs.h) is the one this field declares.
                    unsafe {
                        std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> CUresult>(p)
                    }
                }, )*
            })
        }
    };
}

type P = *mut c_void;

driver_table! {
    init = ("cuInit", DEFAULT): fn(u32);
    driver_get_version = ("cuDriverGetVersion", DEFAULT): fn(*mut i32);
    device_get_count = ("cuDeviceGetCount", DEFAULT): fn(*mut i32);
    device_get_pci_bus_id = ("cuDeviceGetPCIBusId", DEFAULT): fn(*mut c_char, i32, i32);
    device_get_by_pci_bus_id = ("cuDeviceGetByPCIBusId", DEFAULT): fn(*mut i32, *const c_char);
    primary_ctx_retain = ("cuDevicePrimaryCtxRetain", DEFAULT): fn(*mut P, i32);
    ctx_set_current = ("cuCtxSetCurrent", DEFAULT): fn(P);
    ctx_get_current = ("cuCtxGetCurrent", DEFAULT): fn(*mut P);
    ctx_get_device = ("cuCtxGetDevice", DEFAULT): fn(*mut i32, P);
    ctx_synchronize = ("cuCtxSynchronize", DEFAULT): fn(P);
    stream_create_with_priority = ("cuStreamCreateWithPriority", DEFAULT): fn(*mut P, u32, i32);
    stream_destroy = ("cuStreamDestroy", DEFAULT): fn(P);
    stream_synchronize = ("cuStreamSynchronize", DEFAULT): fn(P);
    stream_query = ("cuStreamQuery", DEFAULT): fn(P);
    stream_wait_event = ("cuStreamWaitEvent", DEFAULT): fn(P, P, u32);
    event_create = ("cuEventCreate", DEFAULT): fn(*mut P, u32);
    event_record = ("cuEventRecord", DEFAULT): fn(P, P);
    event_record_with_flags = ("cuEventRecordWithFlags", DEFAULT): fn(P, P, u32);
    event_query = ("cuEventQuery", DEFAULT): fn(P);
    event_synchronize = ("cuEventSynchronize", DEFAULT): fn(P);
    event_elapsed_time = ("cuEventElapsedTime", DEFAULT): fn(*mut f32, P, P);
    event_destroy = ("cuEventDestroy", DEFAULT): fn(P);
    mem_alloc = ("cuMemAlloc", DEFAULT): fn(*mut u64, usize);
    mem_free = ("cuMemFree", DEFAULT): fn(u64);
    mem_alloc_pitch = ("cuMemAllocPitch", DEFAULT): fn(*mut u64, *mut usize, usize, usize, u32);
    mem_alloc_managed = ("cuMemAllocManaged", DEFAULT): fn(*mut u64, usize, u32);
    mem_alloc_async = ("cuMemAllocAsync", DEFAULT): fn(*mut u64, usize, P);
    mem_alloc_async_ptsz = ("cuMemAllocAsync", PER_THREAD): fn(*mut u64, usize, P);
    mem_alloc_from_pool_async = ("cuMemAllocFromPoolAsync", DEFAULT): fn(*mut u64, usize, P, P);
    mem_alloc_from_pool_async_ptsz = ("cuMemAllocFromPoolAsync", PER_THREAD): fn(*mut u64, usize, P, P);
    mem_free_async = ("cuMemFreeAsync", DEFAULT): fn(u64, P);
    mem_free_async_ptsz = ("cuMemFreeAsync", PER_THREAD): fn(u64, P);
    device_get_default_mem_pool = ("cuDeviceGetDefaultMemPool", DEFAULT): fn(*mut P, i32);
    device_get_mem_pool = ("cuDeviceGetMemPool", DEFAULT): fn(*mut P, i32);
    device_set_mem_pool = ("cuDeviceSetMemPool", DEFAULT): fn(i32, P);
    mem_pool_create = ("cuMemPoolCreate", DEFAULT): fn(*mut P, *const c_void);
    mem_pool_destroy = ("cuMemPoolDestroy", DEFAULT): fn(P);
    mem_pool_trim_to = ("cuMemPoolTrimTo", DEFAULT): fn(P, usize);
    mem_pool_set_attribute = ("cuMemPoolSetAttribute", DEFAULT): fn(P, i32, *mut c_void);
    mem_pool_get_attribute = ("cuMemPoolGetAttribute", DEFAULT): fn(P, i32, *mut c_void);
    mem_get_info = ("cuMemGetInfo", DEFAULT): fn(*mut usize, *mut usize);
    memcpy_htod_async = ("cuMemcpyHtoDAsync", DEFAULT): fn(u64, *const c_void, usize, P);
    module_load_data = ("cuModuleLoadData", DEFAULT): fn(*mut P, *const c_void);
    module_get_function = ("cuModuleGetFunction", DEFAULT): fn(*mut P, P, *const c_char);
    launch_kernel = ("cuLaunchKernel", DEFAULT): fn(P, u32, u32, u32, u32, u32, u32, u32, P, *mut P, *mut P);
    launch_kernel_ptsz = ("cuLaunchKernel", PER_THREAD): fn(P, u32, u32, u32, u32, u32, u32, u32, P, *mut P, *mut P);
    launch_kernel_ex = ("cuLaunchKernelEx", DEFAULT): fn(*const CUlaunchConfig, P, *mut P, *mut P);
    launch_kernel_ex_ptsz = ("cuLaunchKernelEx", PER_THREAD): fn(*const CUlaunchConfig, P, *mut P, *mut P);
    graph_create = ("cuGraphCreate", DEFAULT): fn(*mut P, u32);
    graph_add_kernel_node = ("cuGraphAddKernelNode", DEFAULT): fn(*mut P, P, *const P, usize, *const CUDA_KERNEL_NODE_PARAMS_v2);
    graph_instantiate = ("cuGraphInstantiateWithFlags", DEFAULT): fn(*mut P, P, u64);
    graph_launch = ("cuGraphLaunch", DEFAULT): fn(P, P);
    graph_launch_ptsz = ("cuGraphLaunch", PER_THREAD): fn(P, P);
    graph_exec_destroy = ("cuGraphExecDestroy", DEFAULT): fn(P);
    graph_destroy = ("cuGraphDestroy", DEFAULT): fn(P);
}

fn get_fn(get_proc: GetProc, name: &str, flags: u64) -> Result<*mut c_void, String> {
    let cname = std::ffi::CString::new(name).map_err(|e| e.to_string())?;
    DriverEntry { get_proc }
        .get(&cname, RUNTIME_VERSION, flags)
        .map_err(|(r, status)| format!("driver has no {name} (CUresult {r}, status {status})"))
}

fn load() -> Result<Driver, String> {
    let get_proc = DriverEntry::open()?.get_proc;
    let d = resolve(get_proc)?;
    // SAFETY: cuInit from the table just resolved.
    let r = unsafe { (d.init)(0) };
    if r != 0 {
        return Err(format!("cuInit failed: {r}"));
    }
    Ok(d)
}

/// The driver, loaded and initialized on first use (`cudaErrorInsufficientDriver` if it cannot be).
pub fn driver() -> Result<&'static Driver, cudaError_t> {
    static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();
    match DRIVER.get_or_init(load) {
        Ok(d) => Ok(d),
        Err(e) => {
            if std::env::var_os("FREERIDE_SIM_DEBUG").is_some() {
                eprintln!("stand-in libcudart: {e}");
            }
            Err(cudaErrorInsufficientDriver)
        }
    }
}

/// Maps a driver result to the runtime's: the codes the stand-in driver returns have the same
/// numbers in `cudaError` (e.g. 400 invalid handle, 600 not ready, 2 out of memory).
pub fn check(r: CUresult) -> Result<(), cudaError_t> {
    if r == 0 {
        Ok(())
    } else {
        Err(r)
    }
}
