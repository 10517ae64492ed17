//! `freeride sim`: runs pipesim under freeride with the agent in this process, then measures the
//! agent's bubbles against the simulated GPU's ground truth.
//!
//! The agent loop here is the same [`Node`] the daemon runs; it sees the job only through the rings.
//! Scoring (iterations after the second, all ranks), three views of the same bubbles:
//! * inferred (`precision`, `recall`): each bubble as the agent inferred it online, from its GPU-side
//!   begin (the interposer's timing event) to the end the agent determined (the GPU-side end of the
//!   ops the compute waits for, or the host's next compute launch when nothing was queued);
//!   precision = bubble time that was truly idle / all bubble time; recall = true idle time covered
//!   / all true idle time;
//! * forecast (`forecast_precision`, `forecast_recall`): from the GPU-side begin to the end the agent
//!   predicted when the bubble opened (its learnt duration for that position of the iteration; where
//!   nothing was learnt yet, the inferred end), and the error of each predicted end;
//! * live (`live_precision`, `live_recall`): from when the agent saw the bubble begin to when it saw
//!   it end (what it knows in real time, what a scheduler acts on);
//! * detection latency = when the agent saw a bubble open minus when the GPU truly went idle, for
//!   every true idle interval of at least [`MIN_SCORED_IDLE_NS`] that a bubble overlaps.
use crate::sim_procs::{self, SidetaskEnd};
use freeride_abi::{env, now_ns};
use freeride_agent::grant_log::GrantLog;
use freeride_agent::grants::GrantPolicy;
use freeride_agent::inference::partners::MatchStats;
use freeride_agent::inference::score::{clip, merge, Tally};
use freeride_agent::inference::Ns;
use freeride_agent::node::{BubbleRecord, Node};
use freeride_agent::report_lag::ReportLag;
use freeride_agent::scratch::ScratchDir;
use pipesim::cli::JobArgs;
use pipesim::topology::Topology;
use pipesim::truth::{self, Truth};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

/// True idle intervals shorter than this are left out of the detection-latency figures (they are
/// in precision and recall).
pub const MIN_SCORED_IDLE_NS: Ns = 1_000_000;
/// The agent loop's poll period.
pub const POLL_NS: u64 = 50_000;
/// Iterations left out of the scores (the agent learns during them).
pub const WARMUP_ITERATIONS: usize = 2;

/// What one simulated run measured.
#[derive(Debug, Clone)]
pub struct SimResult {
    pub truth: Truth,
    /// Every kernel of the ground truth.
    pub kernels: Vec<truth::KernelRecord>,
    pub bubbles: Vec<BubbleRecord>,
    /// What each node's agent granted (index: node).
    pub grant_logs: Vec<GrantLog>,
    pub events: u64,
    pub dropped: u64,
    /// CPU time of the agent's thread over the run, and the run's length.
    pub agent_cpu_ns: u64,
    pub agent_wall_ns: u64,
    /// How late GPU-side observations reached the agents (all nodes).
    pub report_lag: ReportLag,
    /// The agents' steps: how many, and the longest.
    pub agent_steps: StepTimes,
    /// Ops the agents matched across processes by their communicators (all nodes).
    pub matched: MatchStats,
    pub warnings: Vec<String>,
    /// Side-task processes that ran beside the job.
    pub sidetask_pids: Vec<u32>,
    /// Nodes the job ran on (one agent each), and ranks per node (rank r on node r / that).
    pub nodes: u32,
    pub ranks_per_node: u32,
    /// Each node's agent: (events read, bubbles closed).
    pub per_node: Vec<(u64, usize)>,
    /// Those that ended before the job did (ran out of work, failed, or were killed).
    pub sidetask_ends: Vec<SidetaskEnd>,
}

