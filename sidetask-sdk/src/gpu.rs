//! GPU work through cudarc (driver API, loaded dynamically: it runs on the real `libcuda.so.1` or
//! on the test bed's stand-in). A [`Gpu`] is one device's primary context plus one non-blocking
//! stream that all of the task's work goes to, so that synchronizing that stream is the end of a
//! step.
//!
//! Real kernels: [`Gpu::gemm`] queues an fp32 GEMM through cuBLAS ([`crate::blas`]) on the task's
//! stream, on a real GPU and on the test bed alike (its stand-in BLAS times the GEMM by its
//! shape); the examples do their GPU work so.
//!
//! Simulated kernels: the test bed's driver accepts any module image and runs a kernel for the
//! nanoseconds in `kernelParams[0]` (`tests/simgpu/src/abi.rs`). [`Gpu::launch_ns`] launches such
//! a kernel by name, so a task can say "a 300 µs kernel called `fwd_gemm`". On a real GPU these
//! names must exist in a real module image ([`Gpu::load_module`]) and take a `u64` first
//! parameter.
use crate::blas::Blas;
use crate::error::{Result, SdkError};
use cudarc::driver::result as cu;
use cudarc::driver::sys;
use freeride_abi::now_ns;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicU64, Ordering};

/// The module image given to the simulated driver (any bytes are accepted there).
const SIM_MODULE_IMAGE: &[u8] = b"freeride-sidetask simulated module\0";

static NEXT_GPU_ID: AtomicU64 = AtomicU64::new(1);

/// A module loaded by [`Gpu::load_module`] (valid while that `Gpu` lives).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Module(sys::CUmodule);

/// A kernel handle of one [`Gpu`] (valid while that `Gpu` lives; launching it on another `Gpu` is
/// an error, not undefined behaviour).
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    func: sys::CUfunction,
    gpu_id: u64,
}

pub struct Gpu {
    id: u64,
    device: u32,
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    stream: sys::CUstream,
    modules: Vec<sys::CUmodule>,
    sim_module: Option<Module>,
    kernels: HashMap<String, Kernel>,
    first_launch_ns: Cell<Option<u64>>,
    launches: Cell<u64>,
    /// The start event recorded before the first launch since the last [`Gpu::end_step_mark`].
    step_start: Cell<Option<sys::CUevent>>,
    /// Timing events ready for reuse (all created by this Gpu).
    free_events: RefCell<Vec<sys::CUevent>>,
    /// cuBLAS on `stream`, made at the first [`Gpu::gemm`].
    blas: Option<Blas>,
}

/// One step's GPU work on the task's stream, bracketed by two events (from [`Gpu::end_step_mark`]).
/// Give it back with [`Gpu::finish_step_mark`] (or drop the `Gpu`).
#[derive(Debug)]
pub struct StepMark {
    start: sys::CUevent,
    end: sys::CUevent,
    /// Host time of the step's first launch.
    pub first_launch_ns: u64,
    gpu_id: u64,
}

// SAFETY: CUDA driver handles (context, stream, module, function) are process-wide and may be
// used from any thread; every method that calls the driver first makes this context current on
// the calling thread. `Gpu` is not `Sync` (its `Cell`s), so one thread uses it at a time.
unsafe impl Send for Gpu {}

/// Whether a CUDA driver library can be loaded (without panicking, unlike a first cudarc call).
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the candidate library names.
    unsafe { sys::is_culib_present() }
}

