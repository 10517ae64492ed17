//! The scheduler's grants, per physical GPU: when every trainer on a GPU is in a bubble whose end the
//! agent can predict, side tasks on that GPU get a grant that closes a guard interval before the
//! earliest predicted end; it closes at once when a trainer's bubble closes (compute that can run
//! was queued, or the communication its compute waits for ended). A launch queued behind a wait does
//! not close it: the bubble goes on until the prediction. In a long pause (a trainer idle well past
//! anything predicted: evaluation, checkpointing, a data-loader stall), short renewable grants,
//! closed by the trainer's next launch.
use crate::grant_log::GrantLog;
use crate::grant_time::GrantTime;
use crate::inference::gpus::Gpus;
use crate::inference::obs::gpu_of_record;
use crate::inference::{GpuId, Ns, OpenBubble};
use crate::sidetasks::{self, SideTaskInfo};
use freeride_abi::grant_shm::{GrantFields, GrantWriter};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How grants are sized.
#[derive(Clone, Copy, Debug)]
pub struct GrantPolicy {
    /// The grant closes at least this long before the predicted end of the bubble...
    pub guard_min_ns: Ns,
    /// ...or this share of the bubble's predicted length plus this many times the spread of its
    /// length, if larger.
    pub guard_share: f64,
    pub guard_spreads: f64,
    /// No grant shorter than this.
    pub min_grant_ns: Ns,
    /// No grant for a prediction less confident than this (0..=1).
    pub min_confidence: f64,
    /// Publish grants without a deadline (the side tasks stop issuing work only when the grant
    /// closes): models the prior approach's pause/resume with no time check.
    pub open_ended: bool,
    /// Device memory per GPU, when the operator states it (the agent opens no CUDA context on a
    /// training GPU to ask): side tasks then get the rest after the trainer's allocations and
    /// `mem_reserve_bytes`, as the grant's memory budget. `None`: no budget in the grant.
    pub gpu_mem_bytes: Option<u64>,
    pub mem_reserve_bytes: u64,
    /// A trainer idle this long past its bubble's start or predicted end is in a pause...
    pub pause_after_ns: Ns,
    /// ...or this long, when its compute is queued behind a wait (the bubble then ends on the GPU,
    /// seen only with the poller's delay).
    pub pause_after_blocked_ns: Ns,
    /// Grants in a pause last this long, renewed while it goes on.
    pub pause_slice_ns: Ns,
    /// An open grant reads closed to side tasks once the agent has gone this long without a step
    /// (it refreshes the grant's heartbeat every step: ~50 µs apart while a bubble is open). A
    /// grant is sized from a prediction that the agent corrects as it watches (the bubble closes
    /// early, a transfer begins); a descheduled agent corrects nothing, and on torchtitan's ZBV
    /// job on the 2-core test bed, 2-5 ms grants opened just before a 7 ms stall of the agent ran
    /// on over the trainer's next transfer.
    pub fresh_ns: Ns,
}

impl Default for GrantPolicy {
    fn default() -> Self {
        GrantPolicy {
            guard_min_ns: 300_000,
            guard_share: 0.01,
            guard_spreads: 2.0,
            min_grant_ns: 300_000,
            min_confidence: 0.5,
            open_ended: false,
            gpu_mem_bytes: None,
            mem_reserve_bytes: 1 << 30,
            pause_after_ns: 20_000_000,
            pause_after_blocked_ns: 100_000_000,
            pause_slice_ns: 2_000_000,
            fresh_ns: 1_000_000,
        }
    }
}

impl GrantPolicy {
    /// The side tasks' memory budget on a GPU whose trainer holds `trainer_bytes` (0: none set).
    pub fn mem_budget(&self, trainer_bytes: u64) -> u64 {
        match self.gpu_mem_bytes {
            // At least one byte: 0 would mean "no budget".
            Some(total) => total
                .saturating_sub(trainer_bytes)
                .saturating_sub(self.mem_reserve_bytes)
                .max(1),
            None => 0,
        }
    }

    /// Whether the trainer in bubble `b` is in a long pause at `now`.
    pub fn paused(&self, now: Ns, b: &OpenBubble) -> bool {
        let after = if b.blocked {
            self.pause_after_blocked_ns
        } else {
            self.pause_after_ns
        };
        let since = b.start.max(b.predicted_end.unwrap_or(0));
        now >= since.saturating_add(after)
    }

