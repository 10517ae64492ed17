//! The gate on the launches a side task makes beyond single kernels on one GPU, on the test bed
//! with the ground truth of every kernel (grant blocks written here as the agent would): CUDA
//! graphs (one launch, many kernels), a side task driving two GPUs (each held by its own GPU's
//! grant), and its NCCL collectives between them (never left spinning on a GPU for a peer that
//! another GPU's grant holds back).
use freeride_abi::grant_shm::GrantWriter;
use freeride_abi::now_ns;
use freeride_tests::gatebed::{grant_cycles, heart, kill, sleep_until, Bed, Ran, MS};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Host scheduling slack on a busy 2-core machine (see gate_sidetask.rs).
const SCHED_SLACK: u64 = 2 * MS;

static SERIAL: Mutex<()> = Mutex::new(());

fn gate_side() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| freeride_tests::gate_side_bin("graphs"))
}

fn gate_nccl() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| freeride_tests::cprog("gate_nccl", &["-lcudart", "-lnccl"]))
}

/// Starts `bin args` as a side task and waits for its "ready".
fn start(bed: &Bed, bin: &Path, args: &[&str]) -> (Child, BufReader<ChildStdout>) {
    let mut child = bed
        .cmd(bin, "sidetask", args, &[("FREERIDE_SIM_DEVICES", "2")])
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "side task did not start");
    (child, out)
}

/// The grant (open, until) a kernel started in, if any (with the host slack after its end).
fn grant_of(k: &Ran, grants: &[(u64, u64)]) -> Option<usize> {
    grants
        .iter()
        .position(|g| k.start_ns >= g.0 && k.start_ns <= g.1 + SCHED_SLACK)
}

/// A graph of 4 kernels of 500 µs is one launch of 2 ms: its duration is learnt per executable
/// graph and each launch is held to the grant's remainder, so its kernels start and end inside
/// the grants.
#[test]
fn graph_launches_stay_inside_grants() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::new("graphs");
    let w = Arc::new(GrantWriter::create(&bed.session, freeride_tests::gpu(0)).unwrap());
    let _hb = heart(&w);
    let (child, _out) = start(&bed, gate_side(), &["graph", "500", "4"]);
    let pid = child.id();
    let closed = (now_ns(), now_ns() + 300 * MS);
    std::thread::sleep(Duration::from_millis(300));
    let grants = grant_cycles(&w, 6, 20 * MS, 20 * MS, 100 * MS);
    let to = now_ns();
    kill(child);
    let ks: Vec<Ran> = bed
        .ran(pid)
        .into_iter()
        .filter(|k| k.queued_ns <= to)
        .collect();
    assert!(
        ks.iter()
            .all(|k| k.start_ns < closed.0 || k.start_ns > closed.1),
        "a graph's kernel ran while the grant was closed"
    );
    let graph_ns = 4 * 500_000;
    let mut per_grant = vec![0usize; grants.len()];
    let mut worst_end = i64::MIN;
    for k in &ks {
        let g = grant_of(k, &grants)
            .unwrap_or_else(|| panic!("a graph kernel started outside every grant: {k:?}"));
        per_grant[g] += 1;
        worst_end = worst_end.max(k.end_ns as i64 - grants[g].1 as i64);
    }
    eprintln!(
        "graphs: {} kernels, per grant {per_grant:?}, worst end vs open_until {:.3} ms",
        ks.len(),
        worst_end as f64 / 1e6
    );
    // At most one graph's length past the end (the first launch, before its length is known,
    // is estimated at the default 1 ms), plus the host's slack.
    assert!(
        worst_end <= (graph_ns + SCHED_SLACK) as i64,
        "a graph kernel ended {worst_end} ns after its grant"
    );
    for (i, n) in per_grant.iter().enumerate().skip(1) {
        assert!(*n >= 16, "grant {i} ran only {n} graph kernels (4 graphs)");
    }
}

