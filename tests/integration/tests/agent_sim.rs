//! The agent's bubble inference end to end: `freeride sim` runs pipesim under libfreeride.so with the
//! agent and scores the agent's bubbles against the simulated GPU's ground truth.
//!
//! Bounds: the project's targets are precision and recall >= 0.95 for the inferred bubbles
//! (scripts/bench-inference measures the whole matrix: 0.99-1.00 / 0.94-1.00). CI runs on a busy
//! 2-core machine beside other tests, where the simulated GPU's cross-stream hops get slower (the
//! few µs before a communication op begins on the GPU are idle time the agent cannot see), so here
//! precision must be >= 0.95 and recall >= 0.90: a detector that opened bubbles at the wrong ops,
//! missed the receive waits, ended them at the op's end while the host still slept, or kept them
//! open past the next compute falls far below either. The live view (when the agent learnt of each
//! edge) must keep precision >= 0.85: a scheduler acting on it is mostly right.
use freeride_tests::built;
use serde_json::Value;
use std::process::Command;
use std::sync::Mutex;

/// One pipeline at a time: the 2-core machine is shared.
static SERIAL: Mutex<()> = Mutex::new(());

/// A run of `freeride sim`. One during which the hypervisor took more than
/// [`freeride_tests::STEAL_LIMIT`] of the machine's CPU is run again after a pause that lets a
/// slow spell pass (up to [`freeride_tests::MAX_STOLEN_RUNS`] such runs; then the next one counts
/// whatever it says): the agent's timing is what these tests judge, and a host in a slow spell
/// starves the simulated GPUs of CPU. Which run counts never depends on its figures.
fn sim(args: &[&str]) -> Value {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for n in 1..=freeride_tests::MAX_STOLEN_RUNS {
        let (r, steal) = freeride_tests::stolen_during(|| sim_once(args));
        if steal <= freeride_tests::STEAL_LIMIT {
            return r;
        }
        eprintln!(
            "freeride sim {args:?}: the hypervisor took {:.0} % of the CPU; running it again",
            100.0 * steal
        );
        std::thread::sleep(freeride_tests::stolen_pause(n));
    }
    sim_once(args)
}