/// The physical GPU of device ordinal `device` of this process, whose grant block the task reads:
/// its PCI bus id from the driver (`cuDeviceGetPCIBusId`), if the process has a driver loaded
/// and initialized (never loads or initializes one itself); `None` otherwise.
pub fn named_gpu(device: u32) -> Option<freeride_abi::GpuId> {
    type GetBusId = unsafe extern "C" fn(*mut std::ffi::c_char, i32, i32) -> i32;
    type DeviceGet = unsafe extern "C" fn(*mut i32, i32) -> i32;
    // SAFETY: dlopen with RTLD_NOLOAD only returns a library already loaded (never loads one).
    let h = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if h.is_null() {
        return None;
    }
    // SAFETY: live handle, NUL-terminated names.
    let (get, bus) = unsafe {
        (
            libc::dlsym(h, c"cuDeviceGet".as_ptr()),
            libc::dlsym(h, c"cuDeviceGetPCIBusId".as_ptr()),
        )
    };
    let named = (!get.is_null() && !bus.is_null()).then(|| {
        // SAFETY: the driver's cuDeviceGet and cuDeviceGetPCIBusId, of these C signatures.
        let (get, bus) = unsafe {
            (
                std::mem::transmute::<*mut std::ffi::c_void, DeviceGet>(get),
                std::mem::transmute::<*mut std::ffi::c_void, GetBusId>(bus),
            )
        };
        let mut dev = 0i32;
        let mut buf = [0 as std::ffi::c_char; 32];
        // SAFETY: out-pointers we own; the driver writes at most `len` bytes (NUL included).
        let ok = unsafe {
            get(&mut dev, device as i32) == 0 && bus(buf.as_mut_ptr(), buf.len() as i32, dev) == 0
        };
        let bytes: Vec<u8> = buf.iter().map(|&c| c as u8).collect();
        ok.then(|| freeride_abi::GpuId::parse_bytes(&bytes))
            .flatten()
    });
    // SAFETY: the handle from our dlopen above (the library stays loaded: someone else holds it).
    unsafe { libc::dlclose(h) };
    named.flatten()
}

impl Gpu {
    /// Initializes the driver, retains `device`'s primary context and creates the task's stream.
    pub fn open(device: u32) -> Result<Gpu> {
        if !driver_present() {
            return Err(SdkError::NoDriver);
        }
        cu::init()?;
        let dev = cu::device::get(device as i32)?;
        // SAFETY: `dev` came from cuDeviceGet.
        let ctx = unsafe { cu::primary_ctx::retain(dev)? };
        // SAFETY: `ctx` is the primary context just retained.
        unsafe { cu::ctx::set_current(ctx)? };
        let stream = cu::stream::create(cu::stream::StreamKind::NonBlocking)?;
        Ok(Gpu {
            id: NEXT_GPU_ID.fetch_add(1, Ordering::Relaxed),
            device,
            dev,
            ctx,
            stream,
            modules: vec![],
            sim_module: None,
            kernels: HashMap::new(),
            first_launch_ns: Cell::new(None),
            launches: Cell::new(0),
            step_start: Cell::new(None),
            free_events: RefCell::new(vec![]),
            blas: None,
        })
    }

    pub fn device(&self) -> u32 {
        self.device
    }

    /// The task's stream (for code that launches by itself through the driver API).
    pub fn stream(&self) -> sys::CUstream {
        self.stream
    }

    pub fn make_current(&self) -> Result<()> {
        // SAFETY: `ctx` is retained for the life of `self`.
        unsafe { cu::ctx::set_current(self.ctx)? };
        Ok(())
    }

    /// Loads a module image (cubin/fatbin, or NUL-terminated PTX; the simulated driver takes any
    /// bytes). It stays loaded until the `Gpu` is dropped.
    pub fn load_module(&mut self, image: &[u8]) -> Result<Module> {
        self.make_current()?;
        let mut owned = image.to_vec();
        if owned.last() != Some(&0) {
            owned.push(0);
        }
        // SAFETY: `owned` is a readable NUL-terminated buffer that outlives the call (the driver
        // copies the image).
        let m = unsafe { cu::module::load_data(owned.as_ptr() as *const c_void)? };
        self.modules.push(m);
        Ok(Module(m))
    }

    /// A kernel of a module loaded by [`Gpu::load_module`].
    pub fn function(&mut self, module: Module, name: &str) -> Result<Kernel> {
        if !self.modules.contains(&module.0) {
            return Err(SdkError::Driver("module not loaded by this Gpu".into()));
        }
        self.make_current()?;
        let cname = CString::new(name).map_err(|_| SdkError::Driver("NUL in name".into()))?;
        // SAFETY: `module` is loaded (checked above) and stays loaded while `self` lives.
        let func = unsafe { cu::module::get_function(module.0, cname)? };
        Ok(Kernel {
            func,
            gpu_id: self.id,
        })
    }

