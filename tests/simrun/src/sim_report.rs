//! The report of `freeride sim` as text: every figure of the JSON report (`--json`), rendered from
//! it (so the two always carry the same figures; a figure without a value, JSON `null`, reads
//! "n/a"), and the side tasks that ended before the job did.
use crate::sim::SimResult;
use serde_json::{json, Map, Value};
use std::fmt::Write as _;

/// The side tasks of `res` that ended before the job did, as the report holds them
/// (`harvest.sidetasks_ended`): pid, GPU, the job's iteration it ended in, how it ended.
/// `per_gpu`: side tasks per GPU (they were started GPU by GPU).
pub fn sidetask_ends_json(res: &SimResult, per_gpu: u32) -> Value {
    let its = &res.truth.iterations;
    Value::Array(
        res.sidetask_ends
            .iter()
            .map(|e| {
                let device = res
                    .sidetask_pids
                    .iter()
                    .position(|&p| p == e.pid)
                    .map(|i| i as u32 / per_gpu.max(1));
                let iteration = its
                    .iter()
                    .position(|it| e.at_ns < it.end_ns)
                    .unwrap_or(its.len());
                json!({
                    "pid": e.pid,
                    "device": device,
                    "iteration": iteration,
                    "finished": e.finished(),
                    "exit_status": e.code,
                    "signal": e.signal,
                    "how": e.describe(),
                })
            })
            .collect(),
    )
}

/// One line per side task that ended early (from [`sidetask_ends_json`]), for the text reports.
pub fn sidetask_end_lines(ends: &Value, iterations: u64) -> Vec<String> {
    ends.as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let gpu = e["device"]
                .as_u64()
                .map_or("?".to_string(), |d| d.to_string());
            let then = if e["finished"].as_bool() == Some(true) {
                "its GPU's bubbles had no side task to fill them after that, and the harvest \
                 counts them idle"
            } else {
                "it did no work on its GPU after that"
            };
            format!(
                "side task pid {} (GPU {gpu}) {} in iteration {} of {iterations}: {then}",
                e["pid"],
                e["how"].as_str().unwrap_or("ended"),
                e["iteration"],
            )
        })
        .collect()
}

