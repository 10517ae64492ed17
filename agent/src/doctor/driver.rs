//! The CUDA driver as a trainer would find it: `libcuda.so.1` on the loader path, `cuInit`, the
//! driver API version, the devices; and the NVIDIA kernel module's version where it is loaded.
use super::{Finding, Level};
use std::ffi::{c_char, c_int, c_uint, CStr};

/// The oldest driver API freeride supports: CUDA 12.0 (`cuGetProcAddress_v2`, through which the
/// runtime, NCCL and cuBLAS reach the driver, and the per-thread launch entry points it hooks).
pub const MIN_DRIVER_API: i32 = 12000;
/// The driver API the test bed implements and freeride is tested against.
pub const TESTED_DRIVER_API: i32 = 13000;

const CHECK: &str = "driver";

type CuInit = unsafe extern "C" fn(c_uint) -> c_int;
type CuIntOut = unsafe extern "C" fn(*mut c_int) -> c_int;
type CuDeviceGetName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;

/// `major.minor` of a driver API version number (13000 -> 13.0).
pub fn version_text(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// Resolves `name` in `handle`.
fn sym<T: Copy>(handle: *mut libc::c_void, name: &CStr) -> Option<T> {
    // SAFETY: `handle` is a live dlopen handle and `name` a NUL-terminated string.
    let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
    if p.is_null() {
        return None;
    }
    assert_eq!(
        std::mem::size_of::<T>(),
        std::mem::size_of::<*mut libc::c_void>()
    );
    // SAFETY: T is a function-pointer type of the same size as a pointer (asserted) whose
    // signature is the CUDA driver API's for `name`.
    Some(unsafe { std::mem::transmute_copy::<*mut libc::c_void, T>(&p) })
}

/// Loads `lib` (default `libcuda.so.1`) and reports what it says.
pub fn check(lib: &str) -> Vec<Finding> {
    let mut out = vec![];
    if let Ok(v) = std::fs::read_to_string("/proc/driver/nvidia/version") {
        let first = v.lines().next().unwrap_or("").trim();
        let ver = first
            .split_whitespace()
            .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
            .unwrap_or(first);
        out.push(Finding::new(
            CHECK,
            Level::Info,
            format!("NVIDIA kernel module {ver}"),
        ));
    }
    let Ok(cname) = std::ffi::CString::new(lib) else {
        out.push(Finding::new(CHECK, Level::Fail, "NUL in the library name"));
        return out;
    };
    // SAFETY: dlopen with a NUL-terminated name; the handle is never closed (a driver may start
    // threads).
    let h = unsafe { libc::dlopen(cname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        // SAFETY: dlerror returns NULL or a NUL-terminated message.
        let err = unsafe { libc::dlerror() };
        let msg = if err.is_null() {
            String::new()
        } else {
            // SAFETY: non-NULL, NUL-terminated (checked above).
            unsafe { CStr::from_ptr(err) }
                .to_string_lossy()
                .into_owned()
        };
        out.push(Finding::new(
            CHECK,
            Level::Fail,
            format!("cannot load {lib} ({msg}): no NVIDIA driver on this node, or its library is not on the loader path (LD_LIBRARY_PATH, ldconfig); in a container, run it with the NVIDIA container runtime"),
        ));
        return out;
    }
    let (Some(init), Some(get_version), Some(count)) = (
        sym::<CuInit>(h, c"cuInit"),
        sym::<CuIntOut>(h, c"cuDriverGetVersion"),
        sym::<CuIntOut>(h, c"cuDeviceGetCount"),
    ) else {
        out.push(Finding::new(
            CHECK,
            Level::Fail,
            format!(
                "{lib} lacks cuInit, cuDriverGetVersion or cuDeviceGetCount: not a CUDA driver"
            ),
        ));
        return out;
    };
    let mut v: c_int = 0;
    // SAFETY: a valid out-pointer.
    let rc = unsafe { get_version(&mut v) };
    if rc != 0 {
        out.push(Finding::new(
            CHECK,
            Level::Fail,
            format!("cuDriverGetVersion failed (CUresult {rc})"),
        ));
        return out;
    }
    if v < MIN_DRIVER_API {
        out.push(Finding::new(
            CHECK,
            Level::Fail,
            format!(
                "the driver supports CUDA {} only; freeride needs CUDA {} or newer (tested with {}): update the NVIDIA driver",
                version_text(v),
                version_text(MIN_DRIVER_API),
                version_text(TESTED_DRIVER_API)
            ),
        ));
        return out;
    }
    // SAFETY: cuInit takes flags 0.
    let rc = unsafe { init(0) };
    if rc != 0 {
        let hint = match rc {
            100 => "no CUDA device is visible (CUDA_VISIBLE_DEVICES, the container's GPU request)",
            999 | 3 => "the driver could not initialize (device nodes /dev/nvidia*, their permissions, a driver/library version mismatch)",
            _ => "see the driver's documentation for this code",
        };
        out.push(Finding::new(
            CHECK,
            Level::Fail,
            format!("cuInit failed with CUresult {rc}: {hint}"),
        ));
        return out;
    }
    let mut n: c_int = 0;
    // SAFETY: a valid out-pointer; the driver is initialized.
    let rc = unsafe { count(&mut n) };
    if rc != 0 || n <= 0 {
        out.push(Finding::new(
            CHECK,
            Level::Fail,
            format!("cuDeviceGetCount: {n} devices (CUresult {rc}): no GPU to harvest"),
        ));
        return out;
    }
    let name = sym::<CuDeviceGetName>(h, c"cuDeviceGetName").and_then(|f| {
        let mut buf = [0 as c_char; 128];
        // SAFETY: the buffer is 128 bytes and the driver writes at most `len` of them.
        (unsafe { f(buf.as_mut_ptr(), buf.len() as c_int, 0) } == 0).then(|| {
            // SAFETY: the driver NUL-terminates within the buffer; the last byte is kept 0.
            buf[127] = 0;
            unsafe { CStr::from_ptr(buf.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        })
    });
    out.push(Finding::new(
        CHECK,
        Level::Ok,
        format!(
            "{lib}: CUDA driver API {}, {n} device(s){}",
            version_text(v),
            name.map(|s| format!(", device 0: {s}")).unwrap_or_default()
        ),
    ));
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn versions_read_as_cuda_does() {
        assert_eq!(super::version_text(13000), "13.0");
        assert_eq!(super::version_text(12080), "12.8");
    }
}
