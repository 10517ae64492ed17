//! Config parsing (issue 6): `freeride` rejects bad option values with a clear message naming the
//! option and the value, and a nonzero exit, before it starts anything.
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Out {
    code: Option<i32>,
    stderr: String,
}

/// Runs `freeride args` in a private session directory; kills it if it runs past 20 s (a bad value
/// that was accepted would start the agent or the simulation).
fn freeride(args: &[&str]) -> Out {
    let dir = std::env::temp_dir().join(format!("frcli-{}-{}", std::process::id(), args.join("_")));
    let mut c = Command::new(freeride_tests::built("freeride"))
        .args(args)
        .env("FREERIDE_DIR", &dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = c.try_wait().unwrap() {
            break Some(s);
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = c.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = c.wait();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut c.stderr.take().unwrap(), &mut stderr).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    Out {
        code: status.and_then(|s| s.code()),
        stderr,
    }
}

/// `args` must fail fast with a nonzero exit and a message containing every one of `needles`.
fn rejects(args: &[&str], needles: &[&str]) {
    let o = freeride(args);
    assert!(
        matches!(o.code, Some(c) if c != 0),
        "freeride {args:?}: expected a nonzero exit, got {:?}; stderr:\n{}",
        o.code,
        o.stderr
    );
    for n in needles {
        assert!(
            o.stderr.contains(n),
            "freeride {args:?}: message does not mention {n:?}:\n{}",
            o.stderr
        );
    }
}

#[test]
fn sim_rejects_bad_pipeline_shapes() {
    rejects(&["sim", "--stages", "0"], &["--stages", "0"]);
    rejects(&["sim", "--stages", "65"], &["--stages", "65"]);
    rejects(&["sim", "--stages", "abc"], &["--stages", "abc"]);
    rejects(&["sim", "--microbatches", "0"], &["--microbatches"]);
    rejects(&["sim", "--microbatches=-1"], &["--microbatches", "-1"]);
    // `-1` as a separate word is not taken as a value (clap reads it as an unknown flag).
    rejects(&["sim", "--microbatches", "-1"], &["-1"]);
}

#[test]
fn agent_rejects_bad_numbers() {
    rejects(&["agent", "--poll-us", "abc"], &["--poll-us", "abc"]);
    rejects(&["agent", "--poll-us=-5"], &["--poll-us", "-5"]);
    rejects(
        &["agent", "--metrics-port", "70000"],
        &["--metrics-port", "70000"],
    );
    rejects(&["agent", "--duration", "abc"], &["--duration", "abc"]);
    rejects(
        &["agent", "--gpu-mem-mib", "lots"],
        &["--gpu-mem-mib", "lots"],
    );
}

#[test]
fn unknown_commands_and_options_are_rejected() {
    rejects(&["bogus"], &["bogus"]);
    rejects(&["agent", "--no-such-option"], &["--no-such-option"]);
    rejects(&[], &["Usage"]);
}

/// A negative, NaN or infinite `--duration` is accepted today: -1 and NaN stop the agent at once,
/// and `inf` overflows the deadline so the agent also stops at once instead of running forever.
/// (agent/src/agent_cmd.rs is owned by another change; un-ignore once it validates the value.)
#[test]
fn agent_rejects_bad_duration() {
    for v in ["--duration=-1", "--duration=nan", "--duration=inf"] {
        rejects(&["agent", "--metrics-port", "0", v], &["--duration"]);
    }
}

#[test]
fn agent_rejects_a_metrics_address_that_is_not_host_port() {
    rejects(
        &["agent", "--metrics-addr", "nonsense"],
        &["--metrics-addr", "nonsense", "HOST:PORT"],
    );
}

#[test]
fn doctor_rejects_a_bad_probe_timeout() {
    rejects(&["doctor", "--probe-timeout", "0"], &["--probe-timeout"]);
}
