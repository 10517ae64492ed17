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
    freeride_env(args, &[])
}

/// [`freeride`] with more environment.
fn freeride_env(args: &[&str], env: &[(&str, &str)]) -> Out {
    let dir = std::env::temp_dir().join(format!("frcli-{}-{}", std::process::id(), args.join("_")));
    let mut c = Command::new(freeride_tests::built("freeride"))
        .args(args)
        .env("FREERIDE_DIR", &dir)
        .envs(env.iter().copied())
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

/// `args` must fail fast with exit status 2 (every usage error: one rule) and a message
/// containing every one of `needles`.
fn rejects(args: &[&str], needles: &[&str]) {
    let o = freeride(args);
    assert!(
        o.code == Some(2),
        "freeride {args:?}: expected exit status 2 (a usage error), got {:?}; stderr:\n{}",
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
    // `-1` as a separate word is a value too, refused for what it is (issue 16: it used to be
    // clap's "unexpected argument '-1'").
    for flag in ["--stages", "--microbatches", "--iterations", "--chunks"] {
        rejects(&["sim", flag, "-1"], &[flag, "-1", "must be at least 1"]);
    }
    rejects(&["demo", "--iterations", "-1"], &["must be at least 1"]);
    rejects(&["sim", "--f", "-1"], &["--f", "non-negative"]);
    // Exit status 2 like every other bad flag (issue 16: this one exited 1).
    rejects(&["sim", "--chunks", "3"], &["--chunks 3", "interleaved"]);
}

/// Nothing is scored in the iterations the agent learns in (issue 16: the figures of one
/// iteration were printed, with a forecast precision of 1.0 and no prediction made).
#[test]
fn sim_refuses_a_run_too_short_to_score() {
    for n in ["1", "2"] {
        rejects(
            &["sim", "--iterations", n],
            &["--iterations must be at least 3", "nothing would be scored"],
        );
    }
}

/// A job needs one simulated GPU per process (pp x tp x dp): a device count set too small is named up front
/// (issue 16: the stages died with "cudaSetDevice failed: 101").
#[test]
fn sim_names_a_too_small_simulated_gpu_count() {
    let o = freeride_env(&["sim", "--stages", "9"], &[("FREERIDE_SIM_DEVICES", "4")]);
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert!(
        o.stderr.contains("FREERIDE_SIM_DEVICES=4") && o.stderr.contains("needs 9 simulated GPUs"),
        "{}",
        o.stderr
    );
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
    // Polling every 0 µs is not a poll interval (issue 16: it was accepted).
    rejects(
        &["agent", "--poll-us", "0"],
        &["--poll-us", "must be at least 1"],
    );
    rejects(
        &["agent", "--poll-us", "-5"],
        &["--poll-us", "must be at least 1"],
    );
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

/// The SDK examples share one parser: `--help` prints the usage and exits 0, an unknown option is
/// refused with exit status 2 (issue 16: `pagerank --help` said "--help needs a value",
/// `train_loop --bogus 1` was accepted).
#[test]
fn sdk_examples_print_help_and_refuse_unknown_options() {
    for ex in ["pagerank", "train_loop", "image_batch"] {
        let exe = freeride_tests::built(&format!("examples/{ex}"));
        let help = Command::new(&exe).arg("--help").output().unwrap();
        let text = String::from_utf8_lossy(&help.stdout);
        assert_eq!(help.status.code(), Some(0), "{ex} --help: {help:?}");
        assert!(
            text.contains("Usage") && text.contains("--device") && text.contains("--standalone"),
            "{ex} --help:\n{text}"
        );
        let bad = Command::new(&exe)
            .args(["--bogus", "1", "--standalone"])
            .env("FREERIDE_DIR", "/nonexistent/freeride-test")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&bad.stderr);
        assert_eq!(bad.status.code(), Some(2), "{ex} --bogus 1: {err}");
        assert!(err.contains("unknown option --bogus"), "{ex}: {err}");
    }
}
