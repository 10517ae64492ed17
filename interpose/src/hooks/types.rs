//! The C types and function-pointer signatures the wrappers share.
use std::ffi::{c_char, c_int, c_void};

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Dim3 {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

#[repr(C)]
pub struct CudaLaunchConfig {
    pub grid: Dim3,
    pub block: Dim3,
    pub shmem: usize,
    pub stream: *mut c_void,
    pub attrs: *mut c_void,
    pub num_attrs: u32,
}

#[repr(C)]
pub struct CuLaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shmem: u32,
    pub stream: *mut c_void,
    pub attrs: *mut c_void,
    pub num_attrs: u32,
}

/// The head both `CUmemAllocationProp` (`cuMemCreate`) and `CUmemPoolProps` (`cuMemPoolCreate`)
/// begin with: the allocation type, the handle types, then the `CUmemLocation` (type, id) of
/// the memory. Only this head is read.
#[repr(C)]
pub struct MemLocated {
    pub alloc_type: i32,
    pub handle_types: i32,
    pub location_type: i32,
    pub location_id: i32,
}

/// `CU_MEM_LOCATION_TYPE_DEVICE`.
pub const MEM_LOCATION_TYPE_DEVICE: i32 = 1;

impl MemLocated {
    /// The device the memory is on (-1: host memory, or `p` is NULL).
    ///
    /// # Safety
    /// `p` is NULL or points to a props struct the caller handed to the driver.
    pub unsafe fn device_of(p: *const MemLocated) -> i32 {
        if p.is_null() {
            return -1;
        }
        // SAFETY: the caller's contract; the driver reads the same struct.
        let m = unsafe { &*p };
        if m.location_type == MEM_LOCATION_TYPE_DEVICE {
            m.location_id
        } else {
            -1
        }
    }
}

pub(super) type P = *mut c_void;
pub(super) type PP = *mut *mut c_void;
pub(super) type RtLaunch = unsafe extern "C" fn(*const c_void, Dim3, Dim3, PP, usize, P) -> c_int;
pub(super) type RtLaunchEx =
    unsafe extern "C" fn(*const CudaLaunchConfig, *const c_void, PP) -> c_int;
pub(super) type RtGraph = unsafe extern "C" fn(P, P) -> c_int;
pub(super) type RtSync0 = unsafe extern "C" fn() -> c_int;
pub(super) type RtSync1 = unsafe extern "C" fn(P) -> c_int;
pub(super) type RtEntry = unsafe extern "C" fn(*const c_char, PP, u64, *mut c_int) -> c_int;
pub(super) type RtEntryV = unsafe extern "C" fn(*const c_char, PP, u32, u64, *mut c_int) -> c_int;
pub(super) type DrvLaunch =
    unsafe extern "C" fn(P, u32, u32, u32, u32, u32, u32, u32, P, PP, PP) -> c_int;
pub(super) type DrvLaunchEx = unsafe extern "C" fn(*const CuLaunchConfig, P, PP, PP) -> c_int;
pub(super) type DrvCoop =
    unsafe extern "C" fn(P, u32, u32, u32, u32, u32, u32, u32, P, PP) -> c_int;
pub(super) type DrvGraph = unsafe extern "C" fn(P, P) -> c_int;
pub(super) type DrvAlloc = unsafe extern "C" fn(*mut u64, usize) -> c_int;
pub(super) type DrvAllocAsync = unsafe extern "C" fn(*mut u64, usize, P) -> c_int;
pub(super) type DrvFree = unsafe extern "C" fn(u64) -> c_int;
pub(super) type DrvAllocPitch =
    unsafe extern "C" fn(*mut u64, *mut usize, usize, usize, u32) -> c_int;
pub(super) type DrvAllocManaged = unsafe extern "C" fn(*mut u64, usize, u32) -> c_int;
pub(super) type DrvAllocPool = unsafe extern "C" fn(*mut u64, usize, P, P) -> c_int;
pub(super) type DrvFreeAsync = unsafe extern "C" fn(u64, P) -> c_int;
pub(super) type DrvPoolCreate = unsafe extern "C" fn(PP, *const MemLocated) -> c_int;
pub(super) type DrvDevicePool = unsafe extern "C" fn(PP, c_int) -> c_int;
pub(super) type DrvMemCreate =
    unsafe extern "C" fn(*mut u64, usize, *const MemLocated, u64) -> c_int;
pub(super) type DrvMemRelease = unsafe extern "C" fn(u64) -> c_int;
pub(super) type DrvMemRetain = unsafe extern "C" fn(*mut u64, P) -> c_int;
pub(super) type DrvMemMap = unsafe extern "C" fn(u64, usize, usize, u64, u64) -> c_int;
pub(super) type DrvMemUnmap = unsafe extern "C" fn(u64, usize) -> c_int;
pub(super) type DrvSync0 = unsafe extern "C" fn() -> c_int;
pub(super) type DrvSync1 = unsafe extern "C" fn(P) -> c_int;
pub(super) type DrvCtx = unsafe extern "C" fn(P) -> c_int;
pub(super) type DrvRecord = unsafe extern "C" fn(P, P) -> c_int;
pub(super) type DrvRecordFlags = unsafe extern "C" fn(P, P, u32) -> c_int;
pub(super) type DrvWait = unsafe extern "C" fn(P, P, u32) -> c_int;
pub(super) type DrvCtxPop = unsafe extern "C" fn(PP) -> c_int;
pub(super) type GetProcV1 = unsafe extern "C" fn(*const c_char, PP, c_int, u64) -> c_int;
pub(super) type GetProcV2 =
    unsafe extern "C" fn(*const c_char, PP, c_int, u64, *mut c_int) -> c_int;
pub(super) type NcclP2p = unsafe extern "C" fn(*const c_void, usize, c_int, c_int, P, P) -> c_int;
pub(super) type NcclP2pRecv = unsafe extern "C" fn(P, usize, c_int, c_int, P, P) -> c_int;
pub(super) type NcclGroup = unsafe extern "C" fn() -> c_int;
pub(super) type NcclReduce =
    unsafe extern "C" fn(*const c_void, P, usize, c_int, c_int, P, P) -> c_int;
pub(super) type NcclGather = unsafe extern "C" fn(*const c_void, P, usize, c_int, P, P) -> c_int;

/// `ncclUniqueId`: 128 opaque bytes, passed BY VALUE to `ncclCommInitRank(Config)` (as C passes
/// a struct of this size: in memory, which Rust's `extern "C"` does the same way).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NcclUniqueId {
    pub internal: [u8; 128],
}

pub(super) type NcclInitRank = unsafe extern "C" fn(PP, c_int, NcclUniqueId, c_int) -> c_int;
pub(super) type NcclInitRankConfig =
    unsafe extern "C" fn(PP, c_int, NcclUniqueId, c_int, P) -> c_int;
pub(super) type NcclInitAll = unsafe extern "C" fn(PP, c_int, *const c_int) -> c_int;
pub(super) type NcclSplit = unsafe extern "C" fn(P, c_int, c_int, PP, P) -> c_int;
