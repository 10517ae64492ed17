//! The exported entry points, by area (signatures of cuda_runtime_api.h, CUDA 13).
pub(crate) mod device;
pub(crate) mod error;
pub(crate) mod event;
pub(crate) mod graph;
pub(crate) mod launch;
pub(crate) mod memory;
pub(crate) mod register;
pub(crate) mod stream;
