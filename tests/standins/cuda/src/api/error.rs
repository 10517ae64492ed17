//! Error names and descriptions.
use crate::guard::{guard, out};
use crate::types::*;
use std::ffi::{c_char, CStr};

/// (code, name, description) of the codes the stand-in returns, and a few more.
const ERRORS: &[(CUresult, &CStr, &CStr)] = &[
    (0, c"CUDA_SUCCESS", c"no error"),
    (1, c"CUDA_ERROR_INVALID_VALUE", c"invalid argument"),
    (2, c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory"),
    (3, c"CUDA_ERROR_NOT_INITIALIZED", c"initialization error"),
    (4, c"CUDA_ERROR_DEINITIALIZED", c"driver shutting down"),
    (
        100,
        c"CUDA_ERROR_NO_DEVICE",
        c"no CUDA-capable device is detected",
    ),
    (101, c"CUDA_ERROR_INVALID_DEVICE", c"invalid device ordinal"),
    (
        200,
        c"CUDA_ERROR_INVALID_IMAGE",
        c"device kernel image is invalid",
    ),
    (
        201,
        c"CUDA_ERROR_INVALID_CONTEXT",
        c"invalid device context",
    ),
    (301, c"CUDA_ERROR_FILE_NOT_FOUND", c"file not found"),
    (
        304,
        c"CUDA_ERROR_OPERATING_SYSTEM",
        c"OS call failed or operation not supported on this OS",
    ),
    (
        400,
        c"CUDA_ERROR_INVALID_HANDLE",
        c"invalid resource handle",
    ),
    (500, c"CUDA_ERROR_NOT_FOUND", c"named symbol not found"),
    (600, c"CUDA_ERROR_NOT_READY", c"device not ready"),
    (
        700,
        c"CUDA_ERROR_ILLEGAL_ADDRESS",
        c"an illegal memory access was encountered",
    ),
    (
        719,
        c"CUDA_ERROR_LAUNCH_FAILED",
        c"unspecified launch failure",
    ),
    (801, c"CUDA_ERROR_NOT_SUPPORTED", c"operation not supported"),
    (999, c"CUDA_ERROR_UNKNOWN", c"unknown error"),
];

fn lookup(error: CUresult) -> Option<&'static (CUresult, &'static CStr, &'static CStr)> {
    ERRORS.iter().find(|e| e.0 == error)
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: CUresult, pstr: *mut *const c_char) -> CUresult {
    guard(|| match lookup(error) {
        Some(e) => out(pstr, e.2.as_ptr()),
        None => {
            out(pstr, std::ptr::null())?;
            Err(CUDA_ERROR_INVALID_VALUE)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: CUresult, pstr: *mut *const c_char) -> CUresult {
    guard(|| match lookup(error) {
        Some(e) => out(pstr, e.1.as_ptr()),
        None => {
            out(pstr, std::ptr::null())?;
            Err(CUDA_ERROR_INVALID_VALUE)
        }
    })
}
