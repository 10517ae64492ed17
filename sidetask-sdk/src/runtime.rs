//! The iterative interface: a [`SideTask`] is driven by a [`Runtime`] that calls `step` only when
//! the GPU's grant has room for it.
//!
//! ```text
//! submitted --init ok--> created --> paused <--> running --> finished
//!     \______________________\__________\___________\-----> stopped (stop, SIGTERM, error)
//! ```
//! Per step: wait until the step fits (see [`crate::pacer`]), move to `running` if paused, call
//! `step`, synchronize the task's stream, record the step's span and GPU time. When the next step
//! does not fit the task moves to `paused` (its GPU memory is kept) and polls the grant.
//!
//! With `overlap_steps` (default) the runtime runs steps ahead: while the time left in the grant
//! covers what the steps already on the GPU may still take plus a whole next step (and the budget
//! all of their GPU time), the next `step` is called before the earlier ones are synchronized, up
//! to `steps_in_flight` (default 3) steps on the GPU at once; the runtime then waits for the oldest.
//! The GPU is so fed across step boundaries and through short stalls of the task's host thread;
//! the last steps that fit are synchronized as usual. A step's GPU time is measured with CUDA
//! events around its launches, so a step queued behind another is measured alone. Device work of
//! earlier steps is ordered before the next one's (one stream); host code that reads its results
//! must synchronize itself (`ctx.gpu()?.synchronize()`).
use crate::config::TaskConfig;
use crate::error::{Result, SdkError};
use crate::gpu::{Gpu, StepMark};
use crate::lifecycle::State;
use crate::memory::DeviceMemory;
use crate::pacer::{Pacer, StepStart, Summary, WaitOutcome, Window};
use crate::stop::StopFlag;
use freeride_abi::now_ns;
use std::collections::VecDeque;

/// The error type of side-task code.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
pub type TaskResult<T> = std::result::Result<T, BoxError>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepOutcome {
    Continue,
    /// The task is done (same as `is_finished` returning true).
    Finished,
}

/// A side task in iterative form. Hooks run on the runtime's thread at each transition.
pub trait SideTask {
    /// Loads data and allocates GPU memory (the task is `created` when this returns Ok). Runs
    /// before any grant: queue GPU work in `step`, which is paced, not here.
    fn init(&mut self, ctx: &mut Ctx) -> TaskResult<()>;
    /// One unit of work. Queue GPU work on `ctx.gpu()`; the runtime synchronizes at the end.
    fn step(&mut self, ctx: &mut Ctx) -> TaskResult<StepOutcome>;
    fn is_finished(&self) -> bool;
    /// The smallest share of a full step this task can do when scaling its work by
    /// [`Ctx::step_fraction`] (1.0, the default: it cannot). With less, the runtime may start a
    /// partial step where a full one no longer fits the grant (the last one before a bubble ends);
    /// the task must then queue about that share of a step's GPU work.
    fn min_step_fraction(&self) -> f64 {
        1.0
    }
    fn on_created(&mut self, _ctx: &mut Ctx) {}
    fn on_paused(&mut self, _ctx: &mut Ctx) {}
    fn on_resumed(&mut self, _ctx: &mut Ctx) {}
    fn on_finished(&mut self, _ctx: &mut Ctx) {}
    fn on_stopped(&mut self, _ctx: &mut Ctx) {}
}

/// What a task sees: its GPU (opened on first use), its memory budget, the current grant.
pub struct Ctx {
    device: u32,
    gpu: Option<Gpu>,
    memory: DeviceMemory,
    stop: StopFlag,
    window: Option<Window>,
    steps: u64,
    fraction: f64,
}

impl Ctx {
    fn new(pacer: &Pacer) -> Ctx {
        Ctx {
            device: pacer.config().device,
            gpu: None,
            memory: DeviceMemory::new(pacer.budget()),
            stop: pacer.stop_flag(),
            window: None,
            steps: 0,
            fraction: 1.0,
        }
    }

    pub fn device(&self) -> u32 {
        self.device
    }