fn num(v: &Value) -> String {
    match v {
        Value::Null => "n/a".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A figure with its unit ("n/a" alone when it has no value).
fn unit(v: &Value, unit: &str) -> String {
    match v {
        Value::Null => "n/a".into(),
        v => format!("{} {unit}", num(v)),
    }
}

fn pct(v: &Value) -> String {
    match v.as_f64() {
        Some(x) => format!("{:.2} %", x * 100.0),
        None => "n/a".into(),
    }
}

/// Appends `key value` for every field of `obj` not in `done` (a figure added to the JSON shows
/// in the text even before it gets a sentence).
fn rest(out: &mut String, obj: &Value, done: &[&str]) {
    if let Some(m) = obj.as_object() {
        let extra: Vec<String> = m
            .iter()
            .filter(|(k, _)| !done.contains(&k.as_str()))
            .map(|(k, v)| format!("{k} {}", num(v)))
            .collect();
        if !extra.is_empty() {
            let _ = writeln!(out, "           {}", extra.join(", "));
        }
    }
}

/// The text report of a `freeride sim` JSON report.
pub fn render(r: &Value) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "job        {} p={} m={} v={} tp={} dp={} {}, {} GPUs on {} node(s) (visible devices: {}), {} iterations, {} scored (the agent learns during the first {})",
        num(&r["schedule"]),
        num(&r["stages"]),
        num(&r["microbatches"]),
        num(&r["chunks"]),
        num(&r["tp"]),
        num(&r["dp"]),
        num(&r["style"]),
        num(&r["world"]),
        num(&r["nodes"]),
        num(&r["visible_devices"]),
        num(&r["iterations"]),
        num(&r["scored_iterations"]),
        crate::sim::WARMUP_ITERATIONS,
    );
    let t = &r["truth"];
    let _ = writeln!(
        s,
        "truth      iteration {}, bubbles {} of GPU time",
        unit(&t["iteration_ms"], "ms"),
        pct(&t["bubble_fraction"]),
    );
    rest(&mut s, t, &["iteration_ms", "bubble_fraction"]);
    let i = &r["inference"];
    let _ = writeln!(
        s,
        "agent      {} bubbles; precision {}, recall {} (inferred); forecast {} / {}; live {} / {}",
        num(&i["bubbles"]),
        num(&i["precision"]),
        num(&i["recall"]),
        num(&i["forecast_precision"]),
        num(&i["forecast_recall"]),
        num(&i["live_precision"]),
        num(&i["live_recall"]),
    );
    let _ = writeln!(
        s,
        "           detection p50 {}, p99 {} ({} idle intervals of 1 ms or more missed); \
         predicted end error p50 {}, p99 {}",
        unit(&i["detect_latency_us_p50"], "us"),
        unit(&i["detect_latency_us_p99"], "us"),
        num(&i["missed_idle_intervals"]),
        unit(&i["predicted_end_error_us_p50"], "us"),
        unit(&i["predicted_end_error_us_p99"], "us"),
    );
    rest(
        &mut s,
        i,
        &[
            "bubbles",
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
        ],
    );
    let g = &r["grants"];
    if !g.is_null() {
        let _ = writeln!(
            s,
            "grants     {} granted; {} of it over the trainers' busy GPU time",
            unit(&g["granted_ms"], "ms"),
            pct(&g["over_busy_share"]),
        );
        let c = &g["coverage"];
        if !c.is_null() {
            let _ = writeln!(
                s,
                "           of the trainers' idle time ({}): {} granted; left before a bubble's first \
                 grant {}, after its last {}, between its grants {}, in bubbles never granted {} \
                 (and {} in ones under 1 ms)",
                unit(&c["idle_ms"], "ms"),
                pct(&c["granted"]),
                pct(&c["before_first_grant"]),
                pct(&c["after_last_grant"]),
                pct(&c["between_grants"]),
                pct(&c["ungranted"]),
                pct(&c["ungranted_under_1ms"]),
            );
            // What held the grants closed over the rest, largest first.
            if let Some(held) = c["held"].as_object() {
                let mut v: Vec<(&String, f64)> = held
                    .iter()
                    .filter_map(|(k, x)| Some((k, x.as_f64()?)))
                    .filter(|&(_, x)| x > 0.0)
                    .collect();
                v.sort_by(|a, b| b.1.total_cmp(&a.1));
                if !v.is_empty() {
                    let parts: Vec<String> = v
                        .iter()
                        .map(|(k, x)| format!("{} {}", k.replace('_', " "), pct(&json!(x))))
                        .collect();
                    let _ = writeln!(s, "           not granted because: {}", parts.join(", "));
                }
            }
        }
        rest(&mut s, g, &["granted_ms", "over_busy_share", "coverage"]);
    }
    let a = &r["agent"];
    let _ = writeln!(
        s,
        "agent cost {} events read ({} dropped), {} of CPU ({} of a core)",
        num(&a["events"]),
        num(&a["dropped"]),
        unit(&a["cpu_ms"], "ms"),
        pct(&a["cpu_share"]),
    );
    rest(&mut s, a, &["events", "dropped", "cpu_ms", "cpu_share"]);
    let h = &r["harvest"];
    if !h.is_null() {
        let _ = writeln!(
            s,
            "harvest    {} of the bubble time kept busy by {} {} side task(s) per GPU ({}); \
             side-task GPU time {}, {} of it outside bubbles; GPU share {}; the side tasks ran \
             in {} of the granted time",
            pct(&h["bubble_busy_ratio"]),
            num(&h["sidetasks_per_gpu"]),
            num(&h["kind"]),
            num(&h["mode"]),
            unit(&h["sidetask_busy_ms"], "ms"),
            unit(&h["sidetask_outside_bubbles_ms"], "ms"),
            pct(&h["sidetask_gpu_share"]),
            pct(&h["grants_used"]),
        );
        rest(
            &mut s,
            h,
            &[
                "bubble_busy_ratio",
                "sidetasks_per_gpu",
                "kind",
                "mode",
                "sidetask_busy_ms",
                "sidetask_outside_bubbles_ms",
                "sidetask_gpu_share",
                "grants_used",
                "sidetasks_ended",
                "by_iteration",
            ],
        );
        if let Some(v) = h["by_iteration"].as_array().filter(|v| !v.is_empty()) {
            let each: Vec<String> = v.iter().map(pct).collect();
            let _ = writeln!(s, "           by scored iteration: {}", each.join(", "));
        }
        let iterations = r["iterations"].as_u64().unwrap_or(0);
        for line in sidetask_end_lines(&h["sidetasks_ended"], iterations) {
            let _ = writeln!(s, "           {line}");
        }
    }
    let tr = &r["trainer"];
    if !tr.is_null() {
        let _ = writeln!(
            s,
            "trainer    iteration {} alone, {} with side tasks: slowdown {}",
            unit(&tr["baseline_iteration_ms"], "ms"),
            unit(&tr["iteration_ms"], "ms"),
            pct(&tr["slowdown"]),
        );
        rest(
            &mut s,
            tr,
            &["baseline_iteration_ms", "iteration_ms", "slowdown"],
        );
    }
    let c = &r["change"];
    if !c.is_null() {
        let right: Vec<String> = c["right_predictions_per_iteration"]
            .as_array()
            .into_iter()
            .flatten()
            .map(num)
            .collect();
        let _ = writeln!(
            s,
            "change     at iteration {} to m={}: relearnt in {} iterations (share of bubbles \
             predicted right per iteration from the change: {})",
            num(&c["at_iteration"]),
            num(&c["microbatches"]),
            num(&c["relearned_in_iterations"]),
            if right.is_empty() {
                "n/a".to_string()
            } else {
                right.join(", ")
            },
        );
        rest(
            &mut s,
            c,
            &[
                "at_iteration",
                "microbatches",
                "relearned_in_iterations",
                "right_predictions_per_iteration",
            ],
        );
    }
    let known = [
        "schedule",
        "stages",
        "microbatches",
        "chunks",
        "style",
        "iterations",
        "scored_iterations",
        "truth",
        "inference",
        "grants",
        "agent",
        "harvest",
        "trainer",
        "change",
    ];
    if let Some(m) = r.as_object() {
        let extra: Map<String, Value> = m
            .iter()
            .filter(|(k, _)| !known.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (k, v) in extra {
            let _ = writeln!(s, "{k:<10} {v}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every number of the JSON report appears in the text, and a null reads "n/a", never NaN.
    #[test]
    fn the_text_carries_every_figure_of_the_json() {
        let r = json!({
            "schedule": "1f1b", "stages": 4, "microbatches": 8, "chunks": 1, "style": "batched",
            "iterations": 6, "scored_iterations": 4,
            "truth": {"iteration_ms": 341.7, "bubble_fraction": 0.2957},
            "inference": {"precision": 0.9991, "recall": 0.9965, "forecast_precision": null,
                "forecast_recall": null, "live_precision": 0.9841, "live_recall": 0.9579,
                "detect_latency_us_p50": null, "detect_latency_us_p99": 469.3,
                "missed_idle_intervals": 3, "predicted_end_error_us_p50": 283.8,
                "predicted_end_error_us_p99": 8215.1, "bubbles": 106},
            "agent": {"events": 744, "dropped": 0, "cpu_ms": 87.3, "cpu_share": 0.1161},
            "grants": {"granted_ms": 512.4, "over_busy_share": 0.0012,
                "coverage": {"idle_ms": 700.5, "granted": 0.7314, "before_first_grant": 0.0152,
                    "after_last_grant": 0.0881, "between_grants": 0.0314, "ungranted": 0.0981,
                    "ungranted_under_1ms": 0.0358}},
            "harvest": {"bubble_busy_ratio": 0.1312, "sidetask_busy_ms": 99.25,
                "sidetask_outside_bubbles_ms": 1.5, "sidetask_gpu_share": 0.0421,
                "grants_used": 0.1937, "by_iteration": [0.0512, 0.1788],
                "sidetasks_per_gpu": 1, "kind": "pagerank", "mode": "gated",
                "sidetasks_ended": [{"pid": 77, "device": 2, "iteration": 3, "finished": true,
                    "exit_status": 0, "signal": null, "how": "finished its work (exit status 0)"}]},
            "trainer": {"baseline_iteration_ms": 340.1, "iteration_ms": 342.9, "slowdown": 0.0082},
            "new_section": {"x": 5},
        });
        let text = render(&r);
        assert!(!text.contains("NaN"), "{text}");
        for want in [
            "341.7",
            "29.57 %",
            "0.9991",
            "0.9965",
            "n/a",
            "0.9841",
            "0.9579",
            "469.3",
            " 3 ",
            "283.8",
            "8215.1",
            "106",
            "744",
            "87.3",
            "11.61 %",
            "13.12 %",
            "99.25",
            "1.5",
            "4.21 %",
            "ran in 19.37 % of the granted time",
            "by scored iteration: 5.12 %, 17.88 %",
            "pagerank",
            "gated",
            "340.1",
            "342.9",
            "0.82 %",
            "6 iterations",
            "4 scored",
            "new_section",
            "512.4",
            "0.12 %",
            "700.5",
            "73.14 %",
            "1.52 %",
            "8.81 %",
            "3.14 %",
            "9.81 %",
            "3.58 %",
            "side task pid 77 (GPU 2) finished its work (exit status 0) in iteration 3 of 6",
        ] {
            assert!(text.contains(want), "text lacks {want:?}:\n{text}");
        }
    }
}
