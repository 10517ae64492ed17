//! SIGTERM stops a running task cleanly (its own test binary: the signal flag is process-wide).
mod common;
use common::*;
use freeride_sidetask::{NoAgent, Runtime};
use std::time::Duration;

#[test]
fn sigterm_stops_cleanly_after_the_current_step() {
    let dir = temp_dir("sigterm");
    let mut cfg = config(&dir, NoAgent::Standalone);
    cfg.handle_sigterm = true;
    let mut task = SleepTask::new(Duration::from_millis(1), u64::MAX);
    let done = task.done.clone();
    let mut rt = Runtime::new(cfg).unwrap();
    let t = std::thread::spawn(move || {
        while done.load(std::sync::atomic::Ordering::SeqCst) < 2 {
            std::thread::sleep(Duration::from_micros(200));
        }
        // SAFETY: sends SIGTERM to this process, whose handler (installed by Runtime::new) only
        // sets a flag.
        unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    });
    let s = rt.run(&mut task).unwrap();
    t.join().unwrap();
    assert_eq!(s.state, "stopped");
    assert!(s.steps >= 2);
    assert_eq!(task.log().last().unwrap(), "stopped");
    assert_eq!(read_status(&dir)["state"], "stopped");
    std::fs::remove_dir_all(&dir).unwrap();
}
