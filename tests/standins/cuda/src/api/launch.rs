//! Kernel launches: the parameters are read at launch time (abi.rs) and the kernel is queued on
//! its stream (which may block the host while the stream's launch queue is full).
use super::module::{function, Function};
use crate::guard::{guard, read, CuResult};
use crate::state;
use crate::types::*;
use simgpu::abi::{decode_kernel_word, DeviceWork, DEFAULT_KERNEL_NS, DEVICE_WORK_MAGIC};
use simgpu::stream::Work;
use simgpu::{KernelOp, Op};
use std::ffi::c_void;
use std::sync::Arc;

/// A kernel's parameters as the simulated GPU needs them.
pub struct KernelArgs {
    pub duration_ns: u64,
    /// Percent of the device's SMs it fills.
    pub fill: u32,
    pub work: Option<DeviceWork>,
}

/// Reads `kernelParams` per the kernel ABI: `[0]` -> the u64 kernel word (duration and fill); for
/// a comm kernel `[1]` -> DeviceWork (version 2; version 1 is refused).
pub fn read_args(func: &Function, params: *mut *mut c_void) -> CuResult<KernelArgs> {
    if params.is_null() {
        return Ok(KernelArgs {
            duration_ns: DEFAULT_KERNEL_NS,
            fill: 100,
            work: None,
        });
    }
    // SAFETY: by the kernel ABI a non-NULL kernelParams is an array whose [0] is NULL or points to
    // a u64 kernel word, and for comm kernels whose [1] is NULL or points to a DeviceWork; all
    // valid for the duration of the launch call (values are copied here).
    unsafe {
        let p0 = *params as *const u64;
        let (duration_ns, fill) = if p0.is_null() {
            (DEFAULT_KERNEL_NS, 100)
        } else {
            decode_kernel_word(p0.read_unaligned())
        };
        let mut work = None;
        if func.comm {
            let p1 = *params.add(1) as *const DeviceWork;
            if !p1.is_null() {
                let w = p1.read_unaligned();
                if w.magic != DEVICE_WORK_MAGIC {
                    return Err(CUDA_ERROR_INVALID_VALUE);
                }
                work = Some(w);
            }
        }
        Ok(KernelArgs {
            duration_ns,
            fill,
            work,
        })
    }
}

/// Builds the op for one kernel execution.
pub fn kernel_op(
    func: &Function,
    args: KernelArgs,
    api: &'static str,
    graph: bool,
    hstream: CUstream,
) -> KernelOp {
    KernelOp {
        name: func.name.clone(),
        comm: func.comm,
        duration_ns: args.duration_ns,
        fill: args.fill,
        work: args.work.map(Work),
        api,
        graph,
        stream_handle: hstream as u64,
        queued_ns: simgpu::abi::now_ns(),
    }
}

fn launch(
    api: &'static str,
    f: CUfunction,
    hstream: CUstream,
    params: *mut *mut c_void,
) -> CuResult {
    state::require_init()?;
    let func: Arc<Function> = function(f)?;
    let stream = state::stream(hstream)?;
    let args = read_args(&func, params)?;
    stream.enqueue(vec![Op::Kernel(kernel_op(
        &func, args, api, false, hstream,
    ))]);
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernel(
    f: CUfunction,
    _grid_dim_x: u32,
    _grid_dim_y: u32,
    _grid_dim_z: u32,
    _block_dim_x: u32,
    _block_dim_y: u32,
    _block_dim_z: u32,
    _shared_mem_bytes: u32,
    hstream: CUstream,
    kernel_params: *mut *mut c_void,
    _extra: *mut *mut c_void,
) -> CUresult {
    guard(|| launch("cuLaunchKernel", f, hstream, kernel_params))
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernel_ptsz(
    f: CUfunction,
    grid_dim_x: u32,
    grid_dim_y: u32,
    grid_dim_z: u32,
    block_dim_x: u32,
    block_dim_y: u32,
    block_dim_z: u32,
    shared_mem_bytes: u32,
    hstream: CUstream,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    cuLaunchKernel(
        f,
        grid_dim_x,
        grid_dim_y,
        grid_dim_z,
        block_dim_x,
        block_dim_y,
        block_dim_z,
        shared_mem_bytes,
        hstream,
        kernel_params,
        extra,
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernelEx(
    config: *const CUlaunchConfig,
    f: CUfunction,
    kernel_params: *mut *mut c_void,
    _extra: *mut *mut c_void,
) -> CUresult {
    guard(|| {
        let config = read(config)?;
        launch("cuLaunchKernelEx", f, config.h_stream, kernel_params)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernelEx_ptsz(
    config: *const CUlaunchConfig,
    f: CUfunction,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    cuLaunchKernelEx(config, f, kernel_params, extra)
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchCooperativeKernel(
    f: CUfunction,
    _grid_dim_x: u32,
    _grid_dim_y: u32,
    _grid_dim_z: u32,
    _block_dim_x: u32,
    _block_dim_y: u32,
    _block_dim_z: u32,
    _shared_mem_bytes: u32,
    hstream: CUstream,
    kernel_params: *mut *mut c_void,
) -> CUresult {
    guard(|| launch("cuLaunchCooperativeKernel", f, hstream, kernel_params))
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchCooperativeKernel_ptsz(
    f: CUfunction,
    grid_dim_x: u32,
    grid_dim_y: u32,
    grid_dim_z: u32,
    block_dim_x: u32,
    block_dim_y: u32,
    block_dim_z: u32,
    shared_mem_bytes: u32,
    hstream: CUstream,
    kernel_params: *mut *mut c_void,
) -> CUresult {
    cuLaunchCooperativeKernel(
        f,
        grid_dim_x,
        grid_dim_y,
        grid_dim_z,
        block_dim_x,
        block_dim_y,
        block_dim_z,
        shared_mem_bytes,
        hstream,
        kernel_params,
    )
}
