//! What nvcc-generated host code calls: fat binary and kernel registration, call configuration.
use crate::guard::out;
use crate::state::{self, CallConfig};
use crate::types::*;
use std::ffi::{c_char, c_void, CStr};

/// A registered fat binary (its contents are not looked at).
struct FatBinary {
    _image: *mut c_void,
}

#[no_mangle]
pub unsafe extern "C" fn __cudaRegisterFatBinary(fat_cubin: *mut c_void) -> *mut *mut c_void {
    // The handle is a unique address the caller passes back; it is never freed (like the
    // registration it stands for, it lasts the whole process).
    Box::into_raw(Box::new(FatBinary { _image: fat_cubin })).cast()
}

#[no_mangle]
pub unsafe extern "C" fn __cudaRegisterFatBinaryEnd(_handle: *mut *mut c_void) {}

#[no_mangle]
pub unsafe extern "C" fn __cudaUnregisterFatBinary(_handle: *mut *mut c_void) {}

#[no_mangle]
pub unsafe extern "C" fn __cudaRegisterFunction(
    _handle: *mut *mut c_void,
    host_fun: *const c_char,
    device_fun: *mut c_char,
    device_name: *const c_char,
    _thread_limit: i32,
    _tid: *mut c_void,
    _bid: *mut c_void,
    _bdim: *mut dim3,
    _gdim: *mut dim3,
    _wsize: *mut i32,
) {
    let _ = std::panic::catch_unwind(|| {
        let name = if !device_name.is_null() {
            device_name
        } else {
            device_fun as *const c_char
        };
        if host_fun.is_null() || name.is_null() {
            return;
        }
        // SAFETY: nvcc passes the kernel's NUL-terminated (mangled) name, valid for the process.
        let name = unsafe { CStr::from_ptr(name) }.to_owned();
        state::register_kernel(host_fun as usize, name);
    });
}

#[no_mangle]
pub unsafe extern "C" fn __cudaPushCallConfiguration(
    grid: dim3,
    block: dim3,
    shared_mem: usize,
    stream: *mut c_void,
) -> u32 {
    let _ = std::panic::catch_unwind(|| {
        state::push_call_config(CallConfig {
            grid,
            block,
            smem: shared_mem,
            stream,
        })
    });
    0
}

#[no_mangle]
pub unsafe extern "C" fn __cudaPopCallConfiguration(
    grid: *mut dim3,
    block: *mut dim3,
    shared_mem: *mut usize,
    stream: *mut *mut c_void,
) -> cudaError_t {
    crate::guard::guard(|| {
        let c = state::pop_call_config().ok_or(cudaErrorInvalidValue)?;
        out(grid, c.grid)?;
        out(block, c.block)?;
        out(shared_mem, c.smem)?;
        out(stream, c.stream)
    })
}
