//! Driver entry-point look-ups (`cudaGetDriverEntryPoint(ByVersion)`, `cuGetProcAddress(_v2)`):
//! the real look-up, then our wrapper in place of every function we hook.

use super::*;

static RUNTIME_VERSION: AtomicI32 = AtomicI32::new(0);

/// CUDA version of the loaded runtime (cudaRuntimeGetVersion), -1 if unknown.
fn runtime_version() -> i64 {
    let v = RUNTIME_VERSION.load(Ordering::Relaxed);
    if v != 0 {
        return v as i64;
    }
    let mut f = dl::sym(dl::RTLD_NEXT, c"cudaRuntimeGetVersion");
    if f.is_null() {
        for lib in [c"libcudart.so.13", c"libcudart.so.12", c"libcudart.so"] {
            f = dl::sym_in_loaded(lib, c"cudaRuntimeGetVersion");
            if !f.is_null() {
                break;
            }
        }
    }
    let mut ver: c_int = -1;
    if !f.is_null() {
        // SAFETY: cudaRuntimeGetVersion(int*) writing one int we own.
        let g: unsafe extern "C" fn(*mut c_int) -> c_int = unsafe { std::mem::transmute(f) };
        // SAFETY: as above.
        if unsafe { g(&mut ver) } != 0 {
            ver = -1;
        }
    }
    RUNTIME_VERSION.store(ver, Ordering::Relaxed);
    ver as i64
}

#[no_mangle]
pub unsafe extern "C" fn cudaGetDriverEntryPoint(
    symbol: *const c_char,
    pfn: PP,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    let Some(real) = real_fn::<RtEntry>(Api::CudaGetDriverEntryPoint) else {
        return CUDART_SYMBOL_NOT_FOUND;
    };
    // SAFETY: pass-through.
    let r = unsafe { real(symbol, pfn, flags, status) };
    if r == 0 {
        let v = runtime_version();
        if v > 0 {
            map_proc(symbol, pfn, v, flags);
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cudaGetDriverEntryPointByVersion(
    symbol: *const c_char,
    pfn: PP,
    ver: u32,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    let Some(real) = real_fn::<RtEntryV>(Api::CudaGetDriverEntryPointByVersion) else {
        return CUDART_SYMBOL_NOT_FOUND;
    };
    // SAFETY: pass-through.
    let r = unsafe { real(symbol, pfn, ver, flags, status) };
    if r == 0 {
        map_proc(symbol, pfn, ver as i64, flags);
    }
    r
}

pub(super) unsafe extern "C" fn w_cuGetProcAddress(
    symbol: *const c_char,
    pfn: PP,
    ver: c_int,
    flags: u64,
) -> c_int {
    let Some(real) = real_fn::<GetProcV1>(Api::CuGetProcAddress) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    // SAFETY: pass-through.
    let r = unsafe { real(symbol, pfn, ver, flags) };
    if r == 0 {
        map_proc(symbol, pfn, ver as i64, flags);
    }
    r
}

pub(super) unsafe extern "C" fn w_cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: PP,
    ver: c_int,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    let Some(real) = real_fn::<GetProcV2>(Api::CuGetProcAddressV2) else {
        return CUDA_ERROR_NOT_FOUND;
    };
    // SAFETY: pass-through.
    let r = unsafe { real(symbol, pfn, ver, flags, status) };
    if r == 0 {
        map_proc(symbol, pfn, ver as i64, flags);
    }
    r
}
