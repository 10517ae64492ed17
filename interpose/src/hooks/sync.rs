//! Synchronize calls (runtime and driver): recorded after they return, with their start time;
//! a side task's gate retires its finished work there.

use super::*;

/// What a synchronize call waits for.
#[derive(Clone, Copy)]
enum Target {
    /// Every stream of the context (the device).
    All,
    /// One stream.
    Stream(u64),
    /// One event (what its latest record follows).
    Event(u64),
}

/// Before a synchronize call: a trainer's drain mark on the stream it last launched on, if it
/// launched since its last mark and the call does not wait for that stream itself
/// ([`comm::drain_mark`]). A call that waits for it tells the agent when it drained (by its
/// return) with no mark; one that waits for something else (a receive's stream, an event recorded
/// there) says nothing of it while the host is blocked.
#[inline(always)]
fn drain_mark(g: &Option<rt::Entered>, api: Api, target: Target) {
    if g.is_none() || !rt::active() || rt::is_sidetask() {
        return;
    }
    let Some(s) = rt::take_unmarked_stream() else {
        return;
    };
    let covered = match target {
        Target::All => true,
        Target::Stream(h) => h == s,
        Target::Event(e) => crate::waits::last_record(e).is_some_and(|(rs, _, _)| rs == s),
    };
    if !covered {
        crate::comm::drain_mark(api, s);
    }
}

/// What a one-handle synchronize (`api`, on `h`) waits for.
#[inline(always)]
fn target_of(api: Api, h: P) -> Target {
    match api {
        Api::CudaEventSynchronize | Api::CuEventSynchronize => Target::Event(h as u64),
        _ => Target::Stream(h as u64),
    }
}

/// Synchronize call: recorded after it returns, with its start time.
#[inline(always)]
fn sync_event(g: &Option<rt::Entered>, api: Api, t0: u64, handle: P, r: c_int) {
    if g.is_some() && rt::is_sidetask() {
        crate::gate::after_sync();
    }
    if g.is_some() && rt::active() {
        rt::record(
            Kind::Sync,
            api,
            t0,
            handle as u64,
            r as u32,
            0,
            [now_ns(), 0, 0],
        );
    }
}

#[no_mangle]
pub unsafe extern "C" fn cudaDeviceSynchronize() -> c_int {
    let api = Api::CudaDeviceSynchronize;
    let Some(real) = real_fn::<RtSync0>(api) else {
        return CUDART_SYMBOL_NOT_FOUND;
    };
    let g = rt::enter();
    let t0 = now_ns();
    drain_mark(&g, api, Target::All);
    // SAFETY: pass-through.
    let r = unsafe { real() };
    sync_event(&g, api, t0, std::ptr::null_mut(), r);
    r
}

#[inline(always)]
unsafe fn rt_sync1(api: Api, h: P) -> c_int {
    let Some(real) = real_fn::<RtSync1>(api) else {
        return CUDART_SYMBOL_NOT_FOUND;
    };
    let g = rt::enter();
    let t0 = now_ns();
    drain_mark(&g, api, target_of(api, h));
    // SAFETY: pass-through.
    let r = unsafe { real(h) };
    sync_event(&g, api, t0, h, r);
    r
}

#[no_mangle]
pub unsafe extern "C" fn cudaStreamSynchronize(s: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { rt_sync1(Api::CudaStreamSynchronize, s) }
}

#[no_mangle]
pub unsafe extern "C" fn cudaStreamSynchronize_ptsz(s: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { rt_sync1(Api::CudaStreamSynchronizePtsz, s) }
}

#[no_mangle]
pub unsafe extern "C" fn cudaEventSynchronize(e: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { rt_sync1(Api::CudaEventSynchronize, e) }
}

#[inline(always)]
unsafe fn drv_sync1(api: Api, h: P) -> c_int {
    let Some(real) = real_fn::<DrvSync1>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let g = rt::enter();
    let t0 = now_ns();
    drain_mark(&g, api, target_of(api, h));
    // SAFETY: pass-through.
    let r = unsafe { real(h) };
    sync_event(&g, api, t0, h, r);
    r
}

pub(super) unsafe extern "C" fn w_cuStreamSynchronize(s: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_sync1(Api::CuStreamSynchronize, s) }
}

pub(super) unsafe extern "C" fn w_cuStreamSynchronize_ptsz(s: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_sync1(Api::CuStreamSynchronizePtsz, s) }
}

pub(super) unsafe extern "C" fn w_cuEventSynchronize(e: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_sync1(Api::CuEventSynchronize, e) }
}

/// `cuCtxSynchronize(void)`, before CUDA 13.
pub(super) unsafe extern "C" fn w_cuCtxSynchronize() -> c_int {
    let api = Api::CuCtxSynchronize;
    let Some(real) = real_fn::<DrvSync0>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let g = rt::enter();
    let t0 = now_ns();
    drain_mark(&g, api, Target::All);
    // SAFETY: pass-through.
    let r = unsafe { real() };
    sync_event(&g, api, t0, std::ptr::null_mut(), r);
    r
}

/// `cuCtxSynchronize` from CUDA 13.0: the context to wait for is an argument (NULL: the current).
pub(super) unsafe extern "C" fn w_cuCtxSynchronize_v2(ctx: P) -> c_int {
    let api = Api::CuCtxSynchronizeV2;
    let Some(real) = real_fn::<DrvSync1>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    let g = rt::enter();
    let t0 = now_ns();
    drain_mark(&g, api, Target::All);
    // SAFETY: pass-through.
    let r = unsafe { real(ctx) };
    sync_event(&g, api, t0, std::ptr::null_mut(), r);
    r
}
