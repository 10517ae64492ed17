//! The core shared by the Rust runtime, the imperative runner and the C ABI: it reads the grant,
//! decides whether the next step fits, learns step durations, keeps the life cycle and the
//! counters, and writes the status file.
//!
//! A step fits when the grant is open and both
//! * the time left (`open_until_ns - now`) >= the learned step span (from the step's start to the
//!   return of its final synchronize), and
//! * the GPU budget left in this grant (`budget_ns` minus the GPU time this task used since the
//!   grant appeared) >= the learned GPU time of a step (first launch to synchronize return).
//!
//! Until a step has been measured, the first ("probe") step needs `probe_min_grant_ns` of both.
//! A grant is told apart from the next one by its `(open_until_ns, budget_ns)` pair.
use crate::config::{NoAgent, TaskConfig};
use crate::error::Result;
use crate::estimator::StepEstimator;
use crate::grant_watch::{GrantRead, GrantWatch};
use crate::lifecycle::{Lifecycle, State};
use crate::memory::MemBudget;
use crate::status::{StatusFile, StatusRecord};
use crate::stop::StopFlag;
use freeride_abi::now_ns;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;

/// The room a grant leaves right now (`u64::MAX` fields in standalone mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub time_left_ns: u64,
    pub budget_left_ns: u64,
    /// CLOCK_MONOTONIC end of the grant (`u64::MAX`: unbounded).
    pub deadline_ns: u64,
    /// No agent, running freely (`NoAgent::Standalone`).
    pub standalone: bool,
}

