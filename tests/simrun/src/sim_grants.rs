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
//!
//! `held` breaks the idle time no grant covered down by why the agent held its GPU's grant closed
//! then ([`HeldTally`]): where a better prediction, a faster look or a narrower guard would gain.
//!
//! `used` is what the side tasks made of it: their GPU time inside the grants of the GPU they ran
//! on against the time granted there ([`GrantUse`]). Harvest is about coverage x use: a grant the
//! side task cannot fill (its host thread starved of CPU, its steps longer than what is left) is
//! the side task's or the host's loss, not the agent's.
use crate::sim::{scored_iterations, SimResult};
use freeride_agent::grants::Held;
use freeride_agent::inference::score::{
    clip, merge, minus, overlap, total, Coverage, GrantTally, Tally,
};
use freeride_agent::inference::{GpuId, Ns};
use std::collections::BTreeMap;

/// The grants overall, and per rank (the tally of the GPU the agent put it on).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GrantScores {
    pub overall: GrantTally,
    pub per_rank: Vec<GrantTally>,
    /// All ranks' idle time against their GPUs' grants.
    pub coverage: Coverage,
    /// The idle time no grant covered, by why its GPU's grant was held closed.
    pub held: HeldTally,
    pub used: GrantUse,
}

/// Idle time that no grant covered, by the reason the agent held the grant of the rank's GPU
/// closed then ([`Held`]); `not_noted_ns` is the rest: the agent noted no reason (a grant that
/// lapsed at its deadline before the agent's next step, a GPU it had not seen yet).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeldTally {
    pub by: BTreeMap<Held, Ns>,
    pub ungranted_ns: Ns,
    pub not_noted_ns: Ns,
}

impl HeldTally {
    /// Adds one rank's idle time against its GPU's grants and holds (none need be merged).
    pub fn add(&mut self, idle: &[(Ns, Ns)], granted: &[(Ns, Ns)], held: &[(Ns, Ns, Held)]) {
        let left = minus(&merge(idle.to_vec()), &merge(granted.to_vec()));
        let left_ns = total(&left);
        self.ungranted_ns += left_ns;
        let mut labelled = 0;
        for why in Held::ALL {
            let of: Vec<(Ns, Ns)> = held
                .iter()
                .filter(|h| h.2 == why)
                .map(|h| (h.0, h.1))
                .collect();
            let ns = overlap(&left, &merge(of));
            if ns > 0 {
                *self.by.entry(why).or_default() += ns;
                labelled += ns;
            }
        }
        // A step's reason lasts until the next step's: intervals of one GPU never overlap.
        self.not_noted_ns += left_ns.saturating_sub(labelled);
    }
}

/// Side-task GPU time inside grants against the time granted, summed over GPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GrantUse {
    pub granted_ns: Ns,
    pub used_ns: Ns,
}

