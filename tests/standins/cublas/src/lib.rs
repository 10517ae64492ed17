//! Stand-in libcublas.so.13 for the GPU-less test bed: a "BLAS" whose GEMMs each launch one kernel.
//!
//! Like cuBLAS on an H100 (see shared/reference/launch-paths.md), it imports no CUDA symbol: it
//! opens `libcuda.so.1`, resolves `cuGetProcAddress_v2` and launches through the `cuLaunchKernelEx`
//! pointer the driver hands back, so an interposer sees these launches only at the driver choke
//! point (hooked `dlsym` / `cuGetProcAddress`).
//!
//! Cost model: **the stand-in BLAS does 1000 multiply-adds per ns**: a GEMM of shape m x n x k runs
//! for `m*n*k / 1000` ns (integer division) on the simulated GPU, and fills as much of the device
//! as its output tiles cover: one thread block per 128 x 128 tile of the m x n result, on an H200's
//! 132 SMs (`gemm_fill`; at least 1 %, at most all of it), passed in the kernel word's fill byte
//! (`simgpu::abi::kernel_word`). A small GEMM beside a big kernel of another stream or process
//! then takes only the SMs it can use.
// The exported functions are C entry points: the validity of the pointers they receive is the C
// caller's contract (as with the real library), stated at each dereference.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

mod driver;

use driver::{CUfunction, Driver, GemmKernel};
use std::ffi::{c_int, c_void};

type Status = c_int;
const SUCCESS: Status = 0;
const NOT_INITIALIZED: Status = 1;
const INVALID_VALUE: Status = 7;
const EXECUTION_FAILED: Status = 13;
const INTERNAL_ERROR: Status = 14;

/// `cublasHandle_t` points to one.
pub struct Handle {
    funcs: [CUfunction; 2],
    stream: *mut c_void,
}

/// Multiply-adds per nanosecond of the stand-in BLAS.
pub const MACS_PER_NS: u128 = 1000;

/// Kernel time of an m x n x k GEMM, ns.
pub fn gemm_ns(m: c_int, n: c_int, k: c_int) -> u64 {
    (m.max(0) as u128 * n.max(0) as u128 * k.max(0) as u128 / MACS_PER_NS) as u64
}

/// Output tile of one thread block.
pub const TILE: u64 = 128;
/// SMs of the device the fill is counted on (an H200).
pub const SMS: u64 = 132;

/// Percent of the device an m x n result fills: a block per tile, a block per SM.
pub fn gemm_fill(m: c_int, n: c_int) -> u32 {
    let blocks = (m.max(1) as u64).div_ceil(TILE) * (n.max(1) as u64).div_ceil(TILE);
    (blocks.saturating_mul(100).div_ceil(SMS)).clamp(1, 100) as u32
}

fn guard(f: impl FnOnce() -> Status) -> Status {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(INTERNAL_ERROR)
}

fn handle<'a>(h: *mut Handle) -> Result<&'a mut Handle, Status> {
    // SAFETY: a non-NULL handle came from cublasCreate_v2 and is not destroyed (caller's contract).
    unsafe { h.as_mut() }.ok_or(NOT_INITIALIZED)
}

#[no_mangle]
pub extern "C" fn cublasCreate_v2(out: *mut *mut Handle) -> Status {
    guard(|| {
        if out.is_null() {
            return INVALID_VALUE;
        }
        let Some(drv) = driver::get() else {
            return NOT_INITIALIZED;
        };
        match driver::load_kernels(drv) {
            Ok(funcs) => {
                let h = Box::new(Handle {
                    funcs,
                    stream: std::ptr::null_mut(),
                });
                // SAFETY: out is a non-NULL out-pointer for a handle.
                unsafe { out.write(Box::into_raw(h)) };
                SUCCESS
            }
            Err(_) => NOT_INITIALIZED,
        }
    })
}

