//! C types and layouts of cuda_runtime_api.h / driver_types.h (CUDA 13) used by the stand-in.
#![allow(non_camel_case_types, non_upper_case_globals, dead_code)]
use std::ffi::c_void;

pub type cudaError_t = i32;
pub type CUresult = i32;
pub type cudaStream_t = *mut c_void;
pub type cudaEvent_t = *mut c_void;
pub type cudaGraph_t = *mut c_void;
pub type cudaGraphNode_t = *mut c_void;
pub type cudaGraphExec_t = *mut c_void;

pub const cudaSuccess: cudaError_t = 0;
pub const cudaErrorInvalidValue: cudaError_t = 1;
pub const cudaErrorMemoryAllocation: cudaError_t = 2;
pub const cudaErrorInitializationError: cudaError_t = 3;
pub const cudaErrorInsufficientDriver: cudaError_t = 35;
pub const cudaErrorInvalidDevice: cudaError_t = 101;
pub const cudaErrorNotReady: cudaError_t = 600;
pub const cudaErrorUnknown: cudaError_t = 999;

/// The runtime version reported (`cudaRuntimeGetVersion`) and asked of the driver.
pub const RUNTIME_VERSION: i32 = 13000;

/// `dim3`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct dim3 {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

/// `cudaLaunchConfig_t`.
#[repr(C)]
pub struct cudaLaunchConfig_t {
    pub grid_dim: dim3,
    pub block_dim: dim3,
    pub dynamic_smem_bytes: usize,
    pub stream: cudaStream_t,
    pub attrs: *mut c_void,
    pub num_attrs: u32,
}

/// `struct cudaKernelNodeParams`.
#[repr(C)]
pub struct cudaKernelNodeParams {
    pub func: *mut c_void,
    pub grid_dim: dim3,
    pub block_dim: dim3,
    pub shared_mem_bytes: u32,
    pub kernel_params: *mut *mut c_void,
    pub extra: *mut *mut c_void,
}

/// `CUlaunchConfig` (driver).
#[repr(C)]
pub struct CUlaunchConfig {
    pub grid_dim_x: u32,
    pub grid_dim_y: u32,
    pub grid_dim_z: u32,
    pub block_dim_x: u32,
    pub block_dim_y: u32,
    pub block_dim_z: u32,
    pub shared_mem_bytes: u32,
    pub h_stream: *mut c_void,
    pub attrs: *mut c_void,
    pub num_attrs: u32,
}

/// `CUDA_KERNEL_NODE_PARAMS_v2` (driver).
#[repr(C)]
pub struct CUDA_KERNEL_NODE_PARAMS_v2 {
    pub func: *mut c_void,
    pub grid_dim_x: u32,
    pub grid_dim_y: u32,
    pub grid_dim_z: u32,
    pub block_dim_x: u32,
    pub block_dim_y: u32,
    pub block_dim_z: u32,
    pub shared_mem_bytes: u32,
    pub kernel_params: *mut *mut c_void,
    pub extra: *mut *mut c_void,
    pub kern: *mut c_void,
    pub ctx: *mut c_void,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_headers() {
        assert_eq!(size_of::<dim3>(), 12);
        assert_eq!(offset_of!(cudaLaunchConfig_t, dynamic_smem_bytes), 24);
        assert_eq!(offset_of!(cudaLaunchConfig_t, stream), 32);
        assert_eq!(offset_of!(cudaLaunchConfig_t, num_attrs), 48);
        assert_eq!(offset_of!(cudaKernelNodeParams, shared_mem_bytes), 32);
        assert_eq!(offset_of!(cudaKernelNodeParams, kernel_params), 40);
        assert_eq!(size_of::<cudaKernelNodeParams>(), 56);
        assert_eq!(size_of::<CUDA_KERNEL_NODE_PARAMS_v2>(), 72);
    }
}
