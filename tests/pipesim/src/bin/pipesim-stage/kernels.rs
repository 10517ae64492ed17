//! The compute kernels of a stage, reaching the driver by the paths a PyTorch process uses:
//! * nvcc-style: host stubs registered with `__cudaRegisterFatBinary`/`__cudaRegisterFunction`,
//!   launched with `__cudaLaunchKernel` (the `<<<>>>` lowering of CUDA 13);
//! * cuBLAS: `cublasSgemm_v2` and `cublasGemmEx` (the BLAS launches through `cuLaunchKernelEx`);
//! * Triton-style: `dlopen("libcuda.so.1")` + `dlsym(handle, "cuLaunchKernelEx")`, with the kernel
//!   from `cuModuleLoadData` + `cuModuleGetFunction`;
//! * one small CUDA graph (two kernel nodes) replayed once per iteration with `cudaGraphLaunch`.
//!
//! Each kernel goes by one of the four paths in turn ([`Kernels::launch`]).
use crate::cuda::{self, check, check_blas, Dim3, KernelNodeParams, Stream};
use pipesim::schedule::PhaseName;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

/// A phase's kernels (host stub, Triton name).
struct PhaseKernels {
    stub: extern "C" fn(),
    device_name: &'static CStr,
    triton_name: &'static CStr,
}

extern "C" fn fwd_stub() {
    std::hint::black_box(1);
}
extern "C" fn bwd_input_stub() {
    std::hint::black_box(2);
}
extern "C" fn bwd_weight_stub() {
    std::hint::black_box(3);
}
extern "C" fn graph_stub() {
    std::hint::black_box(4);
}

fn phase_kernels(p: PhaseName) -> PhaseKernels {
    match p {
        PhaseName::Forward => PhaseKernels {
            stub: fwd_stub,
            device_name: c"pipesim_fwd_layernorm_kernel",
            triton_name: c"triton_poi_fused_gelu_fwd_0",
        },
        PhaseName::BackwardInput => PhaseKernels {
            stub: bwd_input_stub,
            device_name: c"pipesim_bwd_input_layernorm_kernel",
            triton_name: c"triton_poi_fused_gelu_bwd_input_1",
        },
        PhaseName::BackwardWeight => PhaseKernels {
            stub: bwd_weight_stub,
            device_name: c"pipesim_bwd_weight_reduce_kernel",
            triton_name: c"triton_red_fused_sum_bwd_weight_2",
        },
    }
}

/// `__fatBinC_Wrapper_t`.
#[repr(C)]
struct FatbinWrapper {
    magic: c_int,
    version: c_int,
    data: *const u64,
    filename_or_fatbins: *const c_void,
}
// SAFETY: immutable static data; the pointers point to other statics.
unsafe impl Sync for FatbinWrapper {}

static FATBIN_DATA: [u64; 4] = [0x00100001ba55ed50, 0, 0, 0];
static FATBIN: FatbinWrapper = FatbinWrapper {
    magic: 0x466243b1,
    version: 1,
    data: FATBIN_DATA.as_ptr(),
    filename_or_fatbins: std::ptr::null(),
};

type ModuleLoadData = unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> c_int;
type ModuleGetFunction =
    unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const c_char) -> c_int;

/// `CUlaunchConfig`.
#[repr(C)]
struct LaunchConfig {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared_mem_bytes: c_uint,
    stream: Stream,
    attrs: *mut c_void,
    num_attrs: c_uint,
}
type LaunchKernelEx = unsafe extern "C" fn(
    *const LaunchConfig,
    *mut c_void,
    *mut *mut c_void,
    *mut *mut c_void,
) -> c_int;

/// Everything the stage launches with.
pub struct Kernels {
    stream: Stream,
    blas: *mut c_void,
    launch_ex: LaunchKernelEx,
    triton: [*mut c_void; 3],
    graph_exec: *mut c_void,
}

fn phase_index(p: PhaseName) -> usize {
    match p {
        PhaseName::Forward => 0,
        PhaseName::BackwardInput => 1,
        PhaseName::BackwardWeight => 2,
    }
}

