//! `freeride status`: the live per-GPU view, from the agent's published state.
use clap::Args;
use freeride_abi::{now_ns, session};
use freeride_agent::status::STATUS_FILE;
use serde_json::Value;
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Session directory (default: `$FREERIDE_DIR`, else `/dev/shm/freeride-<uid>`).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Print the agent's state as JSON.
    #[arg(long)]
    json: bool,
}

/// Why the agent's state in `dir` could not be read (`e`), in the user's terms.
fn unreadable(dir: &Path, e: &std::io::Error) -> String {
    use std::os::unix::fs::MetadataExt;
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => {
            let owner = std::fs::metadata(dir)
                .map(|m| format!(", which belongs to uid {}", m.uid()))
                .unwrap_or_default();
            // SAFETY: geteuid has no preconditions.
            let me = unsafe { libc::geteuid() };
            format!(
                "cannot read {}: permission denied (the session directory is private to its \
                 user{owner}; you are uid {me}: run freeride status as that user, or give --dir \
                 your own session directory)",
                dir.display()
            )
        }
        std::io::ErrorKind::NotFound if !dir.exists() => format!(
            "no agent serves {}: the directory does not exist (start one: freeride agent)",
            dir.display()
        ),
        std::io::ErrorKind::NotFound => format!(
            "no agent serves {} (start one: freeride agent)",
            dir.display()
        ),
        _ => format!("cannot read {}: {e}", dir.join(STATUS_FILE).display()),
    }
}

/// A state older than this means the agent is not running.
const STALE_NS: u64 = 2_000_000_000;

pub fn main(a: StatusArgs) -> i32 {
    let dir = a.dir.unwrap_or_else(session::resolve_dir);
    let path = dir.join(STATUS_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("freeride status: {}", unreadable(&dir, &e));
            return 1;
        }
    };
    let v: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            eprintln!(
                "freeride status: {} is not a valid agent state: {e}",
                path.display()
            );
            return 1;
        }
    };
    let t = v["t_ns"].as_u64().unwrap_or(0);
    let agent_pid = v["agent_pid"].as_u64().unwrap_or(0) as u32;
    if now_ns().saturating_sub(t) > STALE_NS || !session::pid_alive(agent_pid) {
        eprintln!(
            "freeride status: the agent (pid {agent_pid}) of {} is not running",
            dir.display()
        );
        return 1;
    }
    if a.json {
        println!("{v}");
        return 0;
    }
    println!("agent pid {agent_pid}, session {}", dir.display());
    println!(
        "{:<12}  {:<16} {:>12} {:>12} {:>10}  state",
        "gpu", "trainers", "iteration", "bubble share", "bubbles"
    );
    for g in v["gpus"].as_array().into_iter().flatten() {
        let iter_ns = g["iteration_ns"].as_u64();
        let trainers: Vec<String> = g["trainers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| p.to_string())
            .collect();
        let state = if g["bubble_open"].as_bool() == Some(true) {
            match g["bubble_predicted_end_ns"].as_u64() {
                Some(e) => format!(
                    "bubble open, ends in {:.1} ms",
                    e.saturating_sub(t) as f64 / 1e6
                ),
                None => "bubble open".to_string(),
            }
        } else {
            "busy".to_string()
        };
        let granted = granted_line(&g["grants"]);
        println!(
            "{:<12}  {:<16} {:>12} {:>12} {:>10}  {state}",
            bus_id(g),
            trainers.join(","),
            iter_ns
                .map(|n| format!("{:.1} ms", n as f64 / 1e6))
                .unwrap_or_else(|| "learning".into()),
            g["bubble_share"]
                .as_f64()
                .map(|x| format!("{:.1} %", x * 100.0))
                .unwrap_or_default(),
            g["bubbles"].to_string(),
        );
        if let Some(line) = granted {
            println!("{:<12}  {line}", "");
        }
    }
    print_sidetasks(&v["sidetasks"]);
    match v["ends"].as_str() {
        Some("lazy") => println!(
            "trainers' communication ends: read in batches (no side task on the node; no grant until they are prompt)"
        ),
        Some("prompt") => println!("trainers' communication ends: reported as they happen"),
        _ => {}
    }
    0
}

