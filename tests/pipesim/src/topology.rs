//! Where every process of a job sits: its pipeline stage, tensor-parallel and data-parallel index,
//! its GPU and its node, and what `CUDA_VISIBLE_DEVICES` it is started with.
//!
//! Ranks follow Megatron's default order (`tp-cp-ep-dp-pp`: tensor parallel fastest, then data
//! parallel, pipeline slowest): global rank = tp + TP * (dp + DP * pp). Rank r runs on physical GPU
//! r. Nodes hold consecutive ranks: with N nodes, node n holds ranks n*W/N .. (n+1)*W/N - 1 (a
//! tensor-parallel group never spans two nodes when TP divides W/N, as launchers arrange it).
use serde::{Deserialize, Serialize};

/// Largest job: the simulated GPU has at most 64 devices.
pub const MAX_WORLD: u32 = crate::devices::MAX_DEVICES;

/// What a process sees of the GPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Visible {
    /// Every GPU of its node (all of them on one node): the rank picks its own (`cudaSetDevice`).
    #[default]
    All,
    /// `CUDA_VISIBLE_DEVICES=<its GPU>` (Slurm with per-task binding, Kubernetes, Ray): every rank
    /// calls its GPU device 0.
    PerRank,
}

/// The shape of the job's process grid and its placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    pub pp: u32,
    pub tp: u32,
    pub dp: u32,
    pub nodes: u32,
    pub visible: Visible,
}

/// A rank's coordinates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Coords {
    pub pp: u32,
    pub tp: u32,
    pub dp: u32,
}

impl Topology {
    /// A single-GPU-per-stage pipeline on one node.
    pub fn pipeline(pp: u32) -> Topology {
        Topology {
            pp,
            tp: 1,
            dp: 1,
            nodes: 1,
            visible: Visible::All,
        }
    }

    /// Number of processes (and GPUs).
    pub fn world(&self) -> u32 {
        self.pp * self.tp * self.dp
    }

    /// Checks the shape; the message is one line.
    pub fn validate(&self) -> Result<(), String> {
        for (flag, v) in [
            ("--tp", self.tp),
            ("--dp", self.dp),
            ("--nodes", self.nodes),
        ] {
            if v == 0 {
                return Err(format!("{flag} must be at least 1"));
            }
        }
        let w = self.world();
        if w > MAX_WORLD {
            return Err(format!(
                "the job needs {w} GPUs (pp {} x tp {} x dp {}); the simulated GPU has at most {MAX_WORLD}",
                self.pp, self.tp, self.dp
            ));
        }
        if !w.is_multiple_of(self.nodes) {
            return Err(format!(
                "--nodes {} must divide the job's {w} processes",
                self.nodes
            ));
        }
        let per_node = w / self.nodes;
        if self.tp > 1 && !per_node.is_multiple_of(self.tp) {
            return Err(format!(
                "--tp {} must divide the {per_node} GPUs of a node (--nodes {})",
                self.tp, self.nodes
            ));
        }
        Ok(())
    }

    /// Global rank of `c`.
    pub fn rank(&self, c: Coords) -> u32 {
        c.tp + self.tp * (c.dp + self.dp * c.pp)
    }

    /// Coordinates of global rank `r`.
    pub fn coords(&self, r: u32) -> Coords {
        Coords {
            tp: r % self.tp,
            dp: (r / self.tp) % self.dp,
            pp: r / (self.tp * self.dp),
        }
    }

    /// The physical GPU of rank `r`.
    pub fn gpu(&self, r: u32) -> u32 {
        r
    }

    /// GPUs per node.
    pub fn gpus_per_node(&self) -> u32 {
        self.world() / self.nodes.max(1)
    }

    /// The node of rank `r` (and of its GPU).
    pub fn node(&self, r: u32) -> u32 {
        self.gpu(r) / self.gpus_per_node().max(1)
    }

    /// The physical GPUs of node `n`.
    pub fn node_gpus(&self, n: u32) -> std::ops::Range<u32> {
        let k = self.gpus_per_node();
        n * k..(n + 1) * k
    }

