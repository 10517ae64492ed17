//! Replays synthetic timelines through the agent's inference and grant policy, and scores them
//! against the timelines' truth (test support).
//!
//! [`gpu`] runs the programs of [`jobs`] on a model of the GPU and reports what the interposer
//! would push into each ring, with every process's true busy time (compute and transfers).
//! [`replay`] feeds those records to an [`Agent`] the way the daemon does (every poll, what has
//! arrived since, GPU-side records marked seen at that poll) and asks it for each GPU's grant; the
//! [`Report`] holds precision and recall of its bubbles per process and how much of the granted time
//! fell on busy GPU time (`over_busy_share`).
pub mod agents;
pub mod gpu;
pub mod jobs;
mod shapes;

use super::bubble::Bubble;
use super::obs::{GpuId, Ns, Obs};
use super::score::{clip, merge, overlap, total, Tally};
use gpu::Run;
use std::collections::{BTreeMap, HashMap};

/// What the harness drives: the agent's inference and grant policy, without rings.
pub trait Agent {
    /// One record, seen by the agent at `now`.
    fn observe(&mut self, pid: u32, gpu: GpuId, obs: Obs, now: Ns);
    /// The grant of every GPU it knows at `now`: `Some(until)` when open.
    fn grants(&mut self, now: Ns) -> Vec<(GpuId, Option<Ns>)>;
    /// Bubbles closed since the last call: (process, GPU, bubble).
    fn take_closed(&mut self) -> Vec<(u32, GpuId, Bubble)>;
    /// Processes that ended (their rings drained and closed).
    fn gone(&mut self, _pid: u32) {}
    /// The most comm ops it held pending at once, if it tells.
    fn max_pending(&self) -> Option<usize> {
        None
    }
}

/// How the replay runs.
#[derive(Clone, Debug)]
pub struct Replay {
    /// The agent's poll period.
    pub poll_ns: Ns,
    /// Iterations left out of the scores (the agent learns during them).
    pub warmup: usize,
    /// Records lost: (process, from, to) in push time (a full ring, a restarted agent).
    pub lost: Vec<(u32, Ns, Ns)>,
}

impl Default for Replay {
    fn default() -> Self {
        Replay {
            poll_ns: 50_000,
            warmup: 2,
            lost: vec![],
        }
    }
}

/// Scores of one replay.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Inferred bubbles (begin to inferred end) against each process's own idle time.
    pub inferred: Tally,
    /// From the begin to the end predicted when each bubble opened.
    pub forecast: Tally,
    /// Granted time per GPU, and how much of it the GPU was busy (any process's compute or transfer).
    pub granted_ns: BTreeMap<GpuId, Ns>,
    pub granted_busy_ns: BTreeMap<GpuId, Ns>,
    /// True idle time of each GPU (all its processes idle) in the scored window.
    pub idle_ns: BTreeMap<GpuId, Ns>,
    pub bubbles: usize,
    /// The most comm ops the agent held pending at once.
    pub max_pending: Option<usize>,
    /// Per iteration (by index, over all processes): bubbles of at least [`RIGHT_MIN_NS`] whose end
    /// was predicted within [`RIGHT_TOLERANCE`] when they opened, and all such bubbles.
    pub right_per_iteration: Vec<(usize, usize)>,
    /// The scored window.
    pub from: Ns,
    pub to: Ns,
}

/// Bubbles scored for right predictions are at least this long.
pub const RIGHT_MIN_NS: Ns = 2_000_000;
/// A predicted end is right within max(this share of the bubble, 0.5 ms).
pub const RIGHT_TOLERANCE: f64 = 0.1;

impl Report {
    /// Iterations after `at` until predictions are right again: the first with at least 90 % of its
    /// bubbles predicted right whose next iteration has too.
    pub fn relearned_after(&self, at: usize) -> Option<usize> {
        let right = |k: usize| {
            self.right_per_iteration
                .get(k)
                .is_none_or(|&(g, n)| n == 0 || g as f64 >= 0.9 * n as f64)
        };
        (at..self.right_per_iteration.len())
            .find(|&k| right(k) && right(k + 1))
            .map(|k| k - at)
    }

    pub fn granted(&self) -> Ns {
        self.granted_ns.values().sum()
    }
    /// Share of granted time during which the GPU was busy (0 when nothing was granted).
    pub fn over_busy_share(&self) -> f64 {
        let g = self.granted();
        if g == 0 {
            0.0
        } else {
            self.granted_busy_ns.values().sum::<Ns>() as f64 / g as f64
        }
    }
    /// Granted idle time / true idle time: what side tasks could have used.
    pub fn granted_share(&self) -> f64 {
        let idle: Ns = self.idle_ns.values().sum();
        let good = self.granted() - self.granted_busy_ns.values().sum::<Ns>();
        if idle == 0 {
            0.0
        } else {
            good as f64 / idle as f64
        }
    }
    /// One line of figures for test messages and notes.
    pub fn line(&self) -> String {
        format!(
            "precision {:.3} recall {:.3} forecast P {:.3} R {:.3} granted {:.1} ms ({:.3} of idle) over_busy {:.4} bubbles {} pending ops at most {:?}",
            self.inferred.precision(),
            self.inferred.recall(),
            self.forecast.precision(),
            self.forecast.recall(),
            self.granted() as f64 / 1e6,
            self.granted_share(),
            self.over_busy_share(),
            self.bubbles,
            self.max_pending
        )
    }
}