/// What share of a GPU's bubble time was granted, and what held the rest closed (largest first):
/// `None` before the agent decided on any of it (or where it grants nothing).
fn granted_line(v: &Value) -> Option<String> {
    let granted = v["granted_ns"].as_u64()?;
    let mut held: Vec<(&str, u64)> = v["held_ns"]
        .as_object()?
        .iter()
        .filter_map(|(k, x)| Some((k.as_str(), x.as_u64()?)))
        .filter(|&(_, ns)| ns > 0)
        .collect();
    let total = granted + held.iter().map(|&(_, ns)| ns).sum::<u64>();
    if total == 0 {
        return None;
    }
    held.sort_by_key(|h| std::cmp::Reverse(h.1));
    let pct = |ns: u64| format!("{:.1} %", ns as f64 * 100.0 / total as f64);
    let mut line = format!("granted {} of its bubbles", pct(granted));
    if !held.is_empty() {
        let why: Vec<String> = held
            .iter()
            .map(|&(k, ns)| format!("{} {}", k.replace('_', " "), pct(ns)))
            .collect();
        line += &format!("; held closed: {}", why.join(", "));
    }
    Some(line)
}

/// The GPU an entry of the state names, by bus id (its `bus_id`, else its `device` field).
fn bus_id(v: &Value) -> String {
    match (&v["bus_id"], v["device"].as_i64()) {
        (Value::String(s), _) => s.clone(),
        (_, Some(d)) => freeride_abi::GpuId::from_field(d as i32).to_string(),
        _ => "-".to_string(),
    }
}

/// The side tasks of the agent's state (`"sidetasks"`): counters, then one line per task.
fn print_sidetasks(st: &Value) {
    let tasks = st["tasks"].as_array().cloned().unwrap_or_default();
    println!(
        "side tasks: {} (since the agent started: {} lost, {} evicted)",
        tasks.len(),
        st["lost"].as_u64().unwrap_or(0),
        st["evicted"]["hung"].as_u64().unwrap_or(0)
            + st["evicted"]["over_memory"].as_u64().unwrap_or(0),
    );
    if tasks.is_empty() {
        return;
    }
    println!(
        "{:>8}  {:<12}  {:<16} {:<14} {:<10} {:>8} {:>12} {:>10}",
        "pid", "gpu", "name", "kind", "state", "steps", "GPU busy", "memory"
    );
    let or_dash = |v: &Value| match v {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    for t in tasks {
        let kind = match (t["sdk"].as_bool(), t["gated"].as_bool()) {
            (Some(true), Some(true)) => "SDK, gated",
            (Some(true), _) => "SDK",
            _ => "gated",
        };
        println!(
            "{:>8}  {:<12}  {:<16} {:<14} {:<10} {:>8} {:>12} {:>10}",
            or_dash(&t["pid"]),
            bus_id(&t),
            or_dash(&t["name"]),
            kind,
            or_dash(&t["state"]),
            or_dash(&t["steps"]),
            t["gpu_busy_ns"]
                .as_u64()
                .map_or("-".into(), |n| format!("{:.1} ms", n as f64 / 1e6)),
            t["mem_held_bytes"]
                .as_u64()
                .map_or("-".into(), |b| format!("{} MiB", b >> 20)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_granted_line_names_what_held_the_rest_largest_first() {
        let g = json!({"granted_ns": 600, "held_ns": {"low_confidence": 100, "ends_late": 0,
            "guard_before_predicted_end": 300}});
        assert_eq!(
            granted_line(&g).as_deref(),
            Some("granted 60.0 % of its bubbles; held closed: guard before predicted end 30.0 %, low confidence 10.0 %")
        );
        let all = json!({"granted_ns": 5, "held_ns": {"low_confidence": 0}});
        assert_eq!(
            granted_line(&all).as_deref(),
            Some("granted 100.0 % of its bubbles")
        );
        assert_eq!(granted_line(&json!({"granted_ns": 0, "held_ns": {}})), None);
        assert_eq!(granted_line(&Value::Null), None);
    }
}
