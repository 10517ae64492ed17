//! The mapped `grant-gpu<N>` file: defined once, in freeride-abi.
pub(crate) use freeride_abi::grant_shm::GrantMap;
