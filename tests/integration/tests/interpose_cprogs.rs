//! libfreeride.so under small C programs, one per way a real library reaches the GPU.
//! The programs (tests/cprogs) are compiled with the system `cc` into a temp dir, linked against
//! tiny fake CUDA/NCCL libraries (tests/cprogs/fake_*.c), run under LD_PRELOAD, and the
//! FREERIDE_TRACE JSON lines are counted exactly.
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// target/<profile>/ (see freeride_tests::release_dir).
fn target_dir() -> PathBuf {
    freeride_tests::release_dir()
}

fn preload() -> PathBuf {
    let p = target_dir().join("libfreeride.so");
    assert!(
        p.exists(),
        "{} missing: cargo build --release -p freeride-interpose",
        p.display()
    );
    p
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../cprogs")
}

fn cc(args: &[&str]) {
    let out = Command::new("cc").args(args).output().expect("cc");
    assert!(
        out.status.success(),
        "cc {:?}: {}",
        args,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds the fakes and programs once per test binary.
fn bin() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("freeride-cprogs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let lib = d.join("lib");
        std::fs::create_dir_all(&lib).unwrap();
        // Kept for every test of this binary (a static is never dropped): removed at its exit.
        freeride_abi::scratch::remove_at_exit(&d);
        let s = src();
        let sp = |n: &str| s.join(n).to_str().unwrap().to_string();
        let lp = |n: &str| lib.join(n).to_str().unwrap().to_string();
        for (file, so) in [
            ("fake_cuda.c", "libcuda.so.1"),
            ("fake_cudart.c", "libcudart.so.13"),
            ("fake_nccl.c", "libnccl.so.2"),
        ] {
            cc(&[
                "-shared",
                "-fPIC",
                "-O1",
                "-o",
                &lp(so),
                &format!("-Wl,-soname,{so}"),
                &sp(file),
                "-ldl",
                "-lpthread",
            ]);
            let base = so.split(".so").next().unwrap();
            std::os::unix::fs::symlink(so, lib.join(format!("{base}.so"))).unwrap();
        }
        let libdir = format!("-L{}", lib.display());
        cc(&[
            "-shared",
            "-fPIC",
            "-O1",
            "-o",
            &lp("libnextuser.so"),
            &sp("libnextuser.c"),
            "-ldl",
        ]);
        cc(&[
            "-shared",
            "-fPIC",
            "-O1",
            "-o",
            &lp("libseenatftruncate.so"),
            &sp("shim_seen_at_ftruncate.c"),
            "-ldl",
        ]);
        cc(&[
            "-shared",
            "-fPIC",
            "-O1",
            "-o",
            &lp("libncclpart.so"),
            &sp("libncclpart.c"),
            &libdir,
            "-lnccl",
        ]);
        let out = |n: &str| d.join(n).to_str().unwrap().to_string();
        for p in ["runtime", "threads", "fork", "fork_load", "signals"] {
            cc(&[
                "-O1",
                "-o",
                &out(p),
                &sp(&format!("prog_{p}.c")),
                &libdir,
                "-lcudart",
                "-lpthread",
            ]);
        }
        for p in [
            "dlsym_handle",
            "getproc_v2",
            "getproc_v1",
            "nocuda",
            "nccl_local",
        ] {
            cc(&["-O1", "-o", &out(p), &sp(&format!("prog_{p}.c")), "-ldl"]);
        }
        cc(&[
            "-O1",
            "-o",
            &out("dlclose"),
            &sp("prog_dlclose.c"),
            "-ldl",
            "-lpthread",
        ]);
        cc(&[
            "-O1",
            "-o",
            &out("rtld_next"),
            &sp("prog_rtld_next.c"),
            &libdir,
            "-Wl,--no-as-needed",
            "-lnextuser",
            "-lcuda",
            "-ldl",
        ]);
        d
    })
}

struct Run {
    stdout: String,
    events: Vec<Value>,
    dir: PathBuf,
}

