//! `freeride sim`: pipesim under freeride with the agent, scored against the ground truth.
use clap::Args;
use freeride_agent::grants::Held;
use freeride_agent::inference::score::GrantTally;
use freeride_sim::sim::{self, p50_p99};
use freeride_sim::sim_report;
use pipesim::cli::JobArgs;
use pipesim::procs::interrupt;
use serde_json::json;

#[derive(Args, Debug)]
pub struct SimArgs {
    #[command(flatten)]
    job: JobArgs,
    /// Print one JSON report on stdout (otherwise a short summary).
    #[arg(long)]
    json: bool,
    /// Side-task processes per GPU (0: none). With side tasks the job also runs once alone first,
    /// in the same invocation, for the baseline iteration time.
    #[arg(long, default_value_t = 0)]
    sidetasks: u32,
    /// Which SDK example runs as the side task.
    #[arg(long, default_value = "train_loop", value_parser = ["train_loop", "pagerank", "image_batch"])]
    sidetask_kind: String,
    /// How side tasks share the GPUs: gated (freeride), naive (ungated co-location), prior (the
    /// prior approach: pause/resume at bubble edges with no time check).
    #[arg(long, default_value = "gated", value_parser = ["gated", "naive", "prior"])]
    sidetask_mode: String,
    /// An extra argument for every side-task process (repeat it), e.g. --sidetask-arg=--batch=128.
    #[arg(long = "sidetask-arg", allow_hyphen_values = true)]
    sidetask_args: Vec<String>,
}

/// Rounds to `d` decimals for the report.
fn r(v: f64, d: i32) -> serde_json::Value {
    if v.is_finite() {
        let k = 10f64.powi(d);
        json!((v * k).round() / k)
    } else {
        serde_json::Value::Null
    }
}

/// A usage error (bad flags or environment): exit status 2.
fn usage(e: String) -> i32 {
    eprintln!("freeride sim: {e}");
    2
}

/// A failure while running: exit status 1, or 128 + the signal that stopped the run.
pub fn fail(cmd: &str, e: String) -> i32 {
    eprintln!("freeride {cmd}: {e}");
    match interrupt::pending() {
        Some(sig) => {
            eprintln!(
                "freeride {cmd}: stopped the job and the side tasks, and removed their files"
            );
            interrupt::exit_code(sig)
        }
        None => 1,
    }
}

/// The checks of `freeride sim` and `freeride demo` before anything starts: the job's flags (a
/// wrong CSV, a deadlock, more GPUs than the simulated machine has), the scored iterations.
pub fn check_job(job: &JobArgs) -> Result<pipesim::config::JobConfig, String> {
    let cfg = job.to_config()?;
    if (job.iterations as usize) <= sim::WARMUP_ITERATIONS {
        return Err(format!(
            "--iterations must be at least {}: the agent learns during the first {} and nothing \
             would be scored (got {})",
            sim::WARMUP_ITERATIONS + 1,
            sim::WARMUP_ITERATIONS,
            job.iterations
        ));
    }
    Ok(cfg)
}

