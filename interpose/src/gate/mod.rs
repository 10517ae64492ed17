//! Side-task gate: extension point for the later issue.
//!
//! A process started with `FREERIDE_ROLE=sidetask` reaches [`before_launch`] on every launch it
//! makes (after recording it). The gate will read the per-GPU grant block
//! ([`freeride_abi::grant`]) and hold the launch until the agent opens a grant. Today it returns
//! at once: side tasks are observed exactly like trainers.
use freeride_abi::Api;

/// Called on the hook path of a side task before the real launch. Must follow the hook-path
/// rules (no allocation, no lock; waiting is allowed here only for side tasks, never trainers).
#[inline]
pub fn before_launch(_api: Api, _stream: u64) {}
