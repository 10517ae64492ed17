//! Events.
use crate::guard::{drv, guard};
use crate::state;
use crate::types::*;

#[no_mangle]
pub unsafe extern "C" fn cudaEventCreate(event: *mut cudaEvent_t) -> cudaError_t {
    cudaEventCreateWithFlags(event, 0)
}

#[no_mangle]
pub unsafe extern "C" fn cudaEventCreateWithFlags(
    event: *mut cudaEvent_t,
    flags: u32,
) -> cudaError_t {
    guard(|| {
        state::ensure_ctx()?;
        drv!(event_create(event, flags))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaEventRecord(event: cudaEvent_t, stream: cudaStream_t) -> cudaError_t {
    guard(|| {
        state::ensure_ctx()?;
        drv!(event_record(event, stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaEventRecordWithFlags(
    event: cudaEvent_t,
    stream: cudaStream_t,
    flags: u32,
) -> cudaError_t {
    guard(|| {
        state::ensure_ctx()?;
        drv!(event_record_with_flags(event, stream, flags))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaEventQuery(event: cudaEvent_t) -> cudaError_t {
    guard(|| drv!(event_query(event)))
}

#[no_mangle]
pub unsafe extern "C" fn cudaEventSynchronize(event: cudaEvent_t) -> cudaError_t {
    guard(|| drv!(event_synchronize(event)))
}

#[no_mangle]
pub unsafe extern "C" fn cudaEventElapsedTime(
    ms: *mut f32,
    start: cudaEvent_t,
    end: cudaEvent_t,
) -> cudaError_t {
    guard(|| drv!(event_elapsed_time(ms, start, end)))
}

#[no_mangle]
pub unsafe extern "C" fn cudaEventDestroy(event: cudaEvent_t) -> cudaError_t {
    guard(|| drv!(event_destroy(event)))
}