fn run_with(prog: &str, args: &[&str], env: &[(&str, &str)], with_preload: bool) -> Run {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let d = bin();
    let work = d.join(format!("run-{prog}-{n}"));
    std::fs::create_dir_all(&work).unwrap();
    let sess = work.join("session");
    std::fs::create_dir(&sess).unwrap();
    std::fs::set_permissions(&sess, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let trace = work.join("trace.jsonl");
    let mut c = Command::new(d.join(prog));
    c.args(args)
        .current_dir(&work)
        .env("LD_LIBRARY_PATH", d.join("lib"))
        .env("FREERIDE_TRACE", &trace)
        .env("FREERIDE_DIR", &sess);
    if prog == "nccl_local" || prog == "dlclose" {
        // The fake GPU's ground truth (fopen per kernel: not for the signal test).
        c.env("FAKE_GT", work.join("gt.jsonl"));
    }
    if with_preload {
        c.env("LD_PRELOAD", preload());
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{prog} failed: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("OK"), "{prog}: {stdout}");
    let events = std::fs::read_to_string(&trace)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l}: {e}")))
        .collect();
    Run {
        stdout,
        events,
        dir: work,
    }
}

fn run(prog: &str) -> Run {
    run_with(prog, &[], &[], true)
}

/// In every process's lines a GPU is introduced by its `device_info` (once) before any other line
/// names it: a forked child and an exec'd image introduce theirs again.
fn gpus_introduced_first(ev: &[Value]) {
    let mut seen: HashSet<(u64, String)> = HashSet::new();
    for e in ev {
        let (Some(pid), Some(gpu)) = (e["pid"].as_u64(), e["device"].as_str()) else {
            continue;
        };
        let key = (pid, gpu.to_string());
        if e["kind"] == "device_info" {
            assert!(seen.insert(key), "a second device_info: {e}");
        } else {
            assert!(
                seen.contains(&key),
                "{e} names a GPU before its device_info"
            );
        }
    }
    assert!(!seen.is_empty(), "no device_info at all");
}

/// (kind, api) -> count.
fn counts(ev: &[Value]) -> HashMap<(String, String), usize> {
    let mut m = HashMap::new();
    for e in ev {
        for f in ["t_ns", "pid", "kind", "api"] {
            assert!(e.get(f).is_some(), "missing {f}: {e}");
        }
        *m.entry((
            e["kind"].as_str().unwrap().to_string(),
            e["api"].as_str().unwrap().to_string(),
        ))
        .or_default() += 1;
    }
    m
}

fn get(m: &HashMap<(String, String), usize>, kind: &str, api: &str) -> usize {
    m.get(&(kind.to_string(), api.to_string()))
        .copied()
        .unwrap_or(0)
}

fn total(m: &HashMap<(String, String), usize>, kind: &str) -> usize {
    m.iter()
        .filter(|((k, _), _)| k == kind)
        .map(|(_, v)| v)
        .sum()
}

#[test]
fn runtime_symbols_are_counted_once() {
    let r = run("runtime");
    let m = counts(&r.events);
    assert_eq!(get(&m, "launch", "__cudaLaunchKernel"), 100);
    assert_eq!(get(&m, "launch", "cudaLaunchKernel"), 30);
    assert_eq!(get(&m, "launch", "cudaLaunchKernelExC"), 20);
    assert_eq!(
        total(&m, "launch"),
        150,
        "a runtime launch that reaches the driver wrapper is one launch: {m:?}"
    );
    assert_eq!(get(&m, "graph_launch", "cudaGraphLaunch"), 5);
    assert_eq!(total(&m, "graph_launch"), 5);
    assert_eq!(get(&m, "sync", "cudaStreamSynchronize"), 1);
    assert_eq!(get(&m, "process_start", "none"), 1);
    assert_eq!(get(&m, "process_exit", "none"), 1);
    let l = r
        .events
        .iter()
        .find(|e| e["api"] == "cudaLaunchKernel")
        .unwrap();
    assert_eq!(l["grid"], serde_json::json!([4, 2, 1]));
    assert_eq!(l["block"], serde_json::json!([128, 1, 1]));
    assert_eq!(l["stream"], 0x20);
    assert_eq!(l["shmem"], 64);
    // The GPU by its bus id (the fake driver puts ordinal 0 at bus 0x20), not the ordinal.
    assert_eq!(l["device"], "0000:20:00.0");
}

