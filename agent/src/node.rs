//! The agent of one node: reads the rings, keeps one bubble timeline per trainer process and GPU,
//! and knows each physical GPU's state now.
use crate::bell::{pause_for, Bell};
use crate::collect::{Collector, ProcessView, TrainerObs};
use crate::ends::{self, EndsSteering};
use crate::grant_log::GrantLog;
use crate::grant_time::GrantTime;
use crate::grants::{decide_all, GrantPolicy, Grants, Held};
use crate::inference::gpus::Gpus;
use crate::inference::{Bubble, GpuId, Ns, OpenBubble};
use crate::report_lag::ReportLag;
use crate::watchdog::{Watchdog, WatchdogPolicy};
use freeride_abi::Role;
use std::collections::BTreeMap;
use std::path::Path;

/// A closed bubble of a trainer on a GPU.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BubbleRecord {
    pub pid: u32,
    pub gpu: GpuId,
    pub bubble: Bubble,
}

/// What the agent knows of one GPU now.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuState {
    pub gpu: GpuId,
    pub trainers: Vec<u32>,
    /// The GPU's bubble: all its trainers idle.
    pub open: Option<OpenBubble>,
    /// Iteration period of its (first) trainer, once learnt.
    pub period_ns: Option<Ns>,
    pub ops_per_iteration: usize,
    /// Bubble time and bubbles found (with several trainers, those of the one with the least: the
    /// GPU is idle only when all are).
    pub bubble_ns_total: u64,
    pub bubbles: u64,
    /// When the agent first saw a trainer on this GPU.
    pub since_ns: Ns,
    /// Its bubble time granted and held closed (by reason) so far, where this node grants.
    pub grant_time: Option<GrantTime>,
}

/// The agent's pause between steps while no process is watched (an idle node): a few wake-ups per
/// directory scan instead of one every poll.
pub const IDLE_POLL_NS: Ns = 5_000_000;

/// The node's agent state; [`Node::step`] advances it.
pub struct Node {
    collector: Collector,
    gpus: Gpus,
    obs: Vec<TrainerObs>,
    /// Closed bubbles since the last [`Node::take_closed`].
    closed: Vec<BubbleRecord>,
    /// Bubble time and count per (process, GPU) timeline, for the GPU totals.
    totals: BTreeMap<(u32, GpuId), (u64, u64)>,
    /// The side tasks' grants, when this node schedules them.
    grants: Option<Grants>,
    /// Evicts side tasks that crash, hang or hold too much memory (with grants).
    watchdog: Option<Watchdog>,
    /// Wakes the agent between bubbles when a trainer's comm poller rings.
    bell: Bell,
    /// How late GPU-side observations reach the agent.
    report_lag: ReportLag,
    /// How promptly the trainers report their ops' ends ([`crate::ends`]).
    ends: EndsSteering,
    /// The processes (sorted pids) the per-process state was last pruned to, and when (see
    /// [`PRUNE_EVERY_NS`]).
    pruned_to: Vec<u32>,
    pruned_at: Ns,
}

/// The per-process state (timelines, partners, anchors, totals) is pruned to the live processes
/// when their set changes, and at least this often: pruning at every step took a tenth of the
/// agent's CPU on torchtitan's ZBV job (2026-12-06 profile) to change nothing while the set stayed
/// the same.
pub const PRUNE_EVERY_NS: Ns = 100_000_000;

