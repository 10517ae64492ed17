//! The job description the launcher hands to every stage (as JSON in [`env::CONFIG`]).
use crate::schedule::Shape;
use serde::{Deserialize, Serialize};

/// Environment variables between the launcher and its stages.
pub mod env {
    /// This stage's rank.
    pub const RANK: &str = "PIPESIM_RANK";
    /// Number of stages.
    pub const WORLD_SIZE: &str = "PIPESIM_WORLD_SIZE";
    /// Folder where rank 0 publishes the NCCL unique ids (the job's "store").
    pub const JOB_DIR: &str = "PIPESIM_JOB_DIR";
    /// The [`super::JobConfig`] as JSON.
    pub const CONFIG: &str = "PIPESIM_CONFIG";
}

/// How stages talk to their neighbours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Style {
    /// Megatron-LM: `ncclGroupStart`, the step's sends and receives, `ncclGroupEnd`, then a device
    /// synchronize.
    Batched,
    /// DeepSpeed: separate `ncclSend`/`ncclRecv` on 2-rank communicators; the host waits for each
    /// receive.
    Blocking,
}

impl Style {
    /// The command-line spelling.
    pub fn name(self) -> &'static str {
        match self {
            Style::Batched => "batched",
            Style::Blocking => "blocking",
        }
    }
}

/// Default NCCL cost (ps per byte), as `simgpu::abi::env::NCCL_PS_PER_BYTE` documents.
pub const DEFAULT_PS_PER_BYTE: u64 = 100;

/// Everything a stage needs to know.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobConfig {
    pub shape: Shape,
    pub style: Style,
    /// Point-to-point transfer time wanted, ns (sizes the messages).
    pub comm_ns: u64,
    /// All-reduce time wanted at the end of each iteration, ns.
    pub allreduce_ns: u64,
    pub iterations: u32,
    /// The job changes its micro-batch count from this iteration on (a job that relaunches with
    /// another batch size, or a framework that adapts it).
    #[serde(default)]
    pub change: Option<Change>,
}

/// A change of the micro-batch count during the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// First iteration (0-based) that runs with `microbatches`.
    pub at_iteration: u32,
    pub microbatches: u32,
}

impl JobConfig {
    /// The shape iteration `it` runs with.
    pub fn shape_at(&self, it: u32) -> Shape {
        match self.change {
            Some(c) if it >= c.at_iteration => Shape {
                microbatches: c.microbatches,
                ..self.shape
            },
            _ => self.shape,
        }
    }

    /// The NCCL cost the simulated GPU uses (read from the same environment variable).
    pub fn ps_per_byte() -> u64 {
        std::env::var("FREERIDE_SIM_NCCL_PS_PER_BYTE")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|&v| v > 0)
            .unwrap_or(DEFAULT_PS_PER_BYTE)
    }

    /// Bytes of one point-to-point message: comm time / cost per byte, at least 4.
    pub fn p2p_bytes(&self) -> u64 {
        bytes_for(self.comm_ns, Self::ps_per_byte())
    }

    /// Bytes of the all-reduce: its transfer is 2(n-1)/n x bytes, sized to take `allreduce_ns`.
    pub fn allreduce_bytes(&self) -> u64 {
        let n = u64::from(self.shape.stages);
        if n < 2 {
            return 4;
        }
        let raw = bytes_for(self.allreduce_ns, Self::ps_per_byte());
        ((raw as u128 * n as u128 / (2 * (n - 1)) as u128) as u64).max(4)
    }
}

/// bytes = ns * 1000 / ps_per_byte, at least 4.
pub fn bytes_for(ns: u64, ps_per_byte: u64) -> u64 {
    ((ns as u128 * 1000 / ps_per_byte.max(1) as u128) as u64).max(4)
}

/// Milliseconds (command line) to nanoseconds.
pub fn ms_to_ns(ms: f64) -> u64 {
    (ms * 1e6).round().max(0.0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(bytes_for(0, 100), 4);
        assert_eq!(bytes_for(1_000_000, 100), 10_000_000);
        assert_eq!(ms_to_ns(10.0), 10_000_000);
        assert_eq!(ms_to_ns(0.5), 500_000);
    }
}
