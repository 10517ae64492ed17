//! The agents the harness replays: the inference and grant policy as `crate::node` runs them.
use super::super::detector::{Bubble, Detector};
use super::super::obs::{GpuId, Ns, Obs};
use super::Agent;
use crate::grants::GrantPolicy;
use std::collections::BTreeMap;

/// The agent before issue 14: one detector per process, the process's GPU the one its latest
/// record named, each GPU's grant decided from its trainers' open bubbles in pid order (the last
/// one's decision is what the GPU's grant block holds).
pub struct Before {
    trainers: BTreeMap<u32, (GpuId, Detector)>,
    policy: GrantPolicy,
    closed: Vec<(u32, GpuId, Bubble)>,
}

impl Before {
    pub fn new() -> Before {
        Before {
            trainers: BTreeMap::new(),
            policy: GrantPolicy::default(),
            closed: vec![],
        }
    }
}

impl Agent for Before {
    fn observe(&mut self, pid: u32, gpu: GpuId, obs: Obs) {
        let t = self
            .trainers
            .entry(pid)
            .or_insert_with(|| (gpu, Detector::new()));
        t.0 = gpu;
        t.1.observe(obs);
        for b in t.1.take_closed() {
            self.closed.push((pid, t.0, b));
        }
    }

    fn grants(&mut self, now: Ns) -> Vec<(GpuId, Option<Ns>)> {
        let mut by_gpu = BTreeMap::new();
        for (gpu, d) in self.trainers.values() {
            by_gpu.insert(*gpu, self.policy.decide(now, d.open_now()));
        }
        by_gpu.into_iter().collect()
    }

    fn take_closed(&mut self) -> Vec<(u32, GpuId, Bubble)> {
        std::mem::take(&mut self.closed)
    }

    fn gone(&mut self, pid: u32) {
        self.trainers.remove(&pid);
    }
}
