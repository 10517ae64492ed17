//! How a library beside the driver reaches it, as the real CUDA runtime, NCCL and cuBLAS do:
//! `dlopen("libcuda.so.1")` in a local scope, `dlsym` of `cuGetProcAddress_v2` only, and every other
//! entry point through it. Statically linked into each stand-in library, so each one still resolves
//! its own driver at run time (none imports a `cu*` symbol).
use std::ffi::{c_char, c_int, c_void, CStr};

/// `cuGetProcAddress_v2` (cuda.h).
pub type GetProcAddressV2 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;

/// The driver's `cuGetProcAddress_v2`, found in `libcuda.so.1`.
#[derive(Clone, Copy)]
pub struct DriverEntry {
    pub get_proc: GetProcAddressV2,
}

fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl* call.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: a non-NULL dlerror result is a valid C string (see above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

impl DriverEntry {
    /// Loads `libcuda.so.1` (the handle is kept for the life of the process, so every pointer
    /// handed out stays valid) and finds `cuGetProcAddress_v2`; the error is dlerror's text.
    pub fn open() -> Result<DriverEntry, String> {
        // SAFETY: dlopen with a constant NUL-terminated name; the handle is never closed.
        let h =
            unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            return Err(dl_error());
        }
        // SAFETY: h is a live handle; the name is a constant C string.
        let p = unsafe { libc::dlsym(h, c"cuGetProcAddress_v2".as_ptr()) };
        if p.is_null() {
            return Err(dl_error());
        }
        // SAFETY: the driver's cuGetProcAddress_v2 has the GetProcAddressV2 signature (cuda.h).
        let get_proc = unsafe { std::mem::transmute::<*mut c_void, GetProcAddressV2>(p) };
        Ok(DriverEntry { get_proc })
    }

    /// The entry point `name` for CUDA `version` with cuGetProcAddress `flags`; on failure the
    /// driver's result and symbol status.
    pub fn get(
        &self,
        name: &CStr,
        version: c_int,
        flags: u64,
    ) -> Result<*mut c_void, (c_int, c_int)> {
        let mut p: *mut c_void = std::ptr::null_mut();
        let mut status: c_int = 0;
        // SAFETY: get_proc is the driver's cuGetProcAddress_v2; the out-pointers are valid locals.
        let r = unsafe { (self.get_proc)(name.as_ptr(), &mut p, version, flags, &mut status) };
        if r == 0 && !p.is_null() {
            Ok(p)
        } else {
            Err((r, status))
        }
    }
}

/// Reinterprets an entry point as the function pointer type `F`.
///
/// # Safety
/// `F` must be an `extern "C" fn` type matching the entry point's C signature.
pub unsafe fn fn_ptr<F: Copy>(p: *mut c_void) -> F {
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: per the contract, F is a pointer-sized function pointer type for this address.
    unsafe { std::mem::transmute_copy(&p) }
}