    /// The grant of a GPU whose trainers are in `bubbles` now (`None`: a trainer is busy):
    /// `Some(until_ns)` to open it until then, `None` for closed.
    pub fn decide_gpu(&self, now: Ns, bubbles: &[Option<OpenBubble>]) -> Option<Ns> {
        self.decide_gpu_why(now, bubbles).ok()
    }

    /// [`GrantPolicy::decide_gpu`], and why a closed grant is held: `Ok(until_ns)`, or the first
    /// reason of the first trainer that holds it.
    pub fn decide_gpu_why(&self, now: Ns, bubbles: &[Option<OpenBubble>]) -> Result<Ns, Held> {
        if bubbles.is_empty() {
            return Err(Held::NotInBubble);
        }
        let mut until: Option<Ns> = None;
        let mut pause_until = now + self.pause_slice_ns;
        for b in bubbles {
            let b = (*b).ok_or(Held::NotInBubble)?;
            // A bubble that begins once a transfer is over: not yet.
            if b.start > now {
                return Err(Held::TransferFirst);
            }
            match self.decide_why(now, b) {
                Ok(u) => until = Some(until.map_or(u, |x| x.min(u))),
                // A pause's grant, too, stops a guard before the transfer of an op in flight.
                Err(_) if self.paused(now, &b) => {
                    if let Some(x) = b.busy_from {
                        pause_until = pause_until.min(x.saturating_sub(self.guard_min_ns));
                    }
                }
                Err(why) => return Err(why),
            }
        }
        // Each trainer's own grant left the minimum; a pause's only a transfer can shorten.
        let until = until.unwrap_or(pause_until);
        if until >= now + self.min_grant_ns {
            Ok(until)
        } else {
            Err(Held::GuardOfTransfer)
        }
    }

    /// The grant of one trainer's bubble from its prediction: `Some(until_ns)`, or `None`.
    pub fn decide(&self, now: Ns, open: Option<OpenBubble>) -> Option<Ns> {
        self.decide_why(now, open?).ok()
    }

    /// [`GrantPolicy::decide`] of an open bubble, and why no grant: `Ok(until_ns)` or the reason.
    pub fn decide_why(&self, now: Ns, b: OpenBubble) -> Result<Ns, Held> {
        let predicted = b.predicted_end.ok_or(Held::NoPrediction)?;
        if predicted <= b.start {
            return Err(Held::NoPrediction);
        }
        if b.confidence < self.min_confidence {
            return Err(Held::LowConfidence);
        }
        // Never past the earliest end seen lately at this position (the trainer may be back that
        // soon), nor past the earliest start of a transfer of an op in flight; and spreads in
        // hand below that: the shortest of a few values is no bound on the next one (a bubble
        // that waits for a peer ends when the peer is ready, which varies; on torchtitan's ZBV
        // job grants ran 0.2-0.8 ms into a transfer that came earlier than any seen lately).
        let shortest = b.shortest_end.unwrap_or(Ns::MAX);
        let busy = b.busy_from.unwrap_or(Ns::MAX);
        let end = predicted.min(shortest).min(busy);
        // What the grant ends before (on a tie, the prediction: the op that ends the bubble is
        // often the one whose transfer may begin then).
        let limit = if busy < predicted.min(shortest) {
            Held::GuardOfTransfer
        } else if shortest < predicted {
            Held::GuardOfShortest
        } else {
            Held::GuardOfPrediction
        };
        if end <= b.start {
            return Err(limit);
        }
        let spreads = b.spread_ns as f64 * self.guard_spreads;
        let guard = ((end - b.start) as f64 * self.guard_share + spreads) as Ns;
        let until = end.saturating_sub(guard.max(self.guard_min_ns));
        if until >= now + self.min_grant_ns {
            Ok(until)
        } else {
            Err(limit)
        }
    }
}