impl GrantUse {
    /// The share of granted time a side task ran in (`None` when nothing was granted).
    pub fn share(&self) -> Option<f64> {
        (self.granted_ns > 0).then(|| self.used_ns as f64 / self.granted_ns as f64)
    }
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
    let mut held = HeldTally::default();
    for (rank, k) in key_of.iter().enumerate() {
        let log = k.and_then(|(node, gpu)| r.grant_logs.get(node).map(|log| (log, gpu)));
        let granted = clip(
            &merge(log.map(|(l, g)| l.intervals(g)).unwrap_or_default()),
            from,
            to,
        );
        let idle = idle_of(r, rank);
        coverage.add(Coverage::of(&idle, &granted));
        held.add(
            &idle,
            &granted,
            &log.map(|(l, g)| l.held(g)).unwrap_or_default(),
        );
    }
    // Per GPU of the agent once (ranks the agent put on one GPU share its grants): the side-task
    // kernels on the simulated device of its first rank.
    let mut used = GrantUse::default();
    let mut seen = std::collections::BTreeSet::new();
    for (rank, k) in key_of.iter().enumerate() {
        let Some((node, gpu)) = *k else { continue };
        if !seen.insert((node, gpu)) {
            continue;
        }
        let Some(log) = r.grant_logs.get(node) else {
            continue;
        };
        let device = r.truth.devices.get(rank).copied().unwrap_or(rank as u32);
        let side: Vec<(Ns, Ns)> = r
            .kernels
            .iter()
            .filter(|k| k.device == device && r.sidetask_pids.contains(&k.pid))
            .map(|k| (k.start_ns, k.end_ns))
            .collect();
        let t = Tally::of(&side, &clip(&merge(log.intervals(gpu)), from, to));
        used.granted_ns += t.truth_ns;
        used.used_ns += t.overlap_ns;
    }
    GrantScores {
        overall,
        coverage,
        held,
        used,
        per_rank: key_of
            .iter()
            .map(|k| k.and_then(|k| tallies.get(&k).copied()).unwrap_or_default())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use freeride_agent::grant_log::GrantLog;
    use freeride_agent::inference::Bubble;
    use freeride_agent::node::BubbleRecord;
    use serde_json::json;

    /// Two ranks on two GPUs, three iterations of 100 ns (two warm-up, one scored: 200..300);
    /// GPU A granted 220..260 (a side task ran 230..250 there and 250..270 past it), GPU B
    /// granted 210..230 and nothing ran there; a side-task kernel before the scored iteration and
    /// a trainer kernel inside a grant do not count.
    #[test]
    fn used_is_side_task_time_inside_its_gpus_grants() {
        let (a, b) = (GpuId(0xa00), GpuId(0xb00));
        let it = |i: u64| {
            json!({"index": i, "start_ns": 100 * i, "end_ns": 100 * i + 100, "ranks": [
                {"rank": 0, "pid": 10, "busy_ns": 0, "idle_ns": 100, "idle_intervals": [[100 * i, 100 * i + 100]]},
                {"rank": 1, "pid": 11, "busy_ns": 0, "idle_ns": 100, "idle_intervals": [[100 * i, 100 * i + 100]]}]})
        };
        let truth = serde_json::from_value(json!({
            "pids": [10, 11], "devices": [0, 1], "iterations": [it(0), it(1), it(2)]}))
        .unwrap();
        let kernel = |device: u32, pid: u32, s: u64, e: u64| {
            serde_json::from_value(json!({"device": device, "pid": pid, "kernel": "k",
                "kind": "compute", "start_ns": s, "end_ns": e}))
            .unwrap()
        };
        let mut log = GrantLog::new(0);
        // GPU A's steps: held for low confidence from 200, granted 220..260, then held before
        // the shortest recent end up to the last step at 300.
        let mut step = |t: Ns, grant: Result<Ns, Held>| {
            log.note(a, t, grant.ok());
            log.note_held(a, t, grant.err());
        };
        step(200, Err(Held::LowConfidence));
        step(220, Ok(260));
        step(260, Err(Held::GuardOfShortest));
        step(300, Err(Held::GuardOfShortest));
        log.note(b, 210, Some(230));
        log.note(b, 230, None);
        let bubble = |pid, gpu| BubbleRecord {
            pid,
            gpu,
            bubble: Bubble {
                start: 200,
                end: 300,
                opened_seen: 200,
                closed_seen: 300,
                predicted_end: None,
                confidence: 0.0,
                cut_by_exit: false,
            },
        };
        let r = SimResult {
            truth,
            kernels: vec![
                kernel(0, 99, 230, 250),
                kernel(0, 99, 250, 270),
                kernel(0, 99, 150, 190),
                kernel(1, 11, 210, 230),
            ],
            bubbles: vec![bubble(10, a), bubble(11, b)],
            grant_logs: vec![log],
            events: 0,
            dropped: 0,
            agent_cpu_ns: 0,
            agent_wall_ns: 0,
            report_lag: Default::default(),
            agent_steps: Default::default(),
            matched: Default::default(),
            warnings: vec![],
            sidetask_pids: vec![99],
            nodes: 1,
            ranks_per_node: 2,
            per_node: vec![],
            sidetask_ends: vec![],
        };
        let scores = score(&r);
        // Idle 200..300 on both GPUs: A granted 220..260 and held for its reasons the rest, B
        // granted 210..230 and held for none noted.
        let h = &scores.held;
        assert_eq!(h.ungranted_ns, 60 + 80);
        assert_eq!(h.by.get(&Held::LowConfidence), Some(&20));
        assert_eq!(h.by.get(&Held::GuardOfShortest), Some(&40));
        assert_eq!(h.by.len(), 2);
        assert_eq!(h.not_noted_ns, 80);
        let u = scores.used;
        assert_eq!((u.granted_ns, u.used_ns), (60, 30), "{u:?}");
        assert_eq!(u.share(), Some(0.5));
        assert_eq!(GrantUse::default().share(), None);
    }
}
