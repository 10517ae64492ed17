//! Kernel and graph launches: the runtime symbols (exported) and the driver entry points
//! (handed out by look-ups).

use super::*;

#[inline(always)]
unsafe fn rt_launch(
    api: Api,
    func: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: PP,
    shmem: usize,
    stream: P,
) -> c_int {
    let Some(real) = real_fn::<RtLaunch>(api) else {
        return CUDART_SYMBOL_NOT_FOUND;
    };
    let g = rt::enter();
    if g.is_some() {
        rt::launch(
            api,
            stream as u64,
            func as u64,
            [grid.x, grid.y, grid.z],
            [block.x, block.y, block.z],
            shmem as u32,
        );
    }
    // SAFETY: forwarding the caller's arguments unchanged to the real function.
    let r = unsafe { real(func, grid, block, args, shmem, stream) };
    drop(g);
    r
}

/// `__cudaLaunchKernel`: the `<<<>>>` launch stub of CUDA 13 (how PyTorch launches).
#[no_mangle]
pub unsafe extern "C" fn __cudaLaunchKernel(
    func: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: PP,
    shmem: usize,
    stream: P,
) -> c_int {
    // SAFETY: pass-through of the caller's arguments.
    unsafe {
        rt_launch(
            Api::CudaLaunchKernelStub,
            func,
            grid,
            block,
            args,
            shmem,
            stream,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn __cudaLaunchKernel_ptsz(
    func: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: PP,
    shmem: usize,
    stream: P,
) -> c_int {
    // SAFETY: pass-through of the caller's arguments.
    unsafe {
        rt_launch(
            Api::CudaLaunchKernelStubPtsz,
            func,
            grid,
            block,
            args,
            shmem,
            stream,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn cudaLaunchKernel(
    func: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: PP,
    shmem: usize,
    stream: P,
) -> c_int {
    // SAFETY: pass-through of the caller's arguments.
    unsafe {
        rt_launch(
            Api::CudaLaunchKernel,
            func,
            grid,
            block,
            args,
            shmem,
            stream,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn cudaLaunchKernel_ptsz(
    func: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: PP,
    shmem: usize,
    stream: P,
) -> c_int {
    // SAFETY: pass-through of the caller's arguments.
    unsafe {
        rt_launch(
            Api::CudaLaunchKernelPtsz,
            func,
            grid,
            block,
            args,
            shmem,
            stream,
        )
    }
}

#[inline(always)]
unsafe fn rt_launch_ex(
    api: Api,
    cfg: *const CudaLaunchConfig,
    func: *const c_void,
    args: PP,
) -> c_int {
    let Some(real) = real_fn::<RtLaunchEx>(api) else {
        return CUDART_SYMBOL_NOT_FOUND;
    };
    let g = rt::enter();
    if g.is_some() && !cfg.is_null() {
        // SAFETY: the caller passes a valid config (the real function reads it too).
        let c = unsafe { &*cfg };
        rt::launch(
            api,
            c.stream as u64,
            func as u64,
            [c.grid.x, c.grid.y, c.grid.z],
            [c.block.x, c.block.y, c.block.z],
            c.shmem as u32,
        );
    }
    // SAFETY: pass-through.
    let r = unsafe { real(cfg, func, args) };
    drop(g);
    r
}

#[no_mangle]
pub unsafe extern "C" fn cudaLaunchKernelExC(
    cfg: *const CudaLaunchConfig,
    func: *const c_void,
    args: PP,
) -> c_int {
    // SAFETY: pass-through.
    unsafe { rt_launch_ex(Api::CudaLaunchKernelExC, cfg, func, args) }
}

#[no_mangle]
pub unsafe extern "C" fn cudaLaunchKernelExC_ptsz(
    cfg: *const CudaLaunchConfig,
    func: *const c_void,
    args: PP,
) -> c_int {
    // SAFETY: pass-through.
    unsafe { rt_launch_ex(Api::CudaLaunchKernelExCPtsz, cfg, func, args) }
}

#[inline(always)]
fn graph_event(api: Api, exec: P, stream: P) {
    if rt::active() {
        rt::record(
            Kind::GraphLaunch,
            api,
            now_ns(),
            stream as u64,
            0,
            0,
            [exec as u64, 0, 0],
        );
        if rt::is_sidetask() {
            crate::gate::before_launch(api, stream as u64, exec as u64);
        }
    }
}

#[inline(always)]
unsafe fn rt_graph(api: Api, exec: P, stream: P) -> c_int {
    let Some(real) = real_fn::<RtGraph>(api) else {
        return CUDART_SYMBOL_NOT_FOUND;
    };
    let g = rt::enter();
    if g.is_some() {
        graph_event(api, exec, stream);
    }
    // SAFETY: pass-through.
    let r = unsafe { real(exec, stream) };
    drop(g);
    r
}

#[no_mangle]
pub unsafe extern "C" fn cudaGraphLaunch(exec: P, stream: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { rt_graph(Api::CudaGraphLaunch, exec, stream) }
}

#[no_mangle]
pub unsafe extern "C" fn cudaGraphLaunch_ptsz(exec: P, stream: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { rt_graph(Api::CudaGraphLaunchPtsz, exec, stream) }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn drv_launch(
    api: Api,
    f: P,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    sh: u32,
    s: P,
    kp: PP,
    ex: PP,
) -> c_int {
    let Some(real) = real_fn::<DrvLaunch>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let g = rt::enter();
    if g.is_some() {
        rt::launch(api, s as u64, f as u64, [gx, gy, gz], [bx, by, bz], sh);
    }
    // SAFETY: pass-through.
    let r = unsafe { real(f, gx, gy, gz, bx, by, bz, sh, s, kp, ex) };
    drop(g);
    r
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn w_cuLaunchKernel(
    f: P,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    sh: u32,
    s: P,
    kp: PP,
    ex: PP,
) -> c_int {
    // SAFETY: pass-through.
    unsafe {
        drv_launch(
            Api::CuLaunchKernel,
            f,
            gx,
            gy,
            gz,
            bx,
            by,
            bz,
            sh,
            s,
            kp,
            ex,
        )
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn w_cuLaunchKernel_ptsz(
    f: P,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    sh: u32,
    s: P,
    kp: PP,
    ex: PP,
) -> c_int {
    // SAFETY: pass-through.
    unsafe {
        drv_launch(
            Api::CuLaunchKernelPtsz,
            f,
            gx,
            gy,
            gz,
            bx,
            by,
            bz,
            sh,
            s,
            kp,
            ex,
        )
    }
}

#[inline(always)]
unsafe fn drv_launch_ex(api: Api, cfg: *const CuLaunchConfig, f: P, kp: PP, ex: PP) -> c_int {
    let Some(real) = real_fn::<DrvLaunchEx>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let g = rt::enter();
    if g.is_some() && !cfg.is_null() {
        // SAFETY: the caller passes a valid config (the real function reads it too).
        let c = unsafe { &*cfg };
        rt::launch(api, c.stream as u64, f as u64, c.grid, c.block, c.shmem);
    }
    // SAFETY: pass-through.
    let r = unsafe { real(cfg, f, kp, ex) };
    drop(g);
    r
}

pub(super) unsafe extern "C" fn w_cuLaunchKernelEx(
    cfg: *const CuLaunchConfig,
    f: P,
    kp: PP,
    ex: PP,
) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_launch_ex(Api::CuLaunchKernelEx, cfg, f, kp, ex) }
}

pub(super) unsafe extern "C" fn w_cuLaunchKernelEx_ptsz(
    cfg: *const CuLaunchConfig,
    f: P,
    kp: PP,
    ex: PP,
) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_launch_ex(Api::CuLaunchKernelExPtsz, cfg, f, kp, ex) }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn drv_coop(
    api: Api,
    f: P,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    sh: u32,
    s: P,
    kp: PP,
) -> c_int {
    let Some(real) = real_fn::<DrvCoop>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let g = rt::enter();
    if g.is_some() {
        rt::launch(api, s as u64, f as u64, [gx, gy, gz], [bx, by, bz], sh);
    }
    // SAFETY: pass-through.
    let r = unsafe { real(f, gx, gy, gz, bx, by, bz, sh, s, kp) };
    drop(g);
    r
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn w_cuLaunchCooperativeKernel(
    f: P,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    sh: u32,
    s: P,
    kp: PP,
) -> c_int {
    // SAFETY: pass-through.
    unsafe {
        drv_coop(
            Api::CuLaunchCooperativeKernel,
            f,
            gx,
            gy,
            gz,
            bx,
            by,
            bz,
            sh,
            s,
            kp,
        )
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn w_cuLaunchCooperativeKernel_ptsz(
    f: P,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    sh: u32,
    s: P,
    kp: PP,
) -> c_int {
    // SAFETY: pass-through.
    unsafe {
        drv_coop(
            Api::CuLaunchCooperativeKernelPtsz,
            f,
            gx,
            gy,
            gz,
            bx,
            by,
            bz,
            sh,
            s,
            kp,
        )
    }
}

#[inline(always)]
unsafe fn drv_graph(api: Api, exec: P, s: P) -> c_int {
    let Some(real) = real_fn::<DrvGraph>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let g = rt::enter();
    if g.is_some() {
        graph_event(api, exec, s);
    }
    // SAFETY: pass-through.
    let r = unsafe { real(exec, s) };
    drop(g);
    r
}

pub(super) unsafe extern "C" fn w_cuGraphLaunch(exec: P, s: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_graph(Api::CuGraphLaunch, exec, s) }
}

pub(super) unsafe extern "C" fn w_cuGraphLaunch_ptsz(exec: P, s: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_graph(Api::CuGraphLaunchPtsz, exec, s) }
}
