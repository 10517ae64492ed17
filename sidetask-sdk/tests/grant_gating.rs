//! Steps start only inside an open grant with room for them, using a grant block this test writes
//! itself (the seqlock writer of `freeride_sidetask::grant_writer`), with no GPU.
mod common;
use common::*;
use freeride_abi::now_ns;
use freeride_sidetask::grant_writer::GrantWriter;
use freeride_sidetask::{NoAgent, Runtime};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

const MS: u64 = 1_000_000;

fn sleep_ns(ns: u64) {
    std::thread::sleep(Duration::from_nanos(ns));
}

#[test]
fn steps_run_only_in_grants_that_fit() {
    let _hang = hang_guard("steps_run_only_in_grants_that_fit", Duration::from_secs(60));
    let dir = temp_dir("gate");
    let writer = GrantWriter::create(&dir, freeride_abi::GpuId::unnamed(0)).unwrap();
    let mut cfg = config(&dir, NoAgent::Wait);
    cfg.probe_min_grant_ns = 4 * MS;
    // A step sleeps 1 ms: its learned estimate is >= 1.2 ms.
    let mut task = SleepTask::new(Duration::from_millis(1), 12);
    let done = task.done.clone();
    let starts = task.starts.clone();
    let log = task.log.clone();
    let slept = task.slept_ns.clone();

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

        // Phase 3: a long grant with a budget of about three steps, then enough to finish. The
        // budget is 4 ms, or more where this host overslept so much that the learned estimate
        // (1.2 x a quantile of the steps so far) could exceed it: it must fit at least one step.
        let longest = slept.lock().unwrap().iter().copied().max().unwrap_or(0);
        let budget = (4 * MS).max(longest * 13 / 10);
        let at = now_ns();
        let until = writer.open_for(60 * MS, budget, 0);
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
            budget,
        )
    });

    let s = Runtime::new(cfg).unwrap().run(&mut task).unwrap();
    let (windows, after_probe, learned, after_short, after_budget, budget) = agent.join().unwrap();
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
    // Every step takes >= 1 ms of the budget: at most budget/1 ms of them (+1 if the estimate lags).
    let most = budget / MS + 1;
    assert!(
        (1..=most).contains(&in_budget_grant),
        "a {budget} ns budget fits 1..={most} steps of >= 1 ms, ran {in_budget_grant}"
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
    let writer = GrantWriter::create(&dir, freeride_abi::GpuId::unnamed(1)).unwrap();
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

/// A grant the agent stops refreshing closes at the freshness limit it carries (a stalled agent
/// corrects no prediction), long before its deadline and the reader's own stale limit; it reads
/// open again with the agent's next heartbeat.
#[test]
fn a_grant_reads_closed_once_the_agent_stops_refreshing_it() {
    use freeride_sidetask::grant_writer::GrantFields;
    let dir = temp_dir("fresh");
    let writer = GrantWriter::create(&dir, freeride_abi::GpuId::unnamed(1)).unwrap();
    let mut cfg = config(&dir, NoAgent::Standalone);
    cfg.device = 1;
    let mut p = freeride_sidetask::pacer::Pacer::new(cfg, "iterative").unwrap();
    writer.publish(GrantFields {
        open: true,
        open_until_ns: now_ns() + 2_000 * MS,
        budget_ns: 2_000 * MS,
        fresh_ns: 20 * MS,
        ..GrantFields::default()
    });
    assert!(p.check(MS).is_some());
    std::thread::sleep(Duration::from_millis(40));
    assert!(p.check(MS).is_none(), "ran on a grant nobody refreshed");
    writer.heartbeat();
    assert!(p.check(MS).is_some(), "the next heartbeat opens it again");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An open grant in a block of another layout version (an agent of another release) holds the
/// task, even in standalone mode (which runs freely only when there is no agent at all).
#[test]
fn a_grant_block_of_another_version_holds_even_a_standalone_task() {
    let dir = temp_dir("version");
    let writer = GrantWriter::create(&dir, freeride_abi::GpuId::unnamed(0)).unwrap();
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
    let _hang = hang_guard(
        "grants_for_more_important_tasks_are_closed_to_less_important_ones",
        Duration::from_secs(60),
    );
    use freeride_sidetask::grant_writer::GrantFields;
    let dir = temp_dir("prio");
    let writer = GrantWriter::create(&dir, freeride_abi::GpuId::unnamed(0)).unwrap();
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
                fresh_ns: 0,
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
    let _hang = hang_guard(
        "a_task_that_scales_its_work_takes_part_of_a_step_at_a_grants_end",
        Duration::from_secs(60),
    );
    let dir = temp_dir("partial");
    let writer = GrantWriter::create(&dir, freeride_abi::GpuId::unnamed(0)).unwrap();
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
    // Partial steps end inside their grants like full ones: a few may overrun on a loaded machine,
    // and so may every step whose sleep the host made more than a tenth longer than asked.
    let late = task.late_steps.load(Ordering::SeqCst);
    assert!(
        s.overruns <= 3 + late,
        "{} overruns, {late} steps late by the host",
        s.overruns
    );
}

/// A slow spell inflates the step estimate past every grant the task is then offered; partial
/// steps, scaled to whole ones, bring it down again and full steps resume (before, partial steps
/// taught nothing and full steps never ran again).
#[test]
fn an_estimate_inflated_by_a_slow_spell_comes_down_through_partial_steps() {
    let _hang = hang_guard(
        "an_estimate_inflated_by_a_slow_spell_comes_down_through_partial_steps",
        Duration::from_secs(60),
    );
    let dir = temp_dir("recover");
    let writer = GrantWriter::create(&dir, freeride_abi::GpuId::unnamed(0)).unwrap();
    let mut cfg = config(&dir, NoAgent::Wait);
    cfg.probe_min_grant_ns = 4 * MS;
    cfg.window = 8;
    // 8 or more steps of 12 ms (estimate >= 14.4 ms), then 2 ms ones offered 8 ms grants.
    let mut task = SleepTask::new(Duration::from_millis(2), 48);
    task.slow.store(true, Ordering::SeqCst);
    task.slow_step = Duration::from_millis(12);
    task.min_fraction = 0.25;
    let done = task.done.clone();
    let slow = task.slow.clone();
    let agent = std::thread::spawn(move || {
        let steps = || done.load(Ordering::SeqCst);
        while steps() < 8 {
            writer.open_for(200 * MS, 200 * MS, 0);
            sleep_ns(20 * MS);
        }
        writer.close(0);
        // Every step begun in the grant was slow; the spell ends once the last of them is done.
        sleep_ns(40 * MS);
        let spell = steps();
        slow.store(false, Ordering::SeqCst);
        // At most 10 s: without the fix the task would wait here for good.
        let give_up = now_ns() + 10_000 * MS;
        while steps() < 48 && now_ns() < give_up {
            writer.open_for(8 * MS, 8 * MS, 0);
            sleep_ns(8 * MS);
            writer.close(0);
            sleep_ns(2 * MS);
        }
        if steps() < 48 {
            // Let the runtime finish, so that the test reports what happened.
            writer.open_for(60_000 * MS, 60_000 * MS, 0);
        }
        spell as usize
    });
    let s = Runtime::new(cfg).unwrap().run(&mut task).unwrap();
    let spell = agent.join().unwrap();
    let f = task.fractions.lock().unwrap().clone();
    let after_spell = &f[spell..];
    let first_full = after_spell.iter().position(|&x| x >= 1.0);
    eprintln!(
        "after the spell: {} partial steps before the first full one ({first_full:?}), {} full",
        first_full.unwrap_or(after_spell.len()),
        after_spell.iter().filter(|&&x| x >= 1.0).count()
    );
    assert!(
        after_spell[0] < 1.0,
        "the first step after the slow spell was a whole one, not a part of one that fits: {f:?}"
    );
    // Window 8: the slow samples are gone after 8 partial steps (a few more if the host is slow).
    assert!(
        first_full.is_some_and(|i| i <= 16),
        "full steps did not resume: {f:?}"
    );
    assert_eq!(s.steps, 48);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Learns 2 ms steps in long grants, then a slow spell of three 12 ms steps (one per grant, by
/// budget); returns the steps done by the end of the spell. Window 8: 5 fast and 3 slow samples,
/// so the estimate (1.2 x the highest) is above 8 ms while 1.2 x the median is 2.4 ms.
fn learn_then_slow_spell(writer: &GrantWriter, done: &AtomicU64, slow: &AtomicBool) -> u64 {
    let steps = || done.load(Ordering::SeqCst);
    while steps() < 5 {
        writer.open_for(200 * MS, 200 * MS, 0);
        sleep_ns(MS);
    }
    writer.close(0);
    sleep_ns(10 * MS);
    slow.store(true, Ordering::SeqCst);
    let learned = steps();
    while steps() < learned + 3 {
        // Room for one 12 ms step (estimate <= 14.4 ms) and no second.
        writer.open_for(20 * MS, 15 * MS, 0);
        sleep_ns(20 * MS);
        writer.close(0);
        sleep_ns(2 * MS);
    }
    sleep_ns(20 * MS);
    slow.store(false, Ordering::SeqCst);
    steps()
}

/// A task that cannot scale its work, held out of every grant by an estimate a slow spell
/// inflated: after `relax_after_grants` grants in a row that 1.2 x the median would fit, the
/// estimate comes down a sample at a time and full steps resume (before, the task waited for good).
#[test]
fn a_slow_spell_that_holds_a_task_out_of_every_grant_is_relaxed_away() {
    let _hang = hang_guard(
        "a_slow_spell_that_holds_a_task_out_of_every_grant_is_relaxed_away",
        Duration::from_secs(60),
    );
    let dir = temp_dir("relax");
    let writer = GrantWriter::create(&dir, freeride_abi::GpuId::unnamed(0)).unwrap();
    let mut cfg = config(&dir, NoAgent::Wait);
    cfg.probe_min_grant_ns = 4 * MS;
    cfg.window = 8;
    cfg.relax_after_grants = 4;
    let mut task = SleepTask::new(Duration::from_millis(2), 30);
    task.slow_step = Duration::from_millis(12);
    let (done, slow) = (task.done.clone(), task.slow.clone());
    let agent = std::thread::spawn(move || {
        let spell = learn_then_slow_spell(&writer, &done, &slow);
        let give_up = now_ns() + 10_000 * MS;
        let mut short_grants = 0;
        while done.load(Ordering::SeqCst) < 30 && now_ns() < give_up {
            writer.open_for(8 * MS, 8 * MS, 0);
            short_grants += 1;
            sleep_ns(8 * MS);
            writer.close(0);
            sleep_ns(2 * MS);
        }
        let gave_up = done.load(Ordering::SeqCst) < 30;
        if gave_up {
            writer.open_for(60_000 * MS, 60_000 * MS, 0);
        }
        (spell, short_grants, gave_up)
    });
    let s = Runtime::new(cfg).unwrap().run(&mut task).unwrap();
    let (spell, short_grants, gave_up) = agent.join().unwrap();
    let slept: Vec<u64> = task
        .slept_ns
        .lock()
        .unwrap()
        .iter()
        .map(|n| n / 100_000)
        .collect();
    eprintln!(
        "spell ended at step {spell}; {short_grants} short grants; relaxed {} times; steps slept \
         (0.1 ms) {slept:?}",
        s.estimate_relaxed
    );
    let slow_steps = task.slept_ns.lock().unwrap()[..spell as usize]
        .iter()
        .filter(|&&n| n >= 10 * MS)
        .count();
    assert_eq!(slow_steps, 3, "the spell was three slow steps");
    assert!(!gave_up, "full steps did not resume in 8 ms grants: {s:?}");
    assert!(
        (3..=6).contains(&s.estimate_relaxed),
        "relaxed {} times",
        s.estimate_relaxed
    );
    assert_eq!(s.steps, 30);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Relaxing never goes below 1.2 x the median: a task whose every step is longer than the grants
/// offered stays held out of them.
#[test]
fn a_task_slower_than_every_grant_stays_held() {
    let _hang = hang_guard(
        "a_task_slower_than_every_grant_stays_held",
        Duration::from_secs(60),
    );
    let dir = temp_dir("held");
    let writer = GrantWriter::create(&dir, freeride_abi::GpuId::unnamed(0)).unwrap();
    let mut cfg = config(&dir, NoAgent::Wait);
    cfg.probe_min_grant_ns = 4 * MS;
    cfg.window = 8;
    cfg.relax_after_grants = 4;
    let mut task = SleepTask::new(Duration::from_millis(12), 6);
    let done = task.done.clone();
    let agent = std::thread::spawn(move || {
        while done.load(Ordering::SeqCst) < 5 {
            writer.open_for(200 * MS, 200 * MS, 0);
            sleep_ns(10 * MS);
        }
        writer.close(0);
        sleep_ns(20 * MS);
        let before = done.load(Ordering::SeqCst);
        for _ in 0..40 {
            writer.open_for(8 * MS, 8 * MS, 0);
            sleep_ns(8 * MS);
            writer.close(0);
            sleep_ns(2 * MS);
        }
        let in_short = done.load(Ordering::SeqCst) - before;
        writer.open_for(60_000 * MS, 60_000 * MS, 0);
        in_short
    });
    let s = Runtime::new(cfg).unwrap().run(&mut task).unwrap();
    let in_short = agent.join().unwrap();
    assert_eq!(in_short, 0, "a 12 ms step ran in 8 ms grants");
    assert_eq!(s.estimate_relaxed, 0);
    assert_eq!(s.steps, 6);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The C ABI's partial steps: where a whole step no longer fits the grant (here its GPU-time
/// budget), `frst_step_fraction_fits` offers the share that does, `frst_step_begin_partial` runs
/// it; it counts as a step and in `partial_steps`, and, scaled to a whole step no slower than the
/// estimate, it leaves the estimate as it was.
#[test]
fn the_c_abi_offers_part_of_a_step_where_a_whole_one_no_longer_fits() {
    use freeride_sidetask::ffi::*;
    use std::ffi::{CStr, CString};
    let dir = temp_dir("ffi-partial");
    let writer = GrantWriter::create(&dir, freeride_abi::GpuId::unnamed(0)).unwrap();
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
        // Waiting for part of a step returns at once, with the share that fits.
        let mut g = -1.0;
        assert!(frst_wait_for_step(t, 0.25, 0, &mut g) > 0);
        assert!((0.25..1.0).contains(&g), "wait_for_step offered {g}");
        assert_eq!(frst_wait_for_step(t, 0.0, 0, &mut g), inv as i64);
        assert_eq!(
            frst_wait_for_step(t, 0.25, 0, std::ptr::null_mut()),
            inv as i64
        );
        assert_eq!(frst_step_fraction_fits(t, 0.25, &mut f), 0);
        assert!((0.25..1.0).contains(&f), "offered {f}");
        assert_eq!(
            frst_step_begin_partial(t, f + 0.01),
            inv,
            "more than offered"
        );
        assert_eq!(frst_step_begin_partial(t, f), 0);
        // The share of the estimate it was offered (a loaded host may make it longer, never shorter).
        sleep_ns((f * est as f64) as u64);
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
        assert_eq!(frst_wait_for_step(t, 0.25, 0, &mut g), timeout);
        frst_destroy(t);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A task waiting on a closed grant sleeps until the agent's next publish, which wakes it at
/// once: it does not poll on a timer (every 50-200 µs before: 16 waiting side tasks woke 80 000
/// times a second on the 2-core test bed and took the trainers' CPU).
#[test]
fn a_task_waiting_on_a_closed_grant_sleeps_until_the_next_publish() {
    let _hang = hang_guard(
        "a_task_waiting_on_a_closed_grant_sleeps_until_the_next_publish",
        Duration::from_secs(60),
    );
    let dir = temp_dir("publish");
    let writer = GrantWriter::create(&dir, freeride_abi::GpuId::unnamed(0)).unwrap();
    writer.close(0);
    let mut cfg = config(&dir, NoAgent::Wait);
    cfg.probe_min_grant_ns = MS;
    // No status file: the tests' status interval of 0 would write one at every wake-up, and a
    // write to a disk-backed temporary directory may block (a context switch of its own).
    cfg.write_status = false;
    let mut task = SleepTask::new(Duration::from_millis(1), 1);
    let tid = std::sync::Arc::new(AtomicU64::new(0));
    let runner = {
        let tid = tid.clone();
        std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tid.store(unsafe { libc::gettid() } as u64, Ordering::SeqCst);
            Runtime::new(cfg).unwrap().run(&mut task).unwrap()
        })
    };
    while tid.load(Ordering::SeqCst) == 0 {
        sleep_ns(MS);
    }
    let switches = || {
        let path = format!("/proc/self/task/{}/status", tid.load(Ordering::SeqCst));
        std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .expect("voluntary_ctxt_switches in the thread's status")
    };
    // The task reaches its wait, then 300 ms of a closed grant.
    sleep_ns(50 * MS);
    let before = switches();
    sleep_ns(300 * MS);
    let woke = switches() - before;
    // 60 five-millisecond waits; a loaded machine only makes them fewer. Polling: 1 500.
    assert!(
        woke < 150,
        "the waiting task woke {woke} times in 300 ms of a closed grant"
    );
    // The agent's publish opens it: the task steps.
    writer.open_for(200 * MS, 200 * MS, 0);
    let summary = runner.join().unwrap();
    assert_eq!(summary.steps, 1);
    std::fs::remove_dir_all(&dir).unwrap();
}
