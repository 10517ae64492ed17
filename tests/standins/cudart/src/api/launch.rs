//! Kernel launches: a registered host stub becomes a driver function of its name, launched with
//! `cuLaunchKernel` (or `cuLaunchKernelEx`).
use crate::guard::{drv, guard, read, RtResult};
use crate::state;
use crate::types::*;
use std::ffi::c_void;

fn launch(
    ptsz: bool,
    func: *const c_void,
    grid: dim3,
    block: dim3,
    args: *mut *mut c_void,
    smem: usize,
    stream: cudaStream_t,
) -> RtResult {
    let f = state::function(func)?;
    let n = std::ptr::null_mut();
    if ptsz {
        drv!(launch_kernel_ptsz(
            f,
            grid.x,
            grid.y,
            grid.z,
            block.x,
            block.y,
            block.z,
            smem as u32,
            stream,
            args,
            n
        ))
    } else {
        drv!(launch_kernel(
            f,
            grid.x,
            grid.y,
            grid.z,
            block.x,
            block.y,
            block.z,
            smem as u32,
            stream,
            args,
            n
        ))
    }
}

#[no_mangle]
pub unsafe extern "C" fn cudaLaunchKernel(
    func: *const c_void,
    grid: dim3,
    block: dim3,
    args: *mut *mut c_void,
    shared_mem: usize,
    stream: cudaStream_t,
) -> cudaError_t {
    guard(|| launch(false, func, grid, block, args, shared_mem, stream))
}

#[no_mangle]
pub unsafe extern "C" fn cudaLaunchKernel_ptsz(
    func: *const c_void,
    grid: dim3,
    block: dim3,
    args: *mut *mut c_void,
    shared_mem: usize,
    stream: cudaStream_t,
) -> cudaError_t {
    guard(|| launch(true, func, grid, block, args, shared_mem, stream))
}

#[no_mangle]
pub unsafe extern "C" fn __cudaLaunchKernel(
    func: *const c_void,
    grid: dim3,
    block: dim3,
    args: *mut *mut c_void,
    shared_mem: usize,
    stream: cudaStream_t,
) -> cudaError_t {
    guard(|| launch(false, func, grid, block, args, shared_mem, stream))
}

#[no_mangle]
pub unsafe extern "C" fn __cudaLaunchKernel_ptsz(
    func: *const c_void,
    grid: dim3,
    block: dim3,
    args: *mut *mut c_void,
    shared_mem: usize,
    stream: cudaStream_t,
) -> cudaError_t {
    guard(|| launch(true, func, grid, block, args, shared_mem, stream))
}

fn launch_ex(
    ptsz: bool,
    config: *const cudaLaunchConfig_t,
    func: *const c_void,
    args: *mut *mut c_void,
) -> RtResult {
    let c = read(config)?;
    let f = state::function(func)?;
    // cudaLaunchAttribute and CUlaunchAttribute share their layout: passed through.
    let cfg = CUlaunchConfig {
        grid_dim_x: c.grid_dim.x,
        grid_dim_y: c.grid_dim.y,
        grid_dim_z: c.grid_dim.z,
        block_dim_x: c.block_dim.x,
        block_dim_y: c.block_dim.y,
        block_dim_z: c.block_dim.z,
        shared_mem_bytes: c.dynamic_smem_bytes as u32,
        h_stream: c.stream,
        attrs: c.attrs,
        num_attrs: c.num_attrs,
    };
    let n = std::ptr::null_mut();
    if ptsz {
        drv!(launch_kernel_ex_ptsz(&cfg, f, args, n))
    } else {
        drv!(launch_kernel_ex(&cfg, f, args, n))
    }
}

#[no_mangle]
pub unsafe extern "C" fn cudaLaunchKernelExC(
    config: *const cudaLaunchConfig_t,
    func: *const c_void,
    args: *mut *mut c_void,
) -> cudaError_t {
    guard(|| launch_ex(false, config, func, args))
}

#[no_mangle]
pub unsafe extern "C" fn cudaLaunchKernelExC_ptsz(
    config: *const cudaLaunchConfig_t,
    func: *const c_void,
    args: *mut *mut c_void,
) -> cudaError_t {
    guard(|| launch_ex(true, config, func, args))
}