    /// A simulated kernel called `name` (loaded once, then cached).
    pub fn kernel(&mut self, name: &str) -> Result<Kernel> {
        if let Some(k) = self.kernels.get(name) {
            return Ok(*k);
        }
        let m = match self.sim_module {
            Some(m) => m,
            None => {
                let m = self.load_module(SIM_MODULE_IMAGE)?;
                self.sim_module = Some(m);
                m
            }
        };
        let k = self.function(m, name)?;
        self.kernels.insert(name.to_string(), k);
        Ok(k)
    }

    /// Queues `kernel` on the task's stream with one `u64` parameter: its run time in ns.
    pub fn launch(&self, kernel: &Kernel, duration_ns: u64) -> Result<()> {
        if kernel.gpu_id != self.id {
            return Err(SdkError::Driver("kernel belongs to another Gpu".into()));
        }
        self.make_current()?;
        self.mark_step_start()?;
        let mut ns = duration_ns;
        let mut params = [&mut ns as *mut u64 as *mut c_void];
        // SAFETY: `kernel.func` comes from a module of this Gpu that is still loaded; the single
        // parameter points to a live u64 and the driver copies parameter values at launch.
        unsafe {
            cu::launch_kernel(
                kernel.func,
                (1, 1, 1),
                (1, 1, 1),
                0,
                self.stream,
                &mut params,
            )?
        };
        self.launches.set(self.launches.get() + 1);
        Ok(())
    }

    /// Records the step's start event before its first launch: CUDA events time the step on the
    /// GPU, so a step queued behind another one is measured alone. The context must be current.
    fn mark_step_start(&self) -> Result<()> {
        if self.first_launch_ns.get().is_some() {
            return Ok(());
        }
        let ev = self.event()?;
        // SAFETY: `ev` is an event of this Gpu's (current) context and `stream` is ours.
        if let Err(e) = unsafe { cu::event::record(ev, self.stream) } {
            self.free_events.borrow_mut().push(ev);
            return Err(e.into());
        }
        if let Some(old) = self.step_start.replace(Some(ev)) {
            self.free_events.borrow_mut().push(old);
        }
        self.first_launch_ns.set(Some(now_ns()));
        Ok(())
    }

    /// Queues C (m x n) = A (m x k) . B (k x n) on the task's stream through cuBLAS: fp32,
    /// column-major device buffers of at least those sizes (from [`crate::Ctx::alloc`]). A real
    /// kernel on a GPU; on the test bed it runs m*n*k/1000 ns.
    pub fn gemm(&mut self, m: u32, n: u32, k: u32, a: u64, b: u64, c: u64) -> Result<()> {
        self.prepare_gemm()?;
        self.mark_step_start()?;
        if let Some(blas) = &self.blas {
            blas.sgemm(m, n, k, a, b, c)?;
        }
        self.launches.set(self.launches.get() + 1);
        Ok(())
    }

    /// Loads cuBLAS and makes its handle (done by the first [`Gpu::gemm`] otherwise: call it in a
    /// task's `init`, so that the first step's time is the step's own).
    pub fn prepare_gemm(&mut self) -> Result<()> {
        self.make_current()?;
        if self.blas.is_none() {
            self.blas = Some(Blas::new(self.stream as *mut c_void)?);
        }
        Ok(())
    }

    /// Sets `bytes` bytes of device memory at `ptr` to `byte` (synchronously), e.g. to give a
    /// task's GEMM operands finite values.
    pub fn fill(&self, ptr: u64, bytes: u64, byte: u8) -> Result<()> {
        self.make_current()?;
        // SAFETY: the caller passes a device allocation of at least `bytes` bytes.
        unsafe { cu::memset_d8_sync(ptr as sys::CUdeviceptr, byte, bytes as usize)? };
        Ok(())
    }

    /// [`Gpu::kernel`] + [`Gpu::launch`].
    pub fn launch_ns(&mut self, name: &str, duration_ns: u64) -> Result<()> {
        let k = self.kernel(name)?;
        self.launch(&k, duration_ns)
    }

