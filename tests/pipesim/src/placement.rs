//! The environment every process of a job starts with: its rank and device ordinal, the
//! `CUDA_VISIBLE_DEVICES` a launcher would give it, the simulated machine's device count, and,
//! when the job spans several nodes under freeride, its node's session directory. Side tasks
//! started beside the job on a GPU get the same view of it ([`gpu_env`]).
use crate::config::{env, JobConfig};
use crate::devices::{self, SIM_DEVICES};
use crate::topology::Topology;
use std::ffi::OsString;
use std::path::PathBuf;

/// freeride's session directory variable (`freeride_abi::env::DIR`; pipesim does not link it).
pub const SESSION_DIR: &str = "FREERIDE_DIR";

/// Variables to set and to remove for a process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Env {
    pub set: Vec<(String, OsString)>,
    pub remove: Vec<String>,
}

/// The view of physical GPU `gpu` a process on it gets: its `CUDA_VISIBLE_DEVICES` (or none) and
/// the device ordinal to use, plus the simulated machine's device count (`FREERIDE_SIM_DEVICES`)
/// and the node's session directory when `node_dirs` names one per node.
pub fn gpu_env(topo: &Topology, gpu: u32, node_dirs: &[PathBuf]) -> (Env, u32) {
    let mut e = Env::default();
    let (visible, ordinal) = topo.visible_for_gpu(gpu);
    match visible {
        Some(v) => e.set.push(("CUDA_VISIBLE_DEVICES".into(), v.into())),
        None => e.remove.push("CUDA_VISIBLE_DEVICES".into()),
    }
    // Every process of the job and beside it sees the same simulated machine (the job's
    // configuration was checked against it: `devices::for_job` succeeds).
    if let Ok(n) = devices::for_job(topo.world()) {
        e.set.push((SIM_DEVICES.into(), n.to_string().into()));
    }
    if let Some(d) = node_dirs.get(topo.node(gpu) as usize) {
        e.set.push((SESSION_DIR.into(), d.clone().into_os_string()));
    }
    (e, ordinal)
}

/// The environment of rank `rank`'s stage process (beside the launcher's common variables).
pub fn stage_env(cfg: &JobConfig, rank: u32, node_dirs: &[PathBuf]) -> Env {
    let topo = cfg.topology();
    let (mut e, ordinal) = gpu_env(&topo, topo.gpu(rank), node_dirs);
    e.set.push((env::RANK.into(), rank.to_string().into()));
    e.set
        .push((env::WORLD_SIZE.into(), topo.world().to_string().into()));
    e.set.push((env::DEVICE.into(), ordinal.to_string().into()));
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Visible;

    #[test]
    fn per_rank_and_per_node_views() {
        let t = Topology {
            pp: 2,
            tp: 2,
            dp: 1,
            nodes: 2,
            visible: Visible::PerRank,
        };
        let dirs = vec![PathBuf::from("/s0"), PathBuf::from("/s1")];
        let (e, ord) = gpu_env(&t, 3, &dirs);
        assert_eq!(ord, 0);
        assert!(e.set.contains(&("CUDA_VISIBLE_DEVICES".into(), "3".into())));
        assert!(e.set.contains(&(SESSION_DIR.into(), "/s1".into())));
        let t = Topology {
            visible: Visible::All,
            ..t
        };
        let (e, ord) = gpu_env(&t, 3, &[]);
        assert_eq!(ord, 1);
        assert!(e
            .set
            .contains(&("CUDA_VISIBLE_DEVICES".into(), "2,3".into())));
    }
}
