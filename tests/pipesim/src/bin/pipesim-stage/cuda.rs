//! The CUDA runtime and cuBLAS as an ordinary program sees them: imported symbols (DT_NEEDED
//! libcudart.so.13 and libcublas.so.13, linked against build.rs's stubs).
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

pub type Stream = *mut c_void;
pub type Event = *mut c_void;

/// `dim3`: 12 bytes passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Dim3 {
    pub x: c_uint,
    pub y: c_uint,
    pub z: c_uint,
}

impl Dim3 {
    pub const ONE: Dim3 = Dim3 { x: 1, y: 1, z: 1 };
}

/// `cudaKernelNodeParams` (driver_types.h).
#[repr(C)]
pub struct KernelNodeParams {
    pub func: *const c_void,
    pub grid_dim: Dim3,
    pub block_dim: Dim3,
    pub shared_mem_bytes: c_uint,
    pub kernel_params: *mut *mut c_void,
    pub extra: *mut *mut c_void,
}

pub const STREAM_NON_BLOCKING: c_uint = 1;
pub const EVENT_DISABLE_TIMING: c_uint = 2;

#[link(name = "cudart")]
extern "C" {
    pub fn cudaSetDevice(device: c_int) -> c_int;
    pub fn cudaFree(ptr: *mut c_void) -> c_int;
    pub fn cudaStreamCreateWithFlags(stream: *mut Stream, flags: c_uint) -> c_int;
    pub fn cudaEventCreateWithFlags(event: *mut Event, flags: c_uint) -> c_int;
    pub fn cudaEventRecord(event: Event, stream: Stream) -> c_int;
    pub fn cudaStreamWaitEvent(stream: Stream, event: Event, flags: c_uint) -> c_int;
    pub fn cudaDeviceSynchronize() -> c_int;
    pub fn cudaStreamSynchronize(stream: Stream) -> c_int;
    pub fn cudaGetErrorString(err: c_int) -> *const c_char;
    pub fn cudaDeviceGetPCIBusId(pci_bus_id: *mut c_char, len: c_int, device: c_int) -> c_int;
    pub fn __cudaRegisterFatBinary(fat_cubin: *const c_void) -> *mut *mut c_void;
    pub fn __cudaRegisterFatBinaryEnd(handle: *mut *mut c_void);
    pub fn __cudaRegisterFunction(
        handle: *mut *mut c_void,
        host_fun: *const c_char,
        device_fun: *mut c_char,
        device_name: *const c_char,
        thread_limit: c_int,
        tid: *mut c_void,
        bid: *mut c_void,
        block_dim: *mut c_void,
        grid_dim: *mut c_void,
        w_size: *mut c_int,
    );
    pub fn __cudaLaunchKernel(
        func: *const c_void,
        grid: Dim3,
        block: Dim3,
        args: *mut *mut c_void,
        shared_mem: usize,
        stream: Stream,
    ) -> c_int;
    pub fn cudaGraphCreate(graph: *mut *mut c_void, flags: c_uint) -> c_int;
    pub fn cudaGraphAddKernelNode(
        node: *mut *mut c_void,
        graph: *mut c_void,
        deps: *const *mut c_void,
        num_deps: usize,
        params: *const KernelNodeParams,
    ) -> c_int;
    pub fn cudaGraphInstantiate(exec: *mut *mut c_void, graph: *mut c_void, flags: u64) -> c_int;
    pub fn cudaGraphLaunch(exec: *mut c_void, stream: Stream) -> c_int;
}

#[link(name = "cublas")]
extern "C" {
    pub fn cublasCreate_v2(handle: *mut *mut c_void) -> c_int;
    pub fn cublasDestroy_v2(handle: *mut c_void) -> c_int;
    pub fn cublasSetStream_v2(handle: *mut c_void, stream: Stream) -> c_int;
    pub fn cublasSgemm_v2(
        handle: *mut c_void,
        transa: c_int,
        transb: c_int,
        m: c_int,
        n: c_int,
        k: c_int,
        alpha: *const f32,
        a: *const f32,
        lda: c_int,
        b: *const f32,
        ldb: c_int,
        beta: *const f32,
        c: *mut f32,
        ldc: c_int,
    ) -> c_int;
    pub fn cublasGemmEx(
        handle: *mut c_void,
        transa: c_int,
        transb: c_int,
        m: c_int,
        n: c_int,
        k: c_int,
        alpha: *const c_void,
        a: *const c_void,
        a_type: c_int,
        lda: c_int,
        b: *const c_void,
        b_type: c_int,
        ldb: c_int,
        beta: *const c_void,
        c: *mut c_void,
        c_type: c_int,
        ldc: c_int,
        compute_type: c_int,
        algo: c_int,
    ) -> c_int;
}

/// Turns a CUDA runtime status into a one-line error.
pub fn check(what: &str, r: c_int) -> Result<(), String> {
    if r == 0 {
        return Ok(());
    }
    // SAFETY: cudaGetErrorString returns a static NUL-terminated string (or NULL).
    let msg = unsafe {
        let p = cudaGetErrorString(r);
        if p.is_null() {
            "?".into()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    Err(format!("{what} failed: {r} ({msg})"))
}

/// A cuBLAS status as an error.
pub fn check_blas(what: &str, r: c_int) -> Result<(), String> {
    if r == 0 {
        Ok(())
    } else {
        Err(format!("{what} failed: cublas status {r}"))
    }
}
