//! Initialization, versions and device queries.
use crate::guard::{cstr, guard, out, out_str};
use crate::state;
use crate::types::*;
use std::ffi::c_char;

#[no_mangle]
pub unsafe extern "C" fn cuInit(_flags: u32) -> CUresult {
    guard(state::init)
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut i32) -> CUresult {
    guard(|| out(version, DRIVER_VERSION))
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: i32) -> CUresult {
    guard(|| {
        state::check_device(ordinal)?;
        out(device, ordinal)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut i32) -> CUresult {
    guard(|| {
        state::require_init()?;
        out(count, crate::visible::count())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: i32, dev: CUdevice) -> CUresult {
    guard(|| {
        state::check_device(dev)?;
        out_str(name, len, "freeride simulated GPU")
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetPCIBusId(
    pci_bus_id: *mut c_char,
    len: i32,
    dev: CUdevice,
) -> CUresult {
    guard(|| {
        let phys = state::physical(dev)?;
        out_str(pci_bus_id, len, &simgpu::identity::pci_bus_id(phys))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetByPCIBusId(
    dev: *mut CUdevice,
    pci_bus_id: *const c_char,
) -> CUresult {
    guard(|| {
        state::require_init()?;
        let id = cstr(pci_bus_id)?;
        let phys = simgpu::identity::device_of_bus_id(id, simgpu::config::device_count())
            .ok_or(CUDA_ERROR_INVALID_VALUE)?;
        let ordinal = crate::visible::ordinal_of(phys).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        out(dev, ordinal)
    })
}

/// A plausible value for a `CUdevice_attribute` (an H100-like part) of physical device `phys`; 0
/// for the rest.
pub fn attribute(attrib: i32, phys: i32) -> i32 {
    match attrib {
        1 => 1024,                             // MAX_THREADS_PER_BLOCK
        2 | 3 => 1024,                         // MAX_BLOCK_DIM_X/Y
        4 => 64,                               // MAX_BLOCK_DIM_Z
        5 => i32::MAX,                         // MAX_GRID_DIM_X
        6 | 7 => 65535,                        // MAX_GRID_DIM_Y/Z
        8 => 49152,                            // MAX_SHARED_MEMORY_PER_BLOCK
        10 => 32,                              // WARP_SIZE
        13 => 1_980_000,                       // CLOCK_RATE (kHz)
        16 => 132,                             // MULTIPROCESSOR_COUNT
        31 => 1,                               // CONCURRENT_KERNELS
        33 => simgpu::identity::pci_bus(phys), // PCI_BUS_ID
        36 => 2_619_000,                       // MEMORY_CLOCK_RATE
        37 => 5120,                            // GLOBAL_MEMORY_BUS_WIDTH
        38 => 52_428_800,                      // L2_CACHE_SIZE
        39 => 2048,                            // MAX_THREADS_PER_MULTIPROCESSOR
        40 => 2,                               // ASYNC_ENGINE_COUNT
        41 => 1,                               // UNIFIED_ADDRESSING
        75 => 9,                               // COMPUTE_CAPABILITY_MAJOR
        76 => 0,                               // COMPUTE_CAPABILITY_MINOR
        83 => 1,                               // MANAGED_MEMORY
        95 => 1,                               // COOPERATIVE_LAUNCH
        97 => 232_448,                         // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        115 => 1,                              // MEMORY_POOLS_SUPPORTED
        _ => 0,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    pi: *mut i32,
    attrib: i32,
    dev: CUdevice,
) -> CUresult {
    guard(|| {
        let phys = state::physical(dev)?;
        out(pi, attribute(attrib, phys))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    guard(|| {
        let d =
            simgpu::Device::get(state::physical(dev)?).map_err(|_| CUDA_ERROR_OPERATING_SYSTEM)?;
        out(bytes, d.mem_info().1 as usize)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut CUuuid, dev: CUdevice) -> CUresult {
    guard(|| {
        let bytes = simgpu::identity::uuid_bytes(state::physical(dev)?);
        out(uuid, CUuuid { bytes })
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut CUuuid, dev: CUdevice) -> CUresult {
    cuDeviceGetUuid_v2(uuid, dev)
}
