//! Stand-in libcudart.so.13.