    /// `CUDA_VISIBLE_DEVICES` for a process on physical GPU `gpu` (None: leave it unset) and the
    /// device ordinal it then uses.
    pub fn visible_for_gpu(&self, gpu: u32) -> (Option<String>, u32) {
        match self.visible {
            Visible::PerRank => (Some(gpu.to_string()), 0),
            Visible::All if self.nodes <= 1 => (None, gpu),
            Visible::All => {
                let n = gpu / self.gpus_per_node().max(1);
                let list: Vec<String> = self.node_gpus(n).map(|g| g.to_string()).collect();
                (Some(list.join(",")), gpu - self.node_gpus(n).start)
            }
        }
    }

    /// The ranks of rank `r`'s tensor-parallel group, pipeline (per tp, dp), data-parallel group,
    /// and model-parallel group (its replica: every pp and tp index of its dp index).
    pub fn tp_group(&self, r: u32) -> Vec<u32> {
        let c = self.coords(r);
        (0..self.tp)
            .map(|t| self.rank(Coords { tp: t, ..c }))
            .collect()
    }

    pub fn pp_group(&self, r: u32) -> Vec<u32> {
        let c = self.coords(r);
        (0..self.pp)
            .map(|p| self.rank(Coords { pp: p, ..c }))
            .collect()
    }

    pub fn dp_group(&self, r: u32) -> Vec<u32> {
        let c = self.coords(r);
        (0..self.dp)
            .map(|d| self.rank(Coords { dp: d, ..c }))
            .collect()
    }

    pub fn mp_group(&self, r: u32) -> Vec<u32> {
        let c = self.coords(r);
        let mut v: Vec<u32> = (0..self.pp)
            .flat_map(|p| (0..self.tp).map(move |t| (p, t)))
            .map(|(p, t)| {
                self.rank(Coords {
                    pp: p,
                    tp: t,
                    dp: c.dp,
                })
            })
            .collect();
        v.sort_unstable();
        v
    }

    /// The rank of pipeline stage `pp` in `r`'s pipeline (same tp and dp index).
    pub fn stage_rank(&self, r: u32, pp: u32) -> u32 {
        self.rank(Coords {
            pp,
            ..self.coords(r)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(pp: u32, tp: u32, dp: u32, nodes: u32, visible: Visible) -> Topology {
        Topology {
            pp,
            tp,
            dp,
            nodes,
            visible,
        }
    }

    #[test]
    fn megatron_order() {
        let t = t(4, 2, 2, 2, Visible::All);
        assert_eq!(t.world(), 16);
        assert!(t.validate().is_ok());
        for r in 0..16 {
            assert_eq!(t.rank(t.coords(r)), r);
        }
        assert_eq!(t.tp_group(5), vec![4, 5]);
        assert_eq!(t.dp_group(5), vec![5, 7]);
        assert_eq!(t.pp_group(5), vec![1, 5, 9, 13]);
        assert_eq!(t.mp_group(5), vec![0, 1, 4, 5, 8, 9, 12, 13]);
        assert_eq!(t.node(7), 0);
        assert_eq!(t.node(8), 1);
        assert_eq!(
            t.visible_for_gpu(9),
            (Some("8,9,10,11,12,13,14,15".into()), 1)
        );
        let one = Topology::pipeline(4);
        assert_eq!(one.visible_for_gpu(3), (None, 3));
        let per = Topology {
            visible: Visible::PerRank,
            ..one
        };
        assert_eq!(per.visible_for_gpu(3), (Some("3".into()), 0));
    }

    #[test]
    fn bad_shapes_are_refused() {
        assert!(t(4, 2, 2, 3, Visible::All).validate().is_err());
        assert!(t(4, 4, 8, 1, Visible::All).validate().is_err());
        assert!(t(3, 2, 1, 2, Visible::All).validate().is_err());
        assert!(t(4, 0, 1, 1, Visible::All).validate().is_err());
    }
}
