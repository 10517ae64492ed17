//! Which stream waits for what: event records and stream waits (runtime and driver), recorded
//! after the real call succeeded, with the host time before it ([`Kind::EventRecord`],
//! [`Kind::StreamWait`]). A wait for an event whose latest record followed a communication op on
//! another stream is timed on the GPU ([`comm::begin_wait`]: where the waiting stream reached the
//! wait, where it was released), unless `FREERIDE_WAIT_TIMING=0` or the op had already ended
//! when the wait was queued ([`comm::ended`]: such a wait cannot hold its stream on
//! communication, only on compute queued after the op, which keeps the GPU busy). It is recorded
//! with its op, untimed, and the agent reads it as any untimed wait: released by its op's end.
//! Not timing those saves a timing pair, and its threads' wake-ups, on every step of a job whose
//! host waits for its communication before it queues what depends on it.

use super::*;
use crate::waits;

type RtRecord = unsafe extern "C" fn(P, P) -> c_int;
type RtRecordFlags = unsafe extern "C" fn(P, P, u32) -> c_int;
type RtWait = unsafe extern "C" fn(P, P, u32) -> c_int;

/// An event record around its real call `call`.
#[inline(always)]
fn event_record(api: Api, event: P, stream: P, flags: u32, call: impl FnOnce() -> c_int) -> c_int {
    let g = rt::enter();
    let t = now_ns();
    let r = call();
    if g.is_some() && r == 0 && rt::active() {
        let (key, end_event) = waits::last_comm(stream as u64);
        waits::recorded(event as u64, stream as u64, key, end_event);
        rt::record(
            Kind::EventRecord,
            api,
            t,
            stream as u64,
            flags,
            rt::comm_flag(),
            [event as u64, key, 0],
        );
    }
    r
}

/// A stream wait around its real call `call`; timed when the event's latest record followed a
/// comm op on another stream.
#[inline(always)]
fn stream_wait(api: Api, stream: P, event: P, flags: u32, call: impl FnOnce() -> c_int) -> c_int {
    let g = rt::enter();
    if g.is_none() || !rt::active() {
        return call();
    }
    let t = now_ns();
    let (s, e) = (stream as u64, event as u64);
    let (key, end_event) =
        waits::last_record(e).map_or((0, 0), |(rs, k, ev)| if rs != s { (k, ev) } else { (0, 0) });
    let (wait, timing) = if key != 0 && comm::wait_timing_on() && !comm::ended(end_event) {
        let w = comm::next_wait();
        (w, Some(comm::begin_wait(s)))
    } else {
        (0, None)
    };
    let r = call();
    if r != 0 {
        if let Some(Ok(i)) = timing {
            comm::abandon(i);
        }
        return r;
    }
    rt::record(
        Kind::StreamWait,
        api,
        t,
        s,
        flags,
        rt::comm_flag(),
        [e, key, wait as u64],
    );
    match timing {
        Some(Ok(i)) => comm::end_wait(i, s, api, wait, t),
        Some(Err(why)) => comm::untimed_wait(api, s, wait, why),
        None => {}
    }
    r
}

#[inline(always)]
unsafe fn rt_record(api: Api, event: P, stream: P) -> c_int {
    let Some(real) = real_fn::<RtRecord>(api) else {
        return CUDART_SYMBOL_NOT_FOUND;
    };
    // SAFETY: pass-through of the caller's arguments.
    event_record(api, event, stream, 0, || unsafe { real(event, stream) })
}

#[inline(always)]
unsafe fn rt_record_flags(api: Api, event: P, stream: P, flags: u32) -> c_int {
    let Some(real) = real_fn::<RtRecordFlags>(api) else {
        return CUDART_SYMBOL_NOT_FOUND;
    };
    // SAFETY: pass-through of the caller's arguments.
    event_record(api, event, stream, flags, || unsafe {
        real(event, stream, flags)
    })
}

