//! The mapped `grant-<bus id>` file: defined once, in freeride-abi.
pub(crate) use freeride_abi::grant_shm::GrantMap;
