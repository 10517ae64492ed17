//! Contexts: primary contexts, created contexts and the per-thread current context.
use crate::guard::{guard, out};
use crate::state::{self, CONTEXTS};
use crate::types::*;
use std::ffi::c_void;
use std::sync::atomic::Ordering;

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    guard(|| {
        let (h, c) = state::primary(dev)?;
        c.refs.fetch_add(1, Ordering::Relaxed);
        out(pctx, h as CUcontext)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    guard(|| {
        let (_, c) = state::primary(dev)?;
        // Primary contexts stay alive (like a retained context nobody resets); only count.
        let _ = c
            .refs
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                (r > 0).then(|| r - 1)
            });
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease(dev: CUdevice) -> CUresult {
    cuDevicePrimaryCtxRelease_v2(dev)
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(
    dev: CUdevice,
    flags: *mut u32,
    active: *mut i32,
) -> CUresult {
    guard(|| {
        let (_, c) = state::primary(dev)?;
        out(flags, 0)?;
        out(active, (c.refs.load(Ordering::Relaxed) > 0) as i32)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxReset_v2(dev: CUdevice) -> CUresult {
    guard(|| {
        let (_, c) = state::primary(dev)?;
        c.synchronize();
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxSetFlags_v2(dev: CUdevice, _flags: u32) -> CUresult {
    guard(|| state::check_device(dev))
}

fn create(pctx: *mut CUcontext, dev: CUdevice) -> crate::guard::CuResult {
    let (h, _) = state::create_context(dev)?;
    state::push_current(h);
    out(pctx, h as CUcontext)
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(
    pctx: *mut CUcontext,
    _flags: u32,
    dev: CUdevice,
) -> CUresult {
    guard(|| create(pctx, dev))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v3(
    pctx: *mut CUcontext,
    _params: *mut c_void,
    _num_params: i32,
    _flags: u32,
    dev: CUdevice,
) -> CUresult {
    guard(|| create(pctx, dev))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v4(
    pctx: *mut CUcontext,
    _ctx_create_params: *mut c_void,
    _flags: u32,
    dev: CUdevice,
) -> CUresult {
    guard(|| create(pctx, dev))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxDestroy_v2(ctx: CUcontext) -> CUresult {
    guard(|| {
        state::require_init()?;
        let c = state::context(ctx)?;
        if c.primary {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        c.synchronize();
        CONTEXTS.remove(ctx as usize);
        if state::current_handle() == ctx as usize {
            state::pop_current();
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    guard(|| {
        state::require_init()?;
        if !ctx.is_null() {
            state::context(ctx)?;
        }
        state::set_current(ctx as usize);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut CUcontext) -> CUresult {
    guard(|| {
        state::require_init()?;
        out(pctx, state::current_handle() as CUcontext)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPushCurrent_v2(ctx: CUcontext) -> CUresult {
    guard(|| {
        state::require_init()?;
        state::context(ctx)?;
        state::push_current(ctx as usize);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) -> CUresult {
    guard(|| {
        state::require_init()?;
        if state::current_handle() == 0 {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        let h = state::pop_current();
        if !pctx.is_null() {
            out(pctx, h as CUcontext)?;
        }
        Ok(())
    })
}

fn ctx_or_current(ctx: CUcontext) -> crate::guard::CuResult<std::sync::Arc<state::Context>> {
    if ctx.is_null() {
        state::current()
    } else {
        state::require_init()?;
        state::context(ctx)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut CUdevice) -> CUresult {
    guard(|| out(device, state::current()?.dev))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice_v2(device: *mut CUdevice, ctx: CUcontext) -> CUresult {
    guard(|| out(device, ctx_or_current(ctx)?.dev))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    guard(|| {
        state::current()?.synchronize();
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize_v2(ctx: CUcontext) -> CUresult {
    guard(|| {
        ctx_or_current(ctx)?.synchronize();
        Ok(())
    })
}
