//! The agent's published state: a JSON file in the session directory (for `freeride status`) and
//! Prometheus text (for the node's monitoring).
use crate::collect::ProcessView;
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
            "device": g.gpu.index(),
            "trainers": g.trainers,
            "bubble_open": g.open.is_some(),
            "bubble_started_ns": g.open.map(|o| o.start),
            "bubble_predicted_end_ns": g.open.and_then(|o| o.predicted_end),
            "iteration_ns": g.period_ns,
            "ops_per_iteration": g.ops_per_iteration,
            "bubbles": g.bubbles,
            "bubble_ns_total": g.bubble_ns_total,
            "bubble_share": if now_ns > g.since_ns { g.bubble_ns_total as f64 / (now_ns - g.since_ns) as f64 } else { 0.0 },
        })).collect::<Vec<_>>(),
        "processes": procs.iter().map(|p| json!({
            "pid": p.pid,
            "role": p.role.map(|r| r.name()),
            "device": p.device,
            "events": p.events,
            "dropped": p.dropped,
            "invalid": p.invalid,
        })).collect::<Vec<_>>(),
    })
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

/// Prometheus text exposition of the state.
pub fn prometheus(gpus: &[GpuState], procs: &[ProcessView]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# HELP freeride_bubble_seconds_total GPU idle time of trainers found by the agent."
    );
    let _ = writeln!(s, "# TYPE freeride_bubble_seconds_total counter");
    for g in gpus {
        let _ = writeln!(
            s,
            "freeride_bubble_seconds_total{{gpu=\"{}\"}} {:.6}",
            g.gpu,
            g.bubble_ns_total as f64 / 1e9
        );
    }
    let _ = writeln!(
        s,
        "# HELP freeride_bubbles_total Bubbles found by the agent."
    );
    let _ = writeln!(s, "# TYPE freeride_bubbles_total counter");
    for g in gpus {
        let _ = writeln!(
            s,
            "freeride_bubbles_total{{gpu=\"{}\"}} {}",
            g.gpu, g.bubbles
        );
    }
    let _ = writeln!(
        s,
        "# HELP freeride_bubble_open 1 while a bubble is open on the GPU."
    );
    let _ = writeln!(s, "# TYPE freeride_bubble_open gauge");
    for g in gpus {
        let _ = writeln!(
            s,
            "freeride_bubble_open{{gpu=\"{}\"}} {}",
            g.gpu,
            u8::from(g.open.is_some())
        );
    }
    let _ = writeln!(
        s,
        "# HELP freeride_dropped_events_total Events a process dropped because its ring was full."
    );
    let _ = writeln!(s, "# TYPE freeride_dropped_events_total counter");
    for p in procs {
        let _ = writeln!(
            s,
            "freeride_dropped_events_total{{pid=\"{}\",gpu=\"{}\"}} {}",
            p.pid, p.device, p.dropped
        );
    }
    s
}
