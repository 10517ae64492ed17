//! Stand-in libcudart.so.13: the CUDA 13 runtime API over the stand-in driver.
//!
//! Like the real runtime it does not link libcuda: at first use it `dlopen`s `libcuda.so.1`, takes
//! `cuGetProcAddress_v2` with `dlsym`, and gets every other driver function through it
//! (`driver`). Runtime handles are the driver's (`cudaStream_t == CUstream`, ...). Kernels
//! registered with `__cudaRegisterFunction` are launched as driver functions of the same name
//! (`cuModuleLoadData` + `cuModuleGetFunction`), so a runtime launch reaches the driver as
//! `cuLaunchKernel` (or `cuLaunchKernelEx`). Exports are versioned `libcudart.so.13`
//! (`libcudart.map`).
mod api;
mod driver;
mod guard;
mod state;
mod types;