    /// The task's GPU (context + stream on the configured device), opened on first use.
    pub fn gpu(&mut self) -> Result<&mut Gpu> {
        if self.gpu.is_none() {
            self.gpu = Some(Gpu::open(self.device)?);
        }
        Ok(self.gpu.as_mut().expect("opened above"))
    }

    /// Launches the simulated kernel `name` running `duration_ns` on the task's stream.
    pub fn launch_ns(&mut self, name: &str, duration_ns: u64) -> Result<()> {
        self.gpu()?.launch_ns(name, duration_ns)
    }

    /// Device memory within the budget (grant's `mem_budget_bytes` and `mem_cap_bytes`):
    /// `SdkError::OverBudget` otherwise, before anything is allocated.
    pub fn alloc(&mut self, bytes: u64) -> Result<u64> {
        // The budget is checked before the GPU is touched, so an over-budget request fails the
        // same way with or without a driver.
        self.memory.budget().reserve(bytes)?;
        self.memory.budget().release(bytes);
        self.gpu()?;
        let gpu = self.gpu.as_ref().expect("opened above");
        self.memory.alloc(gpu, bytes)
    }

    pub fn free(&mut self, ptr: u64) -> Result<()> {
        let gpu = self
            .gpu
            .as_ref()
            .ok_or_else(|| SdkError::Driver("nothing was allocated".into()))?;
        self.memory.free(gpu, ptr)
    }

    pub fn mem_held(&self) -> u64 {
        self.memory.budget().held()
    }

    pub fn mem_limit(&self) -> u64 {
        self.memory.budget().limit()
    }

    /// The grant's room when the current step started (None outside a step).
    pub fn window(&self) -> Option<Window> {
        self.window
    }

    /// The share of a full step this step may take (1.0, or at least the task's
    /// [`SideTask::min_step_fraction`] when only part of a step fits the grant).
    pub fn step_fraction(&self) -> f64 {
        self.fraction
    }

    /// Steps completed so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    pub fn stop_requested(&self) -> bool {
        self.stop.is_requested()
    }

    /// Marks the end of the step's GPU work on the stream (None: no launch through the SDK).
    fn end_step_mark(&mut self) -> Result<Option<StepMark>> {
        match &self.gpu {
            Some(gpu) => gpu.end_step_mark(),
            None => Ok(None),
        }
    }

    /// Waits for the task's stream (a step without a mark).
    fn synchronize(&self) -> Result<()> {
        match &self.gpu {
            Some(gpu) => gpu.synchronize(),
            None => Ok(()),
        }
    }
}

/// A step whose `step` returned, with its GPU work possibly still running.
struct Launched {
    start: StepStart,
    mark: Option<StepMark>,
    /// When `step` returned (every launch of the step queued).
    returned_ns: u64,
    /// Its GPU work starts no later than this: `returned_ns`, or when the step it was queued
    /// behind was seen done.
    anchor_ns: u64,
    /// Started while the previous step still ran.
    queued_behind: bool,
    /// The next step was started while this one still ran.
    followed: bool,
    /// The share of a full step it did (< 1: a partial step, see [`SideTask::min_step_fraction`]).
    fraction: f64,
}

impl Drop for Ctx {
    fn drop(&mut self) {
        if let Some(gpu) = &self.gpu {
            self.memory.free_all(gpu);
        }
    }
}

/// Drives one [`SideTask`].
pub struct Runtime {
    pacer: Pacer,
}

impl Runtime {
    pub fn new(cfg: TaskConfig) -> Result<Runtime> {
        Ok(Runtime {
            pacer: Pacer::new(cfg, "iterative")?,
        })
    }

    /// Requests a stop from another thread (the task ends `stopped` after its current step).
    pub fn stop_flag(&self) -> StopFlag {
        self.pacer.stop_flag()
    }

    pub fn pacer(&self) -> &Pacer {
        &self.pacer
    }