impl Kernels {
    /// Registers the host stubs, creates the BLAS handle, loads the Triton kernels and builds the
    /// graph (of `graph_ns` in total) — all on `stream`.
    pub fn new(stream: Stream, graph_ns: u64) -> Result<Kernels, String> {
        // SAFETY: nvcc-style registration with static, NUL-terminated names that live forever.
        unsafe {
            let handle = cuda::__cudaRegisterFatBinary((&FATBIN as *const FatbinWrapper).cast());
            for p in [
                PhaseName::Forward,
                PhaseName::BackwardInput,
                PhaseName::BackwardWeight,
            ] {
                let k = phase_kernels(p);
                register(handle, k.stub, k.device_name);
            }
            register(handle, graph_stub, c"pipesim_graph_attention_kernel");
            cuda::__cudaRegisterFatBinaryEnd(handle);
        }
        let mut blas = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the handle is used on this thread only.
        unsafe {
            check_blas("cublasCreate_v2", cuda::cublasCreate_v2(&mut blas))?;
            check_blas("cublasSetStream_v2", cuda::cublasSetStream_v2(blas, stream))?;
        }
        let (launch_ex, triton) = load_triton()?;
        let graph_exec = build_graph(graph_ns)?;
        Ok(Kernels {
            stream,
            blas,
            launch_ex,
            triton,
            graph_exec,
        })
    }

    /// Replays the graph on the stream.
    pub fn launch_graph(&self) -> Result<(), String> {
        // SAFETY: the exec handle came from cudaGraphInstantiate.
        check("cudaGraphLaunch", unsafe {
            cuda::cudaGraphLaunch(self.graph_exec, self.stream)
        })
    }

    /// Queues one kernel of phase `p` running `ns`, by launch path `path` (of 4, rotating:
    /// the nvcc stub, cublasSgemm_v2, cublasGemmEx, the Triton-style kernel), so that every
    /// iteration uses all four paths.
    pub fn launch(&self, p: PhaseName, ns: u64, path: usize) -> Result<(), String> {
        let k = phase_kernels(p);
        match path % 4 {
            0 => self.launch_stub(k.stub, ns),
            1 => self.gemm(false, ns),
            2 => self.gemm(true, ns),
            _ => self.launch_triton(self.triton[phase_index(p)], ns),
        }
    }

    fn launch_stub(&self, stub: extern "C" fn(), ns: u64) -> Result<(), String> {
        let mut dur = ns;
        let mut args: [*mut c_void; 1] = [(&mut dur as *mut u64).cast()];
        // SAFETY: a registered host stub; args points to a local the runtime copies at launch.
        let r = unsafe {
            cuda::__cudaLaunchKernel(
                stub as *const c_void,
                Dim3::ONE,
                Dim3 { x: 256, y: 1, z: 1 },
                args.as_mut_ptr(),
                0,
                self.stream,
            )
        };
        check("__cudaLaunchKernel", r)
    }

    /// The stand-in BLAS does 1000 multiply-adds per ns, so an m x 1 x 1000 GEMM takes m ns.
    fn gemm(&self, ex: bool, mut ns: u64) -> Result<(), String> {
        const MAX_M: u64 = 1 << 30;
        let (alpha, beta) = (1.0f32, 0.0f32);
        while ns > 0 {
            let m = ns.min(MAX_M);
            ns -= m;
            let (m, n, k) = (m as c_int, 1, 1000);
            // SAFETY: the BLAS handle is live; operand pointers are never dereferenced by the stand-in.
            let r = unsafe {
                if ex {
                    cuda::cublasGemmEx(
                        self.blas,
                        0,
                        0,
                        m,
                        n,
                        k,
                        (&alpha as *const f32).cast(),
                        std::ptr::null(),
                        14, // CUDA_R_16BF
                        m,
                        std::ptr::null(),
                        14,
                        k,
                        (&beta as *const f32).cast(),
                        std::ptr::null_mut(),
                        14,
                        m,
                        68, // CUBLAS_COMPUTE_32F
                        -1, // CUBLAS_GEMM_DEFAULT
                    )
                } else {
                    cuda::cublasSgemm_v2(
                        self.blas,
                        0,
                        0,
                        m,
                        n,
                        k,
                        &alpha,
                        std::ptr::null(),
                        m,
                        std::ptr::null(),
                        k,
                        &beta,
                        std::ptr::null_mut(),
                        m,
                    )
                }
            };
            check_blas(if ex { "cublasGemmEx" } else { "cublasSgemm_v2" }, r)?;
        }
        Ok(())
    }

    fn launch_triton(&self, func: *mut c_void, ns: u64) -> Result<(), String> {
        let mut dur = ns;
        let mut args: [*mut c_void; 1] = [(&mut dur as *mut u64).cast()];
        let cfg = LaunchConfig {
            grid: [64, 1, 1],
            block: [128, 1, 1],
            shared_mem_bytes: 0,
            stream: self.stream,
            attrs: std::ptr::null_mut(),
            num_attrs: 0,
        };
        // SAFETY: func was loaded by the driver; cfg and args are locals that outlive the call.
        let r = unsafe { (self.launch_ex)(&cfg, func, args.as_mut_ptr(), std::ptr::null_mut()) };
        if r == 0 {
            Ok(())
        } else {
            Err(format!("cuLaunchKernelEx (dlsym) failed: {r}"))
        }
    }
}