/// How side tasks share the GPU with the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SideMode {
    /// freeride: the agent's grants; each step only when it fits the predicted rest of the bubble.
    Gated,
    /// Naive co-location: side tasks run freely beside the job.
    Naive,
    /// The prior approach's imperative control (FreeRide pauses free-running side tasks with
    /// SIGSTOP and resumes them with SIGCONT at bubble edges, with no time check): the side tasks run
    /// freely while a bubble is open and stop issuing work when it closes (or nears its predicted
    /// end); work already queued on the GPU keeps running. Modelled with open-ended grants rather
    /// than real signals: the test bed's simulated GPU runs a process's kernels on that process's
    /// own threads, so a stopped process would also freeze its queued kernels (and the GPU), which a
    /// real GPU does not do.
    PauseResume,
}

impl SideMode {
    pub fn name(self) -> &'static str {
        match self {
            SideMode::Gated => "gated",
            SideMode::Naive => "naive",
            SideMode::PauseResume => "prior",
        }
    }
}

/// Side tasks to run beside the job: `per_gpu` processes of the SDK example `kind` on every GPU.
#[derive(Clone, Debug)]
pub struct SideTasks {
    pub per_gpu: u32,
    pub kind: String,
    pub mode: SideMode,
    /// Extra arguments for every side-task process.
    pub args: Vec<String>,
}

/// The flag that makes an SDK example run until it is stopped (or runs out of work: pagerank
/// converges), and its value.
fn run_long_arg(kind: &str) -> [&'static str; 2] {
    match kind {
        "pagerank" => ["--iterations", "1000000000"],
        "image_batch" => ["--images", "1000000000"],
        _ => ["--steps", "1000000000"],
    }
}

/// Starts the side tasks, `per_gpu` on every GPU of the job, each with the view of its GPU the
/// job's processes there have (`CUDA_VISIBLE_DEVICES`, device ordinal) and its node's session
/// directory; they run until stopped (SIGTERM), pacing themselves by the grants.
fn start_sidetasks(
    spec: &SideTasks,
    topo: &Topology,
    sessions: &[PathBuf],
    sim_dir: &Path,
    truth: &Path,
) -> Result<Vec<std::process::Child>, String> {
    let exe = sibling(&format!("examples/{}", spec.kind))?;
    let libs = pipesim::standins::ensure_dir().map_err(|e| format!("stand-in folder: {e}"))?;
    let mut ld = libs.into_os_string();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        ld.push(":");
        ld.push(old);
    }
    let mut children = vec![];
    for d in 0..topo.world() {
        let (view, ordinal) = pipesim::placement::gpu_env(topo, d, sessions);
        for k in 0..spec.per_gpu {
            let mut cmd = Command::new(&exe);
            sim_procs::tie_sidetask(&mut cmd);
            cmd.args(["--device", &ordinal.to_string()])
                .args(run_long_arg(&spec.kind))
                .arg("--name")
                .arg(format!("{}-gpu{d}-{k}", spec.kind))
                .args(&spec.args)
                .args(if spec.mode == SideMode::Naive {
                    &["--standalone"][..]
                } else {
                    &[][..]
                })
                .env(env::DIR, &sessions[0])
                .env("FREERIDE_SIM_DIR", sim_dir)
                .env("FREERIDE_SIM_TRACE", truth)
                .env("LD_LIBRARY_PATH", &ld)
                .env_remove("LD_PRELOAD")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            for k in &view.remove {
                cmd.env_remove(k);
            }
            cmd.envs(view.set.iter().map(|(k, v)| (k, v)));
            let child = cmd
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
            children.push(child);
        }
    }
    Ok(children)
}

/// Scores of the agent's bubbles against the truth.
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    pub iteration_ms: f64,
    pub bubble_fraction: f64,
    /// The bubbles as inferred: GPU-side begin to the inferred end.
    pub inferred: Tally,
    /// GPU-side begin to the end predicted when the bubble opened.
    pub forecast: Tally,
    /// When the agent saw the begin to when it saw the end.
    pub live: Tally,
    pub detect_latency_us: Vec<f64>,
    pub missed_idle_intervals: usize,
    pub scored_iterations: usize,
    pub predicted_end_error_us: Vec<f64>,
    /// When the job changed its micro-batch count: per iteration from the change on, the share of
    /// its bubbles (of at least [`RELEARN_MIN_NS`]) whose end was predicted within
    /// [`RELEARN_TOLERANCE`].
    pub after_change: Vec<f64>,
    /// Iterations after the change until predictions are right again (and stay right): the first
    /// iteration with at least [`RELEARNED_SHARE`] of its bubbles right whose next iteration (if
    /// scored) has too. Two in a row, not all later ones: one stall of the host in a late
    /// iteration does not undo the relearning.
    pub relearned_in: Option<usize>,
    /// The job's steady state before the change: the share of right predictions over the scored
    /// iterations before it (a noisy job's bubbles vary, so fewer than [`RELEARNED_SHARE`] are ever
    /// right). None without a change or a scored iteration before it.
    pub before_change: Option<f64>,
    /// Iterations after the change until predictions are as right as before it: as
    /// [`Scores::relearned_in`], with [`RELEARNED_SHARE`] of [`Scores::before_change`] as the bar.
    pub relearned_to_steady_state_in: Option<usize>,
}