    /// Waits for a launched step's GPU work and accounts it. A step that overlapped another counts
    /// the span it would have taken alone (host part, or first launch + its GPU time).
    fn finish(&mut self, ctx: &mut Ctx, p: Launched) -> Result<()> {
        let first_launch_ns = p.mark.as_ref().map_or(p.returned_ns, |m| m.first_launch_ns);
        let (gpu_ns, res) = match (p.mark, &ctx.gpu) {
            (Some(mark), Some(gpu)) => match gpu.finish_step_mark(mark) {
                Ok(ns) => (Some(ns), Ok(())),
                Err(e) => (None, Err(e)),
            },
            _ => (None, ctx.synchronize()),
        };
        let end = now_ns();
        let host_ns = p.returned_ns.saturating_sub(p.start.start_ns);
        let (span_ns, end_ns) = match gpu_ns {
            Some(g) if p.queued_behind || p.followed => {
                let launch_ns = first_launch_ns.saturating_sub(p.start.start_ns);
                (
                    host_ns.max(launch_ns.saturating_add(g)),
                    end.min(p.anchor_ns.saturating_add(g)),
                )
            }
            _ => (end.saturating_sub(p.start.start_ns), end),
        };
        self.pacer
            .step_record(p.start, end_ns, span_ns, gpu_ns, p.fraction);
        res
    }

    /// [`Runtime::finish`]es the oldest step in flight; the next one's GPU work starts no later
    /// than now (it was queued behind it).
    fn finish_oldest(
        &mut self,
        ctx: &mut Ctx,
        oldest: Launched,
        rest: &mut VecDeque<Launched>,
    ) -> Result<()> {
        let r = self.finish(ctx, oldest);
        if let Some(next) = rest.front_mut() {
            next.anchor_ns = next.anchor_ns.max(now_ns());
        }
        r
    }

    fn go<T: SideTask + ?Sized>(&mut self, task: &mut T, ctx: &mut Ctx, to: State) -> Result<()> {
        self.pacer.transition(to)?;
        match to {
            State::Created => task.on_created(ctx),
            State::Paused => task.on_paused(ctx),
            State::Running => task.on_resumed(ctx),
            State::Finished => task.on_finished(ctx),
            State::Stopped => task.on_stopped(ctx),
            State::Submitted => {}
        }
        Ok(())
    }

    fn fail<T: SideTask + ?Sized>(
        &mut self,
        task: &mut T,
        ctx: &mut Ctx,
        what: &str,
        e: BoxError,
    ) -> SdkError {
        let _ = self.go(task, ctx, State::Stopped);
        SdkError::Task(format!("{what}: {e}"))
    }

