//! The runtime's life cycle, hooks, stop handling, memory budget and status file (no GPU needed).
mod common;
use common::*;
use freeride_sidetask::{NoAgent, Runtime, SdkError, State};
use std::time::Duration;

#[test]
fn standalone_runs_to_finished_with_hooks_in_order() {
    let dir = temp_dir("life");
    let mut task = SleepTask::new(Duration::from_micros(200), 3);
    let mut rt = Runtime::new(config(&dir, NoAgent::Standalone)).unwrap();
    let s = rt.run(&mut task).unwrap();
    assert_eq!(s.state, "finished");
    assert_eq!(s.steps, 3);
    assert_eq!(
        task.log(),
        ["init", "created", "paused", "resumed", "step", "step", "step", "finished"]
    );
    let st = read_status(&dir);
    assert_eq!(st["state"], "finished");
    assert_eq!(st["steps"], 3);
    assert_eq!(st["mode"], "iterative");
    assert!(st["step_estimate_ns"].as_u64().unwrap() >= 200_000);
    assert_eq!(rt.pacer().state(), State::Finished);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn no_agent_waits_and_stop_flag_stops_cleanly() {
    let dir = temp_dir("wait");
    let mut task = SleepTask::new(Duration::from_micros(100), 1_000);
    let mut rt = Runtime::new(config(&dir, NoAgent::Wait)).unwrap();
    let stop = rt.stop_flag();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        stop.request();
    });
    let s = rt.run(&mut task).unwrap();
    t.join().unwrap();
    assert_eq!(s.state, "stopped");
    assert_eq!(s.steps, 0, "no step may run without an agent in wait mode");
    assert_eq!(task.log(), ["init", "created", "paused", "stopped"]);
    assert_eq!(read_status(&dir)["state"], "stopped");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn stop_while_running_ends_after_current_step() {
    let dir = temp_dir("stoprun");
    let mut task = SleepTask::new(Duration::from_millis(1), u64::MAX);
    let mut rt = Runtime::new(config(&dir, NoAgent::Standalone)).unwrap();
    let stop = rt.stop_flag();
    let done = task.done.clone();
    let t = std::thread::spawn(move || {
        while done.load(std::sync::atomic::Ordering::SeqCst) < 3 {
            std::thread::sleep(Duration::from_micros(200));
        }
        stop.request();
    });
    let s = rt.run(&mut task).unwrap();
    t.join().unwrap();
    assert_eq!(s.state, "stopped");
    assert!(s.steps >= 3);
    let log = task.log();
    assert_eq!(&log[..4], ["init", "created", "paused", "resumed"]);
    assert_eq!(log.last().unwrap(), "stopped");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn init_and_step_errors_stop_the_task() {
    let dir = temp_dir("err");
    let mut task = SleepTask::new(Duration::ZERO, 5);
    task.fail_init = true;
    let mut rt = Runtime::new(config(&dir, NoAgent::Standalone)).unwrap();
    match rt.run(&mut task) {
        Err(SdkError::Task(m)) => assert!(m.contains("init"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(task.log(), ["init", "stopped"]);

    let mut task = SleepTask::new(Duration::ZERO, 5);
    task.fail_at_step = Some(2);
    let mut rt = Runtime::new(config(&dir, NoAgent::Standalone)).unwrap();
    assert!(matches!(rt.run(&mut task), Err(SdkError::Task(_))));
    assert_eq!(rt.pacer().state(), State::Stopped);
    assert_eq!(task.log().last().unwrap(), "stopped");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Allocation over the configured cap fails cleanly, before any GPU is touched.
#[test]
fn memory_over_cap_is_a_clean_error() {
    struct AllocTask(Option<SdkError>);
    impl freeride_sidetask::SideTask for AllocTask {
        fn init(&mut self, ctx: &mut freeride_sidetask::Ctx) -> freeride_sidetask::TaskResult<()> {
            self.0 = ctx.alloc(2 << 20).err();
            assert_eq!(ctx.mem_held(), 0);
            assert_eq!(ctx.mem_limit(), 1 << 20);
            Ok(())
        }
        fn step(
            &mut self,
            _ctx: &mut freeride_sidetask::Ctx,
        ) -> freeride_sidetask::TaskResult<freeride_sidetask::StepOutcome> {
            Ok(freeride_sidetask::StepOutcome::Finished)
        }
        fn is_finished(&self) -> bool {
            false
        }
    }
    let dir = temp_dir("mem");
    let mut cfg = config(&dir, NoAgent::Standalone);
    cfg.mem_cap_bytes = Some(1 << 20);
    let mut task = AllocTask(None);
    let s = Runtime::new(cfg).unwrap().run(&mut task).unwrap();
    assert_eq!(s.state, "finished");
    match task.0 {
        Some(SdkError::OverBudget {
            requested,
            held: 0,
            limit,
        }) => {
            assert_eq!(requested, 2 << 20);
            assert_eq!(limit, 1 << 20);
        }
        other => panic!("expected OverBudget, got {other:?}"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