/// Bubbles scored for relearning are at least this long: a host stall of a millisecond on a
/// small machine turns the ~0.1 ms hops between kernels into bubbles of about that length, which
/// no pattern of the job predicts.
pub const RELEARN_MIN_NS: Ns = 2_000_000;
/// A predicted end counts as right within max(this share of the bubble, [`RELEARN_FLOOR_NS`]).
pub const RELEARN_TOLERANCE: f64 = 0.1;
pub const RELEARN_FLOOR_NS: f64 = 500_000.0;
/// Share of right predictions that makes an iteration relearnt.
pub const RELEARNED_SHARE: f64 = 0.9;

/// Per iteration from `at` on, the job's last one left out (its ranks finish and exit at different
/// times, which stalls the others' hosts on a small machine): (bubbles whose end was predicted
/// right, bubbles).
fn relearn_curve(r: &SimResult, at: usize) -> Vec<(usize, usize)> {
    let its = &r.truth.iterations;
    curve_of(
        r,
        &its[at.min(its.len().saturating_sub(1))..its.len().saturating_sub(1)],
    )
}

/// (bubbles whose end was predicted right, bubbles) of each of `its`.
fn curve_of(r: &SimResult, its: &[truth::Iteration]) -> Vec<(usize, usize)> {
    its.iter()
        .map(|it| {
            let (mut n, mut good) = (0usize, 0usize);
            for b in r.bubbles.iter().map(|b| &b.bubble) {
                let len = b.end.saturating_sub(b.start);
                if b.start < it.start_ns
                    || b.start >= it.end_ns
                    || len < RELEARN_MIN_NS
                    || b.cut_by_exit
                {
                    continue;
                }
                n += 1;
                let tol = (len as f64 * RELEARN_TOLERANCE).max(RELEARN_FLOOR_NS);
                if b.predicted_end
                    .is_some_and(|p| (p as f64 - b.end as f64).abs() <= tol)
                {
                    good += 1;
                }
            }
            (good, n)
        })
        .collect()
}

/// Where the binaries are: next to this executable (see [`freeride_agent::layout`]).
pub fn sibling(name: &str) -> Result<PathBuf, String> {
    freeride_agent::layout::sibling(name)
}

/// What `freeride sim` and `freeride demo` run, next to this executable.
const TESTBED_FILES: &[&str] = &[
    "libfreeride.so",
    "pipesim",
    "pipesim-stage",
    "libcuda.so",
    "libcudart.so",
    "libnccl.so",
    "libcublas.so",
    "examples/train_loop",
];

/// Builds the test bed if a file of it is missing next to this executable, when this executable
/// is a build of the source tree (see [`freeride_agent::testbed::ensure_built`]).
pub fn ensure_testbed_built() -> Result<(), String> {
    freeride_agent::testbed::ensure_built(TESTBED_FILES)
}

/// What the agent loop saw and what it cost.
pub struct AgentRun {
    pub bubbles: Vec<BubbleRecord>,
    /// Every grant each node's agent published, node by node.
    pub grant_logs: Vec<GrantLog>,
    pub events: u64,
    pub dropped: u64,
    pub warnings: Vec<String>,
    /// CPU time of the agent's thread, and how long it ran.
    pub cpu_ns: u64,
    pub wall_ns: u64,
    /// How late GPU-side observations reached the agent.
    pub report_lag: ReportLag,
    pub steps: StepTimes,
    pub matched: MatchStats,
}