impl Node {
    pub fn new(dir: &Path) -> Node {
        Node {
            collector: Collector::new(dir),
            gpus: Gpus::new(),
            obs: Vec::new(),
            closed: Vec::new(),
            totals: BTreeMap::new(),
            grants: None,
            watchdog: None,
            bell: Bell::new(dir),
            report_lag: ReportLag::default(),
            ends: EndsSteering::prompt(),
            pruned_to: Vec::new(),
            pruned_at: 0,
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

    /// Lets the trainers report their ops' ends lazily while no side task is on the node
    /// ([`crate::ends`]; `freeride agent`). Without it they are always asked for prompt ends.
    pub fn letting_ends_be_lazy(mut self) -> Node {
        self.ends = EndsSteering::lazy_while_nobody_harvests();
        self
    }

    /// Whether the trainers are being told now that their ends may be lazy.
    pub fn ends_lazy_now(&self) -> bool {
        self.ends.lazy_now()
    }

    /// Also logs every grant it publishes (see [`Node::grant_log`]).
    pub fn logging_grants(mut self) -> Node {
        self.grants = self.grants.map(Grants::with_log);
        self
    }

    /// Every grant published so far, when logged.
    pub fn grant_log(&self) -> Option<&GrantLog> {
        self.grants.as_ref().and_then(Grants::log)
    }

    /// The watchdog (evictions and lost side tasks so far), when this node schedules side tasks.
    pub fn watchdog(&self) -> Option<&Watchdog> {
        self.watchdog.as_ref()
    }

    /// How late GPU-side observations have reached this agent (the newest ones).
    pub fn report_lag(&self) -> &ReportLag {
        &self.report_lag
    }

    /// How many ops were matched exactly across processes (by their communicators).
    pub fn match_stats(&self) -> crate::inference::partners::MatchStats {
        self.gpus.match_stats()
    }

    /// Grants opened so far, per GPU.
    pub fn grants_opened(&self) -> BTreeMap<GpuId, u64> {
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
            self.report_lag.note(&o.obs, now);
            self.gpus.observe(o.pid, o.gpu, o.obs, now);
        }
        for (pid, gpu, bubble) in self.gpus.take_closed() {
            let tot = self.totals.entry((pid, gpu)).or_default();
            tot.0 += bubble.end - bubble.start;
            tot.1 += 1;
            self.closed.push(BubbleRecord { pid, gpu, bubble });
        }
        let procs = self.collector.processes();
        // Every close goes to the watchdog (a ring is closed once); without one they are dropped.
        let closed = self.collector.take_closed_sidetasks();
        let mut pids: Vec<u32> = procs.iter().map(|p| p.pid).collect();
        pids.sort_unstable();
        if pids != self.pruned_to || now.saturating_sub(self.pruned_at) >= PRUNE_EVERY_NS {
            let live = |pid: u32| pids.binary_search(&pid).is_ok();
            self.gpus.retain(live);
            self.totals.retain(|k, _| live(k.0));
            self.pruned_to = pids;
            self.pruned_at = now;
        }
        let harvest = ends::sidetask_ring_live(&procs)
            || self.grants.as_mut().is_some_and(|g| g.any_sdk_task(now));
        self.ends.steer(now, harvest, &self.collector);
        if let Some(grants) = &mut self.grants {
            for (gpu, grant) in decide_all(grants.policy(), &self.gpus, now) {
                let trainers: Vec<u32> = self.gpus.on(gpu).map(|(p, _, _)| p).collect();
                // A trainer whose ends may still come late: the bubble may already be over. Read
                // now, after the steering above (see ends::ends_may_be_late).
                let late = trainers.iter().map(|&p| self.collector.ends_late_until(p));
                let grant = match grant {
                    Ok(_) if ends::ends_may_be_late(late, now) => Err(Held::EndsLate),
                    g => g,
                };
                // Memory on this GPU, whatever GPU each process mostly uses.
                let ordinal = gpu.field();
                let mem = procs
                    .iter()
                    .filter(|p| trainers.contains(&p.pid))
                    .map(|p| p.mem_on(ordinal))
                    .sum();
                let side: Vec<(u32, u64)> = procs
                    .iter()
                    .filter(|p| p.role == Some(Role::Sidetask) && !p.gone)
                    .filter(|p| p.device == ordinal || p.mem_on(ordinal) > 0)
                    .map(|p| (p.pid, p.mem_on(ordinal)))
                    .collect();
                grants.update(now, gpu, grant, mem, &side);
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

    /// At the agent's exit: removes the files this node made in the session directory that no
    /// live process needs (the grant blocks, closed first; the doorbell unless a live process's
    /// ring remains: see [`Bell::remove_at_exit`]).
    pub fn remove_files(&mut self) {
        if let Some(g) = &mut self.grants {
            g.remove_blocks();
        }
        self.bell.remove_at_exit();
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
    /// before the next directory scan finds a ring, every [`crate::collect::RESCAN_NS`]). While
    /// the trainers' ends are lazy (nobody harvests) an open bubble is no reason to poll: no grant
    /// can open or need closing, and its end comes in a batch up to 50 ms later anyway.
    pub fn wait(&self, poll_ns: Ns) {
        self.bell.pause(pause_for(
            self.collector.backlog(),
            self.collector.watching_any(),
            !self.ends.lazy_now() && self.gpus.any_open(),
            self.collector.trainers_ring_doorbell(),
            self.bell.ready(),
            poll_ns,
        ));
    }

    /// Every GPU with a trainer, in order.
    pub fn gpus(&self) -> Vec<GpuState> {
        self.gpus
            .gpus()
            .into_iter()
            .map(|gpu| {
                let mut g = GpuState {
                    gpu,
                    trainers: vec![],
                    open: self.gpus.open_of(gpu),
                    period_ns: None,
                    ops_per_iteration: 0,
                    bubble_ns_total: 0,
                    bubbles: 0,
                    since_ns: Ns::MAX,
                    grant_time: self.grants.as_ref().and_then(|g| g.time_of(gpu)),
                };
                for (pid, t, since) in self.gpus.on(gpu) {
                    g.trainers.push(pid);
                    g.since_ns = g.since_ns.min(since);
                    let p = t.pattern();
                    g.period_ns = g.period_ns.or(p.period_ns());
                    g.ops_per_iteration =
                        g.ops_per_iteration.max(p.ops_per_iteration().unwrap_or(0));
                    let (total, n) = self.totals.get(&(pid, gpu)).copied().unwrap_or_default();
                    if g.trainers.len() == 1 || total < g.bubble_ns_total {
                        (g.bubble_ns_total, g.bubbles) = (total, n);
                    }
                }
                g
            })
            .collect()
    }
}
