//! Streams.
use crate::guard::{guard, out, CuResult};
use crate::state::{self, StreamObj, STREAMS};
use crate::types::*;
use simgpu::{Op, Stream};
use std::sync::Arc;

fn create(phstream: *mut CUstream) -> CuResult {
    let ctx = state::current()?;
    let stream = Stream::new(ctx.device.clone()).map_err(|_| CUDA_ERROR_OPERATING_SYSTEM)?;
    ctx.streams
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(stream.clone());
    let h = STREAMS.insert(Arc::new(StreamObj { stream, ctx }));
    out(phstream, h as CUstream)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(phstream: *mut CUstream, _flags: u32) -> CUresult {
    guard(|| create(phstream))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    phstream: *mut CUstream,
    _flags: u32,
    _priority: i32,
) -> CUresult {
    guard(|| create(phstream))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(hstream: CUstream) -> CUresult {
    guard(|| {
        state::require_init()?;
        let obj = STREAMS
            .remove(hstream as usize)
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        obj.ctx
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|s| !s.same(&obj.stream));
        // Queued work still completes; then the executor exits.
        obj.stream.close();
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy(hstream: CUstream) -> CUresult {
    cuStreamDestroy_v2(hstream)
}

/// `cuStreamGetCtx`: the context a stream belongs to (the default streams: the current one).
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCtx(hstream: CUstream, pctx: *mut CUcontext) -> CUresult {
    guard(|| {
        state::require_init()?;
        let h = match hstream as usize {
            0 | STREAM_LEGACY | STREAM_PER_THREAD => match state::current_handle() {
                0 => state::primary(0)?.0,
                h => h,
            },
            v => {
                let s = STREAMS.get(v).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
                Arc::as_ptr(&s.ctx) as usize
            }
        };
        out(pctx, h as CUcontext)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCtx_ptsz(hstream: CUstream, pctx: *mut CUcontext) -> CUresult {
    cuStreamGetCtx(hstream, pctx)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(hstream: CUstream) -> CUresult {
    guard(|| {
        state::stream(hstream)?.synchronize();
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize_ptsz(hstream: CUstream) -> CUresult {
    cuStreamSynchronize(hstream)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery(hstream: CUstream) -> CUresult {
    guard(|| {
        if state::stream(hstream)?.query() {
            Ok(())
        } else {
            Err(CUDA_ERROR_NOT_READY)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery_ptsz(hstream: CUstream) -> CUresult {
    cuStreamQuery(hstream)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitEvent(
    hstream: CUstream,
    hevent: CUevent,
    _flags: u32,
) -> CUresult {
    guard(|| {
        let stream = state::stream(hstream)?;
        // The wait is on the event's latest record as of this call; never recorded: no-op.
        if let Some(rec) = state::event(hevent)?.current() {
            stream.enqueue(vec![Op::Wait(rec)]);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitEvent_ptsz(
    hstream: CUstream,
    hevent: CUevent,
    flags: u32,
) -> CUresult {
    cuStreamWaitEvent(hstream, hevent, flags)
}

/// `CUhostFn`: `void (*)(void *userData)`.
pub type CUhostFn = Option<unsafe extern "C" fn(*mut std::ffi::c_void)>;

/// Queues a host function on the stream, as the real driver does: it runs (here on the stream's
/// executor thread, in the real driver on a driver thread) once the work queued before it is
/// done, and work queued after it waits until it returns. It must not call the driver.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchHostFunc(
    hstream: CUstream,
    f: CUhostFn,
    user_data: *mut std::ffi::c_void,
) -> CUresult {
    guard(|| {
        let f = f.ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let stream = state::stream(hstream)?;
        let data = user_data as usize;
        stream.enqueue(vec![Op::HostFn(Box::new(move || {
            // SAFETY: the caller's host function with the caller's argument, called once, as
            // cuLaunchHostFunc promises.
            unsafe { f(data as *mut std::ffi::c_void) }
        }))]);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchHostFunc_ptsz(
    hstream: CUstream,
    f: CUhostFn,
    user_data: *mut std::ffi::c_void,
) -> CUresult {
    cuLaunchHostFunc(hstream, f, user_data)
}
