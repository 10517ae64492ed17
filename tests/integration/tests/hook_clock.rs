//! The hook clock ([`freeride_abi::clock`]: the calibrated TSC) keeps every record on the one
//! time line of the test bed: two processes of three launching threads each run at once on the
//! simulated GPU, and every launch record of every thread must sit just before the time the
//! stand-in driver took for that kernel (`queued_ns` of the ground truth, `CLOCK_MONOTONIC`):
//! never after it by more than the clock's stated error, and a few microseconds before it as a
//! rule. A clock off by a per-process offset, a wrong rate or a lost anchor fails this. The same
//! runs with `FREERIDE_CLOCK=monotonic` (clock_gettime) check the fallback.
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A launch record may be this much later than the driver's own clock read after it: the TSC
/// clock's anchor half-width and rate error are tens of nanoseconds here; 5 µs is their bound
/// with a pair window of `PAIR_MAX_TICKS` at 2 GHz.
const LATE_NS: i64 = 5_000;
/// The median launch record is at most this much earlier than the driver's clock read (the
/// stand-in runtime and driver between the two take a few microseconds).
const MEDIAN_LEAD_NS: i64 = 100_000;

const THREADS: &str = "3";
const LAUNCHES: &str = "150";

fn prog() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| freeride_tests::cprog("clock_threads", &["-lcudart"]))
        .clone()
}

fn lines(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

struct Outcome {
    /// pid -> features word of its ring.
    features: HashMap<u64, u32>,
    /// Per-record lead of the driver's clock over the hook's (queued_ns - t_ns), all processes.
    leads: Vec<i64>,
}

/// Runs two processes at once with `env`, checks every record against the truth.
fn run(name: &str, env: &[(&str, &str)]) -> Outcome {
    let (root, session) = freeride_tests::shm_session(&format!("hook-clock-{name}"));
    let truth = root.join("truth.jsonl");
    let trace = root.join("trace.jsonl");
    let standins = pipesim::standins::ensure_dir().unwrap();
    let children: Vec<_> = (0..2)
        .map(|_| {
            let mut c = Command::new(prog());
            c.args([THREADS, LAUNCHES])
                .env("LD_PRELOAD", freeride_tests::built("libfreeride.so"))
                .env("LD_LIBRARY_PATH", &standins)
                .env("FREERIDE_DIR", &session)
                .env("FREERIDE_SIM_DIR", root.join("sim"))
                .env("FREERIDE_SIM_TRACE", &truth)
                .env("FREERIDE_TRACE", &trace)
                .env_remove("FREERIDE_CLOCK");
            for (k, v) in env {
                c.env(k, v);
            }
            c.spawn().unwrap()
        })
        .collect();
    let pids: Vec<u64> = children.iter().map(|c| c.id() as u64).collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "clock_threads failed");
    }
    let gt = lines(&truth);
    let tr = lines(&trace);
    let mut features = HashMap::new();
    for ring in freeride_abi::session::list_rings(&session).unwrap() {
        let bytes = std::fs::read(&ring).unwrap();
        let pid = u32::from_le_bytes(bytes[24..28].try_into().unwrap()) as u64;
        features.insert(pid, u32::from_le_bytes(bytes[48..52].try_into().unwrap()));
    }
    let mut leads = Vec::new();
    for pid in pids {
        // Per stream: the truth's kernels in queue order, the launch records in ring order.
        let mut queued: HashMap<u64, Vec<i64>> = HashMap::new();
        for g in gt.iter().filter(|g| g["pid"] == pid) {
            queued
                .entry(g["stream"].as_u64().unwrap())
                .or_default()
                .push(g["queued_ns"].as_i64().unwrap());
        }
        let mut recorded: HashMap<u64, Vec<i64>> = HashMap::new();
        let mut last_by_tid: HashMap<u64, i64> = HashMap::new();
        for e in tr
            .iter()
            .filter(|e| e["pid"] == pid && e["kind"] == "launch")
        {
            let t = e["t_ns"].as_i64().unwrap();
            let tid = e["tid"].as_u64().unwrap();
            let last = last_by_tid.insert(tid, t).unwrap_or(0);
            assert!(t >= last, "pid {pid} tid {tid}: {t} after {last}");
            recorded
                .entry(e["stream"].as_u64().unwrap())
                .or_default()
                .push(t);
        }
        assert_eq!(recorded.len(), 3, "pid {pid}: one stream per thread");
        assert_eq!(last_by_tid.len(), 3, "pid {pid}: three launching threads");
        for (stream, rec) in &recorded {
            let mut q = queued.remove(stream).unwrap_or_default();
            q.sort_unstable();
            assert_eq!(q.len(), rec.len(), "pid {pid} stream {stream}: kernels");
            for (t, q) in rec.iter().zip(&q) {
                let lead = q - t;
                assert!(
                    lead >= -LATE_NS,
                    "pid {pid} stream {stream}: launch recorded at {t}, {} ns after the driver \
                     queued it at {q}",
                    -lead
                );
                leads.push(lead);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    leads.sort_unstable();
    let median = leads[leads.len() / 2];
    eprintln!(
        "{name}: {} launches, driver's clock read after the hook's by: min {} ns, median {median} \
         ns, p99 {} ns",
        leads.len(),
        leads[0],
        leads[leads.len() * 99 / 100]
    );
    assert!(
        median < MEDIAN_LEAD_NS,
        "{name}: launch records {median} ns (median) before the driver's time"
    );
    Outcome { features, leads }
}

/// Whether this machine's hooks read the TSC (the same decision the interposer makes).
fn tsc_in_use_here() -> bool {
    freeride_abi::clock::start();
    let c = freeride_abi::clock::ThreadClock::new();
    let t0 = freeride_abi::now_ns();
    while freeride_abi::clock::mode() == freeride_abi::clock::Mode::Calibrating
        && freeride_abi::now_ns() - t0 < 100_000_000
    {
        std::hint::black_box(c.now());
    }
    freeride_abi::clock::mode() == freeride_abi::clock::Mode::Tsc
}

#[test]
fn records_of_several_processes_and_threads_sit_on_the_truths_time_line() {
    let tsc = tsc_in_use_here() && std::env::var("FREERIDE_CLOCK").is_err();
    let o = run("tsc", &[]);
    assert_eq!(o.features.len(), 2);
    for (pid, f) in &o.features {
        assert_eq!(
            f & freeride_abi::ring::FEATURE_TSC_CLOCK != 0,
            tsc,
            "pid {pid}: features {f:#x}, TSC usable here: {tsc}"
        );
    }
    let m = run("monotonic", &[("FREERIDE_CLOCK", "monotonic")]);
    for (pid, f) in &m.features {
        assert_eq!(f & freeride_abi::ring::FEATURE_TSC_CLOCK, 0, "pid {pid}");
    }
    // With clock_gettime the hook's time is always before the driver's.
    assert!(m.leads[0] >= 0, "clock_gettime went backwards?");
    let _ = std::fs::remove_dir_all(prog().parent().unwrap());
}