/// Why a GPU's grant is closed, as the policy decided it at a step of the agent (the scores break
/// the idle time nobody was granted down by it: `freeride sim --json`'s
/// `"grants": {"coverage": {"held": ...}}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Held {
    /// A trainer on the GPU is not in a bubble as the agent knows it: busy, or its bubble not
    /// seen yet (the record that opens it on its way).
    NotInBubble,
    /// A trainer's bubble begins only once a transfer in flight is over.
    TransferFirst,
    /// Nothing predicted of a trainer's bubble (its position not learnt yet).
    NoPrediction,
    /// A prediction below the policy's confidence bar.
    LowConfidence,
    /// Less than the minimum grant left before the guard that keeps a grant's end before the
    /// bubble's predicted end...
    GuardOfPrediction,
    /// ...before the shortest end seen lately at its position...
    GuardOfShortest,
    /// ...or before the earliest time an op in flight may start transferring (or it may already).
    GuardOfTransfer,
    /// A trainer's ends may still come late (read lazily): its bubble may be over already.
    EndsLate,
}

impl Held {
    pub const ALL: [Held; 8] = [
        Held::NotInBubble,
        Held::TransferFirst,
        Held::NoPrediction,
        Held::LowConfidence,
        Held::GuardOfPrediction,
        Held::GuardOfShortest,
        Held::GuardOfTransfer,
        Held::EndsLate,
    ];

    /// Its place in [`Held::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Held::NotInBubble => "not_in_bubble",
            Held::TransferFirst => "transfer_first",
            Held::NoPrediction => "no_prediction",
            Held::LowConfidence => "low_confidence",
            Held::GuardOfPrediction => "guard_before_predicted_end",
            Held::GuardOfShortest => "guard_before_shortest_recent_end",
            Held::GuardOfTransfer => "guard_before_transfer",
            Held::EndsLate => "ends_late",
        }
    }
}

/// How often the side tasks' status files are re-read.
const SIDETASKS_RESCAN_NS: Ns = 100_000_000;

/// How far an open-ended grant reaches (see [`GrantPolicy::open_ended`]).
const OPEN_ENDED_NS: Ns = 3_600_000_000_000;

/// What a GPU's grant block holds now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Published {
    /// Open until, with this priority floor; `None`: closed.
    grant: Option<(Ns, u64)>,
    mem_budget: u64,
    side_mem: u64,
}

/// Every GPU's grant now, as `policy` decides it from its trainers' bubbles (`Err`: why it is
/// closed).
pub fn decide_all(policy: &GrantPolicy, gpus: &Gpus, now: Ns) -> Vec<(GpuId, Result<Ns, Held>)> {
    gpus.gpus()
        .into_iter()
        .map(|g| (g, policy.decide_gpu_why(now, &gpus.open_on(g))))
        .collect()
}

/// One grant block per GPU with a trainer, in the session directory (named by the GPU's bus id).
pub struct Grants {
    dir: PathBuf,
    policy: GrantPolicy,
    writers: BTreeMap<GpuId, (GrantWriter, Published)>,
    /// The side tasks per GPU (by the device number their rings name), re-read every
    /// [`SIDETASKS_RESCAN_NS`].
    tasks: BTreeMap<i32, Vec<SideTaskInfo>>,
    tasks_read_ns: Ns,
    /// Grants opened so far, per GPU.
    pub opened: BTreeMap<GpuId, u64>,
    pub warnings: Vec<String>,
    /// Device memory the trainers of each GPU held at the last update (summed).
    trainer_mem: BTreeMap<GpuId, u64>,
    /// Every grant published, when asked for ([`Grants::with_log`]).
    log: Option<GrantLog>,
    /// Each GPU's bubble time granted and held, over the agent's life.
    times: BTreeMap<GpuId, GrantTime>,
}

impl Grants {
    pub fn new(dir: &Path, policy: GrantPolicy) -> Grants {
        Grants {
            dir: dir.to_path_buf(),
            policy,
            writers: BTreeMap::new(),
            tasks: BTreeMap::new(),
            tasks_read_ns: 0,
            opened: BTreeMap::new(),
            warnings: vec![],
            trainer_mem: BTreeMap::new(),
            log: None,
            times: BTreeMap::new(),
        }
    }

    /// Also logs every grant (GPU, open, close), for scoring.
    pub fn with_log(mut self) -> Grants {
        self.log = Some(GrantLog::new(self.fresh_ns()));
        self
    }

