//! The agent of one node: reads the rings, keeps one bubble detector per trainer, and knows each
//! GPU's state now.
use crate::bell::{pause_for, Bell};
use crate::collect::{Collector, ProcessView, TrainerObs};
use crate::grants::{GrantPolicy, Grants};
use crate::inference::detector::OpenBubble;
use crate::inference::{Bubble, Detector, Ns};
use crate::watchdog::{Watchdog, WatchdogPolicy};
use freeride_abi::Role;
use std::collections::BTreeMap;
use std::path::Path;

/// A closed bubble of a trainer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BubbleRecord {
    pub pid: u32,
    pub device: i32,
    pub bubble: Bubble,
}

/// What the agent knows of one GPU now.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuState {
    pub device: i32,
    pub trainers: Vec<u32>,
    pub open: Option<OpenBubble>,
    /// Iteration period of its trainer, once learnt.
    pub period_ns: Option<Ns>,
    pub ops_per_iteration: usize,
    pub bubble_ns_total: u64,
    pub bubbles: u64,
    /// When the agent first saw a trainer on this GPU.
    pub since_ns: Ns,
}

struct Trainer {
    device: i32,
    detector: Detector,
    since_ns: Ns,
}

/// The agent's pause between steps while no process is watched (an idle node): a few wake-ups per
/// directory scan instead of one every poll.
pub const IDLE_POLL_NS: Ns = 5_000_000;

/// The node's agent state; [`Node::step`] advances it.
pub struct Node {
    collector: Collector,
    trainers: BTreeMap<u32, Trainer>,
    obs: Vec<TrainerObs>,
    /// Closed bubbles since the last [`Node::take_closed`].
    closed: Vec<BubbleRecord>,
    totals: BTreeMap<i32, (u64, u64)>,
    /// The side tasks' grants, when this node schedules them.
    grants: Option<Grants>,
    /// Evicts side tasks that crash, hang or hold too much memory (with grants).
    watchdog: Option<Watchdog>,
    /// Wakes the agent between bubbles when a trainer's comm poller rings.
    bell: Bell,
}

impl Node {
    pub fn new(dir: &Path) -> Node {
        Node {
            collector: Collector::new(dir),
            trainers: BTreeMap::new(),
            obs: Vec::new(),
            closed: Vec::new(),
            totals: BTreeMap::new(),
            grants: None,
            watchdog: None,
            bell: Bell::new(dir),
        }
    }

    /// A node that also grants its GPUs' bubbles to side tasks (grant blocks in `dir`), with the
    /// side-task watchdog's default policy.
    pub fn with_grants(dir: &Path, policy: GrantPolicy) -> Node {
        Node::with_grants_and_watchdog(dir, policy, WatchdogPolicy::default())
    }

    /// As [`Node::with_grants`], with the watchdog's deadlines given.
    pub fn with_grants_and_watchdog(
        dir: &Path,
        policy: GrantPolicy,
        watchdog: WatchdogPolicy,
    ) -> Node {
        Node {
            grants: Some(Grants::new(dir, policy)),
            watchdog: Some(Watchdog::new(dir, watchdog)),
            ..Node::new(dir)
        }
    }

    /// The watchdog (evictions and lost side tasks so far), when this node schedules side tasks.
    pub fn watchdog(&self) -> Option<&Watchdog> {
        self.watchdog.as_ref()
    }

    /// Grants opened so far, per GPU.
    pub fn grants_opened(&self) -> BTreeMap<i32, u64> {
        self.grants
            .as_ref()
            .map(|g| g.opened.clone())
            .unwrap_or_default()
    }

