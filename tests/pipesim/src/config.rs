//! The job description the launcher hands to every stage (as JSON in [`env::CONFIG`]).
use crate::csv::CsvSchedule;
use crate::noise::Noise;
use crate::schedule::Shape;
use crate::topology::{Topology, Visible};
use serde::{Deserialize, Serialize};

/// Environment variables between the launcher and its stages.
pub mod env {
    /// This process's global rank.
    pub const RANK: &str = "PIPESIM_RANK";
    /// Number of processes.
    pub const WORLD_SIZE: &str = "PIPESIM_WORLD_SIZE";
    /// The CUDA device ordinal the process uses (of those `CUDA_VISIBLE_DEVICES` leaves it).
    pub const DEVICE: &str = "PIPESIM_DEVICE";
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
    /// `torch.distributed.pipelining`: every send and receive a one-op NCCL group on the stream
    /// of its peer pair, waited on by the compute stream (`cudaStreamWaitEvent`); the host blocks
    /// only at the iteration's end.
    Torch,
    /// Megatron's interleaved schedule with `overlap_p2p_comm`: separate `ncclSend`/`ncclRecv` on
    /// the peer pair's stream; in the steady state each forward's and backward's receives are
    /// posted one step ahead and waited on by the compute stream (`lower::interleaved`); the host
    /// blocks only at the iteration's end.
    Overlapped,
}

impl Style {
    /// The command-line spelling.
    pub fn name(self) -> &'static str {
        match self {
            Style::Batched => "batched",
            Style::Blocking => "blocking",
            Style::Torch => "torch",
            Style::Overlapped => "overlapped",
        }
    }

    /// Whether the host runs ahead to the iteration's end (never blocks inside it).
    pub fn host_runs_ahead(self) -> bool {
        matches!(self, Style::Torch | Style::Overlapped)
    }
}

/// Default NCCL cost (ps per byte), as `simgpu::abi::env::NCCL_PS_PER_BYTE` documents.
pub const DEFAULT_PS_PER_BYTE: u64 = 100;

/// Tensor and data parallelism.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parallel {
    /// Processes per pipeline stage (one GPU each), one tensor-parallel communicator per stage.
    pub tp: u32,
    /// Transformer layers per stage: each has its tensor-parallel collectives.
    pub layers: u32,
    /// Sequence parallelism: all-gather + reduce-scatter instead of each all-reduce.
    pub sequence_parallel: bool,
    /// Transfer time of one tensor-parallel collective, ns.
    pub tp_comm_ns: u64,
    /// Pipeline replicas.
    pub dp: u32,
    /// Gradient buckets per model chunk, reduced during the last micro-batch's backward.
    pub dp_buckets: u32,
    /// Transfer time of a model chunk's whole gradient reduction (all buckets), ns; also of an
    /// FSDP stage's all-gather and reduce-scatter.
    pub dp_comm_ns: u64,
    /// Reduce-scatter the gradients and all-gather the parameters after the step.
    pub distributed_optimizer: bool,
    /// A grad-norm all-reduce before the step.
    pub clip_grad: bool,
}

impl Default for Parallel {
    fn default() -> Parallel {
        Parallel {
            tp: 1,
            layers: 1,
            sequence_parallel: false,
            tp_comm_ns: 0,
            dp: 1,
            dp_buckets: 1,
            dp_comm_ns: 0,
            distributed_optimizer: false,
            clip_grad: false,
        }
    }
}

fn one() -> u32 {
    1
}

/// Everything a stage needs to know.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobConfig {
    /// The built-in schedule (for a CSV job: its stages, micro-batches and stages per rank, with
    /// the F, I and W times per stage).
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
    /// A `compute_comms` schedule run with torch's semantics instead of the built-in one.
    #[serde(default)]
    pub csv: Option<CsvSchedule>,
    #[serde(default)]
    pub par: Parallel,
    /// Compute kernels per phase (0: as many as [`crate::lower::kernel_count`] picks).
    #[serde(default)]
    pub kernels_per_phase: u32,
    #[serde(default)]
    pub noise: Noise,
    #[serde(default)]
    pub visible: Visible,
    #[serde(default = "one")]
    pub nodes: u32,
    /// `torch`, `overlapped` and CSV jobs: every pipeline send and receive of a rank on one
    /// stream and the pipeline's communicator (ProcessGroupNCCL's batched P2P on the group's main
    /// communicator) instead of one per peer pair.
    #[serde(default)]
    pub p2p_shared: bool,
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

    /// Bytes of the loss all-reduce over every process, sized to take `allreduce_ns`.
    pub fn allreduce_bytes(&self) -> u64 {
        coll_bytes(self.allreduce_ns, self.topology().world())
    }

    /// The process grid and its placement.
    pub fn topology(&self) -> Topology {
        Topology {
            pp: self.shape.stages,
            tp: self.par.tp,
            dp: self.par.dp,
            nodes: self.nodes,
            visible: self.visible,
        }
    }
}

/// Bytes (the whole buffer) of a collective on `n` ranks whose transfer takes `ns`: the stand-in
/// NCCL moves 2(n-1)/n x bytes for every collective kind (TESTBED.md, "NCCL"), at the cost of
/// [`JobConfig::ps_per_byte`]. At least 4 bytes (one float).
pub fn coll_bytes(ns: u64, n: u32) -> u64 {
    let n = u64::from(n);
    if n < 2 || ns == 0 {
        return 4;
    }
    let raw = bytes_for(ns, JobConfig::ps_per_byte());
    ((raw as u128 * n as u128 / (2 * (n - 1)) as u128) as u64).max(4)
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