    pub fn policy(&self) -> &GrantPolicy {
        &self.policy
    }

    /// The freshness limit the grants carry (none for open-ended grants: the prior approach's
    /// pause/resume has no heartbeat).
    fn fresh_ns(&self) -> Ns {
        if self.policy.open_ended {
            0
        } else {
            self.policy.fresh_ns
        }
    }

    /// GPU `gpu`'s bubble time granted and held so far.
    pub fn time_of(&self, gpu: GpuId) -> Option<GrantTime> {
        self.times.get(&gpu).copied()
    }

    /// The grants published so far, when logged.
    pub fn log(&self) -> Option<&GrantLog> {
        self.log.as_ref()
    }

    /// The side tasks' memory budget on GPU `device` now (`None`: no budget, or no trainer seen).
    pub fn mem_budget_of(&self, device: i32) -> Option<u64> {
        self.policy.gpu_mem_bytes?;
        let mem = self.trainer_mem.get(&gpu_of_record(device)?)?;
        Some(self.policy.mem_budget(*mem))
    }

    /// Whether an SDK side task is on the node (its status file; re-read every
    /// `SIDETASKS_RESCAN_NS`).
    pub fn any_sdk_task(&mut self, now: Ns) -> bool {
        self.rescan_tasks(now);
        self.tasks.values().any(|t| !t.is_empty())
    }

    fn rescan_tasks(&mut self, now: Ns) {
        if now.saturating_sub(self.tasks_read_ns) >= SIDETASKS_RESCAN_NS {
            self.tasks = sidetasks::scan(&self.dir);
            self.tasks_read_ns = now;
        }
    }

    /// Drops a side task that ended from the scheduler's view at once (its priority and step
    /// size no longer shape the grants), without waiting for the next status scan.
    pub fn forget(&mut self, pid: u32) {
        for tasks in self.tasks.values_mut() {
            tasks.retain(|t| t.pid != pid);
        }
    }

    /// Publishes GPU `gpu`'s grant: `grant` is what the policy decided (`Ok(until)`: open;
    /// `Err`: closed, and why, which only the log keeps).
    /// `trainer_mem`: device memory its trainers hold (summed); `side_ring_mem`: (pid, bytes) of
    /// the side-task processes on it that run under the interposer.
    pub fn update(
        &mut self,
        now: Ns,
        gpu: GpuId,
        grant: Result<Ns, Held>,
        trainer_mem: u64,
        side_ring_mem: &[(u32, u64)],
    ) {
        let outcome = grant;
        let (grant, held) = match grant {
            Ok(until) => (Some(until), None),
            Err(why) => (None, Some(why)),
        };
        if !gpu.is_known() {
            return;
        }
        self.times.entry(gpu).or_default().step(now, outcome);
        self.trainer_mem.insert(gpu, trainer_mem);
        if !self.writers.contains_key(&gpu) {
            match GrantWriter::create(&self.dir, gpu) {
                Ok(w) => {
                    self.writers.insert(gpu, (w, Published::default()));
                }
                Err(e) => {
                    self.warnings
                        .push(format!("cannot create the grant of GPU {gpu}: {e}"));
                    return;
                }
            }
        }
        self.rescan_tasks(now);
        let fresh_ns = self.fresh_ns();
        let (w, current) = self.writers.get_mut(&gpu).expect("inserted above");
        let tasks = self
            .tasks
            .get(&gpu.field())
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let until = if self.policy.open_ended {
            grant.map(|_| now + OPEN_ENDED_NS)
        } else {
            grant
        };
        if let Some(log) = &mut self.log {
            log.note(gpu, now, until);
            log.note_held(gpu, now, held);
        }
        let want = Published {
            grant: grant.map(|until| {
                (
                    until,
                    sidetasks::priority_floor(tasks, until.saturating_sub(now)),
                )
            }),
            mem_budget: self.policy.mem_budget(trainer_mem),
            side_mem: sidetasks::mem_held(tasks, side_ring_mem),
        };
        if want == *current {
            w.heartbeat();
            return;
        }
        let fields = match want.grant {
            Some((until, floor)) => {
                if current.grant.is_none() {
                    *self.opened.entry(gpu).or_default() += 1;
                }
                let until = if self.policy.open_ended {
                    now + OPEN_ENDED_NS
                } else {
                    until
                };
                GrantFields {
                    open: true,
                    open_until_ns: until,
                    budget_ns: until - now,
                    min_priority: floor,
                    fresh_ns,
                    ..GrantFields::default()
                }
            }
            None => GrantFields::default(),
        };
        w.publish(GrantFields {
            mem_budget_bytes: want.mem_budget,
            side_mem_held_bytes: want.side_mem,
            ..fields
        });
        *current = want;
    }

