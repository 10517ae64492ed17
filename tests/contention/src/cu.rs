//! The few driver calls the trainer and side-task programs make, through the stand-in driver's
//! `cuGetProcAddress_v2` (as NCCL and cuBLAS reach the driver).
use simgpu::driver_entry::{fn_ptr, DriverEntry};
use std::ffi::{c_char, c_void, CStr};

type P = *mut c_void;

/// The driver entry points used here.
pub struct Cu {
    init: unsafe extern "C" fn(u32) -> i32,
    retain: unsafe extern "C" fn(*mut P, i32) -> i32,
    set_current: unsafe extern "C" fn(P) -> i32,
    module_load_data: unsafe extern "C" fn(*mut P, *const c_void) -> i32,
    module_get_function: unsafe extern "C" fn(*mut P, P, *const c_char) -> i32,
    stream_create: unsafe extern "C" fn(*mut P, u32) -> i32,
    stream_synchronize: unsafe extern "C" fn(P) -> i32,
    event_create: unsafe extern "C" fn(*mut P, u32) -> i32,
    event_record: unsafe extern "C" fn(P, P) -> i32,
    event_synchronize: unsafe extern "C" fn(P) -> i32,
    event_elapsed: unsafe extern "C" fn(*mut f32, P, P) -> i32,
    launch: unsafe extern "C" fn(P, u32, u32, u32, u32, u32, u32, u32, P, *mut P, *mut P) -> i32,
}

fn check(what: &str, r: i32) -> Result<(), String> {
    if r == 0 {
        Ok(())
    } else {
        Err(format!("{what} failed with CUresult {r}"))
    }
}

macro_rules! get {
    ($e:expr, $name:literal) => {{
        let p = $e
            .get(
                CStr::from_bytes_with_nul(concat!($name, "\0").as_bytes()).unwrap(),
                13000,
                0,
            )
            .map_err(|(r, s)| format!("{}: not found (CUresult {r}, status {s})", $name))?;
        // SAFETY: the driver hands out $name with the signature of the field it is stored in.
        unsafe { fn_ptr(p) }
    }};
}

impl Cu {
    /// Opens `libcuda.so.1` (the stand-in, by `LD_LIBRARY_PATH`) and initializes it.
    pub fn open() -> Result<Cu, String> {
        let e = DriverEntry::open().map_err(|e| format!("libcuda.so.1: {e}"))?;
        let cu = Cu {
            init: get!(e, "cuInit"),
            retain: get!(e, "cuDevicePrimaryCtxRetain"),
            set_current: get!(e, "cuCtxSetCurrent"),
            module_load_data: get!(e, "cuModuleLoadData"),
            module_get_function: get!(e, "cuModuleGetFunction"),
            stream_create: get!(e, "cuStreamCreate"),
            stream_synchronize: get!(e, "cuStreamSynchronize"),
            event_create: get!(e, "cuEventCreate"),
            event_record: get!(e, "cuEventRecord"),
            event_synchronize: get!(e, "cuEventSynchronize"),
            event_elapsed: get!(e, "cuEventElapsedTime"),
            launch: get!(e, "cuLaunchKernel"),
        };
        // SAFETY: cuInit takes flags only.
        check("cuInit", unsafe { (cu.init)(0) })?;
        Ok(cu)
    }
}

/// A context on one device with one stream and a kernel handle.
pub struct Gpu<'a> {
    cu: &'a Cu,
    stream: P,
    func: P,
}

impl<'a> Gpu<'a> {
    /// Device `device`'s primary context, made current, a new stream and kernel `name`.
    pub fn new(cu: &'a Cu, device: i32, name: &str) -> Result<Gpu<'a>, String> {
        let (mut ctx, mut module, mut func, mut stream) = (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        let name = std::ffi::CString::new(name).map_err(|e| e.to_string())?;
        // SAFETY: valid out-pointers; the stand-in accepts any module image.
        unsafe {
            check("cuDevicePrimaryCtxRetain", (cu.retain)(&mut ctx, device))?;
            check("cuCtxSetCurrent", (cu.set_current)(ctx))?;
            check(
                "cuModuleLoadData",
                (cu.module_load_data)(&mut module, c"contend".as_ptr().cast()),
            )?;
            check(
                "cuModuleGetFunction",
                (cu.module_get_function)(&mut func, module, name.as_ptr()),
            )?;
            check("cuStreamCreate", (cu.stream_create)(&mut stream, 0))?;
        }
        Ok(Gpu { cu, stream, func })
    }

    /// Launches the kernel for `duration_ns` filling `fill` percent of the device.
    pub fn launch(&self, duration_ns: u64, fill: u32) -> Result<(), String> {
        let mut word = simgpu::abi::kernel_word(duration_ns, fill);
        let mut params: [P; 1] = [(&mut word as *mut u64).cast()];
        let null = std::ptr::null_mut();
        // SAFETY: the function and stream are ours; params points to a live u64 that the driver
        // copies at launch.
        check("cuLaunchKernel", unsafe {
            (self.cu.launch)(
                self.func,
                132,
                1,
                1,
                128,
                1,
                1,
                0,
                self.stream,
                params.as_mut_ptr(),
                null,
            )
        })
    }

    /// A new event.
    pub fn event(&self) -> Result<P, String> {
        let mut e = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        check("cuEventCreate", unsafe {
            (self.cu.event_create)(&mut e, 0)
        })?;
        Ok(e)
    }

    /// Records `event` on the stream.
    pub fn record(&self, event: P) -> Result<(), String> {
        // SAFETY: an event of this context, our stream.
        check("cuEventRecord", unsafe {
            (self.cu.event_record)(event, self.stream)
        })
    }

    /// Milliseconds from `a` to `b` (GPU timestamps), once `b` has completed.
    pub fn elapsed_ms(&self, a: P, b: P) -> Result<f64, String> {
        let mut ms = 0f32;
        // SAFETY: events of this context; valid out-pointer.
        unsafe {
            check("cuEventSynchronize", (self.cu.event_synchronize)(b))?;
            check("cuEventElapsedTime", (self.cu.event_elapsed)(&mut ms, a, b))?;
        }
        Ok(f64::from(ms))
    }

    /// Waits for the stream.
    pub fn synchronize(&self) -> Result<(), String> {
        // SAFETY: our stream.
        check("cuStreamSynchronize", unsafe {
            (self.cu.stream_synchronize)(self.stream)
        })
    }
}
