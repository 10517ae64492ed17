//! The side-task gate of libfreeride.so on the test bed (stand-in CUDA, simulated GPU, ground
//! truth): a side task (tests/cprogs/gate_side.c, runtime launches that never synchronize) under
//! `FREERIDE_ROLE=sidetask`, with grant blocks written here as the agent would.
//! Bounds are checked against the truth's GPU-timeline start/end of every kernel. The gate never
//! sees kernel durations (kernelParams[0]); it learns them from its own completion events.
use freeride_abi::grant_shm::{GrantFields, GrantWriter};
use freeride_abi::now_ns;
use freeride_tests::gatebed::{grant_cycles, heart, kill, sleep_until, Bed, MS};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
const KERNEL_US: u64 = 500;
/// Host scheduling slack on a busy 2-core machine: a thread admitted just before a deadline may
/// be descheduled before its launch reaches the GPU.
const SCHED_SLACK: u64 = 2 * MS;

/// One timing-sensitive test at a time (the machine is small).
static SERIAL: Mutex<()> = Mutex::new(());

fn side_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| freeride_tests::gate_side_bin("gate"))
}

fn cmd(bed: &Bed, role: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
    bed.cmd(side_bin(), role, args, env)
}

/// Starts the never-yielding side task and waits for its "ready" (stream created).
fn start_loop(bed: &Bed, env: &[(&str, &str)]) -> (Child, BufReader<std::process::ChildStdout>) {
    start(bed, &["loop", &KERNEL_US.to_string()], env)
}

/// Starts gate_side with `args` as a side task and waits for its "ready".
fn start(
    bed: &Bed,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = cmd(bed, "sidetask", args, env).spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "side task did not start");
    (child, out)
}

#[test]
fn never_yielding_sidetask_runs_only_inside_grants() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::new("never-yields");
    let w = Arc::new(GrantWriter::create(&bed.session, freeride_tests::gpu(0)).unwrap());
    let _hb = heart(&w);
    let (child, _out) = start_loop(&bed, &[]);
    let pid = child.id();
    let closed_from = now_ns();
    std::thread::sleep(Duration::from_millis(300));
    let closed_to = now_ns();
    // Grants of 20 ms every 100 ms.
    let grants = grant_cycles(&w, 6, 20 * MS, 20 * MS, 100 * MS);
    let truth_to = now_ns();
    kill(child);
    let ks = bed.kernels(pid);
    assert!(
        ks.iter().all(|k| k.0 < closed_from || k.0 > closed_to),
        "a kernel ran while the grant was closed"
    );
    assert!(
        ks.len() >= 20,
        "the side task ran only {} kernels",
        ks.len()
    );
    let mut worst_end = i64::MIN;
    let mut per_grant = vec![0usize; grants.len()];
    for k in ks.iter().filter(|k| k.0 <= truth_to) {
        let g = grants
            .iter()
            .position(|g| k.0 >= g.0 && k.0 <= g.1 + SCHED_SLACK)
            .unwrap_or_else(|| panic!("kernel at {} started outside every grant {grants:?}", k.0));
        per_grant[g] += 1;
        worst_end = worst_end.max(k.1 as i64 - grants[g].1 as i64);
    }
    let bound = (MS + KERNEL_US * 1000 + SCHED_SLACK) as i64;
    eprintln!(
        "never-yields: {} kernels, per grant {per_grant:?}, worst end vs open_until {:.3} ms",
        ks.len(),
        worst_end as f64 / 1e6
    );
    assert!(
        worst_end <= bound,
        "a kernel ended {worst_end} ns after its grant"
    );
    // Every grant after the first (durations learned) was used for real work: >= 8 ms of 20.
    for (i, n) in per_grant.iter().enumerate().skip(1) {
        assert!(*n >= 16, "grant {i} ran only {n} kernels of 500 µs");
    }
}

