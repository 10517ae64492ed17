//! Initialization, versions and device queries.
use crate::guard::{guard, out, out_str};
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
        out(count, simgpu::config::device_count())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: i32, dev: CUdevice) -> CUresult {
    guard(|| {
        state::check_device(dev)?;
        out_str(name, len, "freeride simulated GPU")
    })
}

/// `0000:%02x:00.0` with bus `0x10 + dev`.
pub fn pci_bus_id(dev: CUdevice) -> String {
    format!("0000:{:02x}:00.0", 0x10 + dev)
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetPCIBusId(
    pci_bus_id: *mut c_char,
    len: i32,
    dev: CUdevice,
) -> CUresult {
    guard(|| {
        state::check_device(dev)?;
        out_str(pci_bus_id, len, &self::pci_bus_id(dev))
    })
}

/// A plausible value for a `CUdevice_attribute` (an H100-like part); 0 for the rest.
pub fn attribute(attrib: i32, dev: CUdevice) -> i32 {
    match attrib {
        1 => 1024,        // MAX_THREADS_PER_BLOCK
        2 | 3 => 1024,    // MAX_BLOCK_DIM_X/Y
        4 => 64,          // MAX_BLOCK_DIM_Z
        5 => i32::MAX,    // MAX_GRID_DIM_X
        6 | 7 => 65535,   // MAX_GRID_DIM_Y/Z
        8 => 49152,       // MAX_SHARED_MEMORY_PER_BLOCK
        10 => 32,         // WARP_SIZE
        13 => 1_980_000,  // CLOCK_RATE (kHz)
        16 => 132,        // MULTIPROCESSOR_COUNT
        31 => 1,          // CONCURRENT_KERNELS
        33 => 0x10 + dev, // PCI_BUS_ID
        36 => 2_619_000,  // MEMORY_CLOCK_RATE
        37 => 5120,       // GLOBAL_MEMORY_BUS_WIDTH
        38 => 52_428_800, // L2_CACHE_SIZE
        39 => 2048,       // MAX_THREADS_PER_MULTIPROCESSOR
        40 => 2,          // ASYNC_ENGINE_COUNT
        41 => 1,          // UNIFIED_ADDRESSING
        75 => 9,          // COMPUTE_CAPABILITY_MAJOR
        76 => 0,          // COMPUTE_CAPABILITY_MINOR
        83 => 1,          // MANAGED_MEMORY
        95 => 1,          // COOPERATIVE_LAUNCH
        97 => 232_448,    // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        115 => 1,         // MEMORY_POOLS_SUPPORTED
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
        state::check_device(dev)?;
        out(pi, attribute(attrib, dev))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    guard(|| {
        state::check_device(dev)?;
        let d = simgpu::Device::get(dev).map_err(|_| CUDA_ERROR_OPERATING_SYSTEM)?;
        out(bytes, d.mem_info().1 as usize)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut CUuuid, dev: CUdevice) -> CUresult {
    guard(|| {
        state::check_device(dev)?;
        let mut bytes = *b"freeride-simgpu\0";
        bytes[15] = dev as u8;
        out(uuid, CUuuid { bytes })
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut CUuuid, dev: CUdevice) -> CUresult {
    cuDeviceGetUuid_v2(uuid, dev)
}