/// A side task with one thread on each of two GPUs: while GPU 0's grant is open and GPU 1's
/// closed only its GPU 0 work runs, and the other way round.
#[test]
fn a_two_gpu_sidetask_is_held_on_each_gpu_by_that_gpus_grant() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::new("two-gpus");
    let w: Vec<Arc<GrantWriter>> = (0..2)
        .map(|d| Arc::new(GrantWriter::create(&bed.session, freeride_tests::gpu(d)).unwrap()))
        .collect();
    let _hb: Vec<_> = w.iter().map(heart).collect();
    let (child, _out) = start(&bed, gate_side(), &["loop2", "500"]);
    let pid = child.id();
    let mut phases = vec![];
    for round in 0..4 {
        let (open, shut) = if round % 2 == 0 { (0, 1) } else { (1, 0) };
        w[shut].close(0);
        let t = now_ns();
        let until = w[open].open_for(150 * MS, 0, 0);
        phases.push((open as i32, t, until));
        sleep_until(until);
        w[open].close(0);
        std::thread::sleep(Duration::from_millis(20));
    }
    let to = now_ns();
    kill(child);
    let ks: Vec<Ran> = bed
        .ran(pid)
        .into_iter()
        .filter(|k| k.queued_ns <= to)
        .collect();
    let mut per_phase = vec![0usize; phases.len()];
    for k in &ks {
        let p = phases
            .iter()
            .position(|&(d, t, until)| {
                d == k.device && k.start_ns >= t && k.start_ns <= until + SCHED_SLACK
            })
            .unwrap_or_else(|| {
                panic!(
                    "a kernel on GPU {} ran outside its GPU's grants: {k:?} {phases:?}",
                    k.device
                )
            });
        per_phase[p] += 1;
    }
    eprintln!("two GPUs: kernels per phase (GPU 0, 1, 0, 1 open): {per_phase:?}");
    for (i, n) in per_phase.iter().enumerate() {
        assert!(
            *n >= 50,
            "phase {i} ran only {n} kernels of 500 µs on its open GPU"
        );
    }
}

/// A side task all-reducing between GPUs 0 and 1 from one process: its collective starts only
/// when both GPUs' grants admit it, so no NCCL kernel of it waits (spins) on one GPU for its peer
/// held on the other; with both grants open it runs, inside them.
#[test]
fn a_two_gpu_sidetasks_collectives_wait_for_both_gpus_grants() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::new("two-gpu-nccl");
    let w: Vec<Arc<GrantWriter>> = (0..2)
        .map(|d| Arc::new(GrantWriter::create(&bed.session, freeride_tests::gpu(d)).unwrap()))
        .collect();
    let _hb: Vec<_> = w.iter().map(heart).collect();
    // 1.25 M floats: an all-reduce of ~500 µs on the test bed.
    let (child, _out) = start(&bed, gate_nccl(), &["1250000"]);
    let pid = child.id();
    // Only one GPU's grant open at a time: nothing may start.
    let mut one_sided = vec![];
    for d in [0usize, 1] {
        let t = now_ns();
        let until = w[d].open_for(200 * MS, 0, 0);
        sleep_until(until);
        w[d].close(0);
        one_sided.push((t, until));
    }
    // Both open together.
    let mut both = vec![];
    for _ in 0..4 {
        let t = now_ns();
        let until = t + 20 * MS;
        for g in &w {
            g.open_for(until - now_ns(), 0, 0);
        }
        both.push((t, until));
        sleep_until(until);
        for g in &w {
            g.close(0);
        }
        sleep_until(t + 60 * MS);
    }
    let to = now_ns();
    kill(child);
    let ks: Vec<Ran> = bed
        .ran(pid)
        .into_iter()
        .filter(|k| k.comm && k.queued_ns <= to)
        .collect();
    for k in &ks {
        assert!(
            !one_sided
                .iter()
                .any(|&(t, u)| k.start_ns >= t && k.start_ns <= u),
            "an all-reduce kernel started on GPU {} while only one GPU's grant was open: {k:?}",
            k.device
        );
    }
    let mut per_grant = vec![[0usize; 2]; both.len()];
    let mut worst_end = i64::MIN;
    for k in &ks {
        let g = grant_of(k, &both)
            .unwrap_or_else(|| panic!("an all-reduce kernel started outside the grants: {k:?}"));
        per_grant[g][k.device as usize] += 1;
        worst_end = worst_end.max(k.end_ns as i64 - both[g].1 as i64);
    }
    eprintln!(
        "two-GPU all-reduce: kernels per grant (GPU 0, GPU 1) {per_grant:?}, worst end vs \
         open_until {:.3} ms",
        worst_end as f64 / 1e6
    );
    assert!(
        worst_end <= (2 * MS + SCHED_SLACK) as i64,
        "an all-reduce kernel ended {worst_end} ns after its grant"
    );
    for (i, n) in per_grant.iter().enumerate().skip(1) {
        assert!(
            n[0] >= 4 && n[0] == n[1],
            "grant {i}: all-reduce kernels on GPU 0 and 1: {n:?}"
        );
    }
}