    /// Runs `task` to `finished` or `stopped`. Errors of `init`/`step` stop the task and are
    /// returned; a stop request (flag or SIGTERM) is a clean `stopped` summary.
    pub fn run<T: SideTask + ?Sized>(&mut self, task: &mut T) -> Result<Summary> {
        let mut ctx = Ctx::new(&self.pacer);
        if let Err(e) = task.init(&mut ctx) {
            return Err(self.fail(task, &mut ctx, "init", e));
        }
        self.go(task, &mut ctx, State::Created)?;
        self.go(task, &mut ctx, State::Paused)?;
        let cfg = self.pacer.config();
        // Steps on the GPU at once: the running one and those queued behind it.
        let in_flight_max = if cfg.overlap_steps {
            cfg.steps_in_flight.max(1) as usize
        } else {
            1
        };
        // Steps whose GPU work is not yet waited for, oldest first (fewer than `in_flight_max`).
        let mut pending: VecDeque<Launched> = VecDeque::new();
        loop {
            let ending = self.pacer.stop_requested() || task.is_finished();
            let ahead = match pending.front() {
                Some(oldest) if !ending => {
                    // What the steps in flight may still take: the oldest's remaining GPU time
                    // (it started no later than its anchor) and the others' whole GPU time.
                    let gpu_est = self.pacer.gpu_estimate_ns();
                    let queued = gpu_est.saturating_mul(pending.len() as u64 - 1);
                    let left = gpu_est
                        .saturating_sub(now_ns().saturating_sub(oldest.anchor_ns))
                        .saturating_add(queued);
                    self.pacer
                        .check_ahead(left, gpu_est.saturating_mul(pending.len() as u64))
                }
                _ => None,
            };
            if ahead.is_none() {
                while let Some(p) = pending.pop_front() {
                    if let Err(e) = self.finish_oldest(&mut ctx, p, &mut pending) {
                        return Err(self.fail(task, &mut ctx, "synchronize", e.into()));
                    }
                }
            }
            if self.pacer.stop_requested() {
                self.go(task, &mut ctx, State::Stopped)?;
                break;
            }
            if task.is_finished() {
                self.go(task, &mut ctx, State::Finished)?;
                break;
            }
            // A full step if one fits; else, for a task that can scale its work, the part of one
            // that still fits this grant.
            let min_fraction = task.min_step_fraction();
            let mut fraction = 1.0;
            let found = match ahead.or_else(|| self.pacer.check(0)) {
                Some(w) => Some(w),
                None if min_fraction < 1.0 => {
                    self.pacer.check_partial(min_fraction).map(|(w, f)| {
                        fraction = f;
                        w
                    })
                }
                None => None,
            };
            let window = match found {
                Some(w) => w,
                None => {
                    if self.pacer.state() == State::Running {
                        self.go(task, &mut ctx, State::Paused)?;
                    }
                    // A grant that opens fits a whole step or, for a task that can scale its
                    // work, part of one (else an estimate above every grant would hold the task
                    // for good).
                    match self.pacer.wait(0, min_fraction, None) {
                        WaitOutcome::Fits(w, f) => {
                            fraction = f;
                            w
                        }
                        WaitOutcome::Stopped | WaitOutcome::TimedOut => continue,
                    }
                }
            };
            if self.pacer.state() == State::Paused {
                self.go(task, &mut ctx, State::Running)?;
            }
            ctx.window = Some(window);
            ctx.fraction = fraction;
            self.pacer.step_begin(window);
            let outcome = task.step(&mut ctx);
            let returned_ns = now_ns();
            let start = self.pacer.step_take().expect("begun above");
            let mark = ctx.end_step_mark();
            ctx.window = None;
            ctx.steps += 1;
            let queued_behind = !pending.is_empty();
            if let Some(p) = pending.back_mut() {
                p.followed = true;
            }
            // With as many steps in flight as allowed (this one included), wait for the oldest.
            let mut prev_err = None;
            if pending.len() + 1 >= in_flight_max {
                if let Some(p) = pending.pop_front() {
                    if let Err(e) = self.finish_oldest(&mut ctx, p, &mut pending) {
                        prev_err = Some(e);
                    }
                }
            }
            let mark = match mark {
                Ok(m) => m,
                Err(e) => {
                    // The step's work cannot be timed: wait for it and count its span.
                    let _ = ctx.synchronize();
                    let end = now_ns();
                    self.pacer.step_record(
                        start,
                        end,
                        end.saturating_sub(start.start_ns),
                        None,
                        fraction,
                    );
                    return Err(self.fail(task, &mut ctx, "synchronize", e.into()));
                }
            };
            let cur = Launched {
                start,
                // Queued behind steps still running: re-anchored when the one before it is done.
                anchor_ns: now_ns().max(returned_ns),
                mark,
                returned_ns,
                queued_behind,
                followed: false,
                fraction,
            };
            let keep = in_flight_max > 1
                && cur.mark.is_some()
                && prev_err.is_none()
                && matches!(outcome, Ok(StepOutcome::Continue));
            pending.push_back(cur);
            let mut synced = Ok(());
            if !keep {
                while let Some(p) = pending.pop_front() {
                    let r = self.finish_oldest(&mut ctx, p, &mut pending);
                    synced = synced.and(r);
                }
            }
            match (outcome, prev_err.map_or(synced, Err)) {
                (Err(e), _) => return Err(self.fail(task, &mut ctx, "step", e)),
                (Ok(_), Err(e)) => return Err(self.fail(task, &mut ctx, "synchronize", e.into())),
                (Ok(StepOutcome::Finished), Ok(())) => {
                    self.go(task, &mut ctx, State::Finished)?;
                    break;
                }
                (Ok(StepOutcome::Continue), Ok(())) => {}
            }
        }
        // Frees the task's device memory, so the final status shows what is still held (nothing).
        drop(ctx);
        self.pacer.write_status(true);
        Ok(self.pacer.summary())
    }
}
