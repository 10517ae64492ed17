//! The one table of entry points, and `cuGetProcAddress` / `cuGetProcAddress_v2` over it.
//!
//! Like the real driver, a symbol is looked up by its *base* name (`cuMemAlloc`, `cuStreamDestroy`,
//! `cuLaunchKernel`) and the version asked for picks the variant: the entry with the highest
//! `since` not above the requested CUDA version (e.g. `cuEventElapsedTime` -> `_v2` from 12.8,
//! `cuCtxSynchronize` -> `_v2(ctx)` from 13.0, `cuGraphInstantiate` -> `cuGraphInstantiateWithFlags`
//! from 12.0). With `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM` the `_ptsz` variant is handed
//! out where one exists. As a convenience (the real driver does not), an exact exported name such
//! as `cuMemAlloc_v2` also resolves.
use crate::api::{context::*, device::*, error::*, event::*, graph::*, launch::*, memory::*};
use crate::api::{module::*, pool::*, stream::*, vmm::*};
use crate::guard::{cstr, guard, out};
use crate::types::*;
use std::ffi::{c_char, c_void};
use std::sync::OnceLock;

/// One variant of an entry point.
pub struct Entry {
    /// The base name callers ask for.
    pub name: &'static str,
    /// The first CUDA version (1000 x major + 10 x minor) this variant answers for.
    pub since: i32,
    /// The exported symbol and its address.
    pub export: &'static str,
    pub addr: usize,
    /// The per-thread-default-stream variant, if any.
    pub ptsz: Option<(&'static str, usize)>,
}

macro_rules! entry {
    ($name:literal, $since:literal, $f:ident) => {
        Entry {
            name: $name,
            since: $since,
            export: stringify!($f),
            addr: $f as *const () as usize,
            ptsz: None,
        }
    };
    ($name:literal, $since:literal, $f:ident, $p:ident) => {
        Entry {
            name: $name,
            since: $since,
            export: stringify!($f),
            addr: $f as *const () as usize,
            ptsz: Some((stringify!($p), $p as *const () as usize)),
        }
    };
}

fn build() -> Vec<Entry> {
    vec![
        entry!("cuInit", 2000, cuInit),
        entry!("cuDriverGetVersion", 2020, cuDriverGetVersion),
        entry!("cuGetErrorString", 6000, cuGetErrorString),
        entry!("cuGetErrorName", 6000, cuGetErrorName),
        entry!("cuGetProcAddress", 11030, cuGetProcAddress),
        entry!("cuGetProcAddress", 12000, cuGetProcAddress_v2),
        // Devices.
        entry!("cuDeviceGet", 2000, cuDeviceGet),
        entry!("cuDeviceGetCount", 2000, cuDeviceGetCount),
        entry!("cuDeviceGetName", 2000, cuDeviceGetName),
        entry!("cuDeviceGetPCIBusId", 4010, cuDeviceGetPCIBusId),
        entry!("cuDeviceGetByPCIBusId", 4010, cuDeviceGetByPCIBusId),
        entry!("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
        entry!("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
        entry!("cuDeviceGetUuid", 9020, cuDeviceGetUuid),
        entry!("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
        // Contexts.
        entry!("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
        entry!("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease),
        entry!(
            "cuDevicePrimaryCtxRelease",
            11000,
            cuDevicePrimaryCtxRelease_v2
        ),
        entry!(
            "cuDevicePrimaryCtxGetState",
            7000,
            cuDevicePrimaryCtxGetState
        ),
        entry!("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
        entry!(
            "cuDevicePrimaryCtxSetFlags",
            11000,
            cuDevicePrimaryCtxSetFlags_v2
        ),
        entry!("cuCtxCreate", 3020, cuCtxCreate_v2),
        entry!("cuCtxCreate", 11040, cuCtxCreate_v3),
        entry!("cuCtxCreate", 12050, cuCtxCreate_v4),
        entry!("cuCtxDestroy", 4000, cuCtxDestroy_v2),
        entry!("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
        entry!("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
        entry!("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
        entry!("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
        entry!("cuCtxGetDevice", 2000, cuCtxGetDevice),
        entry!("cuCtxGetDevice", 13000, cuCtxGetDevice_v2),
        entry!("cuCtxSynchronize", 2000, cuCtxSynchronize),
        entry!("cuCtxSynchronize", 13000, cuCtxSynchronize_v2),
        // Streams.
        entry!("cuStreamCreate", 2000, cuStreamCreate),
        entry!(
            "cuStreamCreateWithPriority",
            5050,
            cuStreamCreateWithPriority
        ),
        entry!("cuStreamDestroy", 2000, cuStreamDestroy),
        entry!("cuStreamDestroy", 4000, cuStreamDestroy_v2),
        entry!(
            "cuStreamSynchronize",
            2000,
            cuStreamSynchronize,
            cuStreamSynchronize_ptsz
        ),
        entry!("cuStreamQuery", 2000, cuStreamQuery, cuStreamQuery_ptsz),
        entry!("cuStreamGetCtx", 9020, cuStreamGetCtx, cuStreamGetCtx_ptsz),
        entry!(
            "cuLaunchHostFunc",
            10000,
            cuLaunchHostFunc,
            cuLaunchHostFunc_ptsz
        ),
        entry!(
            "cuStreamWaitEvent",
            3020,
            cuStreamWaitEvent,
            cuStreamWaitEvent_ptsz
        ),
        // Events.
        entry!("cuEventCreate", 2000, cuEventCreate),
        entry!("cuEventRecord", 2000, cuEventRecord, cuEventRecord_ptsz),
        entry!(
            "cuEventRecordWithFlags",
            11010,
            cuEventRecordWithFlags,
            cuEventRecordWithFlags_ptsz
        ),
        entry!("cuEventQuery", 2000, cuEventQuery),
        entry!("cuEventSynchronize", 2000, cuEventSynchronize),
        entry!("cuEventElapsedTime", 2000, cuEventElapsedTime),
        entry!("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),
        entry!("cuEventDestroy", 2000, cuEventDestroy),
        entry!("cuEventDestroy", 4000, cuEventDestroy_v2),
        // Memory.
        entry!("cuMemAlloc", 3020, cuMemAlloc_v2),
        entry!(
            "cuMemAllocAsync",
            11020,
            cuMemAllocAsync,
            cuMemAllocAsync_ptsz
        ),
        entry!("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
        entry!("cuMemAllocManaged", 6000, cuMemAllocManaged),
        entry!("cuMemFree", 3020, cuMemFree_v2),
        entry!("cuMemFreeAsync", 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz),
        // Memory pools.
        entry!(
            "cuMemAllocFromPoolAsync",
            11020,
            cuMemAllocFromPoolAsync,
            cuMemAllocFromPoolAsync_ptsz
        ),
        entry!(
            "cuDeviceGetDefaultMemPool",
            11020,
            cuDeviceGetDefaultMemPool
        ),
        entry!("cuDeviceGetMemPool", 11020, cuDeviceGetMemPool),
        entry!("cuDeviceSetMemPool", 11020, cuDeviceSetMemPool),
        entry!("cuMemPoolCreate", 11020, cuMemPoolCreate),
        entry!("cuMemPoolDestroy", 11020, cuMemPoolDestroy),
        entry!("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
        entry!("cuMemPoolSetAttribute", 11020, cuMemPoolSetAttribute),
        entry!("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute),
        // Virtual memory management.
        entry!(
            "cuMemGetAllocationGranularity",
            10020,
            cuMemGetAllocationGranularity
        ),
        entry!("cuMemCreate", 10020, cuMemCreate),
        entry!("cuMemRelease", 10020, cuMemRelease),
        entry!(
            "cuMemRetainAllocationHandle",
            11000,
            cuMemRetainAllocationHandle
        ),
        entry!("cuMemAddressReserve", 10020, cuMemAddressReserve),
        entry!("cuMemAddressFree", 10020, cuMemAddressFree),
        entry!("cuMemMap", 10020, cuMemMap),
        entry!("cuMemUnmap", 10020, cuMemUnmap),
        entry!("cuMemSetAccess", 10020, cuMemSetAccess),
        entry!("cuMemGetInfo", 3020, cuMemGetInfo_v2),
        entry!("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2),
        entry!("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2),
        entry!("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2),
        entry!("cuMemsetD8", 3020, cuMemsetD8_v2),
        entry!("cuMemsetD32", 3020, cuMemsetD32_v2),
        entry!(
            "cuMemcpyHtoDAsync",
            3020,
            cuMemcpyHtoDAsync_v2,
            cuMemcpyHtoDAsync_v2_ptsz
        ),
        entry!(
            "cuMemcpyDtoHAsync",
            3020,
            cuMemcpyDtoHAsync_v2,
            cuMemcpyDtoHAsync_v2_ptsz
        ),
        entry!(
            "cuMemcpyDtoDAsync",
            3020,
            cuMemcpyDtoDAsync_v2,
            cuMemcpyDtoDAsync_v2_ptsz
        ),
        entry!(
            "cuMemsetD8Async",
            3020,
            cuMemsetD8Async,
            cuMemsetD8Async_ptsz
        ),
        // Modules.
        entry!("cuModuleLoad", 2000, cuModuleLoad),
        entry!("cuModuleLoadData", 2000, cuModuleLoadData),
        entry!("cuModuleGetFunction", 2000, cuModuleGetFunction),
        entry!("cuModuleUnload", 2000, cuModuleUnload),
        // Launches.
        entry!("cuLaunchKernel", 4000, cuLaunchKernel, cuLaunchKernel_ptsz),
        entry!(
            "cuLaunchKernelEx",
            11060,
            cuLaunchKernelEx,
            cuLaunchKernelEx_ptsz
        ),
        entry!(
            "cuLaunchCooperativeKernel",
            9000,
            cuLaunchCooperativeKernel,
            cuLaunchCooperativeKernel_ptsz
        ),
        // Graphs.
        entry!("cuGraphCreate", 10000, cuGraphCreate),
        entry!("cuGraphAddKernelNode", 10000, cuGraphAddKernelNode),
        entry!("cuGraphAddKernelNode", 12000, cuGraphAddKernelNode_v2),
        entry!("cuGraphInstantiate", 10000, cuGraphInstantiate),
        entry!("cuGraphInstantiate", 11000, cuGraphInstantiate_v2),
        entry!("cuGraphInstantiate", 12000, cuGraphInstantiateWithFlags),
        entry!(
            "cuGraphInstantiateWithFlags",
            11040,
            cuGraphInstantiateWithFlags
        ),
        entry!("cuGraphLaunch", 10000, cuGraphLaunch, cuGraphLaunch_ptsz),
        entry!("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
        entry!("cuGraphDestroy", 10000, cuGraphDestroy),
    ]
}

/// The table.
pub fn table() -> &'static [Entry] {
    static TABLE: OnceLock<Vec<Entry>> = OnceLock::new();
    TABLE.get_or_init(build)
}

/// Resolves `symbol` for `version` and `flags`: the address, or the
/// `CUdriverProcAddressQueryResult` saying why not.
pub fn lookup(symbol: &str, version: i32, flags: u64) -> Result<usize, i32> {
    let t = table();
    let mut named = t.iter().filter(|e| e.name == symbol).peekable();
    if named.peek().is_none() {
        // Convenience: an exact exported name.
        return t
            .iter()
            .find_map(|e| match e.ptsz {
                _ if e.export == symbol => Some(e.addr),
                Some((p, addr)) if p == symbol => Some(addr),
                _ => None,
            })
            .ok_or(PROC_SYMBOL_NOT_FOUND);
    }
    let best = named
        .filter(|e| e.since <= version)
        .max_by_key(|e| e.since)
        .ok_or(PROC_VERSION_NOT_SUFFICIENT)?;
    Ok(match best.ptsz {
        Some((_, p)) if flags & PROC_PER_THREAD_DEFAULT_STREAM != 0 => p,
        _ => best.addr,
    })
}

fn get_proc(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: i32,
    flags: u64,
    status: *mut i32,
) -> crate::guard::CuResult {
    let name = cstr(symbol)?;
    if pfn.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let (addr, st) = match lookup(name, version, flags) {
        Ok(a) => (a, PROC_SUCCESS),
        Err(st) => (0, st),
    };
    out(pfn, addr as *mut c_void)?;
    if !status.is_null() {
        out(status, st)?;
    }
    if st == PROC_SUCCESS {
        Ok(())
    } else {
        Err(CUDA_ERROR_NOT_FOUND)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: i32,
    flags: u64,
) -> CUresult {
    guard(|| get_proc(symbol, pfn, cuda_version, flags, std::ptr::null_mut()))
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: i32,
    flags: u64,
    symbol_status: *mut i32,
) -> CUresult {
    guard(|| get_proc(symbol, pfn, cuda_version, flags, symbol_status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_base_name_resolves_at_13000() {
        for e in table() {
            assert!(lookup(e.name, 13000, 0).is_ok(), "{}", e.name);
            // An exported name that is not also a base name resolves to itself.
            if !table().iter().any(|b| b.name == e.export) {
                assert_eq!(lookup(e.export, 13000, 0), Ok(e.addr), "{}", e.export);
            }
        }
    }

    #[test]
    fn versions_pick_variants() {
        assert_eq!(
            lookup("cuMemAlloc", 13000, 0),
            Ok(cuMemAlloc_v2 as *const () as usize)
        );
        assert_eq!(
            lookup("cuStreamDestroy", 13000, 0),
            Ok(cuStreamDestroy_v2 as *const () as usize)
        );
        assert_eq!(
            lookup("cuEventElapsedTime", 12000, 0),
            Ok(cuEventElapsedTime as *const () as usize)
        );
        assert_eq!(
            lookup("cuEventElapsedTime", 12080, 0),
            Ok(cuEventElapsedTime_v2 as *const () as usize)
        );
        assert_eq!(
            lookup("cuCtxSynchronize", 12090, 0),
            Ok(cuCtxSynchronize as *const () as usize)
        );
        assert_eq!(
            lookup("cuCtxSynchronize", 13000, 0),
            Ok(cuCtxSynchronize_v2 as *const () as usize)
        );
        assert_eq!(
            lookup("cuGraphInstantiate", 13000, 0),
            Ok(cuGraphInstantiateWithFlags as *const () as usize)
        );
        assert_eq!(
            lookup("cuGetProcAddress", 13000, 0),
            Ok(cuGetProcAddress_v2 as *const () as usize)
        );
        assert_eq!(
            lookup("cuLaunchKernelEx", 11000, 0),
            Err(PROC_VERSION_NOT_SUFFICIENT)
        );
        assert_eq!(
            lookup("cuNoSuchThing", 13000, 0),
            Err(PROC_SYMBOL_NOT_FOUND)
        );
    }

    #[test]
    fn per_thread_flag_picks_ptsz() {
        let f = PROC_PER_THREAD_DEFAULT_STREAM;
        assert_eq!(
            lookup("cuLaunchKernel", 13000, f),
            Ok(cuLaunchKernel_ptsz as *const () as usize)
        );
        assert_eq!(
            lookup("cuLaunchKernel", 13000, 0),
            Ok(cuLaunchKernel as *const () as usize)
        );
        assert_eq!(
            lookup("cuMemAlloc", 13000, f),
            Ok(cuMemAlloc_v2 as *const () as usize)
        );
    }
}
