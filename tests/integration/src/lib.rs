//! Helpers shared by the integration tests in `tests/` (which run the built binaries as processes).
use std::path::PathBuf;

pub mod gatebed;

/// `target/<profile>/`, where the binaries and libraries under test are.
pub fn release_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// A built binary or library of the workspace; panics with the build command if it is missing.
pub fn built(name: &str) -> PathBuf {
    let p = release_dir().join(name);
    assert!(
        p.exists(),
        "{} missing: run `cargo build --release --workspace` first",
        p.display()
    );
    p
}

/// A fresh folder `/dev/shm/freeride-<tag>-<pid>` (the caller removes it; it is removed at exit
/// too) with a session folder (mode 0700, as the interposer requires) in it: (root, session).
pub fn shm_session(tag: &str) -> (PathBuf, PathBuf) {
    let root = PathBuf::from(format!("/dev/shm/freeride-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    freeride_abi::scratch::remove_at_exit(&root);
    let session = root.join("session");
    std::fs::create_dir_all(&session).expect("session folder");
    std::fs::set_permissions(
        &session,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .expect("session folder mode");
    (root, session)
}

/// Compiles `tests/cprogs/gate_side.c` (a small CUDA-runtime program: kernel loops, graphs, two
/// GPUs, allocations) against the stand-in runtime; returns the executable. `tag` is kept for the
/// callers (the executable is shared: see [`cprog`]).
pub fn gate_side_bin(_tag: &str) -> PathBuf {
    cprog("gate_side", &["-lcudart"])
}

/// Compiles `tests/cprogs/<name>.c` against the stand-in libraries `libs` (`-lcudart`, `-lnccl`)
/// into `target/<profile>/cprogs/<name>` (built under a name of this process, then renamed over
/// it: concurrent test processes each get a whole executable, and nothing is left outside the
/// build folder); returns the executable.
pub fn cprog(name: &str, libs: &[&str]) -> PathBuf {
    let t = release_dir();
    for f in ["libfreeride.so", "libcuda.so", "libcudart.so", "libnccl.so"] {
        assert!(
            t.join(f).exists(),
            "{f} not built (cargo build --release --workspace)"
        );
    }
    let d = t.join("cprogs");
    std::fs::create_dir_all(&d).expect("cprogs folder");
    let out = d.join(name);
    let tmp = d.join(format!("{name}.{}.tmp", std::process::id()));
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../cprogs")
        .join(format!("{name}.c"));
    let o = std::process::Command::new("cc")
        .args(["-O1", "-o"])
        .arg(&tmp)
        .arg(&src)
        .arg(format!("-L{}", t.display()))
        .args(libs)
        .arg("-lpthread")
        .output()
        .expect("cc");
    assert!(
        o.status.success(),
        "cc {}: {}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::rename(&tmp, &out).expect("rename the compiled program");
    out
}

/// The environment that runs a side task at nice 0 in the functional tests. On a loaded 2-core
/// machine a side task at the default nice 19 can be starved for seconds, and those tests are about
/// gating and faults, not CPU priority (the tests of the priority itself leave it at the default).
pub const SIDETASK_NICE_FOR_TESTS: (&str, &str) = ("FREERIDE_SIDETASK_NICE", "0");

/// Voluntary context switches (sleeps, each ending in a wake-up) of every thread of `pid` so far.
pub fn sleeps(pid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("status")).ok())
        .filter_map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .sum()
}

pub use pipesim::host::{stolen_during, STEAL_LIMIT};
/// Timed runs a check may discard as stolen from before it fails anyway.
pub const MAX_STOLEN_RUNS: usize = 6;

/// The pause before the next run after `n` runs were stolen from: a slow spell of the host lasts
/// tens of seconds, so waiting lets it pass (2, 4, ... 10 s).
pub fn stolen_pause(n: usize) -> std::time::Duration {
    std::time::Duration::from_secs(2 * n.clamp(1, 5) as u64)
}

/// Runs a timing check until it passes or has missed `tries` times, pausing `pause(n)` before the
/// n-th run after the first, and panics with every miss if it never passed: a stall of the shared
/// machine only lengthens the run it hits, a wrong result misses every time. A run that missed
/// while the hypervisor took more than [`STEAL_LIMIT`] of the CPU is not counted (up to six such
/// runs): it says nothing of the code.
pub fn timing_check(
    tries: usize,
    pause: impl Fn(usize) -> std::time::Duration,
    mut check: impl FnMut() -> Result<(), String>,
) {
    let mut misses = vec![];
    let mut stolen = 0;
    for n in 0.. {
        if misses.len() == tries {
            break;
        }
        if n > 0 {
            std::thread::sleep(pause(n));
        }
        let (r, steal) = stolen_during(&mut check);
        match r {
            Ok(()) => return,
            Err(e) if steal > STEAL_LIMIT && stolen < MAX_STOLEN_RUNS => {
                stolen += 1;
                eprintln!(
                    "missed ({e}) while the hypervisor took {:.0} % of the CPU: not counted, \
                     running it again",
                    100.0 * steal
                );
                std::thread::sleep(stolen_pause(stolen));
            }
            Err(e) => {
                eprintln!(
                    "missed ({e}; {:.0} % of the CPU stolen); running it again",
                    100.0 * steal
                );
                misses.push(e);
            }
        }
    }
    panic!(
        "missed {} times ({stolen} more runs not counted: the hypervisor took over {:.0} % of \
         the CPU): {}",
        misses.len(),
        100.0 * STEAL_LIMIT,
        misses.join("; ")
    );
}

/// Runs a check that asserts on timing (it panics when it fails) and, if it failed while the
/// hypervisor took more than [`STEAL_LIMIT`] of the machine's CPU, runs it again after a pause
/// ([`stolen_pause`]; up to six times): only a failure in a run the host did not starve fails the
/// test.
pub fn unless_stolen(check: impl Fn()) {
    for n in 1..=MAX_STOLEN_RUNS {
        let (r, steal) =
            stolen_during(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(&check)));
        match r {
            Ok(()) => return,
            Err(_) if steal > STEAL_LIMIT => {
                eprintln!(
                    "failed while the hypervisor took {:.0} % of the CPU: not counted, running \
                     it again",
                    100.0 * steal
                );
                std::thread::sleep(stolen_pause(n));
            }
            Err(e) => std::panic::resume_unwind(e),
        }
    }
    check();
}

/// [`timing_check`] with three counted tries and no pause.
pub fn within_three_tries(check: impl FnMut() -> Result<(), String>) {
    timing_check(3, |_| std::time::Duration::ZERO, check);
}

/// Runs `cmd`, panics with its stderr if it fails, and parses its stdout as one JSON value.
pub fn json_of(cmd: &mut std::process::Command) -> serde_json::Value {
    let out = cmd.output().expect("run the command");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// Runs `cmd` to its end, trying again while its executable is "busy" (ETXTBSY): a program just
/// copied or compiled by this test process can be busy for a moment, because a child another test
/// forks meanwhile holds the writer's descriptor until its exec.
pub fn output_of_new_exe(cmd: &mut std::process::Command) -> std::process::Output {
    for _ in 0..100 {
        match cmd.output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            r => return r.unwrap_or_else(|e| panic!("{cmd:?}: {e}")),
        }
    }
    panic!("{cmd:?}: the executable stayed busy for 2 s");
}

/// An executable `<dir>/cargo` that runs the shell commands `body`: a stand-in for `$CARGO` in the
/// tests of what starts a workspace build (agent/src/testbed.rs).
pub fn stand_in_cargo(dir: &std::path::Path, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let cargo = dir.join("cargo");
    std::fs::write(&cargo, format!("#!/bin/sh\n{body}\n")).expect("write the stand-in cargo");
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    cargo
}

/// A child process killed (SIGKILL) and reaped when dropped, also while a failing test unwinds.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if !matches!(self.0.try_wait(), Ok(Some(_))) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for KillOnDrop {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

/// The stand-in driver's physical GPU `physical` by identity (its PCI bus id): the name of its
/// grant block and the `device` of every record about it, whatever ordinal a process has for it.
pub fn gpu(physical: i32) -> freeride_abi::GpuId {
    freeride_abi::GpuId::parse(&simgpu::identity::pci_bus_id(physical)).expect("a bus id")
}

/// `nm ARGS` of library `lib` of the release directory (binutils' nm is needed).
pub fn nm(args: &[&str], lib: &str) -> String {
    let path = release_dir().join(lib);
    assert!(path.exists(), "{} missing", path.display());
    let out = std::process::Command::new("nm")
        .args(args)
        .arg(&path)
        .output()
        .expect("nm (binutils) is needed");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[cfg(test)]
mod steal_tests {
    use super::*;

    #[test]
    fn a_check_that_passes_runs_once_and_one_that_misses_panics_with_its_misses() {
        let mut runs = 0;
        timing_check(
            3,
            |_| std::time::Duration::ZERO,
            || {
                runs += 1;
                Ok(())
            },
        );
        assert_eq!(runs, 1);
        let r = std::panic::catch_unwind(|| {
            timing_check(2, |_| std::time::Duration::ZERO, || Err("late".to_string()))
        });
        let msg = *r.unwrap_err().downcast::<String>().unwrap();
        assert!(
            msg.starts_with("missed 2 times") && msg.ends_with("late; late"),
            "{msg}"
        );
    }

    #[test]
    fn a_check_that_always_fails_fails_however_much_is_stolen() {
        let runs = std::cell::Cell::new(0);
        unless_stolen(|| runs.set(runs.get() + 1));
        assert_eq!(runs.get(), 1);
        let r = std::panic::catch_unwind(|| unless_stolen(|| panic!("always")));
        assert_eq!(*r.unwrap_err().downcast::<&str>().unwrap(), "always");
    }
}
