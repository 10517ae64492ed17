//! `freeride sim`'s per-GPU view: for every trainer process (a rank on its physical GPU), its
//! share of idle time and what the agent and the side tasks made of that GPU, over the same
//! iterations as the job-wide scores (`crate::sim::score`, `crate::sim::harvest`).
use crate::sim::{scored_iterations, SimResult};
use freeride_agent::inference::score::{clip, merge, Tally};

/// One rank's GPU.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuScore {
    pub rank: u32,
    pub pid: u32,
    /// Physical GPU and its PCI bus id.
    pub device: u32,
    pub bus_id: String,
    /// The GPU the agent put this rank's bubbles on (its bus id), if it closed any.
    pub agent_gpu: Option<String>,
    pub node: u32,
    /// True idle time / the scored iterations' length.
    pub idle_fraction: f64,
    /// The agent's inferred bubbles for this process against its true idle time.
    pub precision: f64,
    pub recall: f64,
    /// Side-task GPU time inside this GPU's true idle time / that idle time.
    pub bubble_busy_ratio: f64,
}

/// Every rank's [`GpuScore`].
pub fn per_gpu(r: &SimResult) -> Vec<GpuScore> {
    let scored = scored_iterations(&r.truth);
    r.truth
        .pids
        .iter()
        .enumerate()
        .map(|(rank, &pid)| {
            let device = r.truth.devices.get(rank).copied().unwrap_or(rank as u32);
            let inferred = merge(
                r.bubbles
                    .iter()
                    .filter(|b| b.pid == pid)
                    .map(|b| (b.bubble.start, b.bubble.end))
                    .collect(),
            );
            let side = merge(
                r.kernels
                    .iter()
                    .filter(|k| k.device == device && r.sidetask_pids.contains(&k.pid))
                    .map(|k| (k.start_ns, k.end_ns))
                    .collect(),
            );
            let (mut agent, mut harvest) = (Tally::default(), Tally::default());
            let (mut window, mut idle) = (0u64, 0u64);
            for it in scored {
                let truth_iv = merge(it.ranks[rank].idle_intervals.clone());
                agent.add(Tally::of(
                    &clip(&inferred, it.start_ns, it.end_ns),
                    &truth_iv,
                ));
                harvest.add(Tally::of(&clip(&side, it.start_ns, it.end_ns), &truth_iv));
                window += it.end_ns - it.start_ns;
                idle += it.ranks[rank].idle_ns;
            }
            GpuScore {
                rank: rank as u32,
                pid,
                device,
                bus_id: r.truth.bus_ids.get(rank).cloned().unwrap_or_default(),
                agent_gpu: r
                    .bubbles
                    .iter()
                    .find(|b| b.pid == pid)
                    .map(|b| b.gpu.to_string()),
                node: rank as u32 / r.ranks_per_node.max(1),
                idle_fraction: if window == 0 {
                    0.0
                } else {
                    idle as f64 / window as f64
                },
                precision: agent.precision(),
                recall: agent.recall(),
                bubble_busy_ratio: if harvest.truth_ns == 0 {
                    0.0
                } else {
                    harvest.overlap_ns as f64 / harvest.truth_ns as f64
                },
            }
        })
        .collect()
}
