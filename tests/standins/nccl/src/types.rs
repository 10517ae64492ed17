//! NCCL's C types (nccl.h, NCCL 2.2x).
use std::ffi::c_int;

pub type NcclResult = c_int;
pub const NCCL_SUCCESS: NcclResult = 0;
pub const NCCL_UNHANDLED_CUDA_ERROR: NcclResult = 1;
pub const NCCL_SYSTEM_ERROR: NcclResult = 2;
pub const NCCL_INTERNAL_ERROR: NcclResult = 3;
pub const NCCL_INVALID_ARGUMENT: NcclResult = 4;
pub const NCCL_INVALID_USAGE: NcclResult = 5;
pub const NCCL_REMOTE_ERROR: NcclResult = 6;
pub const NCCL_IN_PROGRESS: NcclResult = 7;
pub const NCCL_TIMEOUT: NcclResult = 8;

/// NCCL_VERSION_CODE of the headers this stands in for (2.28.9, as the measured PyTorch wheel).
pub const VERSION_CODE: c_int = 22809;

pub const UNIQUE_ID_BYTES: usize = 128;

/// `ncclUniqueId`: 128 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub internal: [u8; UNIQUE_ID_BYTES],
}

/// Size in bytes of an `ncclDataType_t`, None when invalid.
pub fn type_size(datatype: c_int) -> Option<u64> {
    match datatype {
        0 | 1 | 10 | 11 => Some(1),
        6 | 9 => Some(2),
        2 | 3 | 7 => Some(4),
        4 | 5 | 8 => Some(8),
        _ => None,
    }
}

/// `ncclGetErrorString`.
pub fn error_string(r: NcclResult) -> &'static std::ffi::CStr {
    match r {
        NCCL_SUCCESS => c"no error",
        NCCL_UNHANDLED_CUDA_ERROR => c"unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        NCCL_SYSTEM_ERROR => c"unhandled system error (run with NCCL_DEBUG=INFO for details)",
        NCCL_INTERNAL_ERROR => c"internal error - please report this issue to the NCCL developers",
        NCCL_INVALID_ARGUMENT => c"invalid argument (run with NCCL_DEBUG=WARN for details)",
        NCCL_INVALID_USAGE => c"invalid usage (run with NCCL_DEBUG=WARN for details)",
        NCCL_REMOTE_ERROR => c"remote process exited or there was a network error",
        NCCL_IN_PROGRESS => c"NCCL operation in progress",
        NCCL_TIMEOUT => c"NCCL operation timed out",
        _ => c"unknown result code",
    }
}
