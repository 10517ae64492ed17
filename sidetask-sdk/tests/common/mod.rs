//! Shared by the integration tests.
#![allow(dead_code)]
use freeride_sidetask::{Ctx, NoAgent, SideTask, StepOutcome, TaskConfig, TaskResult};
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

static N: AtomicU32 = AtomicU32::new(0);

/// A fresh 0700 directory (a valid session directory); removed by the caller, or at exit (a
/// failing test).
pub fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "frst-it-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::DirBuilder::new().mode(0o700).create(&d).unwrap();
    freeride_abi::scratch::remove_at_exit(&d);
    d
}

pub fn config(dir: &std::path::Path, no_agent: NoAgent) -> TaskConfig {
    TaskConfig {
        name: "test-task".into(),
        session_dir: Some(dir.to_path_buf()),
        no_agent,
        handle_sigterm: false,
        status_interval_ms: 0,
        // Nice 0: these tests run the runtime in the test process, whose every thread (the test's
        // stand-in agent among them) the default nice 19 would lower; on a loaded machine that
        // starves them for milliseconds. The lowering has its own test (testbed.rs).
        cpu_nice: 0,
        ..Default::default()
    }
}

/// A CPU-only task: each step sleeps `step`; records hooks and step start times.
pub struct SleepTask {
    pub step: Duration,
    pub max_steps: u64,
    pub done: Arc<AtomicU64>,
    pub log: Arc<Mutex<Vec<String>>>,
    pub starts: Arc<Mutex<Vec<u64>>>,
    pub fail_init: bool,
    pub fail_at_step: Option<u64>,
    /// `SideTask::min_step_fraction` (1.0: full steps only); a partial step sleeps that share.
    pub min_fraction: f64,
    /// The fraction of every step taken.
    pub fractions: Arc<Mutex<Vec<f64>>>,
    /// How long every step's sleep really took, in ns (a loaded host oversleeps).
    pub slept_ns: Arc<Mutex<Vec<u64>>>,
    /// Steps whose sleep overran what they asked for by more than a tenth: the host was late, and
    /// such a step may end past its grant through no fault of the runtime.
    pub late_steps: Arc<AtomicU64>,
    /// While set, steps sleep `slow_step` instead (a slow spell).
    pub slow: Arc<AtomicBool>,
    pub slow_step: Duration,
}

impl SleepTask {
    pub fn new(step: Duration, max_steps: u64) -> Self {
        SleepTask {
            step,
            max_steps,
            done: Arc::default(),
            log: Arc::default(),
            starts: Arc::default(),
            fail_init: false,
            fail_at_step: None,
            min_fraction: 1.0,
            fractions: Arc::default(),
            slept_ns: Arc::default(),
            late_steps: Arc::default(),
            slow: Arc::default(),
            slow_step: step,
        }
    }

    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    fn note(&self, s: &str) {
        self.log.lock().unwrap().push(s.into());
    }
}

impl SideTask for SleepTask {
    fn init(&mut self, _ctx: &mut Ctx) -> TaskResult<()> {
        self.note("init");
        if self.fail_init {
            return Err("init failed on purpose".into());
        }
        Ok(())
    }

    fn step(&mut self, ctx: &mut Ctx) -> TaskResult<StepOutcome> {
        self.starts.lock().unwrap().push(freeride_abi::now_ns());
        let n = self.done.load(Ordering::SeqCst);
        if self.fail_at_step == Some(n) {
            return Err("step failed on purpose".into());
        }
        let f = ctx.step_fraction();
        self.fractions.lock().unwrap().push(f);
        let step = if self.slow.load(Ordering::SeqCst) {
            self.slow_step
        } else {
            self.step
        };
        let asked = step.mul_f64(f);
        let t0 = std::time::Instant::now();
        std::thread::sleep(asked);
        let slept = t0.elapsed();
        self.slept_ns.lock().unwrap().push(slept.as_nanos() as u64);
        if slept > asked + asked / 10 {
            self.late_steps.fetch_add(1, Ordering::SeqCst);
        }
        self.done.fetch_add(1, Ordering::SeqCst);
        self.note("step");
        Ok(StepOutcome::Continue)
    }

    fn is_finished(&self) -> bool {
        self.done.load(Ordering::SeqCst) >= self.max_steps
    }

    fn min_step_fraction(&self) -> f64 {
        self.min_fraction
    }

    fn on_created(&mut self, _ctx: &mut Ctx) {
        self.note("created");
    }
    fn on_paused(&mut self, _ctx: &mut Ctx) {
        self.note("paused");
    }
    fn on_resumed(&mut self, _ctx: &mut Ctx) {
        self.note("resumed");
    }
    fn on_finished(&mut self, _ctx: &mut Ctx) {
        self.note("finished");
    }
    fn on_stopped(&mut self, _ctx: &mut Ctx) {
        self.note("stopped");
    }
}

/// Reads the status file of this process in `dir`.
pub fn read_status(dir: &std::path::Path) -> serde_json::Value {
    let p = dir.join(freeride_sidetask::status::status_file_name(
        std::process::id(),
    ));
    serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap()
}

/// Ends the whole test process, naming the test, if the test is still running after `limit`:
/// a pacing bug that holds a task for good shows as a failure, not as a test run that never ends.
pub struct HangGuard(Arc<AtomicBool>);

pub fn hang_guard(test: &'static str, limit: Duration) -> HangGuard {
    let done = Arc::new(AtomicBool::new(false));
    let seen = done.clone();
    std::thread::spawn(move || {
        let t0 = std::time::Instant::now();
        while t0.elapsed() < limit {
            if seen.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("{test}: still running after {limit:?}: a task was held for good; failing");
        std::process::exit(101);
    });
    HangGuard(done)
}

impl Drop for HangGuard {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}