#[no_mangle]
pub extern "C" fn cublasDestroy_v2(h: *mut Handle) -> Status {
    guard(|| {
        if h.is_null() {
            return NOT_INITIALIZED;
        }
        // SAFETY: the handle came from Box::into_raw in cublasCreate_v2 and is destroyed once.
        drop(unsafe { Box::from_raw(h) });
        SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn cublasSetStream_v2(h: *mut Handle, stream: *mut c_void) -> Status {
    guard(|| match handle(h) {
        Ok(h) => {
            h.stream = stream;
            SUCCESS
        }
        Err(e) => e,
    })
}

#[no_mangle]
pub extern "C" fn cublasGetStream_v2(h: *mut Handle, stream: *mut *mut c_void) -> Status {
    guard(|| match handle(h) {
        Ok(_) if stream.is_null() => INVALID_VALUE,
        Ok(h) => {
            // SAFETY: non-NULL out-pointer.
            unsafe { stream.write(h.stream) };
            SUCCESS
        }
        Err(e) => e,
    })
}

fn gemm(h: *mut Handle, which: GemmKernel, m: c_int, n: c_int, k: c_int) -> Status {
    guard(|| {
        let h = match handle(h) {
            Ok(h) => h,
            Err(e) => return e,
        };
        if m < 0 || n < 0 || k < 0 {
            return INVALID_VALUE;
        }
        if m == 0 || n == 0 || k == 0 {
            return SUCCESS;
        }
        let Some(drv) = driver::get() else {
            return NOT_INITIALIZED;
        };
        let word = simgpu::abi::kernel_word(gemm_ns(m, n, k), gemm_fill(m, n));
        match launch(drv, h, which, word) {
            0 => SUCCESS,
            _ => EXECUTION_FAILED,
        }
    })
}

fn launch(drv: &Driver, h: &Handle, which: GemmKernel, word: u64) -> c_int {
    let mut dur = word;
    let mut params: [*mut c_void; 1] = [(&mut dur as *mut u64).cast()];
    let config = driver::LaunchConfig {
        grid_dim_x: 132,
        grid_dim_y: 1,
        grid_dim_z: 1,
        block_dim_x: 128,
        block_dim_y: 1,
        block_dim_z: 1,
        shared_mem_bytes: 0,
        h_stream: h.stream,
        attrs: std::ptr::null_mut(),
        num_attrs: 0,
    };
    // SAFETY: the function handle was loaded by the driver; config and params point to locals that
    // outlive the call (the driver copies parameter values at launch).
    unsafe {
        (drv.launch_kernel_ex)(
            &config,
            h.funcs[which as usize],
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
}

/// cublasSgemm_v2 (real signature); the operands are not touched.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn cublasSgemm_v2(
    h: *mut Handle,
    _transa: c_int,
    _transb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    _alpha: *const f32,
    _a: *const f32,
    _lda: c_int,
    _b: *const f32,
    _ldb: c_int,
    _beta: *const f32,
    _c: *mut f32,
    _ldc: c_int,
) -> Status {
    gemm(h, GemmKernel::Sgemm, m, n, k)
}

/// cublasGemmEx (real signature); the operands are not touched.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn cublasGemmEx(
    h: *mut Handle,
    _transa: c_int,
    _transb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    _alpha: *const c_void,
    _a: *const c_void,
    _a_type: c_int,
    _lda: c_int,
    _b: *const c_void,
    _b_type: c_int,
    _ldb: c_int,
    _beta: *const c_void,
    _c: *mut c_void,
    _c_type: c_int,
    _ldc: c_int,
    _compute_type: c_int,
    _algo: c_int,
) -> Status {
    gemm(h, GemmKernel::GemmEx, m, n, k)
}

#[cfg(test)]
mod tests {
    #[test]
    fn cost_model() {
        assert_eq!(super::gemm_ns(1000, 1000, 1000), 1_000_000);
        assert_eq!(super::gemm_ns(2_500_000, 1, 1000), 2_500_000);
        assert_eq!(super::gemm_ns(-1, 1, 1), 0);
        // 132 tiles or more fill the device; one tile fills one SM of 132.
        assert_eq!(super::gemm_fill(128 * 12, 128 * 11), 100);
        assert_eq!(super::gemm_fill(5_000_000, 1), 100);
        assert_eq!(super::gemm_fill(100, 100), 1);
        assert_eq!(super::gemm_fill(1024, 1024), 49);
    }
}