#[test]
fn driver_via_dlsym_on_a_handle() {
    let m = counts(&run("dlsym_handle").events);
    assert_eq!(get(&m, "launch", "cuLaunchKernel"), 50);
    assert_eq!(get(&m, "launch", "cuLaunchKernelEx"), 40);
    assert_eq!(get(&m, "launch", "cuLaunchCooperativeKernel"), 30);
    assert_eq!(get(&m, "graph_launch", "cuGraphLaunch"), 20);
    assert_eq!(total(&m, "launch"), 120);
}

#[test]
fn driver_via_cu_get_proc_address_v2() {
    let r = run("getproc_v2");
    let m = counts(&r.events);
    assert_eq!(get(&m, "launch", "cuLaunchKernel"), 11);
    assert_eq!(get(&m, "launch", "cuLaunchKernel_ptsz"), 12);
    assert_eq!(
        get(&m, "launch", "cuLaunchKernelEx"),
        13,
        "look-ups through the handed-out cuGetProcAddress"
    );
    // cudaVersion 99000 is unknown: handed through untouched, so not seen.
    assert_eq!(total(&m, "launch"), 36);
    let ex = r
        .events
        .iter()
        .find(|e| e["api"] == "cuLaunchKernelEx")
        .unwrap();
    assert_eq!(ex["stream"], 0x51);
}

#[test]
fn driver_via_cu_get_proc_address_v1() {
    let m = counts(&run("getproc_v1").events);
    assert_eq!(get(&m, "launch", "cuLaunchKernel"), 25);
    assert_eq!(total(&m, "launch"), 25);
}

#[test]
fn driver_via_rtld_next_from_another_library() {
    let m = counts(&run("rtld_next").events);
    assert_eq!(get(&m, "launch", "cuLaunchKernel"), 17);
}

