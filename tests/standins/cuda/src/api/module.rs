//! Modules and functions: any image loads; a function is its name.
use crate::guard::{cstr, guard, out};
use crate::handles::Registry;
use crate::state;
use crate::types::*;
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex};

/// A loaded module (its image is not looked at).
pub struct Module {
    _id: u64,
}

/// A kernel: its name decides its kind (`nccl*` = communication).
pub struct Function {
    pub name: Arc<str>,
    pub comm: bool,
}

pub static MODULES: Registry<Module> = Registry::new();
pub static FUNCTIONS: Registry<Function> = Registry::new();
/// One `CUfunction` per name, shared by all modules.
static BY_NAME: Mutex<Option<HashMap<String, usize>>> = Mutex::new(None);

/// The `CUfunction` for `name` (made on first use; lives as long as the process).
pub fn function_handle(name: &str) -> usize {
    let mut g = BY_NAME.lock().unwrap_or_else(|e| e.into_inner());
    let m = g.get_or_insert_with(HashMap::new);
    if let Some(&h) = m.get(name) {
        return h;
    }
    let h = FUNCTIONS.insert(Arc::new(Function {
        name: Arc::from(name),
        comm: name.starts_with(simgpu::abi::COMM_KERNEL_PREFIX),
    }));
    m.insert(name.to_owned(), h);
    h
}

/// The function named by `h`.
pub fn function(h: CUfunction) -> crate::guard::CuResult<Arc<Function>> {
    FUNCTIONS.get(h as usize).ok_or(CUDA_ERROR_INVALID_HANDLE)
}

fn load(module: *mut CUmodule) -> crate::guard::CuResult {
    state::current()?;
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let m = Arc::new(Module {
        _id: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
    });
    out(module, MODULES.insert(m) as CUmodule)
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(
    module: *mut CUmodule,
    _image: *const c_void,
) -> CUresult {
    guard(|| load(module))
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoad(module: *mut CUmodule, fname: *const c_char) -> CUresult {
    guard(|| {
        cstr(fname)?;
        load(module)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    hfunc: *mut CUfunction,
    hmod: CUmodule,
    name: *const c_char,
) -> CUresult {
    guard(|| {
        state::require_init()?;
        MODULES
            .get(hmod as usize)
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let name = cstr(name)?;
        out(hfunc, function_handle(name) as CUfunction)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleUnload(hmod: CUmodule) -> CUresult {
    guard(|| {
        state::require_init()?;
        MODULES
            .remove(hmod as usize)
            .map(|_| ())
            .ok_or(CUDA_ERROR_INVALID_HANDLE)
    })
}