/// An agent's steps (reading the rings, inferring, granting): how many, and the longest in wall
/// time and in the agent thread's CPU time. A long step delays every record that arrives during
/// it (a step that read a whole iteration's launches at once took 5-17 ms, docs/performance.md
/// 2026-12-07 20:28); wall time well above CPU time is the agent thread waiting for a core. Steps
/// that read no record are counted apart, with their CPU time: they are what the agent costs
/// between records (most steps while a bubble is open).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepTimes {
    pub steps: u64,
    pub wall_max_ns: u64,
    pub cpu_max_ns: u64,
    /// Steps that read no record, and their CPU time in all.
    pub empty: u64,
    pub empty_cpu_ns: u64,
    /// The CPU time of the steps that read records, in all.
    pub busy_cpu_ns: u64,
}

impl StepTimes {
    /// One step that read `records`.
    pub fn note(&mut self, wall_ns: u64, cpu_ns: u64, records: usize) {
        self.steps += 1;
        self.wall_max_ns = self.wall_max_ns.max(wall_ns);
        self.cpu_max_ns = self.cpu_max_ns.max(cpu_ns);
        if records == 0 {
            self.empty += 1;
            self.empty_cpu_ns += cpu_ns;
        } else {
            self.busy_cpu_ns += cpu_ns;
        }
    }

    /// Another node's agent's steps.
    pub fn merge(&mut self, o: &StepTimes) {
        self.steps += o.steps;
        self.wall_max_ns = self.wall_max_ns.max(o.wall_max_ns);
        self.cpu_max_ns = self.cpu_max_ns.max(o.cpu_max_ns);
        self.empty += o.empty;
        self.empty_cpu_ns += o.empty_cpu_ns;
        self.busy_cpu_ns += o.busy_cpu_ns;
    }

    /// The mean CPU time of a step that read no record, and of one that read some (µs).
    pub fn cpu_us_means(&self) -> (f64, f64) {
        let mean = |ns: u64, n: u64| ns as f64 / 1e3 / n.max(1) as f64;
        (
            mean(self.empty_cpu_ns, self.empty),
            mean(self.busy_cpu_ns, self.steps - self.empty),
        )
    }
}

