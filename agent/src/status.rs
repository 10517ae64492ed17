//! The agent's published state: a JSON file in the session directory (for `freeride status`) and
//! Prometheus text (for the node's monitoring).
use crate::collect::ProcessView;
use crate::grant_time::GrantTime;
use crate::grants::Held;
use crate::node::GpuState;
use crate::watchdog::{Reason, Watchdog};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::Path;

/// File name of the agent's state in the session directory.
pub const STATUS_FILE: &str = "agent-status.json";

/// The state as JSON (what `agent-status.json` holds).
pub fn to_json(now_ns: u64, agent_pid: u32, gpus: &[GpuState], procs: &[ProcessView]) -> Value {
    json!({
        "version": 1,
        "t_ns": now_ns,
        "agent_pid": agent_pid,
        "gpus": gpus.iter().map(|g| json!({
            "device": g.gpu.field(), "bus_id": g.gpu.to_string(),
            "trainers": g.trainers,
            "bubble_open": g.open.is_some(),
            "bubble_started_ns": g.open.map(|o| o.start),
            "bubble_predicted_end_ns": g.open.and_then(|o| o.predicted_end),
            "iteration_ns": g.period_ns,
            "ops_per_iteration": g.ops_per_iteration,
            "bubbles": g.bubbles,
            "bubble_ns_total": g.bubble_ns_total,
            "bubble_share": if now_ns > g.since_ns { g.bubble_ns_total as f64 / (now_ns - g.since_ns) as f64 } else { 0.0 },
            "grants": g.grant_time.map(|t| grant_time_json(&t)),
        })).collect::<Vec<_>>(),
        "processes": procs.iter().map(|p| json!({
            "pid": p.pid,
            "role": p.role.map(|r| r.name()),
            "device": p.device,
            "events": p.events,
            "dropped": p.dropped,
            "invalid": p.invalid,
            "mem_held_bytes": p.mem_held_bytes,
            "mem_by_device": p.mem_by_device.iter().map(|(d, b)| json!({"device": d, "bytes": b})).collect::<Vec<_>>(),
            "ends_late_until_ns": p.ends_late_until_ns,
        })).collect::<Vec<_>>(),
    })
}

/// A GPU's bubble time granted and held closed, by reason (`not_in_bubble` is never counted: the
/// GPU was not in a bubble as the agent knew it).
fn grant_time_json(t: &GrantTime) -> Value {
    let held: serde_json::Map<String, Value> = Held::ALL
        .iter()
        .filter(|&&h| h != Held::NotInBubble)
        .map(|&h| (h.name().to_string(), json!(t.held_ns[h.index()])))
        .collect();
    json!({"granted_ns": t.granted_ns, "held_ns": held})
}

/// The side tasks of the node (`"sidetasks"."tasks"` of `agent-status.json`): the SDK tasks' status
/// files (`sidetask-<pid>.json`: name, state, steps, GPU time) of live processes, and the
/// side-task processes with a ring (unmodified programs under the interposer's gate, and SDK
/// tasks run under it), one entry per pid.
pub fn sidetasks_json(dir: &Path, procs: &[ProcessView]) -> Value {
    let mut by_pid: std::collections::BTreeMap<u64, Value> = Default::default();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if !(name.starts_with("sidetask-") && name.ends_with(".json")) {
            continue;
        }
        let Ok(v) = std::fs::read_to_string(e.path())
            .map_err(|_| ())
            .and_then(|t| serde_json::from_str::<Value>(&t).map_err(|_| ()))
        else {
            continue;
        };
        let Some(pid) = v["pid"].as_u64() else {
            continue;
        };
        if !freeride_abi::session::pid_alive(pid as u32) {
            continue;
        }
        by_pid.insert(
            pid,
            json!({
                "pid": pid,
                "device": v["device"],
                "name": v["task"],
                "sdk": true,
                "gated": false,
                "state": v["state"],
                "steps": v["steps"],
                "gpu_busy_ns": v["gpu_busy_ns"],
                "priority": v["priority"],
                "mem_held_bytes": v["mem_held_bytes"],
            }),
        );
    }
    for p in procs
        .iter()
        .filter(|p| p.role == Some(freeride_abi::Role::Sidetask) && !p.gone)
    {
        let e = by_pid.entry(p.pid as u64).or_insert_with(|| {
            json!({
                "pid": p.pid, "device": p.device, "name": null, "sdk": false, "state": "running",
                "steps": null, "gpu_busy_ns": null, "priority": null,
                "mem_held_bytes": p.mem_held_bytes,
            })
        });
        e["gated"] = json!(true);
        if e["device"].is_null() || e["device"].as_i64() == Some(-1) {
            e["device"] = json!(p.device);
        }
    }
    Value::Array(by_pid.into_values().collect())
}

/// The side-task watchdog's counters, as `agent-status.json` holds them (`"sidetasks"`).
pub fn watchdog_json(w: &Watchdog) -> Value {
    json!({
        "watched": w.watching(),
        "lost": w.lost,
        "evicted": {
            "hung": w.evicted.get(&Reason::Hung).copied().unwrap_or(0),
            "over_memory": w.evicted.get(&Reason::OverMemory).copied().unwrap_or(0),
        },
    })
}

/// Prometheus text of the side-task watchdog's counters.
pub fn watchdog_prometheus(w: &Watchdog) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# HELP freeride_sidetask_evictions_total Side tasks the agent killed, by reason (hung, over_memory)."
    );
    let _ = writeln!(s, "# TYPE freeride_sidetask_evictions_total counter");
    for r in [Reason::Hung, Reason::OverMemory] {
        let _ = writeln!(
            s,
            "freeride_sidetask_evictions_total{{reason=\"{}\"}} {}",
            r.name(),
            w.evicted.get(&r).copied().unwrap_or(0)
        );
    }
    let _ = writeln!(
        s,
        "# HELP freeride_sidetasks_lost_total Side tasks that died without exiting (crashes)."
    );
    let _ = writeln!(s, "# TYPE freeride_sidetasks_lost_total counter");
    let _ = writeln!(s, "freeride_sidetasks_lost_total {}", w.lost);
    s
}

