//! Stand-in libnccl.so.2.
