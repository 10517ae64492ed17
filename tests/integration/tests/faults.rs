//! Faults of side tasks and version skew, end to end with the real binaries on the test bed: the
//! agent (`freeride agent`), a pipesim job under `freeride run`, and side tasks
//! (tests/cprogs/gate_side.c under libfreeride.so with `FREERIDE_ROLE=sidetask`, and the SDK's
//! `train_loop` example) on the same simulated GPUs. Deadlines are generous (a loaded 2-core
//! machine); nothing here asserts speed.
use freeride_abi::grant_shm::{GrantMap, GrantWriter};
use freeride_abi::now_ns;
use freeride_tests::{built, release_dir, SIDETASK_NICE_FOR_TESTS};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// One test at a time: each runs a whole job and the machine is small.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn side_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| freeride_tests::gate_side_bin("faults"))
}

/// A session directory and a simulated-GPU folder shared by the agent, the job and side tasks.
struct Bed {
    root: PathBuf,
    session: PathBuf,
    sim: PathBuf,
    /// Every process started through the bed: killed on drop if still running (a failing
    /// assertion must not leave side tasks behind).
    children: Mutex<Vec<u32>>,
}

impl Bed {
    fn new(tag: &str) -> Bed {
        let root = PathBuf::from(format!(
            "/dev/shm/freeride-faults-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        let session = root.join("session");
        let sim = root.join("sim");
        std::fs::create_dir_all(&sim).unwrap();
        std::fs::create_dir_all(&session).unwrap();
        std::fs::set_permissions(
            &session,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        Bed {
            root,
            session,
            sim,
            children: Mutex::new(vec![]),
        }
    }

    fn track(&self, c: Child) -> Child {
        self.children.lock().unwrap().push(c.id());
        c
    }

    fn agent(&self, extra: &[&str]) -> Agent {
        let mut child = Command::new(built("freeride"))
            .args(["agent", "--metrics-port", "0", "--dir"])
            .arg(&self.session)
            .args(extra)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start agent");
        let log = Arc::new(Mutex::new(Vec::<String>::new()));
        let (l, err) = (log.clone(), child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("[agent] {line}");
                l.lock().unwrap().push(line);
            }
        });
        Agent { child, log }
    }

    /// The default-sized test job (2 stages, 4 micro-batches, ~150 ms per iteration).
    fn job(&self, iterations: u32) -> Child {
        Command::new(built("freeride"))
            .args(["run", "--"])
            .arg(built("pipesim"))
            .args(["--stages", "2", "--microbatches", "4", "--iterations"])
            .arg(iterations.to_string())
            .env("FREERIDE_DIR", &self.session)
            .env("FREERIDE_SIM_DIR", &self.sim)
            .env("FREERIDE_SIM_MEM_MIB", "4096")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(|c| self.track(c))
            .expect("start pipesim under freeride")
    }

    /// gate_side with `args` under libfreeride.so in `role`; stdout piped, stdin piped (hold).
    fn prog(&self, role: &str, args: &[&str]) -> (Child, BufReader<ChildStdout>) {
        self.prog_of(side_bin(), role, args)
    }

    /// gate_side as [`Bed::prog`], its kernels written to the ground truth `truth`.
    fn prog_traced(
        &self,
        role: &str,
        args: &[&str],
        truth: &Path,
    ) -> (Child, BufReader<ChildStdout>) {
        self.spawn_prog(side_bin(), role, args, Some(truth))
    }

    /// `bin` with `args` under libfreeride.so in `role`; stdout piped, stdin piped (hold).
    fn prog_of(&self, bin: &Path, role: &str, args: &[&str]) -> (Child, BufReader<ChildStdout>) {
        self.spawn_prog(bin, role, args, None)
    }

    fn spawn_prog(
        &self,
        bin: &Path,
        role: &str,
        args: &[&str],
        truth: Option<&Path>,
    ) -> (Child, BufReader<ChildStdout>) {
        let standins = pipesim::standins::ensure_dir().unwrap();
        let mut cmd = Command::new(bin);
        if let Some(t) = truth {
            cmd.env("FREERIDE_SIM_TRACE", t);
        }
        let mut c = cmd
            .args(args)
            .env("LD_PRELOAD", release_dir().join("libfreeride.so"))
            .env("LD_LIBRARY_PATH", &standins)
            .env("FREERIDE_DIR", &self.session)
            .env("FREERIDE_SIM_DIR", &self.sim)
            .env("FREERIDE_SIM_MEM_MIB", "4096")
            .env("FREERIDE_ROLE", role)
            .env(SIDETASK_NICE_FOR_TESTS.0, SIDETASK_NICE_FOR_TESTS.1)
            .env_remove("FREERIDE_TRACE")
            .env_remove("FREERIDE_GATE")
            .env_remove("FREERIDE_MEM_BUDGET_MB")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map(|c| self.track(c))
            .expect("start gate_side");
        let out = BufReader::new(c.stdout.take().unwrap());
        (c, out)
    }

    /// The SDK's train_loop example on GPU 0 (no interposer, as `freeride sim` runs it).
    fn sdk_task(&self) -> Child {
        let standins = pipesim::standins::ensure_dir().unwrap();
        Command::new(built("examples/train_loop"))
            .args(["--device", "0", "--steps", "1000000000", "--name", "crashy"])
            .env("FREERIDE_DIR", &self.session)
            .env("FREERIDE_SIM_DIR", &self.sim)
            .env("FREERIDE_SIM_MEM_MIB", "4096")
            .env("LD_LIBRARY_PATH", &standins)
            .env(SIDETASK_NICE_FOR_TESTS.0, SIDETASK_NICE_FOR_TESTS.1)
            .env_remove("LD_PRELOAD")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(|c| self.track(c))
            .expect("start train_loop")
    }

    /// Waits until the gate of side task `pid` publishes a launch in flight (its ring header).
    fn wait_gate_inflight(&self, pid: u32, within: Duration) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < within {
            for e in std::fs::read_dir(&self.session)
                .into_iter()
                .flatten()
                .flatten()
            {
                let name = e.file_name();
                let mine = name
                    .to_str()
                    .and_then(freeride_abi::session::parse_ring_file_name)
                    .is_some_and(|(p, _)| p == pid);
                if mine
                    && freeride_abi::reader::RingReader::open(&e.path())
                        .is_ok_and(|r| r.gate_status().inflight > 0)
                {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    fn status(&self) -> Option<Value> {
        let text = std::fs::read_to_string(self.session.join("agent-status.json")).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Waits until the agent's state satisfies `f`.
    fn wait_status(&self, within: Duration, f: impl Fn(&Value) -> bool) -> Option<Value> {
        let t0 = Instant::now();
        while t0.elapsed() < within {
            if let Some(v) = self.status().filter(|v| f(v)) {
                return Some(v);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        for &pid in self
            .children
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let pid = pid as libc::pid_t;
            // SAFETY: waitpid/kill on our own child: WNOHANG returns 0 only while it is still
            // running and unreaped (so its pid cannot have been reused); then it is killed and
            // reaped.
            unsafe {
                if libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) == 0 {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, std::ptr::null_mut(), 0);
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

struct Agent {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Agent {
    fn has_line(&self, f: impl Fn(&str) -> bool) -> bool {
        self.log.lock().unwrap().iter().any(|l| f(l))
    }

    fn wait_line(&self, within: Duration, f: impl Fn(&str) -> bool) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < within {
            if self.has_line(&f) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `c` is SIGKILLed within `within`, the agent says so in one line naming its pid and `why`, and
/// `agent-status.json` counts one eviction under `status_key`.
fn expect_evicted(
    bed: &Bed,
    agent: &Agent,
    c: &mut Child,
    within: Duration,
    why: &str,
    status_key: &str,
) {
    let st = wait_exit(c, within);
    assert_eq!(
        st.and_then(|s| s.signal()),
        Some(libc::SIGKILL),
        "the side task ({why}) was not killed (status {st:?})"
    );
    let pid = c.id();
    assert!(
        agent.wait_line(Duration::from_secs(5), |l| l
            .contains(&format!("evicted side task pid {pid}"))
            && l.contains(why)),
        "no eviction line for pid {pid}"
    );
    assert!(
        bed.wait_status(Duration::from_secs(5), |v| sidetasks(v, status_key) == 1)
            .is_some(),
        "agent-status.json does not count the eviction"
    );
}

/// Waits for `c` to exit; `None` (and the child killed) if it is still running after `within`.
fn wait_exit(c: &mut Child, within: Duration) -> Option<ExitStatus> {
    let t0 = Instant::now();
    while t0.elapsed() < within {
        if let Some(st) = c.try_wait().unwrap() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    let _ = c.wait();
    None
}

fn read_line(out: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    let _ = out.read_line(&mut line);
    line.trim().to_string()
}

fn sidetasks(v: &Value, key: &str) -> u64 {
    let p: Vec<&str> = key.split('.').collect();
    let mut x = &v["sidetasks"];
    for k in p {
        x = &x[k];
    }
    x.as_u64().unwrap_or(0)
}

/// Waits until the agent has learnt the job on both GPUs (grants can open).
/// Waits until every thread of `pid` is stopped (state `T` in /proc), at most 5 s.
fn wait_stopped(pid: i32) {
    let tasks = PathBuf::from(format!("/proc/{pid}/task"));
    let stopped = || -> bool {
        let Ok(dir) = std::fs::read_dir(&tasks) else {
            return false;
        };
        dir.filter_map(|e| e.ok()).all(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            // The state follows the command's closing parenthesis.
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T') || rest.starts_with('t'))
        })
    };
    let t0 = Instant::now();
    while !stopped() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "pid {pid} never stopped"
        );
        std::thread::sleep(Duration::from_micros(100));
    }
}

fn wait_learnt(bed: &Bed) {
    let v = bed.wait_status(Duration::from_secs(30), |v| {
        let g = v["gpus"].as_array().cloned().unwrap_or_default();
        g.len() == 2 && g.iter().all(|g| g["iteration_ns"].is_u64())
    });
    assert!(v.is_some(), "the agent never learnt the job");
}

#[test]
fn a_sidetask_stuck_in_a_kernel_is_killed_and_the_trainer_finishes() {
    let _s = serial();
    let bed = Bed::new("hung");
    let agent = bed.agent(&["--sidetask-hang-ms", "500"]);
    let mut job = bed.job(30);
    wait_learnt(&bed);
    // One kernel of an hour, then a synchronize that never returns: on the time-sliced simulated
    // GPU it takes every other time slice of GPU 0, so the trainer's stage 0 runs at half speed
    // until it is gone.
    let (mut hung, mut hung_out) = bed.prog("sidetask", &["loop", "3600000000000", "1"]);
    assert_eq!(read_line(&mut hung_out), "ready");
    // Its kernel admitted (in a grant) and on the GPU before the other task queues anything: the
    // watchdog tells the two apart by which was admitted first.
    assert!(
        bed.wait_gate_inflight(hung.id(), Duration::from_secs(30)),
        "the hung side task's launch was never admitted"
    );
    // A well-behaved side task beside it: 200 kernels of 300 µs inside the grants.
    let (mut good, mut good_out) = bed.prog("sidetask", &["loop", "300", "200"]);
    assert_eq!(read_line(&mut good_out), "ready");
    expect_evicted(
        &bed,
        &agent,
        &mut hung,
        Duration::from_secs(60),
        "hung",
        "evicted.hung",
    );
    // The line says when its gate last looked (its looker looks every 100 ms while the task is
    // stuck in its synchronize: the launch is still in flight on the GPU).
    assert!(
        agent.has_line(
            |l| l.contains(&format!("pid {}", hung.id())) && l.contains("its gate last looked")
        ),
        "the eviction line does not say when the gate last looked"
    );
    let js = wait_exit(&mut job, Duration::from_secs(120));
    assert!(
        js.is_some_and(|s| s.success()),
        "the trainer did not finish after the eviction: {js:?}"
    );
    let gs = wait_exit(&mut good, Duration::from_secs(60));
    assert_eq!(read_line(&mut good_out), "done 200");
    assert!(gs.is_some_and(|s| s.success()), "good side task: {gs:?}");
    assert!(
        !agent.has_line(|l| l.contains(&format!("pid {}", good.id()))),
        "the well-behaved side task was acted on"
    );
}

/// A side task busy on its host after its work finished on the GPU (data loading, a first cuBLAS
/// call loading its kernels: no CUDA call for seconds) is not hung: its gate's looker retires the
/// finished launches, so the ring header does not say they are still running. Without the looker
/// the watchdog evicted it (an H200 run, 2026-12-04: "2 launch(es) in flight, the oldest due 2000 ms
/// ago").
#[test]
fn a_sidetask_busy_on_its_host_after_its_work_finished_is_left_alone() {
    let _s = serial();
    let bed = Bed::new("hostbusy");
    let agent = bed.agent(&["--sidetask-hang-ms", "500"]);
    // Long enough (~15 s) to grant both rounds of the side task; it runs to its end (a killed job
    // would leave its ground-truth file behind).
    let mut job = bed.job(100);
    wait_learnt(&bed);
    // 20 kernels of 300 us inside the grants, 2 s on the host (four deadlines), 20 more.
    let (mut side, mut out) = bed.prog("sidetask", &["pause", "300", "20", "2000"]);
    assert_eq!(read_line(&mut out), "ready");
    assert_eq!(read_line(&mut out), "paused");
    let st = wait_exit(&mut side, Duration::from_secs(120));
    assert_eq!(read_line(&mut out), "done 40");
    assert!(st.is_some_and(|s| s.success()), "side task: {st:?}");
    assert!(
        !agent.has_line(|l| l.contains(&format!("pid {}", side.id()))),
        "the side task busy on its host was acted on"
    );
    let js = wait_exit(&mut job, Duration::from_secs(120));
    assert!(js.is_some_and(|s| s.success()), "the trainer: {js:?}");
}

/// A stopped agent (descheduled, or here SIGSTOPped) corrects no prediction: side tasks stop
/// starting work once its grant's heartbeat is older than the grant's freshness limit (1 ms), not at
/// the grant's deadline (tens of ms in this job's bubbles), and go on once it runs again. Ten stops
/// of 100 ms at moments spread over the iteration: without the limit, a stop in a grant lets a
/// launch through every kernel (300 us) until its deadline.
#[test]
fn a_stopped_agent_holds_the_sidetasks_at_its_grants_freshness() {
    let _s = serial();
    let bed = Bed::new("stopped");
    let truth = bed.root.join("truth.jsonl");
    let agent = bed.agent(&[]);
    let mut job = bed.job(60);
    wait_learnt(&bed);
    let (mut side, mut out) = bed.prog_traced("sidetask", &["loop", "300", "1000000"], &truth);
    assert_eq!(read_line(&mut out), "ready");
    let pid = side.id();
    let kernels = || -> Vec<u64> {
        let text = std::fs::read_to_string(&truth).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|j| j["pid"].as_u64() == Some(pid as u64))
            .filter_map(|j| j["queued_ns"].as_u64())
            .collect()
    };
    let t0 = Instant::now();
    while kernels().len() < 50 && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(kernels().len() >= 50, "the side task never ran in grants");
    let apid = agent.child.id() as i32;
    let mut stops = vec![];
    for k in 0..10u64 {
        // SAFETY: signals to our own child process.
        unsafe { libc::kill(apid, libc::SIGSTOP) };
        // Every heartbeat the agent wrote is older than `a`.
        wait_stopped(apid);
        let a = now_ns();
        std::thread::sleep(Duration::from_millis(100));
        let b = now_ns();
        // SAFETY: as above.
        unsafe { libc::kill(apid, libc::SIGCONT) };
        stops.push((a, b));
        std::thread::sleep(Duration::from_millis(150 + 37 * k));
    }
    let before_end = kernels().len();
    std::thread::sleep(Duration::from_millis(500));
    let after = kernels().len();
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let _ = side.wait();
    let js = wait_exit(&mut job, Duration::from_secs(120));
    assert!(
        js.is_some_and(|s| s.success()),
        "the trainer failed beside a stopped agent: {js:?}"
    );
    // A launch starts only while the heartbeat is at most 1 ms old, so after `a + fresh` the one
    // launching thread can queue at most one launch: one admitted before the limit, which may
    // reach the GPU's queue late on a busy 2-core machine (7.4 ms late once in CI). Its next
    // launch is checked after that and held. Without the limit, every stop inside a grant with
    // more than ~1 ms left let two or more launches through.
    let (fresh, edge) = (1_000_000, 200_000);
    let queued = kernels();
    for (a, b) in &stops {
        let late: Vec<f64> = queued
            .iter()
            .filter(|&&q| q >= a + fresh + edge && q < *b)
            .map(|&q| (q - a) as f64 / 1e6)
            .collect();
        assert!(
            late.len() <= 1,
            "launches queued {late:?} ms after the agent stopped"
        );
    }
    assert!(
        after > before_end,
        "the side task did not go on after the stops"
    );
}

#[test]
fn crashed_sidetasks_are_dropped_and_the_others_go_on() {
    let _s = serial();
    let bed = Bed::new("crash");
    let agent = bed.agent(&[]);
    let mut job = bed.job(40);
    wait_learnt(&bed);
    // A gated side task (ring) and an SDK task (status file), both crashing.
    let (mut gated, mut gated_out) = bed.prog("sidetask", &["loop", "300"]);
    assert_eq!(read_line(&mut gated_out), "ready");
    let mut sdk = bed.sdk_task();
    let sdk_status = bed.session.join(format!("sidetask-{}.json", sdk.id()));
    // The other side task's work (100 launches of 0.3 ms) is a small share of the trainer's
    // bubbles: it ends while the trainer runs even on a slow machine (a gated task gets no grant
    // once its GPU's trainer is gone; CI once saw 300 of them outlast a 30-iteration job).
    let (mut good, mut good_out) = bed.prog("sidetask", &["loop", "300", "100"]);
    assert_eq!(read_line(&mut good_out), "ready");
    let t0 = Instant::now();
    while !sdk_status.exists() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(sdk_status.exists(), "the SDK task published no status file");
    std::thread::sleep(Duration::from_millis(500));
    // An abort (a crash: no exit handlers run) and a SIGKILL (as from the kernel's OOM killer).
    // SAFETY: kill(2) of our own children.
    unsafe {
        libc::kill(gated.id() as i32, libc::SIGABRT);
        libc::kill(sdk.id() as i32, libc::SIGKILL);
    }
    for c in [&mut gated, &mut sdk] {
        assert!(wait_exit(c, Duration::from_secs(10)).is_some());
    }
    // The agent names a GPU by its bus id, as the records and the SDK's status do.
    let gpu0 = freeride_tests::gpu(0);
    for pid in [gated.id(), sdk.id()] {
        assert!(
            agent.wait_line(Duration::from_secs(10), |l| l.contains(&format!(
                "side task pid {pid} (GPU {}) died without exiting",
                gpu0
            ))),
            "no line for the crash of pid {pid}"
        );
    }
    assert!(
        bed.wait_status(Duration::from_secs(5), |v| sidetasks(v, "lost") == 2)
            .is_some(),
        "agent-status.json does not count the two crashes"
    );
    assert!(
        !sdk_status.exists(),
        "the crashed task's status file is left"
    );
    let gs = wait_exit(&mut good, Duration::from_secs(90));
    let trainer = job.try_wait().ok().flatten();
    assert_eq!(
        read_line(&mut good_out),
        "done 100",
        "the good side task did not end (trainer: {trainer:?})"
    );
    assert!(gs.is_some_and(|s| s.success()), "good side task: {gs:?}");
    let js = wait_exit(&mut job, Duration::from_secs(120));
    assert!(js.is_some_and(|s| s.success()), "trainer: {js:?}");
}

#[test]
fn a_sidetask_over_its_memory_budget_is_killed_once_the_trainer_grows() {
    let _s = serial();
    let bed = Bed::new("mem");
    let agent = bed.agent(&[
        "--gpu-mem-mib",
        "1024",
        "--mem-reserve-mib",
        "0",
        "--sidetask-mem-grace-ms",
        "300",
    ]);
    // Before the trainer: the budget is the whole GPU; both side tasks get what they ask.
    let (mut big, mut big_out) = bed.prog("sidetask", &["hold", "600"]);
    assert_eq!(read_line(&mut big_out), "held 0");
    let (mut small, mut small_out) = bed.prog("sidetask", &["hold", "200"]);
    assert_eq!(read_line(&mut small_out), "held 0");
    // The trainer takes 700 MiB: the side tasks' budget falls to 324 MiB.
    let (mut trainer, mut trainer_out) = bed.prog("trainer", &["hold", "700", "100"]);
    assert_eq!(read_line(&mut trainer_out), "held 0");
    expect_evicted(
        &bed,
        &agent,
        &mut big,
        Duration::from_secs(30),
        "over its memory budget",
        "evicted.over_memory",
    );
    // The one within the budget and the trainer live on, and exit normally.
    std::thread::sleep(Duration::from_millis(700));
    for (c, name) in [
        (&mut small, "side task within budget"),
        (&mut trainer, "trainer"),
    ] {
        assert!(c.try_wait().unwrap().is_none(), "the {name} died");
        drop(c.stdin.take());
        let st = wait_exit(c, Duration::from_secs(10));
        assert!(st.is_some_and(|s| s.success()), "{name}: {st:?}");
    }
}

/// A trainer's device memory on every allocation path, as `freeride agent` publishes it per
/// process and per GPU: PyTorch's expandable segments (the virtual memory API) and memory pools
/// included, so the side tasks' budget (the GPU's memory less the trainer's) is right.
#[test]
fn the_trainers_memory_on_every_path_shows_in_the_agents_view() {
    let _s = serial();
    let bed = Bed::new("memview");
    let _agent = bed.agent(&[]);
    let mem_paths = freeride_tests::cprog("mem_paths", &["-lcudart"]);
    // (mem_paths arguments, the (GPU, MiB) it then holds).
    type Case<'a> = (&'a [&'a str], &'a [(i64, u64)]);
    let cases: [Case; 9] = [
        (&["malloc", "32", "16"], &[(0, 48)]),
        (&["pitch", "32", "16"], &[(0, 48)]),
        (&["managed", "32", "16"], &[(0, 48)]),
        (&["async", "32", "16"], &[(0, 48)]),
        (&["pool", "32", "16"], &[(0, 48)]),
        (&["vmm", "32", "16"], &[(0, 48)]),
        // Freed memory goes; memory on another GPU is that GPU's.
        (&["vmm", "32", "16", "free"], &[(0, 16)]),
        (&["vmm", "8", "loc=1", "32"], &[(0, 8), (1, 32)]),
        (&["pool", "dev=1", "24", "free", "10"], &[(1, 10)]),
    ];
    for (args, want) in cases {
        let mut a = args.to_vec();
        a.push("hold");
        let (mut c, mut out) = bed.prog_of(&mem_paths, "trainer", &a);
        for op in &args[1..] {
            assert_eq!(read_line(&mut out), "0", "mem_paths {args:?}: {op}");
        }
        assert_eq!(read_line(&mut out), "held");
        let pid = c.id() as u64;
        let want_json: Vec<Value> = want
            .iter()
            .map(|&(d, mib)| {
                let gpu = freeride_tests::gpu(d as i32).field();
                serde_json::json!({"device": gpu, "bytes": mib << 20})
            })
            .collect();
        let total: u64 = want.iter().map(|w| w.1 << 20).sum();
        let seen = bed.wait_status(Duration::from_secs(10), |v| {
            v["processes"].as_array().is_some_and(|ps| {
                ps.iter().any(|p| {
                    p["pid"].as_u64() == Some(pid)
                        && p["mem_held_bytes"].as_u64() == Some(total)
                        && p["mem_by_device"].as_array() == Some(&want_json)
                })
            })
        });
        assert!(
            seen.is_some(),
            "the agent never showed {want:?} MiB for the trainer {args:?}: {:?}",
            bed.status().map(|v| v["processes"].clone())
        );
        drop(c.stdin.take());
        let st = wait_exit(&mut c, Duration::from_secs(10));
        assert!(st.is_some_and(|s| s.success()), "{args:?}: {st:?}");
    }
}

/// A ring file of another layout version, with a live pid (this test's).
fn plant_ring(dir: &Path, version: u32) -> PathBuf {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let pid = std::process::id();
    let start = now_ns();
    let path = dir.join(freeride_abi::session::ring_file_name(pid, start));
    let f = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    let cap = freeride_abi::ring::MIN_CAPACITY;
    f.set_len(freeride_abi::ring::file_size(cap) as u64)
        .unwrap();
    let mut h = vec![0u8; 48];
    h[0..8].copy_from_slice(&freeride_abi::ring::RING_MAGIC.to_le_bytes());
    h[8..12].copy_from_slice(&version.to_le_bytes());
    h[12..16].copy_from_slice(&(freeride_abi::ring::HEADER_SIZE as u32).to_le_bytes());
    h[16..20].copy_from_slice(&(freeride_abi::ring::SLOT_SIZE as u32).to_le_bytes());
    h[20..24].copy_from_slice(&cap.to_le_bytes());
    h[24..28].copy_from_slice(&pid.to_le_bytes());
    h[28..32].copy_from_slice(&(freeride_abi::Role::Trainer as u32).to_le_bytes());
    h[32..40].copy_from_slice(&start.to_le_bytes());
    h[40..44].copy_from_slice(&(-1i32).to_le_bytes());
    f.write_all_at(&h, 0).unwrap();
    path
}

#[test]
fn a_ring_of_another_version_is_named_and_ignored_and_the_job_is_served() {
    let _s = serial();
    let bed = Bed::new("skew-ring");
    let ring = plant_ring(&bed.session, freeride_abi::RING_LAYOUT_VERSION + 1);
    let agent = bed.agent(&[]);
    let mut job = bed.job(12);
    let want = format!(
        "ring layout version {}, this agent reads version {}",
        freeride_abi::RING_LAYOUT_VERSION + 1,
        freeride_abi::RING_LAYOUT_VERSION
    );
    assert!(
        agent.wait_line(Duration::from_secs(10), |l| l.contains(&want)
            && l.contains(&ring.display().to_string())),
        "no message naming both versions"
    );
    wait_learnt(&bed);
    let js = wait_exit(&mut job, Duration::from_secs(120));
    assert!(js.is_some_and(|s| s.success()), "trainer: {js:?}");
    // Said once, and the foreign ring is left alone (not drained, not removed).
    assert_eq!(
        agent
            .log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(&want))
            .count(),
        1
    );
    assert!(ring.exists());
}

#[test]
fn a_grant_block_of_another_version_holds_the_sidetask_and_says_so() {
    let _s = serial();
    let bed = Bed::new("skew-grant");
    // An "agent" of another release: an open grant, fresh, in a block of layout version 2.
    let w = GrantWriter::create(&bed.session, freeride_tests::gpu(0)).unwrap();
    let other = freeride_abi::grant::GRANT_LAYOUT_VERSION + 1;
    GrantMap::open(w.path(), true)
        .unwrap()
        .block()
        .version
        .store(other, std::sync::atomic::Ordering::Release);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let beat = {
        let (w, stop) = (Arc::new(w), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                w.open_for(50_000_000, 0, 0);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let (mut side, mut out) = bed.prog("sidetask", &["loop", "100", "5"]);
    assert_eq!(read_line(&mut out), "ready");
    // Held: five 100 µs kernels would be done in well under a second if admitted.
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        side.try_wait().unwrap().is_none(),
        "the side task ran under a grant block it cannot read"
    );
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(side.id() as i32, libc::SIGKILL) };
    let _ = side.wait();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut side.stderr.take().unwrap(), &mut err).unwrap();
    let want = format!(
        "has grant layout version {other}, this libfreeride.so reads version {}",
        freeride_abi::grant::GRANT_LAYOUT_VERSION
    );
    assert!(err.contains(&want), "side task stderr: {err}");
    // A trainer beside that block runs as without freeride.
    let mut job = bed.job(3);
    let js = wait_exit(&mut job, Duration::from_secs(60));
    assert!(js.is_some_and(|s| s.success()), "trainer: {js:?}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    beat.join().unwrap();
}
