//! The freeride agent's library: bubble inference and the pieces the `freeride` binary is built from.
pub mod bell;
pub mod collect;
pub mod evict;
pub mod grant_log;
pub mod grants;
pub mod inference;
pub mod node;
pub mod report;
pub mod sidetasks;
pub mod sim;
pub mod status;
pub mod timeline;
pub mod watchdog;
