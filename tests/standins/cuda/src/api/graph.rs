//! Graphs: kernel nodes only, run in node order on the launch stream.
//!
//! A node's parameters are copied when it is added. A communication node's `DeviceWork` is owned
//! by the graph: it moves to the first executable instantiated from it and is consumed by that
//! executable's first launch (later launches run the node for its duration without work).
use super::launch::{kernel_op, read_args, KernelArgs};
use super::module::{function, Function};
use crate::guard::{guard, out, read, CuResult};
use crate::handles::Registry;
use crate::state;
use crate::types::*;
use simgpu::abi::DeviceWork;
use simgpu::Op;
use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex};

struct Node {
    func: Arc<Function>,
    duration_ns: u64,
    fill: u32,
    work: Option<DeviceWork>,
}

// SAFETY: DeviceWork's ctx is owned by the node until it is moved out exactly once (abi.rs).
unsafe impl Send for Node {}

pub struct Graph {
    nodes: Mutex<Vec<Node>>,
}

pub struct GraphExec {
    nodes: Mutex<Vec<Node>>,
}

/// A node handle (only its identity matters).
pub struct NodeHandle {
    _graph: usize,
    _index: usize,
}

static GRAPHS: Registry<Graph> = Registry::new();
static EXECS: Registry<GraphExec> = Registry::new();
static NODES: Registry<NodeHandle> = Registry::new();

#[no_mangle]
pub unsafe extern "C" fn cuGraphCreate(phgraph: *mut CUgraph, _flags: u32) -> CUresult {
    guard(|| {
        state::require_init()?;
        let g = Arc::new(Graph {
            nodes: Mutex::new(Vec::new()),
        });
        out(phgraph, GRAPHS.insert(g) as CUgraph)
    })
}

fn add_kernel_node(
    phnode: *mut CUgraphNode,
    hgraph: CUgraph,
    f: CUfunction,
    params: *mut *mut c_void,
) -> CuResult {
    state::require_init()?;
    if phnode.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let graph = GRAPHS
        .get(hgraph as usize)
        .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    let func = function(f)?;
    let KernelArgs {
        duration_ns,
        fill,
        work,
    } = read_args(&func, params)?;
    let mut nodes = graph.nodes.lock().unwrap_or_else(|e| e.into_inner());
    let index = nodes.len();
    nodes.push(Node {
        func,
        duration_ns,
        fill,
        work,
    });
    let h = NODES.insert(Arc::new(NodeHandle {
        _graph: hgraph as usize,
        _index: index,
    }));
    out(phnode, h as CUgraphNode)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddKernelNode(
    phnode: *mut CUgraphNode,
    hgraph: CUgraph,
    _dependencies: *const CUgraphNode,
    _num_dependencies: usize,
    node_params: *const CUDA_KERNEL_NODE_PARAMS_v1,
) -> CUresult {
    guard(|| {
        let p = read(node_params)?;
        add_kernel_node(phnode, hgraph, p.func, p.kernel_params)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphAddKernelNode_v2(
    phnode: *mut CUgraphNode,
    hgraph: CUgraph,
    _dependencies: *const CUgraphNode,
    _num_dependencies: usize,
    node_params: *const CUDA_KERNEL_NODE_PARAMS_v2,
) -> CUresult {
    guard(|| {
        let p = read(node_params)?;
        // A CUkernel stands for the function of the same handle here.
        let f = if p.func.is_null() { p.kern } else { p.func };
        add_kernel_node(phnode, hgraph, f, p.kernel_params)
    })
}

fn instantiate(phexec: *mut CUgraphExec, hgraph: CUgraph) -> CuResult {
    state::require_init()?;
    if phexec.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let graph = GRAPHS
        .get(hgraph as usize)
        .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
    let nodes = graph
        .nodes
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter_mut()
        .map(|n| Node {
            func: n.func.clone(),
            duration_ns: n.duration_ns,
            fill: n.fill,
            work: n.work.take(),
        })
        .collect();
    let e = Arc::new(GraphExec {
        nodes: Mutex::new(nodes),
    });
    out(phexec, EXECS.insert(e) as CUgraphExec)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    phexec: *mut CUgraphExec,
    hgraph: CUgraph,
    _flags: u64,
) -> CUresult {
    guard(|| instantiate(phexec, hgraph))
}

/// The pre-12.0 five-argument form (exported as `cuGraphInstantiate`, like the real driver).
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiate(
    phexec: *mut CUgraphExec,
    hgraph: CUgraph,
    _error_node: *mut CUgraphNode,
    _log_buffer: *mut c_char,
    _buffer_size: usize,
) -> CUresult {
    guard(|| instantiate(phexec, hgraph))
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiate_v2(
    phexec: *mut CUgraphExec,
    hgraph: CUgraph,
    error_node: *mut CUgraphNode,
    log_buffer: *mut c_char,
    buffer_size: usize,
) -> CUresult {
    cuGraphInstantiate(phexec, hgraph, error_node, log_buffer, buffer_size)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch(hexec: CUgraphExec, hstream: CUstream) -> CUresult {
    guard(|| {
        state::require_init()?;
        let exec = EXECS.get(hexec as usize).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let stream = state::stream(hstream)?;
        let ops = exec
            .nodes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter_mut()
            .map(|n| {
                let args = KernelArgs {
                    duration_ns: n.duration_ns,
                    fill: n.fill,
                    work: n.work.take(),
                };
                Op::Kernel(kernel_op(&n.func, args, "cuGraphLaunch", true, hstream))
            })
            .collect();
        stream.enqueue(ops);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch_ptsz(hexec: CUgraphExec, hstream: CUstream) -> CUresult {
    cuGraphLaunch(hexec, hstream)
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphExecDestroy(hexec: CUgraphExec) -> CUresult {
    guard(|| {
        state::require_init()?;
        EXECS
            .remove(hexec as usize)
            .map(|_| ())
            .ok_or(CUDA_ERROR_INVALID_HANDLE)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGraphDestroy(hgraph: CUgraph) -> CUresult {
    guard(|| {
        state::require_init()?;
        GRAPHS
            .remove(hgraph as usize)
            .map(|_| ())
            .ok_or(CUDA_ERROR_INVALID_HANDLE)
    })
}