    /// Reads what is new in the rings at time `now` and updates every GPU's state. Returns the
    /// number of observations processed.
    pub fn step(&mut self, now: Ns) -> usize {
        self.bell.step_begins(now);
        self.obs.clear();
        self.collector.poll(now, &mut self.obs);
        for o in &self.obs {
            let device = o.gpu.map_or(-1, |g| g.index() as i32);
            let t = self.trainers.entry(o.pid).or_insert_with(|| Trainer {
                device,
                detector: Detector::new(),
                since_ns: now,
            });
            if device >= 0 {
                t.device = device;
            }
            t.detector.observe(o.obs);
            for b in t.detector.take_closed() {
                let tot = self.totals.entry(t.device).or_default();
                tot.0 += b.end - b.start;
                tot.1 += 1;
                self.closed.push(BubbleRecord {
                    pid: o.pid,
                    device: t.device,
                    bubble: b,
                });
            }
        }
        let procs = self.collector.processes();
        // Every close goes to the watchdog (a ring is closed once); without one they are dropped.
        let closed = self.collector.take_closed_sidetasks();
        self.trainers
            .retain(|pid, _| procs.iter().any(|p| p.pid == *pid));
        if let Some(grants) = &mut self.grants {
            for (pid, t) in &self.trainers {
                let mem = procs
                    .iter()
                    .find(|p| p.pid == *pid)
                    .map_or(0, |p| p.mem_held_bytes);
                let side: Vec<(u32, u64)> = procs
                    .iter()
                    .filter(|p| p.role == Some(Role::Sidetask) && p.device == t.device && !p.gone)
                    .map(|p| (p.pid, p.mem_held_bytes))
                    .collect();
                grants.update(now, t.device, t.detector.open_now(), mem, &side);
            }
            if let Some(wd) = &mut self.watchdog {
                wd.check(now, &self.collector, &closed, |d| grants.mem_budget_of(d));
                for pid in wd.take_ended() {
                    grants.forget(pid);
                }
            }
        }
        self.obs.len()
    }

    /// Bubbles closed since the last call.
    pub fn take_closed(&mut self) -> Vec<BubbleRecord> {
        std::mem::take(&mut self.closed)
    }

    /// Warnings about unreadable rings and grant files since the last call.
    pub fn take_warnings(&mut self) -> Vec<String> {
        let mut w = std::mem::take(&mut self.collector.warnings);
        w.append(&mut self.bell.warnings);
        if let Some(g) = &mut self.grants {
            w.append(&mut g.warnings);
        }
        if let Some(wd) = &mut self.watchdog {
            w.append(&mut wd.take_log());
        }
        w
    }

    pub fn processes(&self) -> Vec<ProcessView> {
        self.collector.processes()
    }

    /// Waits before the next [`Node::step`]: `poll_ns` while a bubble is open (or a trainer's
    /// poller does not ring the doorbell); between bubbles, on the doorbell for up to
    /// [`crate::bell::QUIET_WAIT_NS`]; with no ring open, [`IDLE_POLL_NS`] (nothing can happen
    /// before the next directory scan finds a ring, every [`crate::collect::RESCAN_NS`]).
    pub fn wait(&self, poll_ns: Ns) {
        let bubble_open = self
            .trainers
            .values()
            .any(|t| t.detector.open_now().is_some());
        self.bell.pause(pause_for(
            self.collector.watching_any(),
            bubble_open,
            self.collector.trainers_ring_doorbell(),
            self.bell.ready(),
            poll_ns,
        ));
    }

    /// Every GPU with a trainer, in device order.
    pub fn gpus(&self) -> Vec<GpuState> {
        let mut by_dev: BTreeMap<i32, GpuState> = BTreeMap::new();
        for (pid, t) in &self.trainers {
            let (total, n) = self.totals.get(&t.device).copied().unwrap_or_default();
            let g = by_dev.entry(t.device).or_insert_with(|| GpuState {
                device: t.device,
                trainers: vec![],
                open: None,
                period_ns: None,
                ops_per_iteration: 0,
                bubble_ns_total: total,
                bubbles: n,
                since_ns: t.since_ns,
            });
            g.since_ns = g.since_ns.min(t.since_ns);
            g.trainers.push(*pid);
            g.open = g.open.or(t.detector.open_now());
            let p = t.detector.pattern();
            g.period_ns = g.period_ns.or(p.period_ns());
            g.ops_per_iteration = g.ops_per_iteration.max(p.ops_per_iteration());
        }
        by_dev.into_values().collect()
    }
}