fn sim_once(args: &[&str]) -> Value {
    let out = Command::new(built("freeride"))
        .arg("sim")
        .args(args)
        .arg("--json")
        .output()
        .expect("run freeride sim");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "freeride sim {args:?} failed: {stderr}"
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn check_inference(args: &[&str]) {
    let r = sim(args);
    let inf = &r["inference"];
    let (p, rc) = (
        inf["precision"].as_f64().unwrap(),
        inf["recall"].as_f64().unwrap(),
    );
    assert!(p >= 0.95, "precision {p} < 0.95 for {args:?}: {r}");
    assert!(rc >= 0.90, "recall {rc} < 0.90 for {args:?}: {r}");
    let lp = inf["live_precision"].as_f64().unwrap();
    assert!(lp >= 0.85, "live precision {lp} < 0.85 for {args:?}: {r}");
    assert!(inf["bubbles"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(r["agent"]["dropped"].as_u64(), Some(0), "{r}");
    // The stages' communicators were seen made (`comm_init`) and their ops matched across
    // processes: every op has partners on this one node, and their begins complete the keys.
    let m = &r["agent"]["matched"];
    assert!(m["ops"].as_u64().unwrap() > 0, "no op matched: {r}");
    assert!(
        m["completed"].as_u64().unwrap() > 0,
        "no key completed: {r}"
    );
    for k in ["schedule", "stages", "microbatches", "truth", "inference"] {
        assert!(!r[k].is_null(), "report lacks {k}: {r}");
    }
    // Exactly the fields the README documents (`freeride sim --json`).
    let mut keys: Vec<&str> = inf
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    keys.sort_unstable();
    let mut documented = vec![
        "precision",
        "recall",
        "forecast_precision",
        "forecast_recall",
        "live_precision",
        "live_recall",
        "detect_latency_us_p50",
        "detect_latency_us_p99",
        "missed_idle_intervals",
        "predicted_end_error_us_p50",
        "predicted_end_error_us_p99",
        "bubbles",
    ];
    documented.sort_unstable();
    assert_eq!(keys, documented, "inference fields");
    let bf = r["truth"]["bubble_fraction"].as_f64().unwrap();
    assert!(bf > 0.0 && bf < 1.0, "{r}");
    // The grants the agent published, scored against the truth, overall and per GPU.
    let g = &r["grants"];
    let share = g["over_busy_share"].as_f64().unwrap();
    assert!(
        (0.0..=1.0).contains(&share) && g["granted_ms"].is_f64(),
        "{r}"
    );
    for gpu in r["per_gpu"].as_array().unwrap() {
        assert!(gpu["grants"]["over_busy_share"].is_f64(), "{r}");
    }
    // Where the idle time went: the parts add up to all of it, and what was granted of it is
    // no more than what was granted.
    let c = &g["coverage"];
    let parts = [
        "granted",
        "before_first_grant",
        "after_last_grant",
        "between_grants",
        "ungranted_under_1ms",
        "ungranted",
    ];
    let sum: f64 = parts.iter().map(|k| c[*k].as_f64().unwrap()).sum();
    assert!(
        (sum - 1.0).abs() < 0.001,
        "coverage parts sum to {sum}: {r}"
    );
    // What was not granted, by why the grant was held closed: the reasons cover the rest, and
    // (the agent steps every few hundred µs at most) name nearly all of it.
    let held = c["held"].as_object().unwrap();
    let mut names: Vec<&str> = held.keys().map(String::as_str).collect();
    names.sort_unstable();
    let mut documented = [
        "not_in_bubble",
        "transfer_first",
        "no_prediction",
        "low_confidence",
        "guard_before_predicted_end",
        "guard_before_shortest_recent_end",
        "guard_before_transfer",
        "ends_late",
        "not_noted",
    ];
    documented.sort_unstable();
    assert_eq!(names, documented, "held reasons");
    let held_sum: f64 = held.values().map(|v| v.as_f64().unwrap()).sum();
    let not_granted = 1.0 - c["granted"].as_f64().unwrap();
    assert!(
        (held_sum - not_granted).abs() < 0.001,
        "held parts sum to {held_sum}, not {not_granted}: {r}"
    );
    assert!(
        held["not_noted"].as_f64().unwrap() <= 0.5 * not_granted.max(0.01),
        "most of what was not granted has no reason: {r}"
    );
    let idle_ms = c["idle_ms"].as_f64().unwrap();
    let granted_idle_ms = c["granted"].as_f64().unwrap() * idle_ms;
    assert!(
        idle_ms > 0.0 && granted_idle_ms <= g["granted_ms"].as_f64().unwrap() + 0.5,
        "{r}"
    );
}

/// Grants on the trainers' busy time: the project's target is at most 1 % of granted time
/// (scripts/bench-jobs); here, on a loaded 2-core machine where the agent sees a launch later,
/// at most 5 %. (Grants that outlast their bubble by the trainer's reaction time, the prior
/// approach's pause/resume `--sidetask-mode prior`, score 0.7 % here: what this catches is grants
/// sized past the bubble's end or opened inside transfers and compute.)
fn check_grants(args: &[&str]) {
    let r = sim(args);
    let g = &r["grants"];
    assert!(g["granted_ms"].as_f64().unwrap() > 0.0, "no grant: {r}");
    let share = g["over_busy_share"].as_f64().unwrap();
    assert!(share <= 0.05, "grants over busy time {share} > 0.05: {r}");
}

#[test]
fn grants_stay_off_the_trainers_busy_time() {
    check_grants(&[
        "--schedule",
        "1f1b",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--iterations",
        "4",
    ]);
}

#[test]
fn one_f_one_b_batched() {
    check_inference(&[
        "--schedule",
        "1f1b",
        "--stages",
        "4",
        "--microbatches",
        "4",
        "--iterations",
        "4",
    ]);
}

#[test]
fn gpipe_blocking_with_send_latency() {
    check_inference(&[
        "--schedule",
        "gpipe",
        "--stages",
        "2",
        "--microbatches",
        "4",
        "--style",
        "blocking",
        "--comm",
        "2",
        "--iterations",
        "4",
    ]);
}

#[test]
fn interleaved_batched() {
    check_inference(&[
        "--schedule",
        "interleaved",
        "--stages",
        "2",
        "--microbatches",
        "4",
        "--chunks",
        "2",
        "--f",
        "20",
        "--b",
        "20",
        "--w",
        "20",
        "--iterations",
        "4",
    ]);
}

#[test]
fn zero_bubble_blocking() {
    check_inference(&[
        "--schedule",
        "zbh1",
        "--stages",
        "4",
        "--microbatches",
        "4",
        "--style",
        "blocking",
        "--iterations",
        "4",
    ]);
}

/// `schedule` over 2 stages and 8 micro-batches, batched send/receive groups, sends of 2 ms (20 MB,
/// larger than NCCL's buffer), 4 iterations.
fn two_stages_batched_with_2ms_sends(schedule: &str) -> [&str; 12] {
    [
        "--schedule",
        schedule,
        "--stages",
        "2",
        "--microbatches",
        "8",
        "--style",
        "batched",
        "--comm",
        "2",
        "--iterations",
        "4",
    ]
}

/// A send/receive group with a send larger than NCCL's buffer has its data's movements placed as
/// transfers of their own; its partners' begins no longer hold it as transferring until it ends
/// (ZB-H1 with batched groups and 2 ms sends: the bubbles inside such groups, about half of the
/// idle time, were never granted: 0.44-0.48 of the idle time granted before, 0.77-0.80 with it).
#[test]
fn a_large_send_in_a_group_holds_grants_only_while_its_data_moves() {
    let r = sim(&two_stages_batched_with_2ms_sends("zbh1"));
    let g = &r["grants"];
    let granted = g["coverage"]["granted"].as_f64().unwrap();
    let over = g["over_busy_share"].as_f64().unwrap();
    assert!(granted >= 0.65, "idle time granted {granted}: {r}");
    assert!(over <= 0.01, "grants over busy time {over}: {r}");
}

/// GPipe with batched groups and 2 ms sends: a second bubble opens where a wait's bubble opened
/// (the same op, the same part, no op issued between). Learnt at the same position, its length
/// replaced the wait's, and the next wait was forecast from it: forecast recall 0.53 until
/// 2026-12-07, 0.98-0.99 since (the second bubble is learnt apart, `REPEAT` in
/// `agent/src/inference/pattern.rs`).
#[test]
fn a_bubble_that_opens_again_where_one_ended_is_learnt_apart() {
    let r = sim(&two_stages_batched_with_2ms_sends("gpipe"));
    let inf = &r["inference"];
    for k in ["precision", "recall"] {
        let x = inf[k].as_f64().unwrap();
        assert!(x >= 0.95, "{k} {x} < 0.95: {r}");
    }
    let fr = inf["forecast_recall"].as_f64().unwrap();
    assert!(fr >= 0.85, "forecast recall {fr} < 0.85: {r}");
    let share = r["grants"]["over_busy_share"].as_f64().unwrap();
    assert!(share <= 0.05, "grants over busy time {share} > 0.05: {r}");
}

/// A job that changes its micro-batch count mid-run: predictions are right again within 3 iterations
/// (scored up to the job's last iteration, see `freeride sim`'s `change`). Kernels of 20 ms: the
/// host stalls of a millisecond or more that a loaded 2-core machine has now and then stay within
/// the 10 % a prediction may be off (with 10 ms kernels one such stall failed about one run in ten).
/// Stalls of 2-8 ms still come (a CPU-starved process of the test bed wakes late, and the bubble
/// that makes, or that it passes down the pipeline, is one no pattern predicts): about one run in
/// twenty has them in two of its iterations after the change, so the job runs a second time
/// before the test fails. A defect that breaks relearning fails both runs (the build before
/// 2026-12-03's fix of the forecast across an op that moved nothing failed 6 runs of 8).
#[test]
fn a_changed_job_is_relearnt_within_three_iterations() {
    let args = [
        "--schedule",
        "1f1b",
        "--stages",
        "2",
        "--microbatches",
        "8",
        "--f",
        "20",
        "--b",
        "20",
        "--iterations",
        "8",
        "--change-at",
        "3",
        "--then-microbatches",
        "4",
    ];
    let relearnt = |r: &Value| -> Result<(), String> {
        let c = &r["change"];
        let n = c["relearned_in_iterations"]
            .as_u64()
            .ok_or_else(|| format!("never relearnt: {r}"))?;
        if n > 3 {
            return Err(format!("relearnt only after {n} iterations: {r}"));
        }
        // Against the job's own steady state before the change (all right on this clean job), no
        // later than against the fixed bar.
        let before = c["right_predictions_before_change"].as_f64().unwrap_or(0.0);
        if !(before > 0.0 && before <= 1.0) {
            return Err(format!("no steady state before the change: {r}"));
        }
        match c["relearned_to_steady_state_in_iterations"].as_u64() {
            Some(steady) if steady <= n => Ok(()),
            _ => Err(format!("not back to its steady state by then: {r}")),
        }
    };
    let first = sim(&args);
    if let Err(e) = relearnt(&first) {
        eprintln!("first run: {e}; running it again");
        let second = sim(&args);
        if let Err(e2) = relearnt(&second) {
            panic!("twice: first run: {e}\nsecond run: {e2}");
        }
    }
}

#[test]
fn bad_flags_are_refused_before_anything_starts() {
    let out = Command::new(built("freeride"))
        .args([
            "sim",
            "--schedule",
            "interleaved",
            "--stages",
            "4",
            "--microbatches",
            "3",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("multiple of --stages"), "{e}");
    let out = Command::new(built("freeride"))
        .args(["sim", "--bogus"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Per-rank `CUDA_VISIBLE_DEVICES` over two nodes (every rank's GPU is its device 0): the agent puts
/// each rank on its physical GPU (the truth's bus id), and grants open there. An agent that keyed
/// GPUs by device ordinal would put every rank of a node on one GPU.
#[test]
fn per_rank_visible_devices_over_two_nodes_keep_every_gpu_apart() {
    let r = sim(&[
        "--schedule",
        "1f1b",
        "--stages",
        "4",
        "--microbatches",
        "4",
        "--visible-devices",
        "per-rank",
        "--nodes",
        "2",
        "--iterations",
        "4",
    ]);
    let gpus = r["per_gpu"].as_array().unwrap();
    assert_eq!(gpus.len(), 4, "{r}");
    let mut seen = std::collections::BTreeSet::new();
    for g in gpus {
        assert_eq!(g["agent_gpu"], g["bus_id"], "rank on the wrong GPU: {r}");
        assert!(
            seen.insert(g["bus_id"].as_str().unwrap().to_string()),
            "{r}"
        );
        assert!(
            g["grants"]["granted_ms"].as_f64().unwrap() > 0.0,
            "no grant on {}: {r}",
            g["bus_id"]
        );
    }
}
