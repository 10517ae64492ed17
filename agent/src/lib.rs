//! The freeride agent's library: bubble inference and the pieces the `freeride` binary is built from.
pub mod bell;
pub mod bundled;
pub mod collect;
pub mod doctor;
pub mod evict;
pub mod grants;
pub mod inference;
pub mod layout;
pub mod node;
pub mod report;
pub mod sidetasks;
pub mod sim;
pub mod sim_gpus;
pub mod sim_nodes;
pub mod status;
pub mod timeline;
pub mod watchdog;
