//! Real GPU work for side tasks: single-precision GEMMs through cuBLAS, loaded at run time
//! (`libcublas.so.13`, else `.12`, else `libcublas.so`), on the task's stream. The same calls run
//! on a real GPU (the GEMM computes) and on the test bed, whose stand-in cuBLAS times a GEMM at
//! 1000 multiply-adds per ns on the simulated GPU (`tests/standins/cublas`): one code path for
//! both, and the task's GPU time is what its shapes cost.
use crate::error::{Result, SdkError};
use std::ffi::{c_int, c_void, CStr};

/// cuBLAS's names, newest first.
const LIBS: [&CStr; 3] = [c"libcublas.so.13", c"libcublas.so.12", c"libcublas.so"];
const OP_N: c_int = 0;

type Create = unsafe extern "C" fn(*mut *mut c_void) -> c_int;
type Destroy = unsafe extern "C" fn(*mut c_void) -> c_int;
type SetStream = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
#[allow(clippy::type_complexity)]
type Sgemm = unsafe extern "C" fn(
    *mut c_void,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const f32,
    *const f32,
    c_int,
    *const f32,
    c_int,
    *const f32,
    *mut f32,
    c_int,
) -> c_int;

/// One cuBLAS handle bound to a stream.
pub(crate) struct Blas {
    handle: *mut c_void,
    sgemm: Sgemm,
    destroy: Destroy,
}

fn sym(lib: *mut c_void, name: &CStr) -> Result<*mut c_void> {
    // SAFETY: `lib` is a live dlopen handle, `name` NUL-terminated.
    let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
    if p.is_null() {
        return Err(SdkError::Driver(format!(
            "cuBLAS lacks {}",
            name.to_string_lossy()
        )));
    }
    Ok(p)
}

impl Blas {
    /// Loads cuBLAS, creates a handle in the current context and binds it to `stream`.
    pub(crate) fn new(stream: *mut c_void) -> Result<Blas> {
        let lib = LIBS
            .iter()
            // SAFETY: dlopen of a NUL-terminated name; the library stays loaded for the process.
            .map(|n| unsafe { libc::dlopen(n.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) })
            .find(|h| !h.is_null())
            .ok_or_else(|| {
                SdkError::Driver(
                    "cuBLAS not found (libcublas.so.13 or .12 on the loader path: CUDA's lib64, or the test bed's stand-ins)".into(),
                )
            })?;
        // SAFETY: the symbols are cuBLAS's v2 API with the signatures of the types above.
        let (create, set_stream, sgemm, destroy) = unsafe {
            (
                std::mem::transmute::<*mut c_void, Create>(sym(lib, c"cublasCreate_v2")?),
                std::mem::transmute::<*mut c_void, SetStream>(sym(lib, c"cublasSetStream_v2")?),
                std::mem::transmute::<*mut c_void, Sgemm>(sym(lib, c"cublasSgemm_v2")?),
                std::mem::transmute::<*mut c_void, Destroy>(sym(lib, c"cublasDestroy_v2")?),
            )
        };
        let mut handle = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the caller made the task's context current.
        let rc = unsafe { create(&mut handle) };
        if rc != 0 || handle.is_null() {
            return Err(SdkError::Driver(format!("cublasCreate_v2 failed ({rc})")));
        }
        // SAFETY: `handle` was just created; `stream` is the task's live stream.
        let rc = unsafe { set_stream(handle, stream) };
        if rc != 0 {
            // SAFETY: the handle is ours and destroyed once.
            unsafe { destroy(handle) };
            return Err(SdkError::Driver(format!(
                "cublasSetStream_v2 failed ({rc})"
            )));
        }
        Ok(Blas {
            handle,
            sgemm,
            destroy,
        })
    }

    /// Queues C (m x n) = A (m x k) . B (k x n), column-major fp32 device buffers of at least
    /// those sizes.
    pub(crate) fn sgemm(&self, m: u32, n: u32, k: u32, a: u64, b: u64, c: u64) -> Result<()> {
        let dim = |v: u32| {
            c_int::try_from(v)
                .map_err(|_| SdkError::Driver(format!("GEMM dimension {v} too large")))
        };
        let (mi, ni, ki) = (dim(m)?, dim(n)?, dim(k)?);
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: the handle is live; the pointers are device buffers the caller sized for the
        // shapes (cuBLAS reads them on the GPU, never on the host); alpha and beta are locals
        // read during the call (host pointer mode).
        let rc = unsafe {
            (self.sgemm)(
                self.handle,
                OP_N,
                OP_N,
                mi,
                ni,
                ki,
                &alpha,
                a as *const f32,
                mi.max(1),
                b as *const f32,
                ki.max(1),
                &beta,
                c as *mut f32,
                mi.max(1),
            )
        };
        if rc != 0 {
            return Err(SdkError::Driver(format!(
                "cublasSgemm_v2 {m}x{n}x{k} failed ({rc})"
            )));
        }
        Ok(())
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: the handle is ours and destroyed once; errors at teardown are ignored.
        unsafe { (self.destroy)(self.handle) };
    }
}

/// fp32 operands on a task's GPU for GEMMs of up to a given size: one A, B and C buffer, allocated
/// within the task's memory budget and filled with finite values (every byte 0x3c: each element
/// about 0.0115), shared by every GEMM a step queues. The GEMMs compute on a real GPU; their
/// results are not read back (the examples check their own host-side results).
pub struct Operands {
    a: u64,
    b: u64,
    c: u64,
    /// Elements of A, B and C.
    elems: [u64; 3],
}

/// The byte [`Operands`] fills its buffers with.
pub const FILL_BYTE: u8 = 0x3c;

impl Operands {
    /// Room for GEMMs whose A, B and C have at most `a`, `b` and `c` elements.
    pub fn alloc(ctx: &mut crate::Ctx, a: u64, b: u64, c: u64) -> Result<Operands> {
        ctx.gpu()?.prepare_gemm()?;
        let mut ptrs = [0u64; 3];
        for (p, elems) in ptrs.iter_mut().zip([a, b, c]) {
            let bytes = elems.max(1) * 4;
            *p = ctx.alloc(bytes)?;
            ctx.gpu()?.fill(*p, bytes, FILL_BYTE)?;
        }
        Ok(Operands {
            a: ptrs[0],
            b: ptrs[1],
            c: ptrs[2],
            elems: [a, b, c],
        })
    }

    /// Gives the buffers back (they are freed with the task's GPU otherwise).
    pub fn free(self, ctx: &mut crate::Ctx) -> Result<()> {
        for p in [self.a, self.b, self.c] {
            ctx.free(p)?;
        }
        Ok(())
    }

    /// Queues C (m x n) = A (m x k) . B (k x n) on the task's stream.
    pub fn gemm(&self, ctx: &mut crate::Ctx, m: u32, n: u32, k: u32) -> Result<()> {
        let need = [
            m as u64 * k as u64,
            k as u64 * n as u64,
            m as u64 * n as u64,
        ];
        if need.iter().zip(self.elems).any(|(n, have)| *n > have) {
            return Err(SdkError::Driver(format!(
                "GEMM {m}x{n}x{k} is larger than its operands ({:?} elements)",
                self.elems
            )));
        }
        ctx.gpu()?.gemm(m, n, k, self.a, self.b, self.c)
    }
}
