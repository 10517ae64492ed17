//! The side tasks of a node, as their SDK publishes them (`sidetask-<pid>.json` in the session
//! directory: device, state, priority, learned step duration): what the scheduler needs to give each
//! bubble to the most important task whose next step fits.
use crate::inference::Ns;
use freeride_abi::session;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// One side task waiting for or using a GPU's grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SideTaskInfo {
    pub pid: u32,
    pub priority: u64,
    /// The task's learned step duration (0 before its first step).
    pub step_estimate_ns: Ns,
    /// Device memory it holds, as it last published.
    pub mem_held_bytes: u64,
}

/// Device memory the side tasks of one GPU hold together: the SDK tasks' published figures and the
/// hooked allocations of side-task processes running under the interposer (`ring_held`: pid,
/// bytes), a process known both ways counted once (the larger figure).
pub fn mem_held(tasks: &[SideTaskInfo], ring_held: &[(u32, u64)]) -> u64 {
    let mut by_pid: BTreeMap<u32, u64> = tasks.iter().map(|t| (t.pid, t.mem_held_bytes)).collect();
    for &(pid, bytes) in ring_held {
        let e = by_pid.entry(pid).or_default();
        *e = (*e).max(bytes);
    }
    by_pid.values().sum()
}

/// The lowest priority that may start work in a grant of `room_ns`: the highest priority among
/// the tasks whose next step fits (a task with no estimate yet fits), so that a bubble goes to the
/// most important task that can use it. 0 (everyone) when no task is known or none fits.
pub fn priority_floor(tasks: &[SideTaskInfo], room_ns: Ns) -> u64 {
    tasks
        .iter()
        .filter(|t| t.step_estimate_ns <= room_ns)
        .map(|t| t.priority)
        .max()
        .unwrap_or(0)
}

/// Reads the side tasks' status files in `dir`, by device; tasks that finished, stopped or died are
/// left out, and so is anything that does not parse.
pub fn scan(dir: &Path) -> BTreeMap<i32, Vec<SideTaskInfo>> {
    let mut out: BTreeMap<i32, Vec<SideTaskInfo>> = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if !(name.starts_with("sidetask-") && name.ends_with(".json")) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        let (Some(pid), Some(device)) = (v["pid"].as_u64(), v["device"].as_i64()) else {
            continue;
        };
        let live = !matches!(v["state"].as_str(), Some("finished" | "stopped"));
        if !live || !session::pid_alive(pid as u32) {
            continue;
        }
        out.entry(device as i32).or_default().push(SideTaskInfo {
            pid: pid as u32,
            priority: v["priority"].as_u64().unwrap_or(0),
            step_estimate_ns: v["step_estimate_ns"].as_u64().unwrap_or(0),
            mem_held_bytes: v["mem_held_bytes"].as_u64().unwrap_or(0),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(pid: u32, priority: u64, step_estimate_ns: Ns) -> SideTaskInfo {
        SideTaskInfo {
            pid,
            priority,
            step_estimate_ns,
            mem_held_bytes: 0,
        }
    }

    #[test]
    fn memory_is_summed_over_the_gpus_side_tasks_once_per_process() {
        let mut a = t(1, 0, 0);
        a.mem_held_bytes = 100;
        let mut b = t(2, 0, 0);
        b.mem_held_bytes = 50;
        // pid 2 also runs under the interposer (its hooked figure is newer and larger); pid 3 is
        // an unmodified side task.
        assert_eq!(mem_held(&[a, b], &[(2, 70), (3, 30)]), 200);
        assert_eq!(mem_held(&[], &[]), 0);
    }

    #[test]
    fn the_bubble_goes_to_the_most_important_task_that_fits() {
        let tasks = [t(1, 1, 1_000_000), t(2, 5, 8_000_000), t(3, 3, 2_000_000)];
        // 10 ms: the priority-5 task fits.
        assert_eq!(priority_floor(&tasks, 10_000_000), 5);
        // 5 ms: it does not; the priority-3 task does.
        assert_eq!(priority_floor(&tasks, 5_000_000), 3);
        // 1.5 ms: only the priority-1 task.
        assert_eq!(priority_floor(&tasks, 1_500_000), 1);
        // Nothing fits, or nothing known: everyone may try (each checks its own fit).
        assert_eq!(priority_floor(&tasks, 500_000), 0);
        assert_eq!(priority_floor(&[], 500_000), 0);
        // A task that has not measured a step yet fits anywhere.
        assert_eq!(priority_floor(&[t(4, 9, 0), t(5, 2, 1)], 1_000), 9);
    }

    #[test]
    fn status_files_are_read_by_device_and_dead_or_finished_tasks_left_out() {
        let dir = std::env::temp_dir().join(format!("freeride-sidetasks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let me = std::process::id();
        let write = |name: &str, text: String| std::fs::write(dir.join(name), text).unwrap();
        write(
            "sidetask-1.json",
            format!(
                r#"{{"pid":{me},"device":2,"state":"running","priority":4,"step_estimate_ns":900}}"#
            ),
        );
        write(
            "sidetask-2.json",
            format!(r#"{{"pid":{me},"device":2,"state":"finished","priority":9}}"#),
        );
        write(
            "sidetask-3.json",
            r#"{"pid":4000000,"device":2,"state":"running"}"#.to_string(),
        );
        write("sidetask-4.json", "garbage".to_string());
        let m = scan(&dir);
        assert_eq!(m.get(&2).cloned(), Some(vec![t(me, 4, 900)]));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
