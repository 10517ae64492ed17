//! The FFI boundary: no panic crosses it, and C pointers are read/written in one place.
use crate::types::*;
use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What an entry point's body returns.
pub type CuResult<T = ()> = Result<T, CUresult>;

/// Runs an entry point's body: `Ok` -> `CUDA_SUCCESS`, a panic -> `CUDA_ERROR_UNKNOWN`.
pub fn guard(f: impl FnOnce() -> CuResult) -> CUresult {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => CUDA_SUCCESS,
        Ok(Err(e)) => e,
        Err(_) => CUDA_ERROR_UNKNOWN,
    }
}

/// Writes `v` to the caller's out-parameter `p` (`CUDA_ERROR_INVALID_VALUE` if NULL).
pub fn out<T>(p: *mut T, v: T) -> CuResult {
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: the C API contract: a non-NULL out-parameter points to a writable T.
    unsafe { p.write(v) };
    Ok(())
}

/// Reads the caller's in-parameter struct `p` (`CUDA_ERROR_INVALID_VALUE` if NULL).
pub fn read<T>(p: *const T) -> CuResult<&'static T> {
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: the C API contract: a non-NULL in-parameter points to a valid T for the call; the
    // 'static lifetime is never used past the entry point's return.
    Ok(unsafe { &*p })
}

/// The caller's NUL-terminated string (`CUDA_ERROR_INVALID_VALUE` if NULL or not UTF-8).
pub fn cstr<'a>(p: *const c_char) -> CuResult<&'a str> {
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: the C API contract: a non-NULL string argument is NUL-terminated and valid for the
    // call.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| CUDA_ERROR_INVALID_VALUE)
}

/// Copies `s` (NUL-terminated, truncated) into the caller's buffer of `len` bytes.
pub fn out_str(buf: *mut c_char, len: i32, s: &str) -> CuResult {
    if buf.is_null() || len <= 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let n = s.len().min(len as usize - 1);
    // SAFETY: the C API contract: buf points to at least len writable bytes; we write n + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    Ok(())
}