    /// Waits until everything queued on the task's stream has run.
    pub fn synchronize(&self) -> Result<()> {
        self.make_current()?;
        // SAFETY: `stream` was created by us and is destroyed only in Drop.
        unsafe { cu::stream::synchronize(self.stream)? };
        Ok(())
    }

    /// The time of the first launch since the last call (the start of a step's GPU work).
    pub fn take_first_launch_ns(&self) -> Option<u64> {
        if let Some(ev) = self.step_start.take() {
            self.free_events.borrow_mut().push(ev);
        }
        self.first_launch_ns.take()
    }

    /// A timing event (reused, or created in the current context).
    fn event(&self) -> Result<sys::CUevent> {
        if let Some(ev) = self.free_events.borrow_mut().pop() {
            return Ok(ev);
        }
        Ok(cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)?)
    }

    /// Ends the GPU work of the current step: records an end event after the step's launches.
    /// None if nothing was launched through [`Gpu::launch`] since the last mark.
    pub fn end_step_mark(&self) -> Result<Option<StepMark>> {
        let Some(start) = self.step_start.take() else {
            self.first_launch_ns.set(None);
            return Ok(None);
        };
        let first_launch_ns = self.first_launch_ns.take().unwrap_or_else(now_ns);
        self.make_current()?;
        let end = self.event()?;
        // SAFETY: `end` is an event of this Gpu's context and `stream` is ours.
        if let Err(e) = unsafe { cu::event::record(end, self.stream) } {
            self.free_events.borrow_mut().extend([start, end]);
            return Err(e.into());
        }
        Ok(Some(StepMark {
            start,
            end,
            first_launch_ns,
            gpu_id: self.id,
        }))
    }

    /// Waits for the step's GPU work and returns its GPU time (start to end event) in ns; the
    /// events go back to the pool.
    pub fn finish_step_mark(&self, mark: StepMark) -> Result<u64> {
        if mark.gpu_id != self.id {
            return Err(SdkError::Driver("step mark belongs to another Gpu".into()));
        }
        self.make_current()?;
        // SAFETY: both events are live events of this Gpu, recorded on its stream in this order.
        let r = unsafe {
            cu::event::synchronize(mark.end).and_then(|()| cu::event::elapsed(mark.start, mark.end))
        };
        self.free_events.borrow_mut().extend([mark.start, mark.end]);
        let ms = r?;
        Ok((ms.max(0.0) as f64 * 1e6).round() as u64)
    }

    pub fn launches(&self) -> u64 {
        self.launches.get()
    }

    /// (free, total) device memory.
    pub fn mem_info(&self) -> Result<(usize, usize)> {
        self.make_current()?;
        Ok(cu::mem_get_info()?)
    }

    /// Raw device allocation (no budget: use `MemBudget` or `Ctx::alloc`).
    pub(crate) fn raw_alloc(&self, bytes: usize) -> Result<sys::CUdeviceptr> {
        self.make_current()?;
        // SAFETY: a plain synchronous allocation in the current context.
        Ok(unsafe { cu::malloc_sync(bytes)? })
    }

    pub(crate) fn raw_free(&self, ptr: sys::CUdeviceptr) -> Result<()> {
        self.make_current()?;
        // SAFETY: callers pass only pointers returned by `raw_alloc` of this Gpu, once.
        unsafe { cu::free_sync(ptr)? };
        Ok(())
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        if self.make_current().is_err() {
            return;
        }
        // cuBLAS's handle goes before the stream it is bound to.
        drop(self.blas.take());
        // SAFETY: the stream and modules were created by this Gpu and are released exactly once;
        // errors on teardown are ignored (nothing useful can be done with them).
        unsafe {
            let _ = cu::stream::synchronize(self.stream);
            let _ = cu::stream::destroy(self.stream);
            let pending = self.step_start.take();
            for ev in self.free_events.get_mut().drain(..).chain(pending) {
                let _ = cu::event::destroy(ev);
            }
            for m in self.modules.drain(..) {
                let _ = cu::module::unload(m);
            }
            let _ = cu::primary_ctx::release(self.dev);
        }
    }
}