#[inline(always)]
unsafe fn rt_wait(api: Api, stream: P, event: P, flags: u32) -> c_int {
    let Some(real) = real_fn::<RtWait>(api) else {
        return CUDART_SYMBOL_NOT_FOUND;
    };
    // SAFETY: pass-through of the caller's arguments.
    stream_wait(api, stream, event, flags, || unsafe {
        real(stream, event, flags)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaEventRecord(event: P, stream: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { rt_record(Api::CudaEventRecord, event, stream) }
}

#[no_mangle]
pub unsafe extern "C" fn cudaEventRecord_ptsz(event: P, stream: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { rt_record(Api::CudaEventRecordPtsz, event, stream) }
}

#[no_mangle]
pub unsafe extern "C" fn cudaEventRecordWithFlags(event: P, stream: P, flags: u32) -> c_int {
    // SAFETY: pass-through.
    unsafe { rt_record_flags(Api::CudaEventRecordWithFlags, event, stream, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn cudaEventRecordWithFlags_ptsz(event: P, stream: P, flags: u32) -> c_int {
    // SAFETY: pass-through.
    unsafe { rt_record_flags(Api::CudaEventRecordWithFlagsPtsz, event, stream, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn cudaStreamWaitEvent(stream: P, event: P, flags: u32) -> c_int {
    // SAFETY: pass-through.
    unsafe { rt_wait(Api::CudaStreamWaitEvent, stream, event, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn cudaStreamWaitEvent_ptsz(stream: P, event: P, flags: u32) -> c_int {
    // SAFETY: pass-through.
    unsafe { rt_wait(Api::CudaStreamWaitEventPtsz, stream, event, flags) }
}

#[inline(always)]
unsafe fn drv_record(api: Api, event: P, stream: P) -> c_int {
    let Some(real) = real_fn::<DrvRecord>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    // SAFETY: pass-through of the caller's arguments.
    event_record(api, event, stream, 0, || unsafe { real(event, stream) })
}

#[inline(always)]
unsafe fn drv_record_flags(api: Api, event: P, stream: P, flags: u32) -> c_int {
    let Some(real) = real_fn::<DrvRecordFlags>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    // SAFETY: pass-through of the caller's arguments.
    event_record(api, event, stream, flags, || unsafe {
        real(event, stream, flags)
    })
}

#[inline(always)]
unsafe fn drv_wait(api: Api, stream: P, event: P, flags: u32) -> c_int {
    let Some(real) = real_fn::<DrvWait>(api) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    // SAFETY: pass-through of the caller's arguments.
    stream_wait(api, stream, event, flags, || unsafe {
        real(stream, event, flags)
    })
}

pub(super) unsafe extern "C" fn w_cuEventRecord(event: P, stream: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_record(Api::CuEventRecord, event, stream) }
}

pub(super) unsafe extern "C" fn w_cuEventRecord_ptsz(event: P, stream: P) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_record(Api::CuEventRecordPtsz, event, stream) }
}

pub(super) unsafe extern "C" fn w_cuEventRecordWithFlags(event: P, stream: P, flags: u32) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_record_flags(Api::CuEventRecordWithFlags, event, stream, flags) }
}

pub(super) unsafe extern "C" fn w_cuEventRecordWithFlags_ptsz(
    event: P,
    stream: P,
    flags: u32,
) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_record_flags(Api::CuEventRecordWithFlagsPtsz, event, stream, flags) }
}

pub(super) unsafe extern "C" fn w_cuStreamWaitEvent(stream: P, event: P, flags: u32) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_wait(Api::CuStreamWaitEvent, stream, event, flags) }
}

pub(super) unsafe extern "C" fn w_cuStreamWaitEvent_ptsz(stream: P, event: P, flags: u32) -> c_int {
    // SAFETY: pass-through.
    unsafe { drv_wait(Api::CuStreamWaitEventPtsz, stream, event, flags) }
}