/// CPU time of the calling thread so far.
fn thread_cpu_ns() -> u64 {
    freeride_abi::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Runs the agent loop over `dir` until `stop` is set, then drains the rings once more.
/// `grants`: publish grants for side tasks with `policy` (none: the side tasks run ungated).
pub fn agent_loop(dir: &Path, stop: &AtomicBool, grants: Option<GrantPolicy>) -> AgentRun {
    let (cpu0, wall0) = (thread_cpu_ns(), now_ns());
    // SAFETY: PR_SET_TIMERSLACK only changes this thread's timer slack (wake on time to poll).
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    let mut node = match grants {
        Some(p) => Node::with_grants(dir, p).logging_grants(),
        None => Node::new(dir),
    };
    let mut bubbles = vec![];
    let mut warnings = vec![];
    let (mut events, mut dropped) = (0u64, 0u64);
    let mut steps = StepTimes::default();
    let mut tally = |node: &mut Node, bubbles: &mut Vec<BubbleRecord>| {
        let (t0, c0) = (now_ns(), thread_cpu_ns());
        let records = node.step(t0);
        events += records as u64;
        steps.note(
            now_ns().saturating_sub(t0),
            thread_cpu_ns().saturating_sub(c0),
            records,
        );
        bubbles.extend(node.take_closed());
        warnings.extend(node.take_warnings());
        for p in node.processes() {
            dropped = dropped.max(p.dropped);
        }
    };
    while !stop.load(Ordering::Acquire) {
        tally(&mut node, &mut bubbles);
        node.wait(POLL_NS);
    }
    tally(&mut node, &mut bubbles);
    AgentRun {
        bubbles,
        grant_logs: vec![node.grant_log().cloned().unwrap_or_default()],
        events,
        dropped,
        warnings,
        cpu_ns: thread_cpu_ns().saturating_sub(cpu0),
        wall_ns: now_ns().saturating_sub(wall0),
        report_lag: node.report_lag().clone(),
        steps,
        matched: node.match_stats(),
    }
}

/// Runs pipesim for `job` under freeride with one agent per node; returns the truth and what the
/// agents saw. `progress`: pipesim's progress lines go to our stderr.
pub fn run(
    job: &JobArgs,
    sidetasks: Option<&SideTasks>,
    progress: bool,
) -> Result<SimResult, String> {
    if let Some(sig) = pipesim::procs::interrupt::pending() {
        return Err(format!(
            "interrupted ({})",
            pipesim::procs::interrupt::name(sig)
        ));
    }
    let cfg = job.to_config()?;
    let topo = cfg.topology();
    let lib = sibling("libfreeride.so")?;
    let pipesim = sibling("pipesim")?;
    let nodes = crate::sim_nodes::Nodes::new(topo.nodes)?;
    let sessions = nodes.dirs();
    let sim_dir = ScratchDir::new("gpu")?;
    let truth_path = sim_dir.0.join("truth.jsonl");
    let mut side = match sidetasks {
        Some(spec) => start_sidetasks(spec, &topo, &sessions, &sim_dir.0, &truth_path)?,
        None => vec![],
    };
    let grants = match sidetasks.map(|s| s.mode) {
        Some(SideMode::Naive) => None,
        Some(SideMode::PauseResume) => Some(GrantPolicy {
            open_ended: true,
            ..GrantPolicy::default()
        }),
        _ => Some(GrantPolicy::default()),
    };
    let agents = match crate::sim_nodes::Agents::start(&sessions, grants) {
        Ok(a) => a,
        Err(e) => {
            sim_procs::stop_sidetasks(&mut side);
            return Err(e);
        }
    };
    let sidetask_pids: Vec<u32> = side.iter().map(|c| c.id()).collect();
    let mut cmd = Command::new(&pipesim);
    cmd.args(job.to_argv())
        .arg("--truth")
        .arg(&truth_path)
        .env("LD_PRELOAD", &lib)
        .env(env::ROLE, "trainer")
        .env(env::DIR, &sessions[0])
        .env("FREERIDE_SIM_DIR", &sim_dir.0)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    if sessions.len() > 1 {
        let dirs: Vec<String> = sessions.iter().map(|d| d.display().to_string()).collect();
        cmd.arg("--node-session-dirs").arg(dirs.join(","));
    }
    let out = sim_procs::run_job(cmd, progress, &mut side);
    sim_procs::stop_sidetasks(&mut side);
    let (run, per_node) = agents.stop()?;
    let out = out?;
    if !out.status.success() {
        return Err(format!(
            "pipesim failed ({}): {}",
            out.status,
            match out.tail.join(" / ") {
                t if t.is_empty() => "it wrote nothing on stderr".to_string(),
                t => t,
            }
        ));
    }
    let trace =
        truth::Trace::read(&truth_path).map_err(|e| format!("reading the ground truth: {e}"))?;
    if trace.bad > 0 {
        return Err(format!(
            "{} unreadable lines in the ground truth",
            trace.bad
        ));
    }
    let truth = truth::analyze_trace(&trace, topo.world(), None)?;
    Ok(SimResult {
        truth,
        kernels: trace.kernels,
        sidetask_pids,
        sidetask_ends: out.sidetask_ends,
        bubbles: run.bubbles,
        grant_logs: run.grant_logs,
        events: run.events,
        dropped: run.dropped,
        agent_cpu_ns: run.cpu_ns,
        agent_wall_ns: run.wall_ns,
        report_lag: run.report_lag,
        agent_steps: run.steps,
        matched: run.matched,
        warnings: run.warnings,
        nodes: topo.nodes,
        ranks_per_node: topo.gpus_per_node(),
        per_node,
    })
}

fn percentile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i]
}

/// p50 and p99 of a sample (NaN when empty).
pub fn p50_p99(v: &[f64]) -> (f64, f64) {
    let mut v = v.to_vec();
    (percentile(&mut v, 0.5), percentile(&mut v, 0.99))
}

