//! Context switches: they invalidate the thread's cached device.

use super::*;

pub(super) unsafe extern "C" fn w_cuCtxSetCurrent(ctx: P) -> c_int {
    let Some(real) = real_fn::<DrvCtx>(Api::CuCtxSetCurrent) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    rt::invalidate_device();
    // SAFETY: pass-through.
    unsafe { real(ctx) }
}

pub(super) unsafe extern "C" fn w_cuCtxPushCurrent_v2(ctx: P) -> c_int {
    let Some(real) = real_fn::<DrvCtx>(Api::CuCtxPushCurrentV2) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    rt::invalidate_device();
    // SAFETY: pass-through.
    unsafe { real(ctx) }
}

pub(super) unsafe extern "C" fn w_cuCtxPopCurrent_v2(ctx: PP) -> c_int {
    let Some(real) = real_fn::<DrvCtxPop>(Api::CuCtxPopCurrentV2) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    rt::invalidate_device();
    // SAFETY: pass-through.
    unsafe { real(ctx) }
}
