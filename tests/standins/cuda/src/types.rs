//! C types, constants and struct layouts of cuda.h (CUDA 13) used by the stand-in.
#![allow(non_camel_case_types, dead_code)]
use std::ffi::c_void;

pub type CUresult = i32;
pub type CUdevice = i32;
pub type CUdeviceptr = u64;
pub type CUcontext = *mut c_void;
pub type CUstream = *mut c_void;
pub type CUevent = *mut c_void;
pub type CUmodule = *mut c_void;
pub type CUfunction = *mut c_void;
pub type CUgraph = *mut c_void;
pub type CUgraphNode = *mut c_void;
pub type CUgraphExec = *mut c_void;
pub type CUkernel = *mut c_void;
pub type CUmemoryPool = *mut c_void;
pub type CUmemGenericAllocationHandle = u64;

pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
pub const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
pub const CUDA_ERROR_OPERATING_SYSTEM: CUresult = 304;
pub const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
pub const CUDA_ERROR_NOT_READY: CUresult = 600;
pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;

/// `CU_STREAM_LEGACY`.
pub const STREAM_LEGACY: usize = 0x1;
/// `CU_STREAM_PER_THREAD`.
pub const STREAM_PER_THREAD: usize = 0x2;

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
pub const PROC_PER_THREAD_DEFAULT_STREAM: u64 = 1 << 1;
/// `CUdriverProcAddressQueryResult`.
pub const PROC_SUCCESS: i32 = 0;
pub const PROC_SYMBOL_NOT_FOUND: i32 = 1;
pub const PROC_VERSION_NOT_SUFFICIENT: i32 = 2;

/// The driver version reported (`cuDriverGetVersion`).
pub const DRIVER_VERSION: i32 = 13000;

/// `CUlaunchConfig`.
#[repr(C)]
pub struct CUlaunchConfig {
    pub grid_dim_x: u32,
    pub grid_dim_y: u32,
    pub grid_dim_z: u32,
    pub block_dim_x: u32,
    pub block_dim_y: u32,
    pub block_dim_z: u32,
    pub shared_mem_bytes: u32,
    pub h_stream: CUstream,
    pub attrs: *mut c_void,
    pub num_attrs: u32,
}

/// `CUDA_KERNEL_NODE_PARAMS_v1`.
#[repr(C)]
pub struct CUDA_KERNEL_NODE_PARAMS_v1 {
    pub func: CUfunction,
    pub grid_dim_x: u32,
    pub grid_dim_y: u32,
    pub grid_dim_z: u32,
    pub block_dim_x: u32,
    pub block_dim_y: u32,
    pub block_dim_z: u32,
    pub shared_mem_bytes: u32,
    pub kernel_params: *mut *mut c_void,
    pub extra: *mut *mut c_void,
}

/// `CUDA_KERNEL_NODE_PARAMS_v2` (= `CUDA_KERNEL_NODE_PARAMS`).
#[repr(C)]
pub struct CUDA_KERNEL_NODE_PARAMS_v2 {
    pub func: CUfunction,
    pub grid_dim_x: u32,
    pub grid_dim_y: u32,
    pub grid_dim_z: u32,
    pub block_dim_x: u32,
    pub block_dim_y: u32,
    pub block_dim_z: u32,
    pub shared_mem_bytes: u32,
    pub kernel_params: *mut *mut c_void,
    pub extra: *mut *mut c_void,
    pub kern: CUkernel,
    pub ctx: CUcontext,
}

/// `CU_MEM_ATTACH_GLOBAL`, `CU_MEM_ATTACH_HOST` (`cuMemAllocManaged` flags).
pub const MEM_ATTACH_GLOBAL: u32 = 0x1;
pub const MEM_ATTACH_HOST: u32 = 0x2;

/// `CUmemAllocationType`: `CU_MEM_ALLOCATION_TYPE_PINNED`.
pub const MEM_ALLOCATION_TYPE_PINNED: i32 = 1;
/// `CUmemLocationType`.
pub const MEM_LOCATION_TYPE_DEVICE: i32 = 1;
pub const MEM_LOCATION_TYPE_HOST: i32 = 2;
pub const MEM_LOCATION_TYPE_HOST_NUMA: i32 = 3;
pub const MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: i32 = 4;
/// `CUmemAccess_flags`.
pub const MEM_ACCESS_FLAGS_PROT_NONE: i32 = 0;
pub const MEM_ACCESS_FLAGS_PROT_READ: i32 = 1;
pub const MEM_ACCESS_FLAGS_PROT_READWRITE: i32 = 3;

/// `CUmemPool_attribute`.
pub const MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: i32 = 1;
pub const MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: i32 = 2;
pub const MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: i32 = 3;
pub const MEMPOOL_ATTR_RELEASE_THRESHOLD: i32 = 4;
pub const MEMPOOL_ATTR_RESERVED_MEM_CURRENT: i32 = 5;
pub const MEMPOOL_ATTR_RESERVED_MEM_HIGH: i32 = 6;
pub const MEMPOOL_ATTR_USED_MEM_CURRENT: i32 = 7;
pub const MEMPOOL_ATTR_USED_MEM_HIGH: i32 = 8;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUmemLocation {
    pub type_: i32,
    pub id: i32,
}

/// `CUmemAllocationProp` (`_v1`): what `cuMemCreate` allocates.
#[repr(C)]
pub struct CUmemAllocationProp {
    pub type_: i32,
    pub requested_handle_types: i32,
    pub location: CUmemLocation,
    pub win32_handle_meta_data: *mut c_void,
    /// `allocFlags`: compressionType, gpuDirectRDMACapable (u8 each), usage (u16), reserved[4].
    pub alloc_flags: [u8; 8],
}

/// `CUmemAccessDesc`.
#[repr(C)]
pub struct CUmemAccessDesc {
    pub location: CUmemLocation,
    pub flags: i32,
}

/// `CUmemPoolProps` (`_v1`).
#[repr(C)]
pub struct CUmemPoolProps {
    pub alloc_type: i32,
    pub handle_types: i32,
    pub location: CUmemLocation,
    pub win32_security_attributes: *mut c_void,
    pub max_size: usize,
    pub usage: u16,
    pub reserved: [u8; 54],
}

/// `CUuuid`.
#[repr(C)]
pub struct CUuuid {
    pub bytes: [u8; 16],
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_cuda_h() {
        assert_eq!(offset_of!(CUlaunchConfig, h_stream), 32);
        assert_eq!(offset_of!(CUlaunchConfig, num_attrs), 48);
        assert_eq!(size_of::<CUlaunchConfig>(), 56);
        assert_eq!(offset_of!(CUDA_KERNEL_NODE_PARAMS_v1, kernel_params), 40);
        assert_eq!(size_of::<CUDA_KERNEL_NODE_PARAMS_v1>(), 56);
        assert_eq!(offset_of!(CUDA_KERNEL_NODE_PARAMS_v2, ctx), 64);
        assert_eq!(size_of::<CUDA_KERNEL_NODE_PARAMS_v2>(), 72);
        assert_eq!(offset_of!(CUmemAllocationProp, location), 8);
        assert_eq!(offset_of!(CUmemAllocationProp, alloc_flags), 24);
        assert_eq!(size_of::<CUmemAllocationProp>(), 32);
        assert_eq!(size_of::<CUmemAccessDesc>(), 12);
        assert_eq!(offset_of!(CUmemPoolProps, max_size), 24);
        assert_eq!(size_of::<CUmemPoolProps>(), 88);
    }
}
