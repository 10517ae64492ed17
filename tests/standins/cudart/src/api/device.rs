//! Devices, versions and driver entry points.
use crate::guard::{drv, guard, out};
use crate::state;
use crate::types::*;
use std::ffi::{c_char, c_void};

#[no_mangle]
pub unsafe extern "C" fn cudaGetDeviceCount(count: *mut i32) -> cudaError_t {
    guard(|| drv!(device_get_count(count)))
}

#[no_mangle]
pub unsafe extern "C" fn cudaSetDevice(device: i32) -> cudaError_t {
    guard(|| state::set_device(device))
}

#[no_mangle]
pub unsafe extern "C" fn cudaGetDevice(device: *mut i32) -> cudaError_t {
    guard(|| {
        let mut cur: *mut c_void = std::ptr::null_mut();
        drv!(ctx_get_current(&mut cur))?;
        if cur.is_null() {
            return out(device, state::thread_device());
        }
        drv!(ctx_get_device(device, cur))
    })
}

/// The runtime's ordinals are the driver's (both count the devices `CUDA_VISIBLE_DEVICES` leaves).
#[no_mangle]
pub unsafe extern "C" fn cudaDeviceGetPCIBusId(
    pci_bus_id: *mut c_char,
    len: i32,
    device: i32,
) -> cudaError_t {
    guard(|| {
        if pci_bus_id.is_null() || len <= 0 {
            return Err(cudaErrorInvalidValue);
        }
        drv!(device_get_pci_bus_id(pci_bus_id, len, device))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaDeviceGetByPCIBusId(
    device: *mut i32,
    pci_bus_id: *const c_char,
) -> cudaError_t {
    guard(|| {
        if device.is_null() || pci_bus_id.is_null() {
            return Err(cudaErrorInvalidValue);
        }
        drv!(device_get_by_pci_bus_id(device, pci_bus_id))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaDeviceSynchronize() -> cudaError_t {
    guard(|| {
        state::ensure_ctx()?;
        drv!(ctx_synchronize(std::ptr::null_mut()))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaDriverGetVersion(version: *mut i32) -> cudaError_t {
    guard(|| {
        if version.is_null() {
            return Err(cudaErrorInvalidValue);
        }
        match crate::driver::driver() {
            Ok(_) => drv!(driver_get_version(version)),
            // Like the real runtime: no driver is version 0, not an error.
            Err(_) => out(version, 0),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cudaRuntimeGetVersion(version: *mut i32) -> cudaError_t {
    guard(|| out(version, RUNTIME_VERSION))
}

fn entry_point(
    symbol: *const c_char,
    func: *mut *mut c_void,
    version: u32,
    flags: u64,
    status: *mut i32,
) -> crate::guard::RtResult {
    if symbol.is_null() || func.is_null() {
        return Err(cudaErrorInvalidValue);
    }
    let d = crate::driver::driver()?;
    // SAFETY: the driver's cuGetProcAddress_v2, called with the caller's arguments.
    let r = unsafe { (d.get_proc)(symbol, func, version as i32, flags, status) };
    match r {
        0 => Ok(()),
        // Not found is reported through driverStatus, like the real runtime.
        500 => Ok(()),
        e => Err(e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn cudaGetDriverEntryPoint(
    symbol: *const c_char,
    func: *mut *mut c_void,
    flags: u64,
    status: *mut i32,
) -> cudaError_t {
    guard(|| entry_point(symbol, func, RUNTIME_VERSION as u32, flags, status))
}

#[no_mangle]
pub unsafe extern "C" fn cudaGetDriverEntryPointByVersion(
    symbol: *const c_char,
    func: *mut *mut c_void,
    cuda_version: u32,
    flags: u64,
    status: *mut i32,
) -> cudaError_t {
    guard(|| entry_point(symbol, func, cuda_version, flags, status))
}