#[test]
fn grant_closed_early_drains_within_bound() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::new("closed-early");
    let w = Arc::new(GrantWriter::create(&bed.session, freeride_tests::gpu(0)).unwrap());
    let _hb = heart(&w);
    let (child, _out) = start_loop(&bed, &[]);
    let pid = child.id();
    // A first full grant teaches the gate the kernel's duration.
    let until = w.open_for(20 * MS, 20 * MS, 0);
    sleep_until(until);
    w.close(0);
    std::thread::sleep(Duration::from_millis(50));
    let mut closes = vec![];
    for _ in 0..3 {
        let t = now_ns();
        w.open_for(50 * MS, 50 * MS, 0);
        std::thread::sleep(Duration::from_millis(5));
        w.close(0);
        closes.push((t, now_ns()));
        std::thread::sleep(Duration::from_millis(80));
    }
    kill(child);
    let ks = bed.kernels(pid);
    // Bound: the gate's queued-ahead cap (2 ms) + one kernel + host slack.
    let bound = 2 * MS + KERNEL_US * 1000 + SCHED_SLACK;
    for (open, close) in &closes {
        let mine: Vec<_> = ks
            .iter()
            .filter(|k| k.2 >= *open && k.2 < close + 50 * MS)
            .collect();
        assert!(
            !mine.is_empty(),
            "no kernel ran in the grant opened at {open}"
        );
        let last_queue = mine.iter().map(|k| k.2).max().unwrap();
        let last_end = mine.iter().map(|k| k.1).max().unwrap();
        eprintln!(
            "closed-early: {} kernels; last queued {:.3} ms, drained {:.3} ms after the close",
            mine.len(),
            (last_queue as f64 - *close as f64) / 1e6,
            (last_end as f64 - *close as f64) / 1e6
        );
        assert!(
            last_queue <= close + SCHED_SLACK,
            "a launch was queued after the close"
        );
        assert!(
            last_end <= close + bound,
            "work drained {} ns after the close",
            last_end - close
        );
    }
}

/// A grant the agent stops refreshing (it is descheduled or stopped, and corrects no prediction)
/// holds the side task once its heartbeat is older than the freshness limit the grant carries,
/// long before the grant's deadline; the agent's next heartbeat lets it go on.
#[test]
fn a_grant_the_agent_stops_refreshing_holds_the_sidetask() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::new("unrefreshed");
    let w = Arc::new(GrantWriter::create(&bed.session, freeride_tests::gpu(0)).unwrap());
    let (child, _out) = start_loop(&bed, &[]);
    let pid = child.id();
    let fresh = 20 * MS;
    let open = |until: u64| {
        w.publish(GrantFields {
            open: true,
            open_until_ns: until,
            budget_ns: until - now_ns(),
            fresh_ns: fresh,
            ..GrantFields::default()
        })
    };
    // A first grant, refreshed, teaches the gate the kernel's duration.
    let until = now_ns() + 30 * MS;
    open(until);
    while now_ns() < until {
        w.heartbeat();
        std::thread::sleep(Duration::from_millis(1));
    }
    w.close(0);
    std::thread::sleep(Duration::from_millis(20));
    // A grant of 400 ms that nobody refreshes after its publication...
    let published = now_ns();
    let until = published + 400 * MS;
    open(until);
    std::thread::sleep(Duration::from_millis(200));
    // ...then one heartbeat, 200 ms in.
    let beat = now_ns();
    w.heartbeat();
    std::thread::sleep(Duration::from_millis(10));
    let after = now_ns();
    w.close(0);
    kill(child);
    let ks = bed.kernels(pid);
    let queued = |from: u64, to: u64| ks.iter().filter(|k| k.2 >= from && k.2 < to).count();
    eprintln!(
        "unrefreshed: {} kernels queued while fresh, {} after the limit, {} after the heartbeat",
        queued(published, published + fresh),
        queued(published + fresh + SCHED_SLACK, beat),
        queued(beat, after)
    );
    assert!(
        queued(published, published + fresh) > 0,
        "nothing ran while the grant was fresh"
    );
    assert_eq!(
        queued(published + fresh + SCHED_SLACK, beat),
        0,
        "a launch was queued on a grant nobody refreshed"
    );
    assert!(
        queued(beat, after) > 0,
        "the heartbeat did not let the side task go on"
    );
}

#[test]
fn memory_budget_errors_the_sidetask_not_the_trainer() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::new("mem");
    let env = [("FREERIDE_MEM_BUDGET_MB", "64")];
    let o = cmd(
        &bed,
        "sidetask",
        &["mem", "48", "48", "free", "48", "16", "1"],
        &env,
    )
    .output()
    .unwrap();
    assert!(o.status.success());
    let codes: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    // 48 ok; 48 more -> cudaErrorMemoryAllocation (2); free ok; 48 ok; 16 ok (64 held); 1 -> 2.
    assert_eq!(codes, ["0", "2", "0", "0", "0", "2"], "side task results");
    let o = cmd(&bed, "trainer", &["mem", "1024", "1024"], &env)
        .output()
        .unwrap();
    assert!(o.status.success());
    assert_eq!(
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .collect::<Vec<_>>(),
        ["0", "0"]
    );
}

