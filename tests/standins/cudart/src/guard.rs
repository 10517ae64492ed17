//! The FFI boundary: no panic crosses it; errors become the thread's last error.
use crate::state;
use crate::types::*;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What an entry point's body returns.
pub type RtResult<T = ()> = Result<T, cudaError_t>;

/// Runs an entry point's body; an error (or a panic, as `cudaErrorUnknown`) is also recorded as
/// the thread's last error, except `cudaErrorNotReady`, which is a status.
pub fn guard(f: impl FnOnce() -> RtResult) -> cudaError_t {
    let r = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => cudaSuccess,
        Ok(Err(e)) => e,
        Err(_) => cudaErrorUnknown,
    };
    if r != cudaSuccess && r != cudaErrorNotReady {
        state::set_last_error(r);
    }
    r
}

/// Writes `v` to the caller's out-parameter `p` (`cudaErrorInvalidValue` if NULL).
pub fn out<T>(p: *mut T, v: T) -> RtResult {
    if p.is_null() {
        return Err(cudaErrorInvalidValue);
    }
    // SAFETY: the C API contract: a non-NULL out-parameter points to a writable T.
    unsafe { p.write(v) };
    Ok(())
}

/// Reads the caller's in-parameter struct `p` (`cudaErrorInvalidValue` if NULL).
pub fn read<'a, T>(p: *const T) -> RtResult<&'a T> {
    if p.is_null() {
        return Err(cudaErrorInvalidValue);
    }
    // SAFETY: the C API contract: a non-NULL in-parameter points to a valid T for the call.
    Ok(unsafe { &*p })
}

/// Calls driver function `$f` (a field of [`crate::driver::Driver`]) and maps its result.
macro_rules! drv {
    ($f:ident ( $($a:expr),* $(,)? )) => {{
        let d = $crate::driver::driver()?;
        // SAFETY: a driver function resolved for its CUDA 13.0 signature (cudaTypedefs.h), called
        // with arguments that follow that signature, passed through from the runtime caller.
        $crate::driver::check(unsafe { (d.$f)($($a),*) })
    }};
}
pub(crate) use drv;
