//! PyTorch's own pipeline schedules (`tests/pipesim/schedules/torch/`, compute_comms CSVs exported
//! from torch.distributed.pipelining) run with the torch runtime's semantics: a subset reproduces
//! its reference iteration and idle per rank (x 10 ms per stage) within 5 % of the iteration, with
//! receives posted early and deferred (`scripts/bench-torch-schedules` runs all 56); a wrong CSV is
//! refused before anything starts, naming the cell.
//!
//! Tolerance as in pipesim_schedules.rs (a miss is run again, three runs at most: a stall of the
//! shared machine only lengthens the run it hits).
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

fn schedules() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../pipesim/schedules/torch")
}

fn reference(file: &str) -> (f64, f64) {
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(schedules().join("index.json")).unwrap())
            .unwrap();
    let s = index["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["file"] == file)
        .unwrap_or_else(|| panic!("{file} not in index.json"));
    let r = &s["reference"];
    (
        r["iteration"].as_f64().unwrap() * 10.0,
        r["idle_per_rank"].as_f64().unwrap() * 10.0,
    )
}

fn compare(file: &str) -> Result<(), String> {
    let (want_it, want_idle) = reference(file);
    let out = {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        Command::new(freeride_tests::built("pipesim"))
            .arg("--schedule-csv")
            .arg(schedules().join(file))
            .args([
                "--f",
                "10",
                "--b",
                "10",
                "--w",
                "10",
                "--iterations",
                "3",
                "--json",
            ])
            .args(["--timeout", "120"])
            .output()
            .unwrap()
    };
    assert!(
        out.status.success(),
        "{file}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let it = v["iteration_ms"].as_f64().unwrap();
    let idle: Vec<f64> = v["idle_ms_per_rank"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    eprintln!("{file}: iteration {it:.2} (want {want_it}), idle {idle:.2?} (want {want_idle})");
    assert_eq!(v["style"], "torch");
    let tol = 0.05 * want_it;
    if (it - want_it).abs() > tol {
        return Err(format!("{file}: iteration {it} ms, want {want_it} ± {tol}"));
    }
    for (r, i) in idle.iter().enumerate() {
        if (i - want_idle).abs() > tol {
            return Err(format!(
                "{file}: rank {r} idle {i} ms, want {want_idle} ± {tol}"
            ));
        }
    }
    Ok(())
}

fn check(file: &str) {
    freeride_tests::within_three_tries(|| compare(file));
}

#[test]
fn zbv_zero_bubble_p4_m8_receives_early() {
    check("ZBVZeroBubble-p4-m8.csv");
}

#[test]
fn interleaved_1f1b_p4_m4_receives_early() {
    check("Interleaved1F1B-p4-m4.csv");
}

#[test]
fn dualpipev_p2_m4_deferred() {
    check("DualPipeV-p2-m4-deferred.csv");
}

#[test]
fn interleaved_zero_bubble_p2_m4_deferred() {
    check("InterleavedZeroBubble-p2-m4-deferred.csv");
}

/// A wrong CSV: exit status 2, one line naming the cell, nothing started, never a hang.
fn refused(name: &str, text: &str, want: &[&str]) {
    let dir = std::env::temp_dir().join(format!("freeride-badcsv-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{name}.csv"));
    std::fs::write(&file, text).unwrap();
    let t0 = Instant::now();
    let out = Command::new(freeride_tests::built("pipesim"))
        .arg("--schedule-csv")
        .arg(&file)
        .env("FREERIDE_SIM_DIR", dir.join("sim"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let sim_made = dir.join("sim").exists();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.status.code(), Some(2), "{name}: {err}");
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "{name} took {:?}",
        t0.elapsed()
    );
    assert_eq!(err.trim().lines().count(), 1, "{name}: one line: {err}");
    for w in want {
        assert!(err.contains(w), "{name}: {err:?} lacks {w:?}");
    }
    assert!(!sim_made, "{name}: something started");
}

#[test]
fn a_wrong_csv_is_refused_naming_the_cell() {
    refused(
        "unknown",
        "0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1BACK0,1SEND_B0\n",
        &["unknown.csv: row 2, column 3 (\"1BACK0\"): unknown action"],
    );
    refused(
        "nosend",
        "0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1\n",
        &["row 2, column 5 (\"1RECV_F1\"): a receive with no matching send"],
    );
    // Rank 0 posts its gradient's receive before its activation's send on the one stream it
    // shares with rank 1, which waits for that activation before it sends the gradient.
    refused(
        "cycle",
        "0RECV_B0,0F0,0SEND_F0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n",
        &[
            "deadlocks",
            "row 1, column 1 (\"0RECV_B0\")",
            "row 2, column 1 (\"1RECV_F0\")",
        ],
    );
}
