//! The freeride agent's library: bubble inference and the pieces the `freeride` binary is built from.
pub mod inference;