/// The iterations scored: those after the warm-up (none when the job ran no more than it).
pub fn scored_iterations(t: &Truth) -> &[truth::Iteration] {
    &t.iterations[WARMUP_ITERATIONS.min(t.iterations.len())..]
}

/// Scores the agent's bubbles against the truth over the iterations after the warm-up (figures
/// of no iteration are NaN). `change_at`: the iteration from which the job changed, if it did.
pub fn score(r: &SimResult, change_at: Option<u32>) -> Scores {
    let scored = scored_iterations(&r.truth);
    let (mut inferred_tally, mut forecast_tally, mut live_tally) =
        (Tally::default(), Tally::default(), Tally::default());
    let mut latencies = vec![];
    let mut end_errors = vec![];
    let mut missed = 0;
    let (mut window_ns, mut idle_ns) = (0u64, 0u64);
    for (rank, &pid) in r.truth.pids.iter().enumerate() {
        let mine: Vec<&BubbleRecord> = r.bubbles.iter().filter(|b| b.pid == pid).collect();
        let live = merge(
            mine.iter()
                .map(|b| (b.bubble.opened_seen, b.bubble.closed_seen))
                .collect(),
        );
        let inferred = merge(
            mine.iter()
                .map(|b| (b.bubble.start, b.bubble.end))
                .collect(),
        );
        let forecast = merge(
            mine.iter()
                .map(|b| {
                    (
                        b.bubble.start,
                        b.bubble.predicted_end.unwrap_or(b.bubble.end),
                    )
                })
                .collect(),
        );
        for it in scored {
            let rw = &it.ranks[rank];
            let truth_iv = merge(rw.idle_intervals.clone());
            for (t, iv) in [
                (&mut inferred_tally, &inferred),
                (&mut forecast_tally, &forecast),
                (&mut live_tally, &live),
            ] {
                t.add(Tally::of(&clip(iv, it.start_ns, it.end_ns), &truth_iv));
            }
            window_ns += it.end_ns - it.start_ns;
            idle_ns += rw.idle_ns;
            for &(a, b) in truth_iv.iter().filter(|(a, b)| b - a >= MIN_SCORED_IDLE_NS) {
                match mine.iter().find(|m| m.bubble.start < b && m.bubble.end > a) {
                    Some(m) => latencies.push(m.bubble.opened_seen.saturating_sub(a) as f64 / 1e3),
                    None => missed += 1,
                }
            }
            for m in mine
                .iter()
                .filter(|m| m.bubble.start >= it.start_ns && m.bubble.start < it.end_ns)
            {
                if let Some(p) = m.bubble.predicted_end {
                    end_errors.push((p as f64 - m.bubble.end as f64).abs() / 1e3);
                }
            }
        }
    }
    let n = scored.len() as f64;
    let iteration_ms = scored
        .iter()
        .map(|i| (i.end_ns - i.start_ns) as f64)
        .sum::<f64>()
        / n
        / 1e6;
    let mut scores = Scores {
        iteration_ms,
        bubble_fraction: if window_ns == 0 {
            f64::NAN
        } else {
            idle_ns as f64 / window_ns as f64
        },
        inferred: inferred_tally,
        forecast: forecast_tally,
        live: live_tally,
        detect_latency_us: latencies,
        missed_idle_intervals: missed,
        scored_iterations: scored.len(),
        predicted_end_error_us: end_errors,
        after_change: vec![],
        relearned_in: None,
        before_change: None,
        relearned_to_steady_state_in: None,
    };
    if let Some(at) = change_at {
        let curve = relearn_curve(r, at as usize);
        let share = |c: &[(usize, usize)]| {
            let (good, n) = c.iter().fold((0, 0), |(g, m), &(a, b)| (g + a, m + b));
            if n == 0 {
                1.0
            } else {
                good as f64 / n as f64
            }
        };
        let relearned = |bar: f64| {
            let right = |j: usize| share(&curve[j..=j]) >= bar;
            (0..curve.len()).find(|&j| right(j) && (j + 1 == curve.len() || right(j + 1)))
        };
        scores.relearned_in = relearned(RELEARNED_SHARE);
        // The scored iterations before the change (the first two are learning).
        let its = &r.truth.iterations;
        let before = curve_of(r, &its[2.min(at as usize)..(at as usize).min(its.len())]);
        if before.iter().any(|&(_, n)| n > 0) {
            let steady = share(&before);
            scores.before_change = Some(steady);
            scores.relearned_to_steady_state_in = relearned(RELEARNED_SHARE * steady);
        }
        scores.after_change = curve
            .iter()
            .map(|c| share(std::slice::from_ref(c)))
            .collect();
    }
    scores
}

