//! The imperative interface: free-running side-task code, held at its GPU launches by the
//! interposer's gate (`libfreeride.so` loaded with `FREERIDE_ROLE=sidetask`, e.g. through
//! `freeride run --role sidetask ...`). The SDK does not pace this code; it reports the life
//! cycle (paused while the GPU's grant is closed, running while it is open), handles SIGTERM and
//! writes the status file.
//!
//! The interposer reads `FREERIDE_ROLE` when it loads, so the role must be in the environment when
//! the process starts; [`run_imperative`] sets it for child processes and warns if it was missing.
use crate::config::TaskConfig;
use crate::error::{Result, SdkError};
use crate::lifecycle::State;
use crate::pacer::{Availability, Pacer, Summary};
use crate::runtime::TaskResult;
use crate::stop::StopFlag;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const ROLE_SIDETASK: &str = "sidetask";

/// Handed to imperative code.
pub struct ImperativeCtx {
    stop: StopFlag,
    device: u32,
}

impl ImperativeCtx {
    /// Imperative code should check this now and then and return early (the task ends `stopped`).
    pub fn stop_requested(&self) -> bool {
        self.stop.is_requested()
    }

    pub fn device(&self) -> u32 {
        self.device
    }
}

/// Whether this process was started with `FREERIDE_ROLE=sidetask`; if not, sets it (for child
/// processes) and returns false.
pub fn ensure_sidetask_role() -> bool {
    let ok = std::env::var(freeride_abi::env::ROLE).is_ok_and(|r| r == ROLE_SIDETASK);
    if !ok {
        // Setting the environment is only racy with threads reading it concurrently; this runs at
        // task start, before the task's own threads.
        std::env::set_var(freeride_abi::env::ROLE, ROLE_SIDETASK);
    }
    ok
}

type TransitionHook = Box<dyn FnMut(State, State) + Send>;

struct Shared {
    pacer: Pacer,
    hook: TransitionHook,
}

impl Shared {
    fn go(&mut self, to: State) -> Result<()> {
        let from = self.pacer.transition(to)?;
        (self.hook)(from, to);
        Ok(())
    }
}

/// Runs `f` as an imperative side task (see the module docs).
pub fn run_imperative<F>(cfg: TaskConfig, f: F) -> Result<Summary>
where
    F: FnOnce(&ImperativeCtx) -> TaskResult<()>,
{
    run_imperative_with_hook(cfg, |_, _| {}, f)
}

/// [`run_imperative`] with a hook called at every life-cycle transition `(from, to)`.
pub fn run_imperative_with_hook<H, F>(cfg: TaskConfig, hook: H, f: F) -> Result<Summary>
where
    H: FnMut(State, State) + Send + 'static,
    F: FnOnce(&ImperativeCtx) -> TaskResult<()>,
{
    if !ensure_sidetask_role() {
        eprintln!(
            "freeride-sidetask: FREERIDE_ROLE=sidetask was not set at process start; launches are \
             held by the gate only when the process starts with it and libfreeride.so preloaded \
             (freeride run --role sidetask ...)"
        );
    }
    let interval = Duration::from_millis(cfg.status_interval_ms.max(1));
    let device = cfg.device;
    let pacer = Pacer::new(cfg, "imperative")?;
    let ictx = ImperativeCtx {
        stop: pacer.stop_flag(),
        device,
    };
    let shared = Arc::new(Mutex::new(Shared {
        pacer,
        hook: Box::new(hook),
    }));
    {
        let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
        s.go(State::Created)?;
        s.go(State::Paused)?;
    }
    let done = Arc::new(AtomicBool::new(false));
    let monitor = {
        let (shared, done) = (shared.clone(), done.clone());
        std::thread::Builder::new()
            .name("freeride-sidetask-monitor".into())
            .spawn(move || {
                while !done.load(Ordering::Acquire) {
                    {
                        let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
                        let open = matches!(s.pacer.availability(), Availability::Open(_));
                        let target = if open { State::Running } else { State::Paused };
                        let state = s.pacer.state();
                        if !state.is_final() && state != target {
                            let _ = s.go(target);
                        }
                        s.pacer.write_status(false);
                    }
                    std::thread::sleep(interval);
                }
            })?
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&ictx)));
    done.store(true, Ordering::Release);
    let _ = monitor.join();
    let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
    let (to, err) = match result {
        Ok(Ok(())) if !ictx.stop_requested() => (State::Finished, None),
        Ok(Ok(())) => (State::Stopped, None),
        Ok(Err(e)) => (State::Stopped, Some(SdkError::Task(e.to_string()))),
        Err(_) => (State::Stopped, Some(SdkError::Task("panicked".into()))),
    };
    s.go(to)?;
    match err {
        Some(e) => Err(e),
        None => Ok(s.pacer.summary()),
    }
}
