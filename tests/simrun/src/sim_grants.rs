//! `freeride sim`'s `"grants"`: the agents' published grants scored against the truth, over the
//! same iterations as the other scores. `over_busy_share` is the share of granted time during
//! which a trainer's GPU was truly busy (its compute, or a transferring communication kernel):
//! time a side task allowed by the grant would have taken from the trainer.
//!
//! A grant names the GPU as the agent knows it; a rank belongs to the GPU its agent's bubbles
//! named. Ranks the agent put on one GPU (wrongly, under per-rank `CUDA_VISIBLE_DEVICES`, while
//! it keys GPUs by ordinal) are scored together: a grant there is over busy time when any of them
//! was busy.
//!
//! `coverage` is the other side: where each rank's true idle time went against the grants of the
//! GPU its agent put it on ([`Coverage`]): what a side task could have had and did not, by cause.
use crate::sim::{scored_iterations, SimResult};
use freeride_agent::inference::score::{clip, merge, Coverage, GrantTally};
use freeride_agent::inference::{GpuId, Ns};
use std::collections::BTreeMap;

/// The grants overall, and per rank (the tally of the GPU the agent put it on).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GrantScores {
    pub overall: GrantTally,
    pub per_rank: Vec<GrantTally>,
    /// All ranks' idle time against their GPUs' grants.
    pub coverage: Coverage,
}

/// True idle time of rank `rank` in the scored iterations.
fn idle_of(r: &SimResult, rank: usize) -> Vec<(Ns, Ns)> {
    let mut idle = vec![];
    for it in scored_iterations(&r.truth) {
        idle.extend(clip(
            &merge(it.ranks[rank].idle_intervals.clone()),
            it.start_ns,
            it.end_ns,
        ));
    }
    merge(idle)
}

/// Busy time of rank `rank` in the scored iterations: each iteration less its true idle time.
fn busy_of(r: &SimResult, rank: usize) -> Vec<(Ns, Ns)> {
    let mut busy = vec![];
    for it in scored_iterations(&r.truth) {
        let idle = merge(it.ranks[rank].idle_intervals.clone());
        let mut at = it.start_ns;
        for &(a, b) in &idle {
            if a > at {
                busy.push((at, a.min(it.end_ns)));
            }
            at = at.max(b);
        }
        if at < it.end_ns {
            busy.push((at, it.end_ns));
        }
    }
    merge(busy)
}

pub fn score(r: &SimResult) -> GrantScores {
    let scored = scored_iterations(&r.truth);
    let (Some(first), Some(last)) = (scored.first(), scored.last()) else {
        return GrantScores::default();
    };
    let (from, to) = (first.start_ns, last.end_ns);
    let per_node = r.ranks_per_node.max(1) as usize;
    // Rank -> (node, GPU as its agent named it).
    let key_of: Vec<Option<(usize, GpuId)>> = r
        .truth
        .pids
        .iter()
        .enumerate()
        .map(|(rank, &pid)| {
            let gpu = r.bubbles.iter().find(|b| b.pid == pid).map(|b| b.gpu)?;
            Some((rank / per_node, gpu))
        })
        .collect();
    let mut busy: BTreeMap<(usize, GpuId), Vec<(Ns, Ns)>> = BTreeMap::new();
    for (rank, k) in key_of.iter().enumerate() {
        if let Some(k) = k {
            busy.entry(*k).or_default().extend(busy_of(r, rank));
        }
    }
    let mut tallies: BTreeMap<(usize, GpuId), GrantTally> = BTreeMap::new();
    for (node, log) in r.grant_logs.iter().enumerate() {
        for gpu in log.gpus() {
            let b = busy.get(&(node, gpu)).cloned().unwrap_or_default();
            tallies.insert(
                (node, gpu),
                log.tally(gpu, from, to, &clip(&merge(b), from, to)),
            );
        }
    }
    let mut overall = GrantTally::default();
    for t in tallies.values() {
        overall.add(*t);
    }
    let mut coverage = Coverage::default();
    for (rank, k) in key_of.iter().enumerate() {
        let granted = k
            .and_then(|(node, gpu)| r.grant_logs.get(node).map(|log| log.intervals(gpu)))
            .unwrap_or_default();
        coverage.add(Coverage::of(
            &idle_of(r, rank),
            &clip(&merge(granted), from, to),
        ));
    }
    GrantScores {
        overall,
        coverage,
        per_rank: key_of
            .iter()
            .map(|k| k.and_then(|k| tallies.get(&k).copied()).unwrap_or_default())
            .collect(),
    }
}
