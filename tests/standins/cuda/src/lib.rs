//! Stand-in libcuda.so.1.
