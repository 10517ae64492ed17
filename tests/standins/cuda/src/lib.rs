//! Stand-in libcuda.so.1: the CUDA 13 driver API over the simulated GPU ([`simgpu`]).
//!
//! Exports the real C names and signatures (unversioned symbols). Every entry point is reachable
//! through `cuGetProcAddress`/`cuGetProcAddress_v2` by its base name via the one table in
//! `proc_table`. No entry point unwinds: each body runs inside `guard::guard`.
//!
//! Device ordinals are those `CUDA_VISIBLE_DEVICES` leaves (`visible`); the simulated GPU
//! behind each is named by its physical index.
//!
//! Handles (`CUcontext`, `CUstream`, `CUevent`, `CUmodule`, `CUfunction`, `CUgraph`,
//! `CUgraphExec`, `CUgraphNode`) are addresses of objects kept in registries (`handles`); a value
//! that is not registered is `CUDA_ERROR_INVALID_HANDLE`.
mod api;
mod guard;
mod handles;
mod proc_table;
mod state;
mod types;
mod visible;