#[test]
fn no_agent_holds_the_sidetask_and_gate_off_runs_freely() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::new("no-agent");
    let (child, _out) = start_loop(&bed, &[]);
    let pid = child.id();
    std::thread::sleep(Duration::from_millis(300));
    kill(child);
    assert_eq!(
        bed.kernels(pid).len(),
        0,
        "a side task without an agent ran kernels"
    );

    // A stale grant (agent gone: heartbeat not refreshed) is closed too, even if "open".
    let w = GrantWriter::create(&bed.session, freeride_tests::gpu(0)).unwrap();
    w.open_for(10_000 * MS, 0, 0);
    std::thread::sleep(Duration::from_millis(150));
    let (child, _out) = start_loop(&bed, &[]);
    let pid = child.id();
    std::thread::sleep(Duration::from_millis(300));
    kill(child);
    assert_eq!(
        bed.kernels(pid).len(),
        0,
        "a side task ran under a stale grant"
    );

    let o = cmd(
        &bed,
        "sidetask",
        &["loop", "100", "200"],
        &[("FREERIDE_GATE", "off")],
    )
    .output()
    .unwrap();
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("done 200"));
    let pid_off = bed.kernels(0).len(); // none run as pid 0
    assert_eq!(pid_off, 0);
    let text = std::fs::read_to_string(&bed.truth).unwrap();
    assert_eq!(
        text.lines().count(),
        200,
        "FREERIDE_GATE=off must run every kernel"
    );
}

#[test]
fn a_grant_kept_for_more_important_tasks_holds_a_less_important_one() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::new("priority");
    let w = Arc::new(GrantWriter::create(&bed.session, freeride_tests::gpu(0)).unwrap());
    let _hb = heart(&w);
    let (low, _lo) = start_loop(&bed, &[("FREERIDE_PRIORITY", "1")]);
    let (high, _ho) = start_loop(&bed, &[("FREERIDE_PRIORITY", "5")]);
    // Four grants of 20 ms reserved for priority >= 5.
    let (first, mut last) = (now_ns(), 0);
    for _ in 0..4 {
        let t = now_ns();
        let until = t + 20 * MS;
        w.publish(GrantFields {
            open: true,
            open_until_ns: until,
            budget_ns: 20 * MS,
            min_priority: 5,
            ..GrantFields::default()
        });
        sleep_until(until);
        w.close(0);
        last = until;
        sleep_until(t + 60 * MS);
    }
    let (low_pid, high_pid) = (low.id(), high.id());
    kill(low);
    kill(high);
    let in_grants = |pid| {
        bed.kernels(pid)
            .iter()
            .filter(|k| k.0 >= first && k.0 <= last + SCHED_SLACK)
            .count()
    };
    let (lo, hi) = (in_grants(low_pid), in_grants(high_pid));
    eprintln!("priority: low ran {lo} kernels, high {hi}");
    assert_eq!(
        lo, 0,
        "the priority-1 task ran in grants kept for priority 5"
    );
    // At least one kernel per grant on average: what the grants are for, with room for a loaded
    // machine (12 of the possible 160 ran with two CPU hogs on two cores).
    assert!(hi >= 4, "the priority-5 task ran only {hi} kernels");
}

#[test]
fn the_memory_budget_is_for_all_the_gpus_side_tasks_together() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::new("mem-shared");
    let w = Arc::new(GrantWriter::create(&bed.session, freeride_tests::gpu(0)).unwrap());
    let _hb = heart(&w);
    // 64 MiB for the GPU's side tasks, of which the others hold 48 MiB: 16 MiB are left here.
    w.publish(GrantFields {
        mem_budget_bytes: 64 << 20,
        side_mem_held_bytes: 48 << 20,
        ..GrantFields::default()
    });
    let run = |args: &[&str]| {
        let o = cmd(&bed, "sidetask", args, &[]).output().unwrap();
        assert!(o.status.success());
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    // 32 > 16 left -> cudaErrorMemoryAllocation (2); 16 fits.
    assert_eq!(run(&["mem", "32", "16"]), ["2", "0"], "side task results");
    // The others hold the whole budget: nothing is left.
    w.publish(GrantFields {
        mem_budget_bytes: 64 << 20,
        side_mem_held_bytes: 64 << 20,
        ..GrantFields::default()
    });
    assert_eq!(run(&["mem", "1"]), ["2"]);
    // The others let go: the whole budget is this task's.
    w.publish(GrantFields {
        mem_budget_bytes: 64 << 20,
        ..GrantFields::default()
    });
    assert_eq!(run(&["mem", "32", "32", "1"]), ["0", "0", "2"]);
}

