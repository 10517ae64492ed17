//! Streams.
use crate::guard::{drv, guard};
use crate::state;
use crate::types::*;

#[no_mangle]
pub unsafe extern "C" fn cudaStreamCreate(stream: *mut cudaStream_t) -> cudaError_t {
    cudaStreamCreateWithPriority(stream, 0, 0)
}

#[no_mangle]
pub unsafe extern "C" fn cudaStreamCreateWithFlags(
    stream: *mut cudaStream_t,
    flags: u32,
) -> cudaError_t {
    cudaStreamCreateWithPriority(stream, flags, 0)
}

#[no_mangle]
pub unsafe extern "C" fn cudaStreamCreateWithPriority(
    stream: *mut cudaStream_t,
    flags: u32,
    priority: i32,
) -> cudaError_t {
    guard(|| {
        state::ensure_ctx()?;
        drv!(stream_create_with_priority(stream, flags, priority))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaStreamDestroy(stream: cudaStream_t) -> cudaError_t {
    guard(|| drv!(stream_destroy(stream)))
}

#[no_mangle]
pub unsafe extern "C" fn cudaStreamSynchronize(stream: cudaStream_t) -> cudaError_t {
    guard(|| {
        state::ensure_ctx()?;
        drv!(stream_synchronize(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaStreamQuery(stream: cudaStream_t) -> cudaError_t {
    guard(|| {
        state::ensure_ctx()?;
        drv!(stream_query(stream))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaStreamWaitEvent(
    stream: cudaStream_t,
    event: cudaEvent_t,
    flags: u32,
) -> cudaError_t {
    guard(|| {
        state::ensure_ctx()?;
        drv!(stream_wait_event(stream, event, flags))
    })
}
