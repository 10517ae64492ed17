//! The simulated GPU shared by all processes on a device.
pub mod abi;