#[test]
fn an_unmodified_sidetask_yields_the_cpu_to_the_trainer() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::new("nice");
    // SAFETY: getpriority only reads this thread's nice value.
    let ours = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    for (role, env, want) in [
        ("sidetask", None, 19),
        ("sidetask", Some("4"), 4),
        ("trainer", None, ours),
    ] {
        let mut c = cmd(&bed, role, &["loop", &KERNEL_US.to_string()], &[]);
        match env {
            Some(n) => c.env("FREERIDE_SIDETASK_NICE", n),
            None => c.env_remove("FREERIDE_SIDETASK_NICE"),
        };
        let mut child = c.spawn().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "{role} did not start");
        // The interposer starts at the first hooked call; a side task without an agent is then
        // held at its first launch, a trainer runs on.
        std::thread::sleep(Duration::from_millis(200));
        let nices = freeride_abi::cpu::thread_nices(child.id());
        kill(child);
        assert!(
            !nices.is_empty() && nices.iter().all(|n| *n == want.max(ours)),
            "{role} (FREERIDE_SIDETASK_NICE={env:?}): thread nice values {nices:?}, want {want}"
        );
    }
}

/// A side task held by a closed grant sleeps on the grant block until the agent publishes (about
/// a thousand wake-ups a second, from the 1 ms timeout) instead of polling every 50 µs (20 000),
/// and a grant that opens wakes it at once: its first kernel is queued soon after.
#[test]
fn a_held_sidetask_sleeps_until_a_grant_opens() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::new("sleeps");
    let w = Arc::new(GrantWriter::create(&bed.session, freeride_tests::gpu(0)).unwrap());
    let _hb = heart(&w);
    let (child, _out) = start_loop(&bed, &[]);
    let pid = child.id();
    // Held at its first launch (the interposer starts at the first hooked call).
    std::thread::sleep(Duration::from_millis(200));
    let before = freeride_tests::sleeps(pid);
    std::thread::sleep(Duration::from_secs(1));
    let woke = freeride_tests::sleeps(pid) - before;
    // Then grants of 10 ms every 50 ms: how soon after each opening is a kernel queued?
    let mut opened = vec![];
    for _ in 0..10 {
        let t = now_ns();
        let until = w.open_for(10 * MS, 10 * MS, 0);
        opened.push((t, until));
        sleep_until(until);
        w.close(0);
        sleep_until(t + 50 * MS);
    }
    kill(child);
    let ks = bed.kernels(pid);
    let mut lat: Vec<u64> = opened
        .iter()
        .filter_map(|&(t, until)| {
            ks.iter()
                .find(|k| k.2 >= t && k.2 <= until)
                .map(|k| k.2 - t)
        })
        .collect();
    lat.sort();
    eprintln!(
        "held side task: {woke} wake-ups in the closed second; first kernel queued after a grant \
         opened: median {} µs, worst {} µs",
        lat.get(lat.len() / 2).map_or(0, |n| n / 1000),
        lat.last().map_or(0, |n| n / 1000)
    );
    assert!(
        woke < 5_000,
        "the held side task woke {woke} times in a second"
    );
    assert_eq!(lat.len(), 10, "a grant passed without a kernel: {ks:?}");
}

/// Found on a real GPU (2026-12-04): a grant block that group or others may open (the GPU check's
/// Python stand-in made it 0644) is refused by the gate, which then held the side task for ever
/// without a word. It is still refused, but the side task says why, once; with
/// `FREERIDE_GATE_VERBOSE=1` a launch held for a second says what holds it; and once the block is
/// made usable the side task runs.
#[test]
fn a_grant_block_others_may_open_holds_the_sidetask_and_says_why() {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::new("grant-mode");
    let w = Arc::new(GrantWriter::create(&bed.session, freeride_tests::gpu(0)).unwrap());
    let _hb = heart(&w);
    w.open_for(60_000 * MS, 0, 0);
    let path = w.path().to_path_buf();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut child = cmd(
        &bed,
        "sidetask",
        &["loop", &KERNEL_US.to_string()],
        &[("FREERIDE_GATE_VERBOSE", "1")],
    )
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let pid = child.id();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "side task did not start");
    std::thread::sleep(Duration::from_millis(1300));
    assert_eq!(
        bed.kernels(pid).len(),
        0,
        "a side task ran under a grant block others may open"
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let mut err = child.stderr.take().unwrap();
    kill(child);
    let mut text = String::new();
    err.read_to_string(&mut text).unwrap();
    assert!(
        text.contains("cannot use the grant block") && text.contains("mode 644"),
        "the side task did not say why it is held: {text}"
    );
    assert_eq!(
        text.matches("cannot use the grant block").count(),
        1,
        "said more than once: {text}"
    );
    assert!(
        text.contains("a launch held") && text.contains("no grant block"),
        "no report of the held launch: {text}"
    );
    assert!(
        !bed.kernels(pid).is_empty(),
        "the side task did not run once the block was usable"
    );
}