/// What the side tasks harvested, from the ground truth.
#[derive(Debug, Clone, PartialEq)]
pub struct Harvest {
    /// Side-task GPU time inside the trainers' true idle time / that idle time.
    pub bubble_busy_ratio: f64,
    /// Side-task GPU time in the scored iterations, summed over GPUs.
    pub sidetask_busy_ms: f64,
    /// Of which outside the trainers' idle time (where it can slow the trainer).
    pub outside_bubbles_ms: f64,
    /// Side-task GPU time / (measured time x GPUs): the side tasks' throughput as a GPU share.
    pub gpu_share: f64,
    /// [`Harvest::bubble_busy_ratio`] of each scored iteration, in order: how the agent's learning
    /// shows in the first ones, and the steady state after them.
    pub by_iteration: Vec<f64>,
}

/// Scores the side tasks' kernels against the trainers' idle time (same iterations as [`score`]).
pub fn harvest(r: &SimResult) -> Harvest {
    let (mut inside, mut idle, mut busy, mut window) = (0u64, 0u64, 0u64, 0u64);
    let scored = scored_iterations(&r.truth);
    // (inside, idle) per scored iteration.
    let mut per_it = vec![(0u64, 0u64); scored.len()];
    for (rank, _) in r.truth.pids.iter().enumerate() {
        let gpu = r.truth.devices.get(rank).copied().unwrap_or(rank as u32);
        let side = merge(
            r.kernels
                .iter()
                .filter(|k| k.device == gpu && r.sidetask_pids.contains(&k.pid))
                .map(|k| (k.start_ns, k.end_ns))
                .collect(),
        );
        for (it, acc) in scored.iter().zip(per_it.iter_mut()) {
            let truth_iv = merge(it.ranks[rank].idle_intervals.clone());
            let s = clip(&side, it.start_ns, it.end_ns);
            let t = Tally::of(&s, &truth_iv);
            acc.0 += t.overlap_ns;
            acc.1 += t.truth_ns;
            inside += t.overlap_ns;
            idle += t.truth_ns;
            busy += t.predicted_ns;
            window += it.end_ns - it.start_ns;
        }
    }
    Harvest {
        bubble_busy_ratio: if idle == 0 {
            f64::NAN
        } else {
            inside as f64 / idle as f64
        },
        sidetask_busy_ms: busy as f64 / 1e6,
        outside_bubbles_ms: (busy - inside) as f64 / 1e6,
        gpu_share: if window == 0 {
            f64::NAN
        } else {
            busy as f64 / window as f64
        },
        by_iteration: per_it
            .iter()
            .map(|&(a, b)| {
                if b == 0 {
                    f64::NAN
                } else {
                    a as f64 / b as f64
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::StepTimes;

    #[test]
    fn steps_count_and_keep_the_longest_of_every_node() {
        let mut a = StepTimes::default();
        a.note(300, 200, 0);
        a.note(5_000, 900, 40);
        a.note(100, 100, 0);
        let mut b = StepTimes::default();
        b.note(2_000, 1_500, 3);
        b.note(50, 30, 0);
        a.merge(&b);
        assert_eq!(
            a,
            StepTimes {
                steps: 5,
                wall_max_ns: 5_000,
                cpu_max_ns: 1_500,
                empty: 3,
                empty_cpu_ns: 330,
                busy_cpu_ns: 2_400,
            }
        );
        assert_eq!(a.cpu_us_means(), (0.11, 1.2));
        assert_eq!(StepTimes::default().cpu_us_means(), (0.0, 0.0));
    }
}