#[test]
fn nccl_in_a_local_scope_with_gpu_side_timing() {
    let r = run("nccl_local");
    let m = counts(&r.events);
    assert_eq!(get(&m, "comm", "ncclSend"), 4);
    assert_eq!(get(&m, "comm", "ncclRecv"), 3);
    assert_eq!(get(&m, "comm", "ncclAllReduce"), 1);
    assert_eq!(get(&m, "comm_group", "ncclGroupStart"), 1);
    assert_eq!(get(&m, "comm_group", "ncclGroupEnd"), 1);
    // NCCL's own kernels (through its cuGetProcAddress) are launches too: 3+2+1 ungrouped,
    // 2 streams in the group.
    assert_eq!(get(&m, "launch", "cuLaunchKernel"), 8);
    let send = r.events.iter().find(|e| e["api"] == "ncclSend").unwrap();
    assert_eq!(
        (
            send["peer"].as_i64(),
            send["bytes"].as_u64(),
            send["stream"].as_u64()
        ),
        (Some(1), Some(4096), Some(0x80))
    );
    let recv = r.events.iter().find(|e| e["api"] == "ncclRecv").unwrap();
    assert_eq!(
        (recv["peer"].as_i64(), recv["bytes"].as_u64()),
        (Some(2), Some(512))
    );
    let grouped: Vec<_> = r
        .events
        .iter()
        .filter(|e| e["kind"] == "comm" && e["group"] != 0)
        .collect();
    assert_eq!(grouped.len(), 2);
    assert_eq!(grouped[0]["bytes"], 80);
    // One begin/end per ungrouped op and per stream of the group.
    assert_eq!(total(&m, "comm_begin"), 8, "{m:?}");
    assert_eq!(total(&m, "comm_end"), 8);
    // GPU-side times within 1 ms of the fake GPU's ground truth (kernel start/end per stream).
    let gt: Vec<Value> = std::fs::read_to_string(r.dir.join("gt.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for kind in ["comm_begin", "comm_end"] {
        for e in r.events.iter().filter(|e| e["kind"] == kind) {
            let t = e["t_ns"].as_i64().unwrap();
            let field = if kind == "comm_begin" {
                "start_ns"
            } else {
                "end_ns"
            };
            let best = gt
                .iter()
                .filter(|g| g["stream"] == e["stream"])
                .map(|g| (g[field].as_i64().unwrap() - t).abs())
                .min()
                .unwrap();
            // The fake driver has no event timing: these times are poll midpoints, exact to their
            // stated uncertainty (the poller's interval), plus scheduling slack on a busy machine.
            // (The GPU-clock path is checked within 1 ms against the stand-ins in interpose_pipesim.)
            let unc = e["uncertainty_ns"].as_i64().unwrap_or(0);
            assert!(
                best < 1_000_000 + unc,
                "{kind} {e} is {best} ns from the ground truth (uncertainty {unc} ns)"
            );
        }
    }
}

/// An op that cannot be timed is said so at once, never left pending: with timing off, and with
/// every stream being captured into a graph, each op outside a group and each stream of the group
/// gets one `comm_untimed` (with why) and no begin or end.
#[test]
fn untimed_ops_are_recorded_untimed() {
    for (env, why) in [
        (("FREERIDE_COMM_TIMING", "0"), "off"),
        (("FAKE_CAPTURING", "1"), "capturing"),
    ] {
        let r = run_with("nccl_local", &[], &[env], true);
        let m = counts(&r.events);
        assert_eq!(total(&m, "comm"), 8, "{m:?}");
        assert_eq!(total(&m, "comm_begin") + total(&m, "comm_end"), 0, "{m:?}");
        let untimed: Vec<&Value> = r
            .events
            .iter()
            .filter(|e| e["kind"] == "comm_untimed")
            .collect();
        assert_eq!(untimed.len(), 8, "{env:?}: {m:?}");
        assert!(untimed.iter().all(|e| e["why"] == why), "{untimed:?}");
        // Each names its op (or the group, for a group's stream) as a begin would have.
        let ops: HashSet<u64> = r
            .events
            .iter()
            .filter(|e| e["kind"] == "comm" && e["group"] == 0)
            .map(|e| e["op"].as_u64().unwrap())
            .collect();
        for u in &untimed {
            let (op, group) = (u["op"].as_u64().unwrap(), u["group"].as_u64().unwrap());
            assert!(
                (group == 0 && ops.contains(&op)) || (group != 0 && op == 0),
                "{u}"
            );
        }
        assert_eq!(untimed.iter().filter(|u| u["group"] != 0).count(), 2);
    }
}

/// A framework that dlcloses libnccl / libcudart and opens them again, while the interposer holds
/// real pointers into them (without the pin in `dl::pin_owner`, the NCCL run crashes in the
/// reloaded library's first call and the reloaded runtime's launches go unrecorded).
#[test]
fn dlclose_and_reload_of_nccl_and_the_runtime() {
    let r = run_with("dlclose", &["nccl"], &[], true);
    assert_eq!(r.stdout.trim(), "OK pinned=1", "{}", r.stdout);
    let m = counts(&r.events);
    assert_eq!(get(&m, "comm", "ncclSend"), 8, "{m:?}");
    assert_eq!(get(&m, "comm", "ncclRecv"), 6);
    assert_eq!(get(&m, "comm", "ncclAllReduce"), 2);
    assert_eq!(get(&m, "launch", "cuLaunchKernel"), 16);
    let r = run_with("dlclose", &["cudart"], &[], true);
    assert_eq!(r.stdout.trim(), "OK pinned=1", "{}", r.stdout);
    let m = counts(&r.events);
    assert_eq!(get(&m, "launch", "cudaLaunchKernel"), 200, "{m:?}");
    assert_eq!(total(&m, "launch"), 200, "{m:?}");
    // Without freeride the same program unloads the libraries (nothing else holds them).
    let plain = run_with("dlclose", &["nccl"], &[], false);
    assert_eq!(plain.stdout.trim(), "OK pinned=0");
}

/// Workers forked (and exec'ing) while four threads keep launching: every process image's events
/// are its own, none lost or duplicated, nothing hangs. (A worker forked while a thread of the
/// parent was still initializing the interposer used to inherit that unfinished initialization:
/// it recorded nothing and waited 50 ms in every hooked call; `rt::init` now notices.)
/// The two many-thread tests one at a time: each counts every launch, and a thread that finds
/// another one initializing waits at most 50 ms, which a loaded 2-core machine can exceed.
static MANY_THREADS: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn fork_and_exec_while_threads_launch() {
    let _one = MANY_THREADS.lock().unwrap_or_else(|e| e.into_inner());
    let r = run("fork_load");
    let out: Vec<&str> = r.stdout.split_whitespace().collect();
    assert_eq!(out.get(1), Some(&"6"), "{}", r.stdout);
    let total: usize = out[2].parse().unwrap();
    let mut per_pid: HashMap<u64, (usize, usize, usize)> = HashMap::new();
    for e in &r.events {
        let c = per_pid.entry(e["pid"].as_u64().unwrap()).or_default();
        match e["kind"].as_str().unwrap() {
            "launch" => c.0 += 1,
            "process_start" => c.1 += 1,
            "dropped" => c.2 += 1,
            _ => {}
        }
    }
    let mut launches: Vec<usize> = per_pid.values().map(|c| c.0).collect();
    launches.sort();
    // The parent (`total`), 6 workers (10 each) and 6 exec'd images (3 each). A thread that finds
    // another one initializing waits at most 50 ms (never forever): on a loaded machine the first
    // launch of each of the 3 other threads may go unrecorded.
    let parent = launches.pop().unwrap_or(0);
    assert!(
        total > 100 && (total - 3..=total).contains(&parent),
        "{total}: {per_pid:?}"
    );
    let mut want = vec![3; 6];
    want.extend([10; 6]);
    assert_eq!(launches, want, "every worker and exec'd image: {per_pid:?}");
    assert!(
        per_pid.values().all(|c| c.1 == 1 && c.2 == 0),
        "{per_pid:?}"
    );
    gpus_introduced_first(&r.events);
}

#[test]
fn many_threads_many_producers() {
    let _one = MANY_THREADS.lock().unwrap_or_else(|e| e.into_inner());
    let r = run("threads");
    let m = counts(&r.events);
    assert_eq!(get(&m, "launch", "__cudaLaunchKernel"), 16000);
    assert_eq!(total(&m, "dropped"), 0);
    // The shared ring has them all too, whichever lanes (owned or shared) the threads got.
    let (heads, dropped) = shared_ring_lanes(&r.dir);
    assert_eq!(dropped, 0);
    let records: u64 = heads.iter().sum();
    assert!(
        (16000..16000 + 20).contains(&records),
        "{records} records in the shared ring's lanes {heads:?}"
    );
}

/// A launching thread owns a lane of the shared ring while it runs and gives it back when it
/// ends: twelve threads one after another all push to the first lane (the next thread claims what
/// the last one gave back), none to the others, the shared service lane included (threads that
/// kept their lanes would have spread over all of them and then over the service lane).
#[test]
fn launching_threads_give_their_ring_lanes_back() {
    let _one = MANY_THREADS.lock().unwrap_or_else(|e| e.into_inner());
    let r = run_with("threads", &["churn"], &[], true);
    assert_eq!(
        get(&counts(&r.events), "launch", "__cudaLaunchKernel"),
        1200
    );
    let (heads, dropped) = shared_ring_lanes(&r.dir);
    assert_eq!(dropped, 0);
    assert!(heads.len() > 2, "{heads:?}");
    assert!(
        (1200..1200 + 20).contains(&heads[0]) && heads[1..].iter().all(|&h| h == 0),
        "records per lane: {heads:?}"
    );
}

/// The records each lane of the run's one shared ring took, and the ring's dropped count.
fn shared_ring_lanes(run_dir: &Path) -> (Vec<u64>, u64) {
    let rings = freeride_abi::session::list_rings(&run_dir.join("session")).unwrap();
    assert_eq!(rings.len(), 1, "{rings:?}");
    let r = freeride_abi::reader::RingReader::open(&rings[0]).unwrap();
    (r.lane_heads(), r.info().dropped)
}

#[test]
fn fork_and_exec() {
    let r = run("fork");
    let child: u64 = r.stdout.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut per_pid: HashMap<u64, (usize, usize)> = HashMap::new();
    for e in &r.events {
        let c = per_pid.entry(e["pid"].as_u64().unwrap()).or_default();
        match e["kind"].as_str().unwrap() {
            "launch" => c.0 += 1,
            "process_start" => c.1 += 1,
            _ => {}
        }
    }
    assert_eq!(
        per_pid.len(),
        2,
        "the worker that never launches records nothing: {per_pid:?}"
    );
    assert_eq!(
        per_pid[&child],
        (10, 2),
        "7 launches after fork + 3 after exec, one start each"
    );
    let parent = per_pid.iter().find(|(p, _)| **p != child).unwrap().1;
    assert_eq!(*parent, (15, 1));
    gpus_introduced_first(&r.events);
}

#[test]
fn signals_never_deadlock() {
    let r = run("signals");
    let m = counts(&r.events);
    let main_thread = r
        .events
        .iter()
        .filter(|e| e["kind"] == "launch" && e["stream"] == 0x300)
        .count();
    assert_eq!(main_thread, 200_000);
    let hits: usize = r.stdout.split_whitespace().nth(1).unwrap().parse().unwrap();
    // A handler that interrupts a hook passes through unrecorded (re-entrancy guard).
    assert!(get(&m, "launch", "__cudaLaunchKernel") <= 200_000 + hits);
}

/// A program that never calls CUDA runs as without freeride: no ring, no event. Traced
/// (`FREERIDE_TRACE`, a debugging view), the interposer initializes at load time, so the trace
/// still shows it was there: its process_start and process_exit lines, nothing else.
#[test]
fn no_cuda_runs_exactly_as_without_freeride() {
    let plain = run_with("nocuda", &[], &[], false);
    let hooked = run_with("nocuda", &[], &[("FREERIDE_TRACE", "")], true);
    assert_eq!(plain.stdout, hooked.stdout);
    assert!(hooked.events.is_empty());
    assert!(
        std::fs::read_dir(hooked.dir.join("session"))
            .unwrap()
            .next()
            .is_none(),
        "no ring without CUDA use"
    );
    let traced = run("nocuda");
    assert_eq!(plain.stdout, traced.stdout);
    let kinds: Vec<&str> = traced
        .events
        .iter()
        .map(|e| e["kind"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        kinds,
        ["process_start", "process_exit"],
        "{:?}",
        traced.events
    );
}

#[test]
fn no_session_dir_and_no_trace_still_pass_through() {
    let r = run_with(
        "runtime",
        &[],
        &[
            ("FREERIDE_DIR", "/nonexistent/freeride"),
            ("FREERIDE_TRACE", ""),
        ],
        true,
    );
    assert!(r.events.is_empty());
    let r = run_with(
        "nccl_local",
        &[],
        &[
            ("FREERIDE_DIR", "/nonexistent/freeride"),
            ("FREERIDE_TRACE", ""),
        ],
        true,
    );
    assert!(r.events.is_empty());
}

#[test]
fn shared_ring_is_written_to_the_session_dir() {
    let r = run("runtime");
    let rings: Vec<_> = std::fs::read_dir(r.dir.join("session"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(rings.len(), 1, "{rings:?}");
    assert!(rings[0].starts_with("ring-") && rings[0].ends_with(".ring"));
}

/// A ring appears under its name only complete: while the interposer sizes the new file (the
/// moment an agent listing the directory would have found an empty ring and refused it for
/// good), the directory holds only its staging name.
#[test]
fn a_ring_is_published_only_once_initialized() {
    let log = bin().join(format!("seen-at-ftruncate-{}", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let preloads = format!(
        "{}:{}",
        bin().join("lib/libseenatftruncate.so").display(),
        preload().display()
    );
    let r = run_with(
        "runtime",
        &[],
        &[
            ("LD_PRELOAD", preloads.as_str()),
            ("SEEN_AT_FTRUNCATE", log.to_str().unwrap()),
        ],
        true,
    );
    let seen = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        seen.lines().filter(|l| *l == "ftruncate").count() >= 1,
        "the shim saw no ftruncate: {seen:?}"
    );
    let entries: Vec<&str> = seen.lines().filter(|l| *l != "ftruncate").collect();
    assert!(
        entries
            .iter()
            .all(
                |l| freeride_abi::session::parse_ring_file_name(l.split(' ').next().unwrap())
                    .is_none()
            ),
        "a ring name was visible before its ring was sized: {entries:?}"
    );
    assert!(
        entries
            .iter()
            .any(|l| l.starts_with("ring-") && l.contains(".staging ")),
        "the staging ring was not seen while it was sized: {entries:?}"
    );
    let names: Vec<String> = std::fs::read_dir(r.dir.join("session"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 1, "staging left behind? {names:?}");
    assert!(freeride_abi::session::parse_ring_file_name(&names[0]).is_some());
    let _ = std::fs::remove_file(&log);
}

#[test]
fn freeride_run_sets_preload_role_and_dir() {
    let exe = target_dir().join("freeride");
    assert!(
        exe.exists(),
        "{} missing: cargo build --release -p freeride-agent",
        exe.display()
    );
    let d = bin().join("run-cli");
    std::fs::create_dir_all(&d).unwrap();
    let sess = d.join("sess");
    let _ = std::fs::remove_dir_all(&sess);
    let out = Command::new(&exe)
        .args([
            "run",
            "--role",
            "sidetask",
            "--",
            "sh",
            "-c",
            "echo $FREERIDE_ROLE $FREERIDE_DIR; echo $LD_PRELOAD",
        ])
        .env("FREERIDE_DIR", &sess)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8(out.stdout).unwrap();
    let mut l = s.lines();
    assert_eq!(l.next().unwrap(), format!("sidetask {}", sess.display()));
    assert!(l.next().unwrap().contains("libfreeride.so"));
    let md = std::fs::metadata(&sess).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(md.permissions().mode() & 0o777, 0o700);
    // A side task starts at the lowest CPU priority unless told otherwise; a trainer as it was.
    let nice_of = |args: &[&str], env: Option<&str>| {
        let mut c = Command::new(&exe);
        c.arg("run")
            .args(args)
            .args([
                "--",
                "sh",
                "-c",
                "cut -d')' -f2 /proc/$$/stat | cut -d' ' -f18",
            ])
            .env("FREERIDE_DIR", &sess)
            .env_remove("FREERIDE_SIDETASK_NICE");
        if let Some(v) = env {
            c.env("FREERIDE_SIDETASK_NICE", v);
        }
        let o = c.output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).trim().to_string(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    // SAFETY: getpriority only reads this thread's nice value.
    let ours = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    let at = |n: i32| n.max(ours).to_string();
    assert_eq!(nice_of(&["--role", "sidetask"], None).1, at(19));
    assert_eq!(
        nice_of(&["--role", "sidetask", "--nice", "5"], None).1,
        at(5)
    );
    assert_eq!(nice_of(&["--role", "sidetask"], Some("3")).1, at(3));
    assert_eq!(nice_of(&["--role", "trainer"], None).1, ours.to_string());
    let (code, _, err) = nice_of(&["--role", "trainer", "--nice", "5"], None);
    assert!(code == Some(2) && err.contains("--nice"), "{code:?} {err}");
    let (code, _, err) = nice_of(&["--role", "sidetask"], Some("40"));
    assert!(
        code == Some(2) && err.contains("FREERIDE_SIDETASK_NICE"),
        "{code:?} {err}"
    );
    // Exit status is passed through.
    let st = Command::new(&exe)
        .args(["run", "--", "sh", "-c", "exit 7"])
        .env("FREERIDE_DIR", &sess)
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(7));
}
