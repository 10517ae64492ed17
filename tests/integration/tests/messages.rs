//! Messages that name the real cause, and reports that carry every figure (issue 16).
use freeride_abi::scratch::ScratchDir;
use freeride_tests::built;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;

/// One simulated job at a time: the 2-core machine is shared.
static SERIAL: Mutex<()> = Mutex::new(());

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A real session directory and a symlink to it, in /dev/shm.
fn linked_session(tag: &str) -> (ScratchDir, PathBuf) {
    let d = ScratchDir::new_in(Path::new("/dev/shm"), &format!("freeride-msg-{tag}")).unwrap();
    let link = d.with_extension("link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(d.path(), &link).unwrap();
    freeride_abi::scratch::remove_at_exit(&link);
    (d, link)
}

fn freeride(args: &[&str], env: &[(&str, &Path)]) -> Output {
    Command::new(built("freeride"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A symlinked session directory is named as one (it used to be "not a directory"); a trainer
/// still runs, unobserved, with one warning line (the README: everything fails open for the
/// trainer), a side task is refused (ungated, it would slow the trainer), and so is the agent.
#[test]
fn a_symlinked_session_directory_is_named_and_only_the_trainer_runs() {
    let (_d, link) = linked_session("link");
    let env = [("FREERIDE_DIR", link.as_path())];
    let trainer = freeride(&["run", "--", "sh", "-c", "echo ran"], &env);
    let err = text(&trainer.stderr);
    assert_eq!(trainer.status.code(), Some(0), "{err}");
    assert_eq!(text(&trainer.stdout).trim(), "ran");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("is a symbolic link") && err.contains("unobserved"),
        "{err}"
    );
    let side = freeride(&["run", "--role", "sidetask", "--", "true"], &env);
    let err = text(&side.stderr);
    assert_eq!(side.status.code(), Some(2), "{err}");
    assert!(err.contains("is a symbolic link"), "{err}");
    let agent = freeride(&["agent", "--metrics-port", "0", "--duration", "1"], &env);
    let err = text(&agent.stderr);
    assert_eq!(agent.status.code(), Some(2), "{err}");
    assert!(err.contains("is a symbolic link"), "{err}");
}

/// A process preloaded with an unusable session directory says so, once, and runs as without
/// freeride (it used to fail open without a word).
#[test]
fn a_preload_with_a_bad_session_directory_says_so_once() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_d, link) = linked_session("preload");
    let out = Command::new(built("pipesim"))
        .args(["--stages", "1", "--microbatches", "2", "--iterations", "2"])
        .args(["--f", "1", "--b", "1", "--w", "1"])
        .env("LD_PRELOAD", built("libfreeride.so"))
        .env("FREERIDE_DIR", &link)
        .env_remove("FREERIDE_SIM_DIR")
        .env_remove("FREERIDE_TRACE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("freeride: session directory"))
        .collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(
        said[0].contains("symbolic link") && said[0].contains("unobserved"),
        "{err}"
    );
}

/// `freeride run --trace` on a program that never calls CUDA still shows the interposer was
/// there: its process_start and process_exit lines (it used to write nothing).
#[test]
fn a_trace_shows_a_process_without_cuda() {
    let d = ScratchDir::new_in(Path::new("/dev/shm"), "freeride-msg-trace").unwrap();
    let trace = d.join("trace.jsonl");
    let out = Command::new(built("freeride"))
        .args(["run", "--dir"])
        .arg(d.join("session"))
        .arg("--trace")
        .arg(&trace)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<Value> = std::fs::read_to_string(&trace)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = lines.iter().filter_map(|l| l["kind"].as_str()).collect();
    assert_eq!(kinds, ["process_start", "process_exit"], "{lines:?}");
    assert_eq!(lines[0]["role"], "trainer");
    assert_eq!(lines[0]["pid"], lines[1]["pid"]);
}

/// Another user's session directory: "permission denied", not "no agent serves" (needs root to
/// run a child as uid 65534).
#[test]
fn status_of_another_users_directory_says_permission_denied() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to run a child as uid 65534");
        return;
    }
    use std::os::unix::process::CommandExt;
    let d = ScratchDir::new_in(Path::new("/dev/shm"), "freeride-msg-other").unwrap();
    let out = Command::new(built("freeride"))
        .args(["status", "--dir"])
        .arg(d.path())
        .uid(65534)
        .gid(65534)
        .env_clear()
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("permission denied") && err.contains("uid 0"),
        "{err}"
    );
}