    /// Closes every grant (the agent is stopping).
    pub fn close_all(&mut self) {
        for (w, current) in self.writers.values_mut() {
            w.publish(GrantFields::default());
            *current = Published::default();
        }
    }

    /// Closes every grant and removes its block (the agent is stopping): side tasks then read "no
    /// agent" (the gate holds them, as with no block at all; the SDK follows its no-agent policy),
    /// and a mapping they hold stays valid (a removed file lives on while it is mapped). A block
    /// that is no longer the one this agent made is left alone.
    pub fn remove_blocks(&mut self) {
        self.close_all();
        for (w, _) in std::mem::take(&mut self.writers).into_values() {
            if freeride_abi::shm_file::file_id(w.path()) == Some(w.id()) {
                let _ = std::fs::remove_file(w.path());
            }
        }
    }
}

impl Drop for Grants {
    fn drop(&mut self) {
        self.close_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bubble(start: Ns, end: Option<Ns>, confidence: f64) -> Option<OpenBubble> {
        Some(OpenBubble {
            start,
            opened_seen: start + 50_000,
            predicted_end: end,
            shortest_end: None,
            spread_ns: 100_000,
            confidence,
            blocked: false,
            busy_from: None,
        })
    }

    #[test]
    fn a_gpu_is_granted_only_where_all_its_trainers_are_idle() {
        let p = GrantPolicy::default();
        let a = bubble(0, Some(20_000_000), 1.0);
        let b = bubble(1_000_000, Some(10_000_000), 1.0);
        // The earliest predicted end bounds it.
        assert_eq!(p.decide_gpu(2_000_000, &[a, b]), p.decide(2_000_000, b));
        // One trainer busy, or none: no grant.
        assert_eq!(p.decide_gpu(2_000_000, &[a, None]), None);
        assert_eq!(p.decide_gpu(2_000_000, &[]), None);
        // A trainer idle with nothing predicted holds it closed...
        assert_eq!(p.decide_gpu(2_000_000, &[a, bubble(0, None, 0.0)]), None);
    }

    #[test]
    fn a_closed_grant_says_why() {
        for (i, h) in Held::ALL.iter().enumerate() {
            assert_eq!(h.index(), i, "{h:?}");
        }
        let p = GrantPolicy::default();
        let ok = bubble(0, Some(20_000_000), 1.0);
        assert!(p.decide_gpu_why(1_000_000, &[ok]).is_ok());
        assert_eq!(
            p.decide_gpu_why(1_000_000, &[ok, None]),
            Err(Held::NotInBubble)
        );
        let why = |b| p.decide_gpu_why(1_000_000, &[b]);
        assert_eq!(why(bubble(0, None, 0.0)), Err(Held::NoPrediction));
        assert_eq!(
            why(bubble(0, Some(20_000_000), 0.2)),
            Err(Held::LowConfidence)
        );
        assert_eq!(
            why(bubble(2_000_000, Some(20_000_000), 1.0)),
            Err(Held::TransferFirst)
        );
        // Too late in the bubble: what its grant would end before names the guard.
        assert_eq!(
            why(bubble(0, Some(1_500_000), 1.0)),
            Err(Held::GuardOfPrediction)
        );
        let mut b = ok.unwrap();
        b.shortest_end = Some(1_500_000);
        assert_eq!(p.decide_why(1_000_000, b), Err(Held::GuardOfShortest));
        b.busy_from = Some(1_000_000);
        assert_eq!(p.decide_why(1_000_000, b), Err(Held::GuardOfTransfer));
        // The op that ends the bubble may start transferring at its predicted end: that is the
        // prediction's guard.
        let mut b = bubble(0, Some(1_500_000), 1.0).unwrap();
        b.busy_from = Some(1_500_000);
        assert_eq!(p.decide_why(1_000_000, b), Err(Held::GuardOfPrediction));
    }

    #[test]
    fn a_long_pause_gets_short_renewable_grants() {
        let p = GrantPolicy::default();
        let idle = bubble(0, None, 0.0);
        assert_eq!(p.decide_gpu(10_000_000, &[idle]), None);
        let now = p.pause_after_ns + 1;
        assert_eq!(p.decide_gpu(now, &[idle]), Some(now + p.pause_slice_ns));
        // Past a prediction too, but only once the pause has lasted past it.
        let late = bubble(0, Some(5_000_000), 1.0);
        assert_eq!(p.decide_gpu(6_000_000, &[late]), None);
        let now = 5_000_000 + p.pause_after_ns;
        assert_eq!(p.decide_gpu(now, &[late]), Some(now + p.pause_slice_ns));
        // Compute queued behind a wait: a longer pause first (its end is seen late).
        let mut blocked = idle.unwrap();
        blocked.blocked = true;
        assert_eq!(p.decide_gpu(p.pause_after_ns + 1, &[Some(blocked)]), None);
        let now = p.pause_after_blocked_ns;
        assert!(p.decide_gpu(now, &[Some(blocked)]).is_some());
        // Not into the transfer of an op in flight (a receive whose data is about to arrive).
        let now = p.pause_after_ns + 1;
        let mut receiving = idle.unwrap();
        receiving.busy_from = Some(now + 1_000_000);
        assert_eq!(
            p.decide_gpu(now, &[Some(receiving)]),
            Some(now + 1_000_000 - p.guard_min_ns)
        );
        receiving.busy_from = Some(now);
        assert_eq!(p.decide_gpu(now, &[Some(receiving)]), None);
    }

    #[test]
    fn grants_close_before_the_shortest_recent_bubble_ends() {
        let p = GrantPolicy::default();
        let mut b = bubble(0, Some(20_000_000), 1.0);
        if let Some(b) = b.as_mut() {
            b.shortest_end = Some(15_000_000);
        }
        // 15 ms is the bound, and the spread is kept in hand below it (the next bubble may be
        // shorter than any seen lately): guard = max(300 µs, 1% of 15 ms = 150 µs + 2 x 100 µs).
        assert_eq!(p.decide(100_000, b), Some(14_650_000));
        // A steady position (no spread) keeps the minimum guard.
        if let Some(b) = b.as_mut() {
            b.spread_ns = 0;
        }
        assert_eq!(p.decide(100_000, b), Some(14_700_000));
    }

    #[test]
    fn grants_close_a_guard_before_the_predicted_end() {
        let p = GrantPolicy::default();
        // 20 ms bubble, spread 100 µs: guard = max(300 µs, 1% = 200 µs + 2 x 100 µs) = 400 µs.
        assert_eq!(
            p.decide(100_000, bubble(0, Some(20_000_000), 1.0)),
            Some(19_600_000)
        );
        // 2 ms bubble: guard = 300 µs.
        assert_eq!(
            p.decide(100_000, bubble(0, Some(2_000_000), 1.0)),
            Some(1_700_000)
        );
    }

    #[test]
    fn side_tasks_get_the_memory_the_trainer_leaves() {
        let mut p = GrantPolicy::default();
        assert_eq!(
            p.mem_budget(10 << 30),
            0,
            "no budget without the GPU's size"
        );
        p.gpu_mem_bytes = Some(80 << 30);
        assert_eq!(p.mem_budget(60 << 30), 19 << 30);
        // A trainer that holds (nearly) everything leaves side tasks nothing usable.
        assert_eq!(p.mem_budget(80 << 30), 1);
    }

    #[test]
    fn no_grant_without_a_confident_prediction_or_room() {
        let p = GrantPolicy::default();
        assert_eq!(p.decide(0, None), None);
        assert_eq!(p.decide(0, bubble(0, None, 1.0)), None);
        assert_eq!(p.decide(0, bubble(0, Some(20_000_000), 0.2)), None);
        // Too late in the bubble: less than the minimum grant left before the guard.
        assert_eq!(p.decide(1_500_000, bubble(0, Some(2_000_000), 1.0)), None);
    }
}