impl Drop for Kernels {
    fn drop(&mut self) {
        // SAFETY: destroys the handle created in new().
        unsafe { cuda::cublasDestroy_v2(self.blas) };
    }
}

/// # Safety
/// `handle` comes from __cudaRegisterFatBinary; `name` is a static string.
unsafe fn register(handle: *mut *mut c_void, stub: extern "C" fn(), name: &'static CStr) {
    // SAFETY: per the function contract; the runtime keeps the pointers, which are static.
    unsafe {
        cuda::__cudaRegisterFunction(
            handle,
            stub as *const c_char,
            name.as_ptr().cast_mut(),
            name.as_ptr(),
            -1,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
}

/// Triton's way: its own dlopen of the driver and dlsym of each entry point.
fn load_triton() -> Result<(LaunchKernelEx, [*mut c_void; 3]), String> {
    // SAFETY: dlopen/dlsym with static names; the handle stays open for the process's life; the
    // pointers are cast to the signatures cuda.h gives these names.
    unsafe {
        let h = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if h.is_null() {
            return Err("dlopen(libcuda.so.1) failed".into());
        }
        let sym = |n: &CStr| {
            let p = libc::dlsym(h, n.as_ptr());
            if p.is_null() {
                Err(format!("dlsym({}) failed", n.to_string_lossy()))
            } else {
                Ok(p)
            }
        };
        let load: ModuleLoadData =
            std::mem::transmute::<*mut c_void, ModuleLoadData>(sym(c"cuModuleLoadData")?);
        let get: ModuleGetFunction =
            std::mem::transmute::<*mut c_void, ModuleGetFunction>(sym(c"cuModuleGetFunction")?);
        let launch: LaunchKernelEx =
            std::mem::transmute::<*mut c_void, LaunchKernelEx>(sym(c"cuLaunchKernelEx")?);
        let mut module = std::ptr::null_mut();
        let r = load(&mut module, c"// triton cubin stand-in".as_ptr().cast());
        if r != 0 {
            return Err(format!("cuModuleLoadData failed: {r}"));
        }
        let mut funcs = [std::ptr::null_mut(); 3];
        for p in [
            PhaseName::Forward,
            PhaseName::BackwardInput,
            PhaseName::BackwardWeight,
        ] {
            let name = phase_kernels(p).triton_name;
            let r = get(&mut funcs[phase_index(p)], module, name.as_ptr());
            if r != 0 {
                return Err(format!(
                    "cuModuleGetFunction({}) failed: {r}",
                    name.to_string_lossy()
                ));
            }
        }
        Ok((launch, funcs))
    }
}

/// A graph of two kernel nodes (node 2 after node 1) lasting `ns` in total.
fn build_graph(ns: u64) -> Result<*mut c_void, String> {
    let mut durs = [ns / 2, ns - ns / 2];
    let mut graph = std::ptr::null_mut();
    let mut prev: *mut c_void = std::ptr::null_mut();
    // SAFETY: out-pointers are locals; node params point to locals that the runtime copies when
    // the node is added (CUDA copies kernel parameter values into the node).
    unsafe {
        check("cudaGraphCreate", cuda::cudaGraphCreate(&mut graph, 0))?;
        for d in durs.iter_mut() {
            let mut args: [*mut c_void; 1] = [(d as *mut u64).cast()];
            let params = KernelNodeParams {
                func: graph_stub as *const c_void,
                grid_dim: Dim3::ONE,
                block_dim: Dim3 { x: 128, y: 1, z: 1 },
                shared_mem_bytes: 0,
                kernel_params: args.as_mut_ptr(),
                extra: std::ptr::null_mut(),
            };
            let mut node = std::ptr::null_mut();
            let (deps, n) = if prev.is_null() {
                (std::ptr::null(), 0)
            } else {
                (&prev as *const *mut c_void, 1)
            };
            check(
                "cudaGraphAddKernelNode",
                cuda::cudaGraphAddKernelNode(&mut node, graph, deps, n, &params),
            )?;
            prev = node;
        }
        let mut exec = std::ptr::null_mut();
        check(
            "cudaGraphInstantiate",
            cuda::cudaGraphInstantiate(&mut exec, graph, 0),
        )?;
        Ok(exec)
    }
}
