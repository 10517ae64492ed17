//! Events.
use crate::guard::{guard, out};
use crate::state::{self, EVENTS};
use crate::types::*;
use simgpu::event::ElapsedError;
use simgpu::Event;
use std::sync::Arc;

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(phevent: *mut CUevent, flags: u32) -> CUresult {
    guard(|| {
        state::current()?;
        let h = EVENTS.insert(Arc::new(Event::new(flags)));
        out(phevent, h as CUevent)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecord(hevent: CUevent, hstream: CUstream) -> CUresult {
    guard(|| {
        let ev = state::event(hevent)?;
        ev.record(&state::stream(hstream)?);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecord_ptsz(hevent: CUevent, hstream: CUstream) -> CUresult {
    cuEventRecord(hevent, hstream)
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecordWithFlags(
    hevent: CUevent,
    hstream: CUstream,
    _flags: u32,
) -> CUresult {
    cuEventRecord(hevent, hstream)
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecordWithFlags_ptsz(
    hevent: CUevent,
    hstream: CUstream,
    flags: u32,
) -> CUresult {
    cuEventRecordWithFlags(hevent, hstream, flags)
}

#[no_mangle]
pub unsafe extern "C" fn cuEventQuery(hevent: CUevent) -> CUresult {
    guard(|| {
        if state::event(hevent)?.query() {
            Ok(())
        } else {
            Err(CUDA_ERROR_NOT_READY)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventSynchronize(hevent: CUevent) -> CUresult {
    guard(|| {
        state::event(hevent)?.synchronize();
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime_v2(
    ms: *mut f32,
    hstart: CUevent,
    hend: CUevent,
) -> CUresult {
    guard(|| {
        let (a, b) = (state::event(hstart)?, state::event(hend)?);
        match Event::elapsed_ns(&a, &b) {
            Ok(ns) => out(ms, (ns as f64 / 1e6) as f32),
            Err(ElapsedError::NotReady) => Err(CUDA_ERROR_NOT_READY),
            Err(ElapsedError::InvalidHandle) => Err(CUDA_ERROR_INVALID_HANDLE),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(
    ms: *mut f32,
    hstart: CUevent,
    hend: CUevent,
) -> CUresult {
    cuEventElapsedTime_v2(ms, hstart, hend)
}

#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy_v2(hevent: CUevent) -> CUresult {
    guard(|| {
        state::require_init()?;
        EVENTS
            .remove(hevent as usize)
            .map(|_| ())
            .ok_or(CUDA_ERROR_INVALID_HANDLE)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy(hevent: CUevent) -> CUresult {
    cuEventDestroy_v2(hevent)
}
