//! Every process freeride starts ends with it, and what it made goes (issue 16): `freeride sim`
//! stopped by SIGTERM or SIGINT (in the baseline run or beside its side tasks), `freeride sim`
//! killed outright, and `pipesim` stopped by SIGTERM.
use freeride_tests::{built, KillOnDrop};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One job at a time: the 2-core machine is shared.
static SERIAL: Mutex<()> = Mutex::new(());

/// (pid, name) of every process whose environment or command line holds `marker`.
fn procs_with(marker: &str) -> Vec<(u32, String)> {
    let mut v = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let read = |f: &str| std::fs::read(e.path().join(f)).unwrap_or_default();
        let state = String::from_utf8_lossy(&read("stat")).into_owned();
        if state
            .rfind(')')
            .and_then(|i| state[i + 1..].trim_start().chars().next())
            .is_some_and(|c| c == 'Z' || c == 'X')
        {
            continue; // a zombie holds nothing
        }
        let has = |b: &[u8]| b.windows(marker.len()).any(|w| w == marker.as_bytes());
        if has(&read("environ")) || has(&read("cmdline")) {
            let name = String::from_utf8_lossy(&read("comm")).trim().to_string();
            v.push((pid, name));
        }
    }
    v
}

fn wait_for(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < within, "{what} not within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Entries of /dev/shm (and /tmp) named `prefix*`.
fn entries(prefix: &str) -> Vec<String> {
    ["/dev/shm", "/tmp"]
        .iter()
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
        .map(|e| e.path().display().to_string())
        .filter(|p| {
            std::path::Path::new(p)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .collect()
}

fn sim(extra: &[&str]) -> KillOnDrop {
    KillOnDrop(
        Command::new(built("freeride"))
            .args([
                "sim",
                "--stages",
                "2",
                "--microbatches",
                "4",
                "--sidetasks",
                "1",
            ])
            .args(extra)
            .env("FREERIDE_SIDETASK_NICE", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// The marker of one `freeride sim` run: its simulated GPUs' folder, in the environment of the
/// job, its stages and the side tasks.
fn marker(pid: u32) -> String {
    format!("/dev/shm/freeride-gpu-{pid}-")
}

fn stderr_of(c: &mut KillOnDrop) -> String {
    let mut s = String::new();
    if let Some(mut e) = c.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut s);
    }
    s
}

#[test]
fn freeride_sim_stopped_by_a_signal_ends_its_processes_and_removes_its_files() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // SIGTERM in the baseline run (the job alone), SIGINT beside the side tasks.
    for (sig, phase) in [
        (libc::SIGTERM, "pipesim-stage"),
        (libc::SIGINT, "train_loop"),
    ] {
        let mut s = sim(&["--iterations", "60"]);
        let m = marker(s.id());
        wait_for(
            &format!("{phase} of the run"),
            Duration::from_secs(60),
            || procs_with(&m).iter().any(|(_, n)| n == phase),
        );
        let before = procs_with(&m);
        // SAFETY: kill(2) of our own child.
        unsafe { libc::kill(s.id() as i32, sig) };
        let err = stderr_of(&mut s);
        let st = s.wait().unwrap();
        assert_eq!(st.code(), Some(128 + sig), "{err}");
        assert!(err.contains("interrupted"), "{err}");
        wait_for(
            &format!("the end of every process of the run ({before:?})"),
            Duration::from_secs(5),
            || procs_with(&m).is_empty(),
        );
        let left = entries(&format!("freeride-gpu-{}-", s.id()))
            .into_iter()
            .chain(entries(&format!("freeride-session-{}-", s.id())))
            .collect::<Vec<_>>();
        assert!(left.is_empty(), "signal {sig}: left {left:?}");
    }
}

/// Killed outright, `freeride sim` cannot clean up, but its processes end with it (their
/// parent-death signal) and the next run removes its folders.
#[test]
fn a_killed_freeride_sim_takes_its_processes_with_it() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = sim(&["--iterations", "60"]);
    let pid = s.id();
    let m = marker(pid);
    wait_for("the side tasks", Duration::from_secs(60), || {
        procs_with(&m).iter().any(|(_, n)| n == "train_loop")
    });
    s.kill().unwrap();
    s.wait().unwrap();
    wait_for(
        "the end of every process of the killed run",
        Duration::from_secs(10),
        || procs_with(&m).is_empty(),
    );
    assert!(!entries(&format!("freeride-session-{pid}-")).is_empty());
    let next = Command::new(built("freeride"))
        .args([
            "sim",
            "--stages",
            "1",
            "--microbatches",
            "2",
            "--iterations",
            "3",
        ])
        .args(["--f", "1", "--b", "1", "--w", "1"])
        .output()
        .unwrap();
    assert!(next.status.success(), "{next:?}");
    let left = entries(&format!("freeride-gpu-{pid}-"))
        .into_iter()
        .chain(entries(&format!("freeride-session-{pid}-")))
        .collect::<Vec<_>>();
    assert!(left.is_empty(), "the killed run's folders stayed: {left:?}");
}

#[test]
fn pipesim_stopped_by_sigterm_kills_its_stages_and_removes_its_folders() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut p = KillOnDrop(
        Command::new(built("pipesim"))
            .args([
                "--stages",
                "2",
                "--microbatches",
                "4",
                "--iterations",
                "200",
            ])
            .env_remove("FREERIDE_SIM_DIR")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let pid = p.id();
    let m = format!("/dev/shm/pipesim-sim-{pid}-");
    wait_for("the stages", Duration::from_secs(30), || {
        procs_with(&m)
            .iter()
            .filter(|(_, n)| n == "pipesim-stage")
            .count()
            == 2
    });
    // SAFETY: kill(2) of our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let err = stderr_of(&mut p);
    let st = p.wait().unwrap();
    assert_eq!(
        (st.code(), st.signal()),
        (Some(128 + libc::SIGTERM), None),
        "{err}"
    );
    wait_for("the end of the stages", Duration::from_secs(5), || {
        procs_with(&m).is_empty()
    });
    let left = entries(&format!("pipesim-sim-{pid}-"))
        .into_iter()
        .chain(entries(&format!("pipesim-truth-{pid}-")))
        .collect::<Vec<_>>();
    assert!(left.is_empty(), "pipesim left {left:?}");
}