/// Replays `run` through `agent`.
pub fn replay(run: &Run, agent: &mut dyn Agent, cfg: &Replay) -> Report {
    // Every record with its process, in push order across processes.
    let mut all: Vec<(Ns, u32, GpuId, Obs)> = vec![];
    for (&pid, v) in &run.pushed {
        for p in v {
            if cfg
                .lost
                .iter()
                .any(|&(q, a, b)| q == pid && p.at >= a && p.at < b)
            {
                continue;
            }
            all.push((p.at, pid, p.gpu, p.obs));
        }
        // The collector sees the ring's count of dropped records grow at once, and the ring
        // reports the loss once it has room again.
        for &(q, a, b) in cfg.lost.iter().filter(|l| l.0 == pid) {
            let gpu = v.first().map(|p| p.gpu).unwrap_or(GpuId::UNKNOWN);
            all.push((a, q, gpu, Obs::Lost { t: a }));
            all.push((b, q, gpu, Obs::Lost { t: b }));
        }
    }
    all.sort_by_key(|a| (a.0, a.1));
    let (first, last) = (
        all.first().map_or(0, |a| a.0),
        all.last().map_or(0, |a| a.0),
    );
    let mut exits: HashMap<u32, Ns> = HashMap::new();
    let mut granted: BTreeMap<GpuId, Vec<(Ns, Ns)>> = BTreeMap::new();
    let mut bubbles = vec![];
    let mut i = 0;
    let mut now = first - first % cfg.poll_ns + cfg.poll_ns;
    while now <= last + 4 * cfg.poll_ns {
        while i < all.len() && all[i].0 <= now {
            let (_, pid, gpu, obs) = all[i];
            let obs = match obs {
                Obs::CommBegin { id, t, .. } => Obs::CommBegin { id, t, seen: now },
                Obs::CommEnd { id, t, .. } => Obs::CommEnd { id, t, seen: now },
                Obs::WaitReached { wait, t, .. } => Obs::WaitReached { wait, t, seen: now },
                Obs::WaitReleased { wait, t, .. } => Obs::WaitReleased { wait, t, seen: now },
                o => o,
            };
            if let Obs::Exit { t } = obs {
                exits.insert(pid, t);
            }
            agent.observe(pid, gpu, obs, now);
            i += 1;
        }
        for (pid, _) in exits.drain() {
            agent.gone(pid);
        }
        for (gpu, g) in agent.grants(now) {
            if let Some(until) = g {
                let end = until.min(now + cfg.poll_ns);
                if end > now {
                    granted.entry(gpu).or_default().push((now, end));
                }
            }
        }
        bubbles.extend(agent.take_closed());
        now += cfg.poll_ns;
    }
    let mut r = score(run, cfg, &bubbles, granted);
    r.max_pending = agent.max_pending();
    r
}

fn score(
    run: &Run,
    cfg: &Replay,
    bubbles: &[(u32, GpuId, Bubble)],
    granted: BTreeMap<GpuId, Vec<(Ns, Ns)>>,
) -> Report {
    let from = run
        .marks
        .values()
        .filter_map(|m| m.get(cfg.warmup).or(m.last()))
        .copied()
        .max()
        .unwrap_or(0);
    let to = run.end.values().copied().min().unwrap_or(0);
    let mut r = Report {
        from,
        to,
        ..Report::default()
    };
    let idle_of = |busy: &[(Ns, Ns)]| -> Vec<(Ns, Ns)> {
        let mut idle = vec![];
        let mut t = from;
        for &(a, b) in &clip(busy, from, to) {
            if a > t {
                idle.push((t, a));
            }
            t = t.max(b);
        }
        if to > t {
            idle.push((t, to));
        }
        idle
    };
    for ((pid, gpu), busy) in &run.busy {
        let mine: Vec<&Bubble> = bubbles
            .iter()
            .filter(|(p, g, _)| p == pid && g == gpu)
            .map(|(_, _, b)| b)
            .collect();
        let idle = idle_of(busy);
        let inferred = merge(mine.iter().map(|b| (b.start, b.end)).collect());
        let forecast = merge(
            mine.iter()
                .map(|b| (b.start, b.predicted_end.unwrap_or(b.end)))
                .collect(),
        );
        r.inferred.add(Tally::of(&clip(&inferred, from, to), &idle));
        r.forecast.add(Tally::of(&clip(&forecast, from, to), &idle));
        r.bubbles += mine
            .iter()
            .filter(|b| b.start >= from && b.start < to)
            .count();
    }
    for (pid, marks) in &run.marks {
        for (k, w) in marks.windows(2).enumerate() {
            if r.right_per_iteration.len() <= k {
                r.right_per_iteration.resize(k + 1, (0, 0));
            }
            for (_, _, b) in bubbles.iter().filter(|(p, _, _)| p == pid) {
                let len = b.end.saturating_sub(b.start);
                if b.start < w[0] || b.start >= w[1] || len < RIGHT_MIN_NS || b.cut_by_exit {
                    continue;
                }
                let tol = (len as f64 * RIGHT_TOLERANCE).max(500_000.0);
                let ok = b
                    .predicted_end
                    .is_some_and(|p| (p as f64 - b.end as f64).abs() <= tol);
                r.right_per_iteration[k].0 += ok as usize;
                r.right_per_iteration[k].1 += 1;
            }
        }
    }
    for gpu in run.gpus() {
        let busy = run.gpu_busy(gpu);
        let g = clip(
            &merge(granted.get(&gpu).cloned().unwrap_or_default()),
            from,
            to,
        );
        r.granted_ns.insert(gpu, total(&g));
        r.granted_busy_ns
            .insert(gpu, overlap(&g, &clip(&busy, from, to)));
        r.idle_ns.insert(gpu, total(&idle_of(&busy)));
    }
    r
}