/// Writes `value` to `dir/STATUS_FILE` atomically (a reader never sees half a file).
pub fn publish(dir: &Path, value: &Value) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{STATUS_FILE}.{}", std::process::id()));
    std::fs::write(&tmp, value.to_string())?;
    std::fs::rename(&tmp, dir.join(STATUS_FILE))
}

/// One metric family of the exposition: its help and type lines, then a sample per
/// (labels, value), labels as `k="v",...`.
fn family(s: &mut String, name: &str, kind: &str, help: &str, samples: Vec<(String, String)>) {
    let _ = writeln!(s, "# HELP {name} {help}");
    let _ = writeln!(s, "# TYPE {name} {kind}");
    for (labels, value) in samples {
        let _ = writeln!(s, "{name}{{{labels}}} {value}");
    }
}

/// Seconds from nanoseconds, as the exposition writes them.
fn secs(ns: u64) -> String {
    format!("{:.6}", ns as f64 / 1e9)
}

/// Prometheus text exposition of the state.
pub fn prometheus(gpus: &[GpuState], procs: &[ProcessView]) -> String {
    let mut s = String::new();
    let per_gpu = |f: &dyn Fn(&GpuState) -> String| -> Vec<(String, String)> {
        gpus.iter()
            .map(|g| (format!("gpu=\"{}\"", g.gpu), f(g)))
            .collect()
    };
    family(
        &mut s,
        "freeride_bubble_seconds_total",
        "counter",
        "GPU idle time of trainers found by the agent.",
        per_gpu(&|g| secs(g.bubble_ns_total)),
    );
    family(
        &mut s,
        "freeride_bubbles_total",
        "counter",
        "Bubbles found by the agent.",
        per_gpu(&|g| g.bubbles.to_string()),
    );
    family(
        &mut s,
        "freeride_bubble_open",
        "gauge",
        "1 while a bubble is open on the GPU.",
        per_gpu(&|g| u8::from(g.open.is_some()).to_string()),
    );
    let granted = gpus.iter().filter_map(|g| Some((g, g.grant_time?)));
    family(
        &mut s,
        "freeride_granted_seconds_total",
        "counter",
        "Bubble time (as the agent saw it) the GPU's grant was open.",
        granted
            .clone()
            .map(|(g, t)| (format!("gpu=\"{}\"", g.gpu), secs(t.granted_ns)))
            .collect(),
    );
    family(
        &mut s,
        "freeride_held_seconds_total",
        "counter",
        "Bubble time (as the agent saw it) the GPU's grant was held closed, by reason.",
        granted
            .flat_map(|(g, t)| {
                Held::ALL
                    .iter()
                    .filter(|&&h| h != Held::NotInBubble)
                    .map(move |&h| {
                        (
                            format!("gpu=\"{}\",reason=\"{}\"", g.gpu, h.name()),
                            secs(t.held_ns[h.index()]),
                        )
                    })
            })
            .collect(),
    );
    family(
        &mut s,
        "freeride_dropped_events_total",
        "counter",
        "Events a process dropped because its ring was full.",
        procs
            .iter()
            .map(|p| {
                (
                    format!("pid=\"{}\",gpu=\"{}\"", p.pid, p.device),
                    p.dropped.to_string(),
                )
            })
            .collect(),
    );
    family(
        &mut s,
        "freeride_process_memory_bytes",
        "gauge",
        "Device memory a process holds on a GPU (every hooked allocation path).",
        procs
            .iter()
            .flat_map(|p| {
                let role = p.role.map_or("unknown", |r| r.name());
                p.mem_by_device.iter().map(move |(d, b)| {
                    (
                        format!("pid=\"{}\",role=\"{role}\",gpu=\"{d}\"", p.pid),
                        b.to_string(),
                    )
                })
            })
            .collect(),
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inference::GpuId;

    #[test]
    fn a_gpus_granted_and_held_time_is_exported_where_it_grants() {
        let mut t = GrantTime::default();
        t.step(0, Err(Held::LowConfidence));
        t.step(1_500_000, Ok(3_000_000));
        t.step(2_000_000, Err(Held::NotInBubble));
        let gpu = |id, grant_time| GpuState {
            gpu: GpuId(id),
            trainers: vec![1],
            open: None,
            period_ns: None,
            ops_per_iteration: 0,
            bubble_ns_total: 0,
            bubbles: 0,
            since_ns: 0,
            grant_time,
        };
        let (a, b) = (gpu(0x1001, Some(t)), gpu(0x1002, None));
        let text = prometheus(&[a.clone(), b], &[]);
        let g = a.gpu;
        assert!(text.contains(&format!(
            "freeride_granted_seconds_total{{gpu=\"{g}\"}} 0.000500\n"
        )));
        assert!(text.contains(&format!(
            "freeride_held_seconds_total{{gpu=\"{g}\",reason=\"low_confidence\"}} 0.001500\n"
        )));
        // Not in a bubble is not held time; a GPU this node does not grant has no such samples.
        assert!(!text.contains("not_in_bubble"));
        assert_eq!(text.matches("freeride_granted_seconds_total{").count(), 1);
        let v = to_json(0, 1, &[a], &[]);
        assert_eq!(v["gpus"][0]["grants"]["granted_ns"], 500_000);
        assert_eq!(
            v["gpus"][0]["grants"]["held_ns"]["low_confidence"],
            1_500_000
        );
    }
}
