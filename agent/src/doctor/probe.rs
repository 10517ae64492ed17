//! Runs a command under the interposer (as `freeride run --role trainer` would, in a private
//! session directory, with the event trace on) and says whether the interposer loaded into it and
//! saw its kernel launches and NCCL operations.
use super::interposer::elf_kind;
use super::{Finding, Level};
use crate::scratch::ScratchDir;
use freeride_abi::env;
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHECK: &str = "probe";

/// What the trace of one probe run holds.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// Processes the interposer initialized in (`process_start`).
    pub processes: BTreeSet<u64>,
    pub launches: u64,
    pub graph_launches: u64,
    pub nccl_ops: u64,
}

/// Counts a trace's events (lines that do not parse are skipped).
pub fn read_trace(text: &str) -> Seen {
    let mut s = Seen::default();
    for v in text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
    {
        match v["kind"].as_str().unwrap_or("") {
            "process_start" => {
                s.processes.insert(v["pid"].as_u64().unwrap_or(0));
            }
            "launch" => s.launches += 1,
            "graph_launch" => s.graph_launches += 1,
            "comm" => s.nccl_ops += 1,
            _ => {}
        }
    }
    s
}

/// `name` as the shell would find it (on `PATH` unless it has a slash).
fn resolve(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return p.is_file().then_some(p);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// Why the loader would not preload into `exe`, if it can tell beforehand.
fn cannot_preload(exe: &Path) -> Option<String> {
    let md = std::fs::metadata(exe).ok()?;
    if md.permissions().mode() & 0o6000 != 0 {
        return Some(format!(
            "{} is setuid/setgid: the loader ignores LD_PRELOAD for it",
            exe.display()
        ));
    }
    match elf_kind(exe) {
        Ok((_, false)) => Some(format!(
            "{} is statically linked: there is no dynamic loader to preload libfreeride.so",
            exe.display()
        )),
        _ => None,
    }
}

fn tail(text: &str, lines: usize) -> String {
    let v: Vec<&str> = text.lines().collect();
    v[v.len().saturating_sub(lines)..].join(" | ")
}

/// Runs `cmd` with `lib` preloaded for at most `timeout`.
pub fn run(cmd: &[String], lib: &Path, timeout: Duration) -> Vec<Finding> {
    let shown = cmd.join(" ");
    let Some(exe) = resolve(&cmd[0]) else {
        return vec![Finding::new(
            CHECK,
            Level::Fail,
            format!("`{shown}`: {} not found", cmd[0]),
        )];
    };
    if let Some(why) = cannot_preload(&exe) {
        return vec![Finding::new(
            CHECK,
            Level::Fail,
            format!("`{shown}`: {why}"),
        )];
    }
    let scratch = match ScratchDir::new("doctor") {
        Ok(s) => s,
        Err(e) => return vec![Finding::new(CHECK, Level::Fail, e)],
    };
    let trace = scratch.0.join("trace.jsonl");
    let errlog = scratch.0.join("stderr.log");
    let Ok(errfile) = std::fs::File::create(&errlog) else {
        return vec![Finding::new(
            CHECK,
            Level::Fail,
            format!("cannot create {}", errlog.display()),
        )];
    };
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(p) if !p.is_empty() => format!("{} {p}", lib.display()),
        _ => lib.display().to_string(),
    };
    let child = Command::new(&exe)
        .args(&cmd[1..])
        .env("LD_PRELOAD", preload)
        .env(env::ROLE, "trainer")
        .env(env::DIR, &scratch.0)
        .env(env::TRACE, &trace)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(errfile)
        .process_group(0)
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            return vec![Finding::new(
                CHECK,
                Level::Fail,
                format!("`{shown}`: cannot start it: {e}"),
            )]
        }
    };
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if t0.elapsed() >= timeout => break None,
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => break None,
        }
    };
    let mut out = vec![];
    let status = match status {
        Some(s) => s,
        None => {
            // SAFETY: kill() of the process group we made for the child (its pid is the group's).
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            out.push(Finding::new(
                CHECK,
                Level::Fail,
                format!(
                    "`{shown}` did not finish within {} s (killed): give a short command (--probe-timeout S)",
                    timeout.as_secs_f64()
                ),
            ));
            return out;
        }
    };
    // The command's own children may still be writing their last lines: give them a moment.
    std::thread::sleep(Duration::from_millis(50));
    let seen = read_trace(&std::fs::read_to_string(&trace).unwrap_or_default());
    let stderr = std::fs::read_to_string(&errlog).unwrap_or_default();
    if !status.success() {
        out.push(Finding::new(
            CHECK,
            Level::Warn,
            format!(
                "`{shown}` exited with {status}; its last lines: {}",
                tail(&stderr, 3)
            ),
        ));
    }
    let pids = seen
        .processes
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let f = if seen.processes.is_empty() {
        Finding::new(
            CHECK,
            Level::Fail,
            format!(
                "`{shown}`: libfreeride.so recorded nothing: the command made no CUDA or NCCL call, or the interposer did not load into the process that did (a launcher that clears LD_PRELOAD, a container entry point that resets the environment)"
            ),
        )
    } else if seen.launches + seen.graph_launches == 0 {
        Finding::new(
            CHECK,
            Level::Fail,
            format!(
                "`{shown}`: libfreeride.so loaded (pid {pids}) but saw no kernel launch: the command launched none, or through a path freeride does not hook (report it with `FREERIDE_TRACE`)"
            ),
        )
    } else {
        Finding::new(
            CHECK,
            Level::Ok,
            format!(
                "`{shown}`: libfreeride.so loaded (pid {pids}), saw {} kernel launches, {} graph launches, {} NCCL ops",
                seen.launches, seen.graph_launches, seen.nccl_ops
            ),
        )
    };
    out.push(f);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_is_counted_by_kind() {
        let t = r#"{"kind":"process_start","pid":7}
{"kind":"launch","pid":7}
{"kind":"launch","pid":7}
{"kind":"comm","pid":7}
not json
{"kind":"graph_launch","pid":8}"#;
        let s = read_trace(t);
        assert_eq!(s.processes.into_iter().collect::<Vec<_>>(), [7]);
        assert_eq!((s.launches, s.graph_launches, s.nccl_ops), (2, 1, 1));
    }
}
