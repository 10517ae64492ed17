//! The exported entry points, by area. Every function is `#[no_mangle] extern "C"` with the
//! signature of cuda.h (CUDA 13) and is listed in [`crate::proc_table`].
pub(crate) mod context;
pub(crate) mod device;
pub(crate) mod error;
pub(crate) mod event;
pub(crate) mod graph;
pub(crate) mod launch;
pub(crate) mod memory;
pub(crate) mod module;
pub(crate) mod pool;
pub(crate) mod stream;
pub(crate) mod vmm;
