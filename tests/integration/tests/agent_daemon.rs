//! `freeride agent` as a daemon beside a running job: restarts, dead processes' rings, hostile files.
use freeride_tests::built;
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn session(tag: &str) -> std::path::PathBuf {
    let d = std::path::PathBuf::from(format!(
        "/dev/shm/freeride-itest-{tag}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    freeride_abi::scratch::remove_at_exit(&d);
    d
}

fn agent(dir: &Path) -> Child {
    agent_with(dir, &[])
}

fn agent_with(dir: &Path, env: &[(&str, &str)]) -> Child {
    Command::new(built("freeride"))
        .args(["agent", "--metrics-port", "0", "--dir"])
        .arg(dir)
        .envs(env.iter().copied())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start agent")
}

fn job(dir: &Path, iterations: u32) -> Child {
    Command::new(built("freeride"))
        .args(["run", "--"])
        .arg(built("pipesim"))
        .args(["--stages", "2", "--microbatches", "4", "--iterations"])
        .arg(iterations.to_string())
        .env("FREERIDE_DIR", dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start pipesim under freeride")
}

fn status(dir: &Path) -> Option<Value> {
    let out = Command::new(built("freeride"))
        .args(["status", "--json", "--dir"])
        .arg(dir)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
}

/// Waits until every GPU's iteration period is known; returns the state.
fn wait_learnt(dir: &Path, gpus: usize, within: Duration) -> Option<Value> {
    let t0 = Instant::now();
    while t0.elapsed() < within {
        if let Some(v) = status(dir) {
            let g = v["gpus"].as_array().cloned().unwrap_or_default();
            if g.len() == gpus
                && g.iter()
                    .all(|g| g["iteration_ns"].is_u64() && g["bubbles"].as_u64() > Some(0))
            {
                return Some(v);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn a_restarted_agent_relearns_from_live_rings() {
    let dir = session("restart");
    let mut a = agent(&dir);
    std::thread::sleep(Duration::from_millis(200));
    let mut j = job(&dir, 14);
    let learnt = wait_learnt(&dir, 2, Duration::from_secs(20));
    assert!(learnt.is_some(), "first agent never learnt the job");
    // Each GPU says how much of its bubble time was granted and what held the rest closed (with no
    // side task on the node the trainers' ends are read lazily, and nothing is granted).
    for g in learnt.unwrap()["gpus"].as_array().unwrap() {
        let t = &g["grants"];
        let held = t["held_ns"].as_object();
        assert!(
            t["granted_ns"].is_u64() && held.is_some_and(|h| h.len() == 7),
            "{g}"
        );
    }
    a.kill().unwrap();
    a.wait().unwrap();
    let killed_at = Instant::now();
    let mut b = agent(&dir);
    // The iteration is about 150 ms (2 stages, 4 micro-batches of 10 ms): 3 iterations < 0.5 s; allow
    // a busy machine several times that.
    // Relearnt: every GPU's period known and right. An agent that begins in the job's steady
    // state may take a micro-batch's sends and receives for the iteration at first (once in
    // about ten suite runs it said 31 ms for a moment): it must have corrected it in time.
    let in_range = |p: u64| p > 100_000_000 && p < 400_000_000;
    let t0 = Instant::now();
    let mut last = None;
    while t0.elapsed() < Duration::from_secs(5) {
        let left = Duration::from_secs(5).saturating_sub(t0.elapsed());
        let Some(v) = wait_learnt(&dir, 2, left) else {
            break;
        };
        let periods: Vec<u64> = v["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|g| g["iteration_ns"].as_u64())
            .collect();
        if periods.iter().all(|&p| in_range(p)) {
            last = Some(Ok(periods));
            break;
        }
        last = Some(Err(periods));
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = killed_at.elapsed();
    match last {
        None => panic!("restarted agent did not relearn within 5 s"),
        Some(Err(periods)) => panic!("restarted agent's periods after 5 s: {periods:?}"),
        Some(Ok(_)) => {}
    }
    let st = j.wait().unwrap();
    assert!(
        st.success(),
        "the job failed beside a killed and restarted agent: {st}"
    );
    // Its ranks gone, the agent forgets them: no GPU is left with a trainer.
    let t0 = Instant::now();
    let mut left = status(&dir);
    while t0.elapsed() < Duration::from_secs(5)
        && left.as_ref().is_none_or(|v| {
            v["gpus"].as_array().is_none_or(|g| {
                g.iter()
                    .any(|g| g["trainers"].as_array().is_none_or(|t| !t.is_empty()))
            })
        })
    {
        std::thread::sleep(Duration::from_millis(50));
        left = status(&dir);
    }
    assert!(
        left.as_ref()
            .and_then(|v| v["gpus"].as_array())
            .is_some_and(|g| g
                .iter()
                .all(|g| g["trainers"].as_array().is_some_and(|t| t.is_empty()))),
        "the agent still shows the ended job's trainers: {left:?}"
    );
    b.kill().unwrap();
    b.wait().unwrap();
    eprintln!("relearnt in {took:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dead_rings_and_garbage_files_do_not_stop_the_agent() {
    let dir = session("dead");
    // A finished job leaves its rings behind.
    assert!(job(&dir, 2).wait().unwrap().success());
    let rings = std::fs::read_dir(&dir).unwrap().count();
    assert!(rings >= 2, "expected the job's rings in {}", dir.display());
    // A file with a ring's name and random contents, and a truncated one.
    use std::os::unix::fs::OpenOptionsExt;
    let mut junk: Vec<u8> = (0..1 << 16)
        .map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let write = |name: &str, bytes: &[u8]| {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(dir.join(name))
            .and_then(|mut f| std::io::Write::write_all(&mut f, bytes))
            .unwrap();
    };
    write("ring-4000000-1.ring", &junk);
    junk.truncate(100);
    write("ring-4000001-1.ring", &junk);
    // A ring a process was creating when it died (never published).
    let staging = dir.join("ring-4000002-1.staging");
    write("ring-4000002-1.staging", &junk);
    let mut a = agent(&dir);
    std::thread::sleep(Duration::from_millis(300));
    let mut j = job(&dir, 6);
    let v = wait_learnt(&dir, 2, Duration::from_secs(20));
    assert!(
        v.is_some(),
        "agent did not serve the live job beside dead and garbage rings"
    );
    assert!(j.wait().unwrap().success());
    // The finished processes' rings are drained and removed (garbage files are left alone).
    let t0 = Instant::now();
    let live_rings = || {
        std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("ring-") && !n.starts_with("ring-400000"))
            .count()
    };
    while live_rings() > 0 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        live_rings(),
        0,
        "rings of finished processes left in {}",
        dir.display()
    );
    assert!(
        !staging.exists(),
        "the staging ring of a dead process was left"
    );
    assert!(a.try_wait().unwrap().is_none(), "the agent died");
    // SAFETY: plain kill(2) of our child.
    unsafe { libc::kill(a.id() as i32, libc::SIGTERM) };
    let out = a.wait_with_output().unwrap();
    assert!(out.status.success(), "agent exit: {:?}", out.status);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ring-4000000-1.ring"),
        "no warning about the garbage ring: {err}"
    );
    assert!(
        err.contains("removed") && err.contains("ring-4000002-1.staging"),
        "no line about the removed staging ring: {err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// With no process to watch the agent wakes a few hundred times a second, not at its 50 µs poll
/// (20 000 a second), and still serves its state.
#[test]
fn an_agent_with_nothing_to_watch_mostly_sleeps() {
    let dir = session("idle");
    let mut a = agent(&dir);
    std::thread::sleep(Duration::from_millis(300));
    let before = freeride_tests::sleeps(a.id());
    std::thread::sleep(Duration::from_secs(1));
    let woke = freeride_tests::sleeps(a.id()) - before;
    let served = status(&dir).is_some();
    a.kill().unwrap();
    a.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(served, "the idle agent published no state");
    assert!(woke < 2_000, "the idle agent woke {woke} times in a second");
}

#[test]
fn a_second_agent_on_the_same_session_is_refused() {
    let dir = session("twice");
    let mut a = agent(&dir);
    std::thread::sleep(Duration::from_millis(300));
    let out = Command::new(built("freeride"))
        .args(["agent", "--metrics-port", "0", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("another agent"));
    a.kill().unwrap();
    a.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn report_writes_a_perfetto_trace_of_bubbles_and_kernels() {
    let dir = session("report");
    let log = dir.with_extension("bubbles.jsonl");
    let truth = dir.with_extension("truth.jsonl");
    // Also when an assertion below fails (the test binary still exits normally).
    for f in [&log, &truth, &dir.with_extension("trace.json")] {
        freeride_abi::scratch::remove_at_exit(f);
    }
    let mut a = Command::new(built("freeride"))
        .args(["agent", "--metrics-port", "0", "--dir"])
        .arg(&dir)
        .arg("--bubble-log")
        .arg(&log)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let st = Command::new(built("freeride"))
        .args(["run", "--"])
        .arg(built("pipesim"))
        .args([
            "--stages",
            "2",
            "--microbatches",
            "4",
            "--iterations",
            "3",
            "--truth",
        ])
        .arg(&truth)
        .env("FREERIDE_DIR", &dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: plain kill(2) of our child.
    unsafe { libc::kill(a.id() as i32, libc::SIGTERM) };
    assert!(a.wait().unwrap().success());
    let out = dir.with_extension("trace.json");
    let r = Command::new(built("freeride"))
        .args(["report", "--trace"])
        .arg(&out)
        .arg("--bubbles")
        .arg(&log)
        .arg("--truth")
        .arg(&truth)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let ev = v["traceEvents"].as_array().unwrap();
    let bubbles = ev.iter().filter(|e| e["name"] == "bubble").count();
    let kernels = ev
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"] != "bubble")
        .count();
    assert!(bubbles >= 6, "{bubbles} bubbles in the trace");
    assert!(kernels > 50, "{kernels} kernels in the trace");
    for p in [&log, &truth, &out] {
        let _ = std::fs::remove_file(p);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Between bubbles the agent sleeps on the session doorbell, which the trainers' comm pollers ring
/// when an op begins or ends; it polls every 50 µs only while a bubble is open. Watching a job
/// whose GPUs are idle about a fifth of the time with prompt ends (as when a side task is on the
/// node), it wakes a few thousand times a second, not the 20 000 of a 50 µs poll throughout
/// (`FREERIDE_DOORBELL=0`, printed for comparison). With nobody harvesting (lazy ends, the
/// default) an open bubble is no reason to poll, and it wakes far less still.
#[test]
fn a_watching_agent_sleeps_between_bubbles() {
    let mut woke = vec![];
    for (bell, ends) in [("1", "prompt"), ("0", "prompt"), ("1", "auto")] {
        let dir = session(&format!("bell{bell}{ends}"));
        let mut a = agent_with(
            &dir,
            &[("FREERIDE_DOORBELL", bell), ("FREERIDE_COMM_ENDS", ends)],
        );
        std::thread::sleep(Duration::from_millis(200));
        let mut j = job(&dir, 40);
        assert!(
            wait_learnt(&dir, 2, Duration::from_secs(20)).is_some(),
            "the agent never learnt the job"
        );
        // Every trainer's ring says whether its poller rings the doorbell (there is none to ring
        // with FREERIDE_DOORBELL=0).
        let rings: Vec<_> = freeride_abi::session::list_rings(&dir)
            .unwrap()
            .iter()
            .filter_map(|p| freeride_abi::reader::RingReader::open(p).ok())
            .collect();
        assert_eq!(rings.len(), 2, "expected the two trainers' rings");
        assert!(
            rings.iter().all(|r| r.rings_doorbell() == (bell == "1")),
            "doorbell {bell}: a trainer's ring says otherwise"
        );
        drop(rings);
        let before = freeride_tests::sleeps(a.id());
        std::thread::sleep(Duration::from_secs(1));
        woke.push(freeride_tests::sleeps(a.id()) - before);
        assert!(j.wait().unwrap().success());
        a.kill().unwrap();
        a.wait().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
    eprintln!(
        "wake-ups in a second: doorbell {}, polling {}, doorbell and lazy ends {}",
        woke[0], woke[1], woke[2]
    );
    assert!(
        woke[0] < 10_000,
        "the agent woke {} times in a second with the doorbell",
        woke[0]
    );
    assert!(
        woke[2] * 2 < woke[0],
        "with lazy ends the agent woke {} times in a second, with prompt ends {}",
        woke[2],
        woke[0]
    );
}

/// Exactly one agent serves a directory, whatever the race (issue 16): agents started at the same
/// moment leave one serving, and the claim does not rest on the pid file (a removed `agent.pid`,
/// which an agent that stopped used to remove under a running one, lets no second agent in).
#[test]
fn only_one_agent_serves_a_directory_even_when_started_at_once() {
    use freeride_tests::KillOnDrop;
    use std::io::Read;
    let dir = session("race");
    freeride_abi::session::ensure_dir(&dir).unwrap();
    let fifo = dir.with_extension("go");
    let _ = std::fs::remove_file(&fifo);
    freeride_abi::scratch::remove_at_exit(&fifo);
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for round in 0..3 {
        // Each waits on the FIFO, then execs the agent: opening it for writing releases all.
        let agents: Vec<KillOnDrop> = (0..4)
            .map(|_| {
                KillOnDrop(
                    Command::new("sh")
                        .arg("-c")
                        .arg(r#"read x < "$0"; exec "$@""#)
                        .arg(&fifo)
                        .arg(built("freeride"))
                        .args(["agent", "--metrics-port", "0", "--duration", "1.5", "--dir"])
                        .arg(&dir)
                        .stdout(Stdio::null())
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap(),
                )
            })
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        drop(std::fs::OpenOptions::new().write(true).open(&fifo).unwrap());
        let mut serving = 0;
        for mut a in agents {
            let mut err = String::new();
            a.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            let st = a.wait().unwrap();
            if err.contains("serving") {
                serving += 1;
                assert!(st.success(), "round {round}: {err}");
            } else {
                assert_eq!(st.code(), Some(1), "round {round}: {err}");
                assert!(err.contains("another agent"), "round {round}: {err}");
            }
        }
        assert_eq!(
            serving, 1,
            "round {round}: {serving} agents served one directory"
        );
    }
    let mut first = KillOnDrop(agent(&dir));
    let t0 = Instant::now();
    while !dir.join("agent.pid").exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::remove_file(dir.join("agent.pid")).unwrap();
    let second = Command::new(built("freeride"))
        .args(["agent", "--metrics-port", "0", "--duration", "5", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(
        second.status.code(),
        Some(1),
        "a second agent served beside the first once its pid file was gone: {}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert!(first.try_wait().unwrap().is_none(), "the first agent died");
    drop(first);
    let _ = std::fs::remove_dir_all(&dir);
}

/// What an agent made goes when it stops (issue 16): its pid file, its state, the grant blocks
/// and the doorbell (no live process rings it any more); and the status file of a side task
/// whose process is gone does not pile up. While the task lives, `freeride status` shows it.
/// While no side task is on the node the agent lets the trainers read their ops' ends in batches
/// (each trainer's ring then says how late its ends may come, so the agent grants nothing there
/// meanwhile); an SDK side task's status file makes it ask for prompt ends again, and the trainers
/// stop saying their ends may be late.
#[test]
fn trainers_read_ends_lazily_until_a_sidetask_comes() {
    use freeride_tests::KillOnDrop;
    let dir = session("ends");
    let _a = KillOnDrop(agent(&dir));
    let mut j = KillOnDrop(job(&dir, 30));
    // The largest "late until" among the trainers, and the agent's clock, as it published them.
    let late = |v: &Value| {
        let most = v["processes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["role"] == "trainer")
            .filter_map(|p| p["ends_late_until_ns"].as_u64())
            .max()
            .unwrap_or(0);
        (most, v["t_ns"].as_u64().unwrap_or(0))
    };
    let wait = |what: &str, f: &dyn Fn(&Value) -> bool| {
        let t0 = Instant::now();
        loop {
            match status(&dir) {
                Some(v) if f(&v) => return v,
                v if t0.elapsed() > Duration::from_secs(20) => panic!("{what}: {v:?}"),
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    };
    wait("the trainers never read their ends lazily", &|v| {
        let (most, now) = late(v);
        v["ends"] == "lazy" && most > now
    });
    let mut task = KillOnDrop(Command::new("sleep").arg("60").spawn().unwrap());
    let file = dir.join(format!("sidetask-{}.json", task.id()));
    std::fs::write(
        &file,
        format!(
            r#"{{"pid":{},"task":"ends-probe","device":0,"state":"waiting"}}"#,
            task.id()
        ),
    )
    .unwrap();
    wait("the agent did not ask for prompt ends", &|v| {
        v["ends"] == "prompt"
    });
    // Every trainer's last lazy look has run out (50 ms and its slack), and none came after.
    std::thread::sleep(Duration::from_millis(300));
    wait("a trainer still says its ends may be late", &|v| {
        let (most, now) = late(v);
        most < now
    });
    task.kill().unwrap();
    task.wait().unwrap();
    let _ = std::fs::remove_file(&file);
    assert!(j.wait().unwrap().success(), "the job failed");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_stopped_agent_leaves_nothing_behind_and_status_shows_side_tasks() {
    use freeride_tests::KillOnDrop;
    let dir = session("clean");
    let mut a = KillOnDrop(agent(&dir));
    std::thread::sleep(Duration::from_millis(300));
    // An SDK side task as its status file shows it (the process: a sleep of ours), and the file
    // a finished one left.
    let mut task = KillOnDrop(Command::new("sleep").arg("60").spawn().unwrap());
    let write = |pid: u32, state: &str| {
        let p = dir.join(format!("sidetask-{pid}.json"));
        std::fs::write(
            &p,
            format!(
                r#"{{"pid":{pid},"task":"probe-task","device":1,"state":"{state}","steps":12,"gpu_busy_ns":3000000,"mem_held_bytes":0}}"#
            ),
        )
        .unwrap();
        p
    };
    let live = write(task.id(), "running");
    let mut gone = Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let finished = write(gone.id(), "finished");
    assert!(job(&dir, 4).wait().unwrap().success());
    let t0 = Instant::now();
    let shown = loop {
        let v = status(&dir);
        let tasks = v.as_ref().map(|v| v["sidetasks"]["tasks"].clone());
        if tasks.as_ref().and_then(|t| t.as_array()).is_some_and(|t| {
            t.iter()
                .any(|t| t["pid"] == task.id() && t["name"] == "probe-task")
        }) {
            break tasks;
        }
        if t0.elapsed() > Duration::from_secs(10) {
            break tasks;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        shown.is_some_and(|t| t.as_array().is_some_and(|t| t.len() == 1)),
        "the side task is not in the agent's state: {:?}",
        status(&dir)
    );
    let text = Command::new(built("freeride"))
        .args(["status", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("side tasks: 1") && text.contains("probe-task"),
        "{text}"
    );
    assert!(
        !finished.exists(),
        "the status file of a finished, gone side task stayed"
    );
    task.kill().unwrap();
    task.wait().unwrap();
    let t0 = Instant::now();
    while live.exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!live.exists(), "the status file of a dead side task stayed");
    // The job's rings are drained and removed; then the agent stops.
    let t0 = Instant::now();
    while !freeride_abi::session::list_rings(&dir).unwrap().is_empty()
        && t0.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let made: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let grants = [0, 1].map(|d| freeride_abi::session::grant_file_name(freeride_tests::gpu(d)));
    for f in ["agent.pid", "doorbell"]
        .iter()
        .copied()
        .chain(grants.iter().map(String::as_str))
    {
        assert!(made.iter().any(|m| m == f), "{f} not made: {made:?}");
    }
    // SAFETY: plain kill(2) of our child.
    unsafe { libc::kill(a.id() as i32, libc::SIGTERM) };
    assert!(a.wait().unwrap().success());
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.is_empty(), "the stopped agent left {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