impl Window {
    pub fn unbounded() -> Self {
        Window {
            time_left_ns: u64::MAX,
            budget_left_ns: u64::MAX,
            deadline_ns: u64::MAX,
            standalone: true,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Availability {
    NoAgent,
    Closed,
    Open(Window),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WaitOutcome {
    /// The window, and the share of a step that fits it (1.0: a whole one).
    Fits(Window, f64),
    Stopped,
    TimedOut,
}

/// How long one step took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepTiming {
    pub span_ns: u64,
    pub gpu_ns: u64,
    /// The step ended after its grant's deadline.
    pub overran: bool,
}

/// The final (or current) account of a task; `to_json` is the examples' summary line.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub task: String,
    pub state: &'static str,
    pub steps: u64,
    /// Of which partial (see [`Pacer::check_partial`]).
    pub partial_steps: u64,
    pub gpu_busy_ms: f64,
    pub wall_ms: f64,
    pub last_step_ms: f64,
    pub step_estimate_ms: f64,
    pub overruns: u64,
    /// See [`TaskConfig::relax_after_grants`].
    pub estimate_relaxed: u64,
}

impl Summary {
    /// The summary as one JSON object, with `extra`'s fields (an object) added.
    pub fn to_json_with(&self, extra: serde_json::Value) -> String {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let (Some(o), serde_json::Value::Object(e)) = (v.as_object_mut(), extra) {
            o.extend(e);
        }
        v.to_string()
    }
}

/// A begun step (see [`Pacer::step_take`]).
#[derive(Clone, Copy, Debug)]
pub struct StepStart {
    pub start_ns: u64,
    pub window: Window,
}

pub struct Pacer {
    cfg: TaskConfig,
    grant: GrantWatch,
    span: StepEstimator,
    gpu: StepEstimator,
    life: Lifecycle,
    stop: StopFlag,
    budget: Arc<MemBudget>,
    status: Option<StatusFile>,
    rec: StatusRecord,
    grant_key: (u64, u64),
    used_in_grant_ns: u64,
    /// Grants in a row that held the task though a step would fit them by the floor estimate
    /// (see [`TaskConfig::relax_after_grants`]), and the last one counted.
    held_grants: u32,
    held_key: (u64, u64),
    step: Option<StepStart>,
    no_agent_noted: bool,
    /// The foreign grant layout version already reported (0: none).
    version_noted: u32,
    /// The epoch of the last grant read when nothing but the agent's next publish can open it to
    /// this task (None: a grant whose heartbeat alone is stale, or no grant read).
    publish_after: Option<u64>,
}

/// How long a task waits for the agent's next publish when only a publish can open its grant:
/// the publish wakes it at once (a futex on the block), so this bounds only how soon it notices a
/// stop asked from another thread, a dead agent or a replaced block file. Polling every
/// `poll_max_us` instead (200 µs) woke every waiting task 5 000 times a second; with 16 side tasks
/// on a 2-core test bed that took the trainers' CPU.
const PUBLISH_WAIT_NS: u64 = 5_000_000;

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

impl Pacer {
    /// `mode`: "iterative" or "imperative" (shown in the status file).
    pub fn new(cfg: TaskConfig, mode: &'static str) -> Result<Pacer> {
        cfg.validate()?;
        if mode == "iterative" {
            crate::double_gate::refuse_if_gated(&cfg.name)?;
        }
        if cfg.handle_sigterm {
            crate::stop::install_sigterm_handler();
        }
        if let Err(e) = freeride_abi::cpu::lower_process_priority(cfg.cpu_nice) {
            eprintln!(
                "freeride-sidetask: {}: cannot lower the CPU priority to nice {}: {e}",
                cfg.name, cfg.cpu_nice
            );
        }
        let dir = cfg.session_dir();
        let status = if cfg.write_status {
            match freeride_abi::session::ensure_dir(&dir) {
                Ok(()) => Some(StatusFile::new(&dir, cfg.status_interval_ms)),
                Err(e) => {
                    eprintln!(
                        "freeride-sidetask: session directory {}: {e}; no status file",
                        dir.display()
                    );
                    None
                }
            }
        } else {
            None
        };
        let now = now_ns();
        let rec = StatusRecord {
            pid: std::process::id(),
            task: cfg.name.clone(),
            mode,
            device: -1,
            ordinal: cfg.device,
            priority: cfg.priority,
            state: State::Submitted.name(),
            started_ns: now,
            ..Default::default()
        };
        let mut p = Pacer {
            grant: GrantWatch::new(&dir, cfg.device),
            span: StepEstimator::new(cfg.window, cfg.quantile, cfg.margin),
            gpu: StepEstimator::new(cfg.window, cfg.quantile, cfg.margin),
            life: Lifecycle::default(),
            stop: StopFlag::default(),
            budget: Arc::new(MemBudget::new(cfg.mem_cap_bytes)),
            status,
            rec,
            grant_key: (0, 0),
            used_in_grant_ns: 0,
            held_grants: 0,
            held_key: (0, 0),
            step: None,
            no_agent_noted: false,
            version_noted: 0,
            publish_after: None,
            cfg,
        };
        p.write_status(true);
        Ok(p)
    }

    pub fn config(&self) -> &TaskConfig {
        &self.cfg
    }

    pub fn state(&self) -> State {
        self.life.state()
    }

    pub fn stop_flag(&self) -> StopFlag {
        self.stop.clone()
    }

    pub fn stop_requested(&self) -> bool {
        self.stop.is_requested()
    }

    pub fn budget(&self) -> Arc<MemBudget> {
        self.budget.clone()
    }

    pub fn status_path(&self) -> Option<&std::path::Path> {
        self.status.as_ref().map(|s| s.path())
    }

    /// Moves the life cycle to `to` (returns the previous state) and reports it.
    pub fn transition(&mut self, to: State) -> Result<State> {
        let from = self.life.go(to)?;
        self.write_status(true);
        Ok(from)
    }

    pub fn write_status(&mut self, force: bool) {
        let Some(s) = self.status.as_mut() else {
            return;
        };
        self.rec.state = self.life.state().name();
        self.rec.step_estimate_ns = self.span.estimate_ns().unwrap_or(0);
        self.rec.mem_held_bytes = self.budget.held();
        s.update(&mut self.rec, force);
    }

    /// Learned `(time, gpu budget)` a step needs, or the probe minimum before the first step.
    /// `override_ns > 0` replaces both (a caller that knows its step).
    pub fn needed_ns(&self, override_ns: u64) -> (u64, u64) {
        if override_ns > 0 {
            return (override_ns, override_ns);
        }
        match (self.span.estimate_ns(), self.gpu.estimate_ns()) {
            // A step's span is never shorter than its GPU time.
            (Some(s), Some(g)) => (s.max(g), g),
            _ => (self.cfg.probe_min_grant_ns, self.cfg.probe_min_grant_ns),
        }
    }

    /// The learned span estimate (0 until a step was measured).
    pub fn step_estimate_ns(&self) -> u64 {
        self.span.estimate_ns().unwrap_or(0)
    }

    pub fn gpu_estimate_ns(&self) -> u64 {
        self.gpu.estimate_ns().unwrap_or(0)
    }

    pub fn availability(&mut self) -> Availability {
        let standalone = self.cfg.no_agent == NoAgent::Standalone;
        let read = self.grant.read();
        self.rec.device = self.grant.gpu_field();
        self.publish_after = None;
        match read {
            GrantRead::NoAgent if standalone => Availability::Open(Window::unbounded()),
            GrantRead::NoAgent => Availability::NoAgent,
            GrantRead::Busy => Availability::Closed,
            GrantRead::OtherVersion(v) => {
                if self.version_noted != v {
                    self.version_noted = v;
                    eprintln!(
                        "freeride-sidetask: {}: {} has grant layout version {v}, this SDK reads \
                         version {}: the agent is of another release; holding until an agent of \
                         this release serves the GPU",
                        self.cfg.name,
                        self.grant.path().display(),
                        freeride_abi::grant::GRANT_LAYOUT_VERSION
                    );
                }
                Availability::Closed
            }
            GrantRead::Grant(g) => {
                self.budget
                    .set_grant_limit(g.mem_limit_for(self.budget.held()));
                let now = now_ns();
                // Open, before its deadline, its heartbeat fresh (see freeride_abi::grant's
                // fresh_ns); no heartbeat check at all with heartbeat_stale_ms 0.
                let open_by_state = g.open && now < g.open_until_ns;
                let open = match self.cfg.heartbeat_stale_ms {
                    0 => open_by_state,
                    ms => g.open_at(now, ms.saturating_mul(1_000_000)),
                };
                // Closed, expired, reserved, or open with no room for a step (the room only
                // shrinks): only a publish changes that. Open by its state but stale: the
                // agent's next heartbeat, which wakes nobody, opens it again.
                if open || !open_by_state {
                    self.publish_after = Some(g.epoch);
                }
                // A grant given to more important tasks (see TaskConfig::priority) is closed to us.
                if !open || g.min_priority > self.cfg.priority {
                    return Availability::Closed;
                }
                let key = (g.open_until_ns, g.budget_ns);
                if key != self.grant_key {
                    self.grant_key = key;
                    self.used_in_grant_ns = 0;
                }
                Availability::Open(Window {
                    time_left_ns: g.open_until_ns - now,
                    budget_left_ns: g.budget_ns.saturating_sub(self.used_in_grant_ns),
                    deadline_ns: g.open_until_ns,
                    standalone: false,
                })
            }
        }
    }

    /// The window if the next step fits in it now.
    pub fn check(&mut self, override_ns: u64) -> Option<Window> {
        let (t, b) = self.needed_ns(override_ns);
        match self.availability() {
            Availability::Open(w) if w.time_left_ns >= t && w.budget_left_ns >= b => Some(w),
            Availability::Open(w) if override_ns == 0 => {
                self.note_held(w);
                None
            }
            _ => None,
        }
    }

    /// Counts a grant that the estimate holds the task out of though a step would fit it by
    /// `margin` x the median; after [`TaskConfig::relax_after_grants`] of them in a row the
    /// estimates come down by a sample.
    fn note_held(&mut self, w: Window) {
        if self.cfg.relax_after_grants == 0 || w.standalone || self.held_key == self.grant_key {
            return;
        }
        let (Some(span), Some(gpu)) = (self.span.floor_ns(), self.gpu.floor_ns()) else {
            return;
        };
        if w.time_left_ns < span.max(gpu) || w.budget_left_ns < gpu {
            return;
        }
        self.held_key = self.grant_key;
        self.held_grants += 1;
        if self.held_grants >= self.cfg.relax_after_grants {
            self.held_grants = 0;
            // Both, not short-circuited.
            let (a, b) = (self.span.relax(), self.gpu.relax());
            if a || b {
                self.rec.estimate_relaxed += 1;
            }
        }
    }

    /// The window if a next step fits behind steps still on the GPU ("steps ahead"): the
    /// estimates are learned and the grant has `in_flight_ns` (what the steps in flight may still
    /// take) plus a step's GPU time left (queued behind them, its work starts on the GPU as they
    /// end: the host's launch and wake-up, which a step's span includes, are not on the GPU's
    /// clock), and `in_flight_gpu_ns` (their GPU time, not yet charged) plus a step's GPU time of
    /// budget left.
    pub fn check_ahead(&mut self, in_flight_ns: u64, in_flight_gpu_ns: u64) -> Option<Window> {
        if !(self.span.is_learned() && self.gpu.is_learned()) {
            return None;
        }
        let (_, b) = self.needed_ns(0);
        match self.availability() {
            Availability::Open(w)
                if w.time_left_ns >= in_flight_ns.saturating_add(b)
                    && w.budget_left_ns >= in_flight_gpu_ns.saturating_add(b) =>
            {
                Some(w)
            }
            _ => None,
        }
    }

    /// The window and the share of a step that fits it, when a full step does not but at least
    /// `min_fraction` of one does (time and budget, by the learned estimates); `None` before the
    /// estimates are learned.
    pub fn check_partial(&mut self, min_fraction: f64) -> Option<(Window, f64)> {
        if !(self.span.is_learned() && self.gpu.is_learned()) {
            return None;
        }
        let (t, b) = self.needed_ns(0);
        let Availability::Open(w) = self.availability() else {
            return None;
        };
        let f = (w.time_left_ns as f64 / t.max(1) as f64)
            .min(w.budget_left_ns as f64 / b.max(1) as f64);
        (f >= min_fraction.max(0.01) && f < 1.0).then_some((w, f))
    }

    /// Polls until the next step fits, or at least `min_fraction` of one does (1.0: whole steps
    /// only; see [`Pacer::check_partial`]), a stop is requested, or `timeout` passes.
    pub fn wait(
        &mut self,
        override_ns: u64,
        min_fraction: f64,
        timeout: Option<Duration>,
    ) -> WaitOutcome {
        let deadline = timeout.map(|t| now_ns().saturating_add(t.as_nanos() as u64));
        let mut sleep_us = self.cfg.poll_min_us;
        loop {
            if self.stop_requested() {
                return WaitOutcome::Stopped;
            }
            if let Some(w) = self.check(override_ns) {
                return WaitOutcome::Fits(w, 1.0);
            }
            if min_fraction < 1.0 {
                if let Some((w, f)) = self.check_partial(min_fraction) {
                    return WaitOutcome::Fits(w, f);
                }
            }
            let now = now_ns();
            if deadline.is_some_and(|d| now >= d) {
                return WaitOutcome::TimedOut;
            }
            self.write_status(false);
            let no_agent = self.availability() == Availability::NoAgent;
            let pause = if no_agent {
                if !self.no_agent_noted {
                    self.no_agent_noted = true;
                    eprintln!(
                        "freeride-sidetask: {}: no freeride agent ({} missing or dead); waiting \
                         (no_agent=standalone or FREERIDE_SIDETASK_STANDALONE=1 runs freely)",
                        self.cfg.name,
                        self.grant.path().display()
                    );
                }
                Duration::from_millis(self.cfg.no_agent_poll_ms.max(1))
            } else if self.publish_after.is_some() {
                Duration::from_nanos(PUBLISH_WAIT_NS)
            } else {
                let d = Duration::from_micros(sleep_us);
                sleep_us = (sleep_us * 2).min(self.cfg.poll_max_us);
                d
            };
            let pause = match deadline {
                Some(d) => pause.min(Duration::from_nanos(d.saturating_sub(now))),
                None => pause,
            };
            if no_agent {
                std::thread::sleep(pause);
            } else if let Some(epoch) = self.publish_after {
                // Woken at once by any publish since that read, even one made before this call.
                self.grant
                    .wait_for_publish_after(epoch, pause.as_nanos() as u64);
            } else {
                // Woken at once when the agent publishes (a grant opening).
                self.grant.wait_for_change(pause.as_nanos() as u64);
            }
        }
    }

    pub fn step_begin(&mut self, window: Window) {
        self.held_grants = 0;
        self.held_key = self.grant_key;
        self.step = Some(StepStart {
            start_ns: now_ns(),
            window,
        });
    }

    pub fn in_step(&self) -> bool {
        self.step.is_some()
    }

    /// Takes the step begun by `step_begin` out of the pacer (its GPU work still running), to be
    /// accounted later by [`Pacer::step_record`].
    pub fn step_take(&mut self) -> Option<StepStart> {
        self.step.take()
    }

    /// Ends the step begun by `step_begin`. `gpu_ns`: the GPU-side time if known (first launch to
    /// synchronize return), else the whole span counts. `fraction`: see [`Pacer::step_record`].
    pub fn step_end(&mut self, gpu_ns: Option<u64>, fraction: f64) -> Option<StepTiming> {
        let s = self.step.take()?;
        let end = now_ns();
        let span_ns = end.saturating_sub(s.start_ns);
        Some(self.step_record(s, end, span_ns, gpu_ns, fraction))
    }

    /// Accounts a step taken by `step_take`: it ended (its GPU work) at `end_ns` and took
    /// `span_ns` (what it would have taken alone) and `gpu_ns` (None: the span). `fraction` is the
    /// share of a full step it did: below 1 a partial step (see [`Pacer::check_partial`]), which
    /// counts against the grant and in the task's totals, and whose durations scaled to a whole
    /// step (divided by `fraction`) may lower the step estimates but never raise them: a step's
    /// fixed costs make the scaled figure a whole step's or more, so it is no evidence of a slower
    /// step, while it lets an estimate that a slow spell inflated past every grant the task is
    /// offered come down again (full steps would never run to correct it).
    pub fn step_record(
        &mut self,
        s: StepStart,
        end_ns: u64,
        span_ns: u64,
        gpu_ns: Option<u64>,
        fraction: f64,
    ) -> StepTiming {
        let gpu_ns = gpu_ns.unwrap_or(span_ns).min(span_ns);
        let overran = !s.window.standalone && end_ns > s.window.deadline_ns;
        if fraction < 1.0 {
            self.rec.partial_steps += 1;
            let whole = |ns: u64| (ns as f64 / fraction.max(0.01)).min(u64::MAX as f64) as u64;
            self.span.record_at_most_estimate(whole(span_ns));
            self.gpu.record_at_most_estimate(whole(gpu_ns));
        } else {
            self.span.record(span_ns);
            self.gpu.record(gpu_ns);
            self.rec.last_step_ns = span_ns;
        }
        self.used_in_grant_ns += gpu_ns;
        self.rec.steps += 1;
        self.rec.gpu_busy_ns += gpu_ns;
        self.rec.overruns += overran as u64;
        self.write_status(false);
        StepTiming {
            span_ns,
            gpu_ns,
            overran,
        }
    }

    pub fn steps(&self) -> u64 {
        self.rec.steps
    }

    pub fn gpu_busy_ns(&self) -> u64 {
        self.rec.gpu_busy_ns
    }

    pub fn summary(&self) -> Summary {
        Summary {
            task: self.cfg.name.clone(),
            state: self.life.state().name(),
            steps: self.rec.steps,
            partial_steps: self.rec.partial_steps,
            gpu_busy_ms: ms(self.rec.gpu_busy_ns),
            wall_ms: ms(now_ns().saturating_sub(self.rec.started_ns)),
            last_step_ms: ms(self.rec.last_step_ns),
            step_estimate_ms: ms(self.step_estimate_ns()),
            overruns: self.rec.overruns,
            estimate_relaxed: self.rec.estimate_relaxed,
        }
    }
}
