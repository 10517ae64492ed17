//! The agent the harness replays: the inference and grant policy as `crate::node` runs them.
use super::super::bubble::Bubble;
use super::super::gpus::Gpus;
use super::super::obs::{GpuId, Ns, Obs};
use super::Agent;
use crate::grants::{decide_all, GrantPolicy};

/// The node's timelines and the grant policy (without rings and grant blocks).
#[derive(Default)]
pub struct NodeAgent {
    pub gpus: Gpus,
    pub policy: GrantPolicy,
    /// The most comm ops the timelines held pending at once.
    pub max_pending: usize,
}

impl NodeAgent {
    pub fn new() -> NodeAgent {
        NodeAgent::default()
    }
}

impl Agent for NodeAgent {
    fn observe(&mut self, pid: u32, gpu: GpuId, obs: Obs, now: Ns) {
        self.gpus.observe(pid, Some(gpu), obs, now);
    }

    fn grants(&mut self, now: Ns) -> Vec<(GpuId, Option<Ns>)> {
        self.max_pending = self.max_pending.max(self.gpus.pending_ops());
        decide_all(&self.policy, &self.gpus, now)
            .into_iter()
            .map(|(g, grant)| (g, grant.ok()))
            .collect()
    }

    fn take_closed(&mut self) -> Vec<(u32, GpuId, Bubble)> {
        self.gpus.take_closed()
    }

    fn gone(&mut self, pid: u32) {
        self.gpus.retain(|p| p != pid);
    }

    fn max_pending(&self) -> Option<usize> {
        Some(self.max_pending)
    }
}
