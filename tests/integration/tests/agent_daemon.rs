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
    assert!(
        wait_learnt(&dir, 2, Duration::from_secs(20)).is_some(),
        "first agent never learnt the job"
    );
    a.kill().unwrap();
    a.wait().unwrap();
    let killed_at = Instant::now();
    let mut b = agent(&dir);
    // The iteration is about 150 ms (2 stages, 4 micro-batches of 10 ms): 3 iterations < 0.5 s; allow
    // a busy machine several times that.
    let v = wait_learnt(&dir, 2, Duration::from_secs(5));
    let took = killed_at.elapsed();
    assert!(v.is_some(), "restarted agent did not relearn within 5 s");
    let period = v.unwrap()["gpus"][0]["iteration_ns"].as_u64().unwrap();
    assert!(
        period > 100_000_000 && period < 400_000_000,
        "period {period}"
    );
    let st = j.wait().unwrap();
    assert!(
        st.success(),
        "the job failed beside a killed and restarted agent: {st}"
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
/// whose GPUs are idle about a fifth of the time, it wakes a few thousand times a second, not the
/// 20 000 of a 50 µs poll throughout (`FREERIDE_DOORBELL=0`, printed for comparison).
#[test]
fn a_watching_agent_sleeps_between_bubbles() {
    let mut woke = vec![];
    for bell in ["1", "0"] {
        let dir = session(&format!("bell{bell}"));
        let mut a = agent_with(&dir, &[("FREERIDE_DOORBELL", bell)]);
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
        "wake-ups in a second: doorbell {}, polling {}",
        woke[0], woke[1]
    );
    assert!(
        woke[0] < 10_000,
        "the agent woke {} times in a second with the doorbell",
        woke[0]
    );
}
