//! Steps start only inside an open grant with room for them, using a grant block this test writes
//! itself (the seqlock writer of `freeride_sidetask::grant_writer`), with no GPU.
mod common;
use common::*;
use freeride_abi::now_ns;
use freeride_sidetask::grant_writer::GrantWriter;
use freeride_sidetask::{NoAgent, Runtime};
use std::sync::atomic::Ordering;
use std::time::Duration;

const MS: u64 = 1_000_000;

fn sleep_ns(ns: u64) {
    std::thread::sleep(Duration::from_nanos(ns));
}

#[test]
fn steps_run_only_in_grants_that_fit() {
    let dir = temp_dir("gate");
    let writer = GrantWriter::create(&dir, 0).unwrap();
    let mut cfg = config(&dir, NoAgent::Wait);
    cfg.probe_min_grant_ns = 4 * MS;
    // A step sleeps 1 ms: its learned estimate is >= 1.2 ms.
    let mut task = SleepTask::new(Duration::from_millis(1), 12);
    let done = task.done.clone();
    let starts = task.starts.clone();
    let log = task.log.clone();

    let agent = std::thread::spawn(move || {
        // (open_at, until) of every grant that could fit a step.
        let mut windows: Vec<(u64, u64)> = vec![];
        let steps = || done.load(Ordering::SeqCst);

        // Phase 0: grants shorter than the probe minimum: no probe step may start.
        for _ in 0..20 {
            writer.open_for(2 * MS, 2 * MS, 0);
            sleep_ns(2 * MS);
            writer.close(0);
            sleep_ns(MS);
        }
        let after_probe_phase = steps();

        // Phase 1: learn, in 10 ms grants.
        while steps() < 5 {
            let at = now_ns();
            let until = writer.open_for(10 * MS, 10 * MS, 0);
            windows.push((at, until));
            sleep_ns(10 * MS);
            writer.close(0);
            sleep_ns(3 * MS);
        }
        sleep_ns(5 * MS);
        let learned = steps();

        // Phase 2: open but too short for the learned step, then long but with too little budget.
        for _ in 0..30 {
            writer.open_for(MS / 2, MS / 2, 0);
            sleep_ns(MS / 2);
            writer.close(0);
            sleep_ns(MS / 2);
        }
        writer.open_for(40 * MS, MS / 2, 0);
        sleep_ns(40 * MS);
        writer.close(0);
        let after_short = steps();

        // Phase 3: a long grant with a budget of about three steps, then enough to finish.
        let at = now_ns();
        let until = writer.open_for(60 * MS, 4 * MS, 0);
        windows.push((at, until));
        sleep_ns(60 * MS);
        writer.close(0);
        let after_budget = steps();
        while steps() < 12 {
            let at = now_ns();
            let until = writer.open_for(20 * MS, 20 * MS, 0);
            windows.push((at, until));
            sleep_ns(20 * MS);
        }
        (
            windows,
            after_probe_phase,
            learned,
            after_short,
            after_budget,
        )
    });

    let s = Runtime::new(cfg).unwrap().run(&mut task).unwrap();
    let (windows, after_probe, learned, after_short, after_budget) = agent.join().unwrap();
    assert_eq!(s.state, "finished");
    assert_eq!(s.steps, 12);
    assert_eq!(
        after_probe, 0,
        "a probe step started in a grant below probe_min_grant_ns"
    );
    assert_eq!(
        after_short, learned,
        "steps started in grants shorter than (or with less budget than) the learned duration"
    );
    let in_budget_grant = after_budget - after_short;
    assert!(
        (1..=4).contains(&in_budget_grant),
        "a 4 ms budget fits 1..=3 steps of >= 1 ms (+1 if the estimate lags), ran {in_budget_grant}"
    );
    for t in starts.lock().unwrap().iter() {
        assert!(
            windows.iter().any(|(a, u)| a <= t && t < u),
            "a step started at {t}, outside every open grant"
        );
    }
    let log = log.lock().unwrap().clone();
    assert_eq!(&log[..3], ["init", "created", "paused"]);
    assert!(
        log.iter().filter(|l| *l == "paused").count() >= 3,
        "{log:?}"
    );
    assert_eq!(
        log.iter().filter(|l| *l == "paused").count(),
        log.iter().filter(|l| *l == "resumed").count(),
        "{log:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn stale_heartbeat_or_dead_block_reads_closed() {
    let dir = temp_dir("stale");
    let writer = GrantWriter::create(&dir, 1).unwrap();
    let mut cfg = config(&dir, NoAgent::Standalone);
    cfg.device = 1;
    cfg.heartbeat_stale_ms = 20;
    let mut p = freeride_sidetask::pacer::Pacer::new(cfg, "iterative").unwrap();
    writer.open_for(500 * MS, 500 * MS, 0);
    assert!(p.check(MS).is_some());
    // The agent stops touching the block: closed once the heartbeat is stale, though "open".
    std::thread::sleep(Duration::from_millis(40));
    assert!(p.check(MS).is_none());
    // An invalid block is "no agent": standalone mode runs freely.
    writer.invalidate();
    let w = p.check(MS).expect("standalone without a valid block");
    assert!(w.standalone);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An open grant in a block of another layout version (an agent of another release) holds the
/// task, even in standalone mode (which runs freely only when there is no agent at all).
#[test]
fn a_grant_block_of_another_version_holds_even_a_standalone_task() {
    let dir = temp_dir("version");
    let writer = GrantWriter::create(&dir, 0).unwrap();
    let mut p =
        freeride_sidetask::pacer::Pacer::new(config(&dir, NoAgent::Standalone), "iterative")
            .unwrap();
    writer.open_for(500 * MS, 500 * MS, 0);
    assert!(p.check(MS).is_some(), "this release's open grant runs");
    freeride_abi::grant_shm::GrantMap::open(writer.path(), true)
        .unwrap()
        .block()
        .version
        .store(
            freeride_abi::grant::GRANT_LAYOUT_VERSION + 1,
            Ordering::Release,
        );
    writer.open_for(500 * MS, 500 * MS, 0);
    assert!(
        p.check(MS).is_none(),
        "ran under a block of another version"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A grant given to more important tasks (its `min_priority` above ours) is closed to us; the same
/// grant for our priority runs steps.
#[test]
fn grants_for_more_important_tasks_are_closed_to_less_important_ones() {
    use freeride_sidetask::grant_writer::GrantFields;
    let dir = temp_dir("prio");
    let writer = GrantWriter::create(&dir, 0).unwrap();
    let mut cfg = config(&dir, NoAgent::Wait);
    cfg.priority = 2;
    cfg.probe_min_grant_ns = MS;
    let mut task = SleepTask::new(Duration::from_millis(1), 3);
    let done = task.done.clone();
    let agent = std::thread::spawn(move || {
        let publish = |min_priority: u64| {
            let until = now_ns() + 20 * MS;
            writer.publish(GrantFields {
                open: true,
                open_until_ns: until,
                budget_ns: 20 * MS,
                mem_budget_bytes: 0,
                min_priority,
                side_mem_held_bytes: 0,
            });
        };
        // 200 ms of grants for priority >= 5: a priority-2 task must not step.
        for _ in 0..10 {
            publish(5);
            sleep_ns(20 * MS);
        }
        let steps_while_reserved = done.load(Ordering::SeqCst);
        // Then grants for everyone of priority >= 2.
        while done.load(Ordering::SeqCst) < 3 {
            publish(2);
            sleep_ns(20 * MS);
        }
        writer.close(0);
        steps_while_reserved
    });
    let summary = Runtime::new(cfg).unwrap().run(&mut task).unwrap();
    let steps_while_reserved = agent.join().unwrap();
    assert_eq!(
        steps_while_reserved, 0,
        "a priority-2 task stepped in grants for priority >= 5"
    );
    assert_eq!(summary.steps, 3);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_task_that_scales_its_work_takes_part_of_a_step_at_a_grants_end() {
    let dir = temp_dir("partial");
    let writer = GrantWriter::create(&dir, 0).unwrap();
    let mut cfg = config(&dir, NoAgent::Wait);
    cfg.probe_min_grant_ns = 4 * MS;
    // Steps of 2 ms (estimate about 2.4 ms); grants of 7 ms: two full steps, then about half a
    // step's room.
    let mut task = SleepTask::new(Duration::from_millis(2), 30);
    task.min_fraction = 0.25;
    let done = task.done.clone();
    let fractions = task.fractions.clone();
    let agent = std::thread::spawn(move || {
        let mut windows = vec![];
        while done.load(Ordering::SeqCst) < 30 {
            let at = now_ns();
            let until = writer.open_for(7 * MS, 7 * MS, 0);
            windows.push((at, until));
            sleep_ns(7 * MS);
            writer.close(0);
            sleep_ns(3 * MS);
        }
        windows
    });
    let mut rt = Runtime::new(cfg).unwrap();
    let s = rt.run(&mut task).unwrap();
    let windows = agent.join().unwrap();
    let f = fractions.lock().unwrap().clone();
    let partial: Vec<f64> = f.iter().copied().filter(|&x| x < 1.0).collect();
    eprintln!(
        "{} steps, partial {partial:?}, overruns {}",
        f.len(),
        s.overruns
    );
    assert!(
        !partial.is_empty(),
        "no partial step in {} grants",
        windows.len()
    );
    assert!(
        partial.iter().all(|&x| (0.25..1.0).contains(&x)),
        "{partial:?}"
    );
    // Partial steps end inside their grants like full ones (a loaded machine may overrun a few).
    assert!(s.overruns <= 3, "{} overruns", s.overruns);
}

/// The C ABI's partial steps: where a whole step no longer fits the grant (here its GPU-time
/// budget), `frst_step_fraction_fits` offers the share that does, `frst_step_begin_partial` runs
/// it; it counts as a step and in `partial_steps`, and the step estimate does not learn from it.
#[test]
fn the_c_abi_offers_part_of_a_step_where_a_whole_one_no_longer_fits() {
    use freeride_sidetask::ffi::*;
    use std::ffi::{CStr, CString};
    let dir = temp_dir("ffi-partial");
    let writer = GrantWriter::create(&dir, 0).unwrap();
    let cfg = CString::new(format!(
        "{{\"name\":\"ffi-partial\",\"session_dir\":\"{}\",\"no_agent\":\"wait\",\
         \"probe_min_grant_ns\":4000000,\"handle_sigterm\":false,\"status_interval_ms\":0,\
         \"cpu_nice\":0}}",
        dir.display()
    ))
    .unwrap();
    let (inv, state, timeout) = (
        FRST_ERR_INVALID as i32,
        FRST_ERR_STATE as i32,
        FRST_ERR_TIMEOUT,
    );
    // SAFETY: the C contract: a handle from frst_create until frst_destroy, valid pointers.
    unsafe {
        let t = frst_create(cfg.as_ptr());
        assert!(!t.is_null());
        assert_eq!(frst_set_state(t, 1), 0);
        let mut f = -1.0;
        assert_eq!(frst_step_fraction_fits(t, 0.0, &mut f), inv);
        assert_eq!(frst_step_fraction_fits(t, 0.25, std::ptr::null_mut()), inv);
        // No grant open: nothing fits, nothing is offered.
        writer.close(0);
        assert_eq!(frst_step_fraction_fits(t, 0.25, &mut f), 0);
        assert_eq!(f, 0.0);
        assert_eq!(frst_step_begin_partial(t, 0.5), state);
        // Learn 2 ms steps in a long grant.
        writer.open_for(60_000 * MS, 60_000 * MS, 0);
        for _ in 0..5 {
            assert!(frst_wait_for_grant(t, 0, 5_000_000_000) > 0);
            assert_eq!(frst_step_begin(t), 0);
            sleep_ns(2 * MS);
            assert!(frst_step_end(t) >= 2 * MS as i64);
        }
        let est = frst_step_estimate_ns(t);
        assert!(est >= 2 * MS as i64, "estimate {est}");
        assert_eq!(frst_step_fraction_fits(t, 0.25, &mut f), 0);
        assert_eq!(f, 1.0, "a whole step fits the long grant");
        // A new grant, long, with GPU-time budget for about half a step.
        writer.open_for(60_000 * MS, est as u64 / 2, 0);
        assert_eq!(frst_wait_for_grant(t, 0, 0), timeout);
        assert_eq!(frst_step_fraction_fits(t, 0.25, &mut f), 0);
        assert!((0.25..1.0).contains(&f), "offered {f}");
        assert_eq!(
            frst_step_begin_partial(t, f + 0.01),
            inv,
            "more than offered"
        );
        assert_eq!(frst_step_begin_partial(t, f), 0);
        sleep_ns((f * 2.0 * MS as f64) as u64);
        assert!(frst_step_end(t) > 0);
        assert_eq!(
            frst_step_begin_partial(t, f),
            state,
            "an offer is good for one step"
        );
        assert_eq!(frst_steps(t), 6);
        assert_eq!(
            frst_step_estimate_ns(t),
            est,
            "the partial step taught the estimate"
        );
        let js = CStr::from_ptr(frst_summary_json(t, std::ptr::null()))
            .to_str()
            .unwrap()
            .to_string();
        let v: serde_json::Value = serde_json::from_str(&js).unwrap();
        assert_eq!(v["partial_steps"], 1, "{js}");
        // Its GPU time went against the budget: not even a quarter step is left.
        assert_eq!(frst_step_fraction_fits(t, 0.25, &mut f), 0);
        assert!(f < 0.25, "offered {f} after the partial step");
        frst_destroy(t);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