/// A `freeride` copied away from its build starts no cargo build (it used to start a debug build
/// of the workspace and fail with "libfreeride.so still missing after the build"): it names what
/// is missing and how to get it. Copied alone, what it misses is the test bed's program
/// (`freeride-sim`); copied with that program, the program names the rest of the test bed.
#[test]
fn a_copied_freeride_names_the_missing_test_bed_and_builds_nothing() {
    let d = ScratchDir::new("freeride-msg-copy").unwrap();
    let exe = d.join("freeride");
    std::fs::copy(built("freeride"), &exe).unwrap();
    let marker = d.join("cargo-ran");
    let cargo =
        freeride_tests::stand_in_cargo(&d, &format!("touch '{}'\nexit 1", marker.display()));
    let run = |cmd: &str| {
        let out = freeride_tests::output_of_new_exe(
            Command::new(&exe)
                .arg(cmd)
                .env("CARGO", &cargo)
                .env_remove("CARGO_MANIFEST_DIR"),
        );
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {err}");
        assert!(!marker.exists(), "{cmd} started a build: {err}");
        assert_eq!(err.lines().count(), 1, "{cmd}: {err}");
        err
    };
    for cmd in ["demo", "sim"] {
        let err = run(cmd);
        assert!(
            err.contains("freeride-sim missing")
                && err.contains("pip install freeride")
                && err.contains("cargo build"),
            "{cmd}: {err}"
        );
    }
    let sim = d.join("freeride-sim");
    std::fs::copy(built("freeride-sim"), &sim).unwrap();
    // Once it has run, it is no longer busy for the exec of `freeride` either (see
    // output_of_new_exe).
    freeride_tests::output_of_new_exe(Command::new(&sim).arg("--version"));
    for cmd in ["demo", "sim"] {
        let err = run(cmd);
        assert!(
            err.starts_with(&format!("freeride {cmd}: "))
                && err.contains("libfreeride.so")
                && err.contains("pipesim")
                && err.contains("cargo build"),
            "{cmd}: {err}"
        );
    }
}

fn sim(args: &[&str]) -> (Option<i32>, String, String) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new(built("freeride"))
        .arg("sim")
        .args(args)
        .env("FREERIDE_SIDETASK_NICE", "0")
        .env_remove("FREERIDE_SIM_DEVICES")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// The text report carries the figures of the JSON: with side tasks, the harvest and the
/// trainer's slowdown (they were missing); a side task that ran out of work (pagerank converged)
/// is named, in both forms (the harvest used to read low with no word why).
#[test]
fn sim_reports_say_what_the_json_says_and_when_a_side_task_finished() {
    let job = [
        "--stages",
        "2",
        "--microbatches",
        "4",
        "--iterations",
        "4",
        "--sidetasks",
        "1",
        "--sidetask-kind",
        "pagerank",
        // Converges at once, and runs ungated (no waiting for the agent to learn the job): the
        // side tasks finish in the job's first iteration.
        "--sidetask-arg=--tol=10",
        "--sidetask-mode",
        "naive",
    ];
    let (code, out, err) = sim(&job);
    assert_eq!(code, Some(0), "{err}");
    for want in [
        "harvest",
        "of the bubble time kept busy",
        "slowdown",
        "finished its work",
    ] {
        assert!(out.contains(want), "text report lacks {want:?}:\n{out}");
    }
    assert!(!out.contains("NaN"), "{out}");
    let (code, out, err) = sim(&[&job[..], &["--json"]].concat());
    assert_eq!(code, Some(0), "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    let ended = r["harvest"]["sidetasks_ended"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(ended.len(), 2, "{r}");
    assert!(ended.iter().all(|e| e["finished"] == true), "{r}");
    assert!(err.contains("finished its work"), "{err}");
}

/// One stage has (almost) no bubble: no "NaN" in the text, and forecast figures only when the
/// agent predicted a bubble's end (without a prediction they read 1.0, issue 16: they must be
/// null); a job of more than 8 stages gets its simulated GPUs. (One stage still idles a little at
/// each iteration's end, in its host's synchronize, and that short bubble may be predicted.)
#[test]
fn sim_reports_no_nan_and_no_forecast_without_prediction() {
    let (code, out, err) = sim(&["--stages", "1", "--iterations", "3", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    let inf = &r["inference"];
    let predicted = !inf["predicted_end_error_us_p50"].is_null();
    assert_eq!(inf["forecast_precision"].is_null(), !predicted, "{r}");
    assert_eq!(inf["forecast_recall"].is_null(), !predicted, "{r}");
    let (code, out, err) = sim(&["--stages", "1", "--iterations", "3"]);
    assert_eq!(code, Some(0), "{err}");
    // The text says n/a where the JSON has null: a job whose short bubbles got no prediction (most
    // runs of this one) shows no forecast either.
    assert!(!out.contains("NaN"), "{out}");
    let predicted = !out.contains("predicted end error p50 n/a");
    assert_eq!(out.contains("forecast n/a / n/a"), !predicted, "{out}");
    let (code, out, err) = sim(&[
        "--stages",
        "9",
        "--microbatches",
        "9",
        "--iterations",
        "3",
        "--f",
        "1",
        "--b",
        "1",
        "--w",
        "1",
        "--json",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["stages"], 9, "{r}");
}
