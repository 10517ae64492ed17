//! The imperative runner: role set, life cycle following the grant, final state.
mod common;
use common::*;
use freeride_sidetask::grant_writer::GrantWriter;
use freeride_sidetask::{run_imperative_with_hook, NoAgent, State};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[test]
fn imperative_reports_paused_running_and_finished() {
    let dir = temp_dir("imp");
    let writer = GrantWriter::create(&dir, freeride_abi::GpuId::unnamed(0)).unwrap();
    let mut cfg = config(&dir, NoAgent::Wait);
    cfg.status_interval_ms = 5;
    let seen: Arc<Mutex<Vec<(State, State)>>> = Arc::default();
    let seen2 = seen.clone();
    let s = run_imperative_with_hook(
        cfg,
        move |from, to| seen2.lock().unwrap().push((from, to)),
        |ictx| {
            assert_eq!(std::env::var("FREERIDE_ROLE").unwrap(), "sidetask");
            assert!(!ictx.stop_requested());
            std::thread::sleep(Duration::from_millis(60));
            writer.open_for(10_000_000_000, 10_000_000_000, 0);
            std::thread::sleep(Duration::from_millis(120));
            assert_eq!(read_status(&dir)["state"], "running");
            assert_eq!(read_status(&dir)["mode"], "imperative");
            writer.close(0);
            std::thread::sleep(Duration::from_millis(120));
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(s.state, "finished");
    use State::*;
    assert_eq!(
        *seen.lock().unwrap(),
        [
            (Submitted, Created),
            (Created, Paused),
            (Paused, Running),
            (Running, Paused),
            (Paused, Finished)
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn imperative_error_ends_stopped() {
    let dir = temp_dir("imperr");
    let r =
        freeride_sidetask::run_imperative(
            config(&dir, NoAgent::Standalone),
            |_| Err("boom".into()),
        );
    assert!(r.is_err());
    assert_eq!(read_status(&dir)["state"], "stopped");
    std::fs::remove_dir_all(&dir).unwrap();
}
