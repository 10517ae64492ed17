//! Errors: the thread's last error, names and descriptions.
use crate::state;
use crate::types::*;
use std::ffi::{c_char, CStr};

const ERRORS: &[(cudaError_t, &CStr, &CStr)] = &[
    (0, c"cudaSuccess", c"no error"),
    (1, c"cudaErrorInvalidValue", c"invalid argument"),
    (2, c"cudaErrorMemoryAllocation", c"out of memory"),
    (3, c"cudaErrorInitializationError", c"initialization error"),
    (
        35,
        c"cudaErrorInsufficientDriver",
        c"CUDA driver version is insufficient for CUDA runtime version",
    ),
    (
        98,
        c"cudaErrorInvalidDeviceFunction",
        c"invalid device function",
    ),
    (
        100,
        c"cudaErrorNoDevice",
        c"no CUDA-capable device is detected",
    ),
    (101, c"cudaErrorInvalidDevice", c"invalid device ordinal"),
    (
        201,
        c"cudaErrorDeviceUninitialized",
        c"invalid device context",
    ),
    (
        304,
        c"cudaErrorOperatingSystem",
        c"OS call failed or operation not supported on this OS",
    ),
    (
        400,
        c"cudaErrorInvalidResourceHandle",
        c"invalid resource handle",
    ),
    (500, c"cudaErrorSymbolNotFound", c"named symbol not found"),
    (600, c"cudaErrorNotReady", c"device not ready"),
    (801, c"cudaErrorNotSupported", c"operation not supported"),
    (999, c"cudaErrorUnknown", c"unknown error"),
];

fn lookup(e: cudaError_t) -> (&'static CStr, &'static CStr) {
    ERRORS
        .iter()
        .find(|x| x.0 == e)
        .map(|x| (x.1, x.2))
        .unwrap_or((c"cudaErrorUnknown", c"unrecognized error code"))
}

#[no_mangle]
pub unsafe extern "C" fn cudaGetLastError() -> cudaError_t {
    state::last_error(true)
}

#[no_mangle]
pub unsafe extern "C" fn cudaPeekAtLastError() -> cudaError_t {
    state::last_error(false)
}

#[no_mangle]
pub unsafe extern "C" fn cudaGetErrorString(error: cudaError_t) -> *const c_char {
    lookup(error).1.as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn cudaGetErrorName(error: cudaError_t) -> *const c_char {
    lookup(error).0.as_ptr()
}
