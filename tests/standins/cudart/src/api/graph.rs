//! Graphs, over the driver's.
use crate::guard::{drv, guard, read};
use crate::state;
use crate::types::*;
use std::ffi::c_void;

#[no_mangle]
pub unsafe extern "C" fn cudaGraphCreate(graph: *mut cudaGraph_t, flags: u32) -> cudaError_t {
    guard(|| {
        state::ensure_ctx()?;
        drv!(graph_create(graph, flags))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaGraphAddKernelNode(
    node: *mut cudaGraphNode_t,
    graph: cudaGraph_t,
    deps: *const cudaGraphNode_t,
    num_deps: usize,
    params: *const cudaKernelNodeParams,
) -> cudaError_t {
    guard(|| {
        let p = read(params)?;
        let f = state::function(p.func as *const c_void)?;
        let dp = CUDA_KERNEL_NODE_PARAMS_v2 {
            func: f,
            grid_dim_x: p.grid_dim.x,
            grid_dim_y: p.grid_dim.y,
            grid_dim_z: p.grid_dim.z,
            block_dim_x: p.block_dim.x,
            block_dim_y: p.block_dim.y,
            block_dim_z: p.block_dim.z,
            shared_mem_bytes: p.shared_mem_bytes,
            kernel_params: p.kernel_params,
            extra: p.extra,
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        };
        drv!(graph_add_kernel_node(node, graph, deps, num_deps, &dp))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaGraphInstantiate(
    exec: *mut cudaGraphExec_t,
    graph: cudaGraph_t,
    flags: u64,
) -> cudaError_t {
    guard(|| drv!(graph_instantiate(exec, graph, flags)))
}

#[no_mangle]
pub unsafe extern "C" fn cudaGraphInstantiateWithFlags(
    exec: *mut cudaGraphExec_t,
    graph: cudaGraph_t,
    flags: u64,
) -> cudaError_t {
    guard(|| drv!(graph_instantiate(exec, graph, flags)))
}

#[no_mangle]
pub unsafe extern "C" fn cudaGraphLaunch(
    exec: cudaGraphExec_t,
    stream: cudaStream_t,
) -> cudaError_t {
    guard(|| {
        state::ensure_ctx()?;
        drv!(graph_launch(exec, stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaGraphLaunch_ptsz(
    exec: cudaGraphExec_t,
    stream: cudaStream_t,
) -> cudaError_t {
    guard(|| {
        state::ensure_ctx()?;
        drv!(graph_launch_ptsz(exec, stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaGraphExecDestroy(exec: cudaGraphExec_t) -> cudaError_t {
    guard(|| drv!(graph_exec_destroy(exec)))
}

#[no_mangle]
pub unsafe extern "C" fn cudaGraphDestroy(graph: cudaGraph_t) -> cudaError_t {
    guard(|| drv!(graph_destroy(graph)))
}