pub fn main(a: SimArgs) -> i32 {
    let fail = |e: String| fail("sim", e);
    // A job that cannot run (bad flags, a wrong CSV, a deadlock) is a usage error.
    let cfg = match check_job(&a.job) {
        Ok(c) => c,
        Err(e) => return usage(e),
    };
    interrupt::install();
    if let Err(e) = sim::ensure_testbed_built() {
        return fail(e);
    }
    let ticks0 = pipesim::host::cpu_ticks();
    let side = (a.sidetasks > 0).then(|| sim::SideTasks {
        per_gpu: a.sidetasks,
        kind: a.sidetask_kind.clone(),
        mode: match a.sidetask_mode.as_str() {
            "naive" => sim::SideMode::Naive,
            "prior" => sim::SideMode::PauseResume,
            _ => sim::SideMode::Gated,
        },
        args: a
            .sidetask_args
            .iter()
            .flat_map(|x| x.splitn(2, '=').map(str::to_string).collect::<Vec<_>>())
            .collect(),
    });
    let baseline = match &side {
        Some(_) => match sim::run(&a.job, None, !a.json) {
            Ok(r) => Some(sim::score(&r, a.job.change_at).iteration_ms),
            Err(e) => return fail(e),
        },
        None => None,
    };
    let res = match sim::run(&a.job, side.as_ref(), !a.json) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    for w in &res.warnings {
        eprintln!("freeride sim: warning: {w}");
    }
    if let Ok(path) = std::env::var("FREERIDE_SIM_DUMP") {
        let dump = json!({
            "pids": res.truth.pids,
            "iterations": res.truth.iterations.iter().map(|it| json!({
                "start": it.start_ns, "end": it.end_ns,
                "idle": it.ranks.iter().map(|r| r.idle_intervals.clone()).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "side": res.kernels.iter().filter(|k| res.sidetask_pids.contains(&k.pid)).map(|k| json!([k.device, k.start_ns, k.end_ns])).collect::<Vec<_>>(),
            "trainer": res.kernels.iter().filter(|k| !res.sidetask_pids.contains(&k.pid)).map(|k| json!([k.device, k.queued_ns, k.start_ns, k.end_ns, k.kind, k.transfer_start_ns, k.pid, k.stream, k.kernel, k.eager_end_ns, k.mid_start_ns, k.mid_end_ns])).collect::<Vec<_>>(),
            "bubbles": res.bubbles.iter().map(|b| json!([b.pid, b.bubble.start, b.bubble.end, b.bubble.opened_seen, b.bubble.closed_seen, b.bubble.predicted_end, b.bubble.confidence])).collect::<Vec<_>>(),
            "grants": res.grant_logs.iter().enumerate().flat_map(|(node, log)| log.gpus().into_iter().map(move |g| json!({"node": node, "gpu": g.to_string(), "intervals": log.intervals(g)}))).collect::<Vec<_>>(),
            "bubble_gpus": res.bubbles.iter().map(|b| (b.pid, b.gpu.to_string())).collect::<std::collections::BTreeSet<_>>(),
        });
        if let Err(e) = std::fs::write(&path, dump.to_string()) {
            eprintln!("freeride sim: cannot write {path}: {e}");
        }
    }
    let s = sim::score(&res, a.job.change_at);
    // The forecast is the end predicted when a bubble opened: with no prediction made there is
    // nothing to score (the inferred end would stand in for it and score perfectly).
    let predicted = !s.predicted_end_error_us.is_empty();
    let forecast = |v: f64| {
        if predicted {
            r(v, 4)
        } else {
            serde_json::Value::Null
        }
    };
    let (lat50, lat99) = p50_p99(&s.detect_latency_us);
    let (err50, err99) = p50_p99(&s.predicted_end_error_us);
    let topo = cfg.topology();
    let report = json!({
        "schedule": a.job.schedule_name(),
        "stages": cfg.shape.stages,
        "microbatches": cfg.shape.microbatches,
        "chunks": cfg.shape.chunks,
        "style": a.job.style_name(),
        "tp": topo.tp,
        "dp": topo.dp,
        "world": topo.world(),
        "nodes": topo.nodes,
        "visible_devices": match topo.visible {
            pipesim::topology::Visible::All => "all",
            pipesim::topology::Visible::PerRank => "per-rank",
        },
        "iterations": a.job.iterations,
        "scored_iterations": s.scored_iterations,
        "truth": { "iteration_ms": r(s.iteration_ms, 3), "bubble_fraction": r(s.bubble_fraction, 4) },
        "inference": {
            "precision": r(s.inferred.precision(), 4),
            "recall": r(s.inferred.recall(), 4),
            "forecast_precision": forecast(s.forecast.precision()),
            "forecast_recall": forecast(s.forecast.recall()),
            "live_precision": r(s.live.precision(), 4),
            "live_recall": r(s.live.recall(), 4),
            "detect_latency_us_p50": r(lat50, 1),
            "detect_latency_us_p99": r(lat99, 1),
            "missed_idle_intervals": s.missed_idle_intervals,
            "predicted_end_error_us_p50": r(err50, 1),
            "predicted_end_error_us_p99": r(err99, 1),
            "bubbles": res.bubbles.len(),
        },
        "agent": {
            "events": res.events,
            "dropped": res.dropped,
            "cpu_ms": r(res.agent_cpu_ns as f64 / 1e6, 1),
            "cpu_share": r(res.agent_cpu_ns as f64 / res.agent_wall_ns.max(1) as f64, 4),
            // From a GPU-side record's time to when the agent read it: the end of a bubble that
            // came before its prediction is seen this much later.
            "report_lag_us": {
                "p50": res.report_lag.quantile_us(0.5),
                "p90": res.report_lag.quantile_us(0.9),
                "p99": res.report_lag.quantile_us(0.99),
            },
            // The agents' steps, and the longest in wall and in CPU time: a record that arrives
            // during a step waits for its end.
            "steps": res.agent_steps.steps,
            "step_ms_max": r(res.agent_steps.wall_max_ns as f64 / 1e6, 2),
            "step_cpu_ms_max": r(res.agent_steps.cpu_max_ns as f64 / 1e6, 2),
            // Steps that read no record, and the mean CPU time of those and of the others.
            "steps_empty": res.agent_steps.empty,
            "step_cpu_us_mean": {
                "empty": r(res.agent_steps.cpu_us_means().0, 1),
                "with_records": r(res.agent_steps.cpu_us_means().1, 1),
            },
            // Ops matched across processes by their communicators' identities, and keys all of
            // whose parties began on the node (their transfers' starts known exactly).
            "matched": {"ops": res.matched.keyed_ops, "completed": res.matched.completed_keys},
            "per_node": res.per_node.iter().map(|&(events, bubbles)| json!({"events": events, "bubbles": bubbles})).collect::<Vec<_>>(),
        },
        // The share of this machine's CPU the hypervisor took while the command ran: the simulated
        // GPUs run on the CPU, so a figure from a run that lost more than a few percent is not
        // the agent's alone.
        "host": {"cpu_steal_share": r(pipesim::host::stolen_share(ticks0, pipesim::host::cpu_ticks()), 4)},
    });
    let mut report = report;
    let grants = freeride_sim::sim_grants::score(&res);
    let grants_json = |t: &GrantTally| json!({"over_busy_share": r(t.over_busy_share(), 4), "granted_ms": r(t.granted_ms(), 1)});
    report["grants"] = grants_json(&grants.overall);
    let c = &grants.coverage;
    report["grants"]["coverage"] = json!({
        "idle_ms": r(c.idle_ns as f64 / 1e6, 1),
        "granted": r(c.share(c.covered_ns), 4),
        "before_first_grant": r(c.share(c.before_ns), 4),
        "after_last_grant": r(c.share(c.after_ns), 4),
        "between_grants": r(c.share(c.between_ns), 4),
        "ungranted_under_1ms": r(c.share(c.ungranted_short_ns), 4),
        "ungranted": r(c.share(c.ungranted_ns), 4),
    });
    // The idle time no grant covered (the four parts above but "granted"), by why the agent held
    // the GPU's grant closed then.
    let mut held = serde_json::Map::new();
    for why in Held::ALL {
        let ns = grants.held.by.get(&why).copied().unwrap_or(0);
        held.insert(why.name().into(), json!(r(c.share(ns), 4)));
    }
    held.insert(
        "not_noted".into(),
        json!(r(c.share(grants.held.not_noted_ns), 4)),
    );
    report["grants"]["coverage"]["held"] = held.into();
    report["per_gpu"] = freeride_sim::sim_gpus::per_gpu(&res)
        .iter()
        .map(|g| {
            let mut v = json!({
                "rank": g.rank, "pid": g.pid, "device": g.device, "bus_id": g.bus_id, "agent_gpu": g.agent_gpu,
                "node": g.node, "idle_fraction": r(g.idle_fraction, 4),
                "precision": r(g.precision, 4), "recall": r(g.recall, 4),
                "grants": grants_json(&grants.per_rank.get(g.rank as usize).copied().unwrap_or_default()),
            });
            if side.is_some() {
                v["bubble_busy_ratio"] = r(g.bubble_busy_ratio, 4);
            }
            v
        })
        .collect();
    if let (Some(spec), Some(base)) = (&side, baseline) {
        let h = sim::harvest(&res);
        report["harvest"] = json!({
            "bubble_busy_ratio": r(h.bubble_busy_ratio, 4),
            "sidetask_busy_ms": r(h.sidetask_busy_ms, 3),
            "sidetask_outside_bubbles_ms": r(h.outside_bubbles_ms, 3),
            "sidetask_gpu_share": r(h.gpu_share, 4),
            "by_iteration": h.by_iteration.iter().map(|&v| r(v, 4)).collect::<Vec<_>>(),
            "sidetasks_per_gpu": spec.per_gpu,
            "kind": spec.kind,
            "mode": spec.mode.name(),
            "sidetasks_ended": sim_report::sidetask_ends_json(&res, spec.per_gpu),
            // The share of granted time the side tasks ran in (see sim_grants::GrantUse).
            "grants_used": grants.used.share().map(|v| r(v, 4)),
        });
        report["trainer"] = json!({
            "baseline_iteration_ms": r(base, 3),
            "iteration_ms": r(s.iteration_ms, 3),
            "slowdown": r(s.iteration_ms / base - 1.0, 4),
        });
    }
    if let Some(at) = a.job.change_at {
        report["change"] = json!({
            "at_iteration": at,
            "microbatches": a.job.then_microbatches,
            "right_predictions_per_iteration": s.after_change.iter().map(|&v| r(v, 3)).collect::<Vec<_>>(),
            "relearned_in_iterations": s.relearned_in,
            // A noisy job never has 90 % of its bubbles predicted right: the same bar against
            // its share before the change.
            "right_predictions_before_change": s.before_change.map(|v| r(v, 3)),
            "relearned_to_steady_state_in_iterations": s.relearned_to_steady_state_in,
        });
    }
    if a.json {
        if let Some(h) = report.get("harvest") {
            for line in
                sim_report::sidetask_end_lines(&h["sidetasks_ended"], a.job.iterations as u64)
            {
                eprintln!("freeride sim: warning: {line}");
            }
        }
        println!("{report}");
    } else {
        print!("{}", sim_report::render(&report));
    }
    0
}
