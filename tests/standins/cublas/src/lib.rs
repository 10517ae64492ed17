//! Stand-in libcublas.so.13.
