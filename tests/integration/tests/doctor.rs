//! `freeride doctor`: each problem it reports, made on purpose on the test bed, and the all-clear
//! of a node that has none (the stand-in driver, a probe command that launches kernels).
use freeride_tests::{built, release_dir};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Held while a fake MPS control daemon runs and by the test that wants a node with no problem:
/// the doctor sees every process of the machine, so that test would see the daemon too.
static FAKE_DAEMON: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn fake_daemon_lock() -> std::sync::MutexGuard<'static, ()> {
    FAKE_DAEMON.lock().unwrap_or_else(|e| e.into_inner())
}

struct Node {
    root: PathBuf,
}

impl Node {
    fn new(tag: &str) -> Node {
        let root =
            Path::new("/dev/shm").join(format!("freeride-doctor-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        Node { root }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.root.join(p)
    }

    /// `freeride doctor --json ARGS` with the stand-in driver and a private session directory,
    /// simulated GPU and MPS pipe directory (each overridable by `args`/`envs`).
    fn doctor(&self, args: &[&str], envs: &[(&str, &str)]) -> (i32, Value) {
        let mut c = Command::new(built("freeride"));
        c.args(["doctor", "--json"]);
        if !args.contains(&"--cuda-lib") {
            c.arg("--cuda-lib").arg(release_dir().join("libcuda.so"));
        }
        c.args(args)
            .env("FREERIDE_DIR", self.path("session"))
            .env("FREERIDE_SIM_DIR", self.path("sim"))
            .env("CUDA_MPS_PIPE_DIRECTORY", self.path("mps"))
            .env("XDG_CACHE_HOME", self.path("cache"))
            .env_remove("FREERIDE_LIB")
            .stdin(Stdio::null());
        for (k, v) in envs {
            c.env(k, v);
        }
        self.run(c)
    }

    fn run(&self, mut c: Command) -> (i32, Value) {
        let o = c.output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        let v: Value = serde_json::from_str(text.trim())
            .unwrap_or_else(|e| panic!("{e}: {text}\n{}", String::from_utf8_lossy(&o.stderr)));
        (o.status.code().unwrap_or(-1), v)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The findings of `check` at `level` ("ok", "info", "warn", "fail").
fn findings<'a>(v: &'a Value, check: &str, level: &str) -> Vec<&'a str> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["check"] == check && f["level"] == level)
        .map(|f| f["what"].as_str().unwrap())
        .collect()
}

/// Exactly one `fail` finding of `check`, containing every one of `needles`; exit status 1.
fn fails(r: &(i32, Value), check: &str, needles: &[&str]) {
    let (code, v) = r;
    assert_eq!(*code, 1, "{v:#}");
    let f = findings(v, check, "fail");
    assert_eq!(f.len(), 1, "{check}: {v:#}");
    for n in needles {
        assert!(f[0].contains(n), "{check}: {:?} lacks {n:?}", f[0]);
    }
}

/// A C source compiled into `node` (with extra cc arguments).
fn cc(node: &Node, name: &str, src: &str, args: &[&str]) -> Option<PathBuf> {
    let c = node.path(&format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let out = node.path(name);
    let o = Command::new("cc")
        .arg("-o")
        .arg(&out)
        .arg(&c)
        .args(args)
        .output()
        .unwrap();
    if !o.status.success() {
        eprintln!("cc {name}: {}", String::from_utf8_lossy(&o.stderr));
        return None;
    }
    Some(out)
}

fn pipesim_probe() -> Vec<String> {
    let p = built("pipesim").display().to_string();
    [
        "--",
        &p,
        "--stages",
        "2",
        "--microbatches",
        "2",
        "--iterations",
        "1",
        "--f",
        "1",
        "--b",
        "1",
        "--w",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn a_healthy_test_bed_node_has_no_problem() {
    let node = Node::new("healthy");
    let probe = pipesim_probe();
    let args: Vec<&str> = probe.iter().map(String::as_str).collect();
    let (code, v) = {
        let _no_fake_daemon = fake_daemon_lock();
        node.doctor(&args, &[])
    };
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(v["problems"], 0, "{v:#}");
    assert!(
        findings(&v, "driver", "ok")[0].contains("CUDA driver API 13.0"),
        "{v:#}"
    );
    assert!(
        findings(&v, "probe", "ok")[0].contains("kernel launches"),
        "{v:#}"
    );
    assert!(findings(&v, "probe", "ok")[0].contains("NCCL ops"), "{v:#}");
    assert_eq!(findings(&v, "mps", "info").len(), 1, "{v:#}");
}

#[test]
fn driver_problems() {
    let node = Node::new("driver");
    fails(
        &node.doctor(&["--cuda-lib", "libfreeride-no-such-driver.so.1"], &[]),
        "driver",
        &["cannot load libfreeride-no-such-driver.so.1", "loader path"],
    );
    // Stand-ins for a driver that is too old, one that finds no GPU and one with no device.
    let stub = |name: &str, version: i32, init: i32, count: i32| {
        let src = format!(
            "int cuDriverGetVersion(int *v) {{ *v = {version}; return 0; }}\n\
             int cuInit(unsigned f) {{ (void)f; return {init}; }}\n\
             int cuDeviceGetCount(int *n) {{ *n = {count}; return 0; }}\n"
        );
        cc(&node, name, &src, &["-shared", "-fPIC"]).expect("cc -shared")
    };
    let old = stub("old.so", 11080, 0, 1);
    fails(
        &node.doctor(&["--cuda-lib", old.to_str().unwrap()], &[]),
        "driver",
        &["CUDA 11.8 only", "12.0 or newer"],
    );
    let nodev = stub("nodev.so", 13000, 100, 0);
    fails(
        &node.doctor(&["--cuda-lib", nodev.to_str().unwrap()], &[]),
        "driver",
        &["cuInit failed with CUresult 100", "CUDA_VISIBLE_DEVICES"],
    );
    let zero = stub("zero.so", 13000, 0, 0);
    fails(
        &node.doctor(&["--cuda-lib", zero.to_str().unwrap()], &[]),
        "driver",
        &["0 devices", "no GPU"],
    );
    let notcuda = cc(
        &node,
        "notcuda.so",
        "int f(void) { return 0; }\n",
        &["-shared", "-fPIC"],
    )
    .expect("cc -shared");
    fails(
        &node.doctor(&["--cuda-lib", notcuda.to_str().unwrap()], &[]),
        "driver",
        &["not a CUDA driver"],
    );
}

#[test]
fn shared_memory_problems() {
    let node = Node::new("shm");
    fails(
        &node.doctor(&["--shm", "/nonexistent-shm"], &[]),
        "/dev/shm",
        &["/nonexistent-shm", "emptyDir"],
    );
    let dir = node.path("shm755");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    fails(
        &node.doctor(&["--shm", dir.to_str().unwrap()], &[]),
        "/dev/shm",
        &["mode 0755", "chmod 1777"],
    );
    fails(
        &node.doctor(&["--processes", "100000000"], &[]),
        "/dev/shm",
        &["100000000 processes", "--shm-size"],
    );
    // A folder on the disk the workspace is built on.
    let disk = release_dir().join(format!("doctor-not-tmpfs-{}", std::process::id()));
    std::fs::create_dir_all(&disk).unwrap();
    std::fs::set_permissions(&disk, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let r = node.doctor(&["--shm", disk.to_str().unwrap()], &[]);
    std::fs::remove_dir_all(&disk).unwrap();
    fails(&r, "/dev/shm", &["not a tmpfs"]);
}

#[test]
fn session_directory_problems() {
    let node = Node::new("session");
    let s = node.path("session");
    std::fs::create_dir(&s).unwrap();
    std::fs::set_permissions(&s, std::fs::Permissions::from_mode(0o755)).unwrap();
    fails(&node.doctor(&[], &[]), "session", &["mode 755", "0700"]);
    std::fs::remove_dir(&s).unwrap();
    std::os::unix::fs::symlink(node.path("elsewhere"), &s).unwrap();
    std::fs::create_dir(node.path("elsewhere")).unwrap();
    fails(
        &node.doctor(&[], &[]),
        "session",
        &["symbolic link", "real directory"],
    );
    std::fs::remove_file(&s).unwrap();
    std::fs::create_dir(&s).unwrap();
    std::fs::set_permissions(&s, std::fs::Permissions::from_mode(0o700)).unwrap();
    let (code, v) = node.doctor(&[], &[]);
    assert_eq!(code, 0, "{v:#}");
    assert!(
        findings(&v, "session", "warn")[0].contains("no agent serves it"),
        "{v:#}"
    );
    // A dead agent's pid file (a pid no process has).
    std::fs::write(s.join("agent.pid"), "4194303\n").unwrap();
    let (_, v) = node.doctor(&[], &[]);
    assert!(
        findings(&v, "session", "warn")[0].contains("pid 4194303) is gone"),
        "{v:#}"
    );
    std::fs::write(s.join("agent.pid"), format!("{}\n", std::process::id())).unwrap();
    let (_, v) = node.doctor(&[], &[]);
    assert!(
        findings(&v, "session", "ok")[0].contains("served by agent pid"),
        "{v:#}"
    );
}

#[test]
fn device_nodes_this_user_cannot_open() {
    let node = Node::new("devices");
    let dev = node.path("dev");
    std::fs::create_dir(&dev).unwrap();
    std::fs::set_permissions(&dev, std::fs::Permissions::from_mode(0o755)).unwrap();
    let nv = dev.join("nvidia0");
    std::fs::write(&nv, b"").unwrap();
    std::fs::set_permissions(&nv, std::fs::Permissions::from_mode(0o600)).unwrap();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut c = Command::new(built("freeride"));
    c.args([
        "doctor",
        "--json",
        "--cuda-lib",
        "libfreeride-none.so",
        "--dev",
    ])
    .arg(&dev)
    .env("FREERIDE_DIR", node.path("session-nobody"))
    .env("CUDA_MPS_PIPE_DIRECTORY", node.path("mps"))
    .stdin(Stdio::null());
    if root {
        // As another user (root can open anything).
        c.uid(65534).gid(65534);
    } else {
        std::fs::set_permissions(&nv, std::fs::Permissions::from_mode(0o000)).unwrap();
    }
    let (_, v) = node.run(c);
    let f = findings(&v, "devices", "fail");
    assert_eq!(f.len(), 1, "{v:#}");
    assert!(
        f[0].contains("nvidia0") && f[0].contains("not readable and writable"),
        "{v:#}"
    );
}

/// Waits until `/proc/PID/cmdline` shows the arguments of the program `pid` executed: spawning
/// returns once the exec has replaced the child's memory, a moment before the kernel has laid out
/// its arguments (a scan of /proc in that moment reads an empty command line).
fn wait_for_its_arguments(pid: u32) {
    let cmdline = format!("/proc/{pid}/cmdline");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::read(&cmdline).map_or(true, |c| c.is_empty()) {
        assert!(
            std::time::Instant::now() < deadline,
            "{cmdline} still empty after 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn mps_half_states() {
    let node = Node::new("mps");
    let pipe = node.path("mps");
    std::fs::create_dir(&pipe).unwrap();
    std::fs::write(pipe.join("control"), b"").unwrap();
    fails(
        &node.doctor(&[], &[]),
        "mps",
        &["no nvidia-cuda-mps-control runs", "stale"],
    );
    // A process named like the control daemon: sleep run through a link of that name (a copy
    // could be "text file busy" while another test's child, forked meanwhile, holds it open).
    let fake = node.path("nvidia-cuda-mps-control");
    std::os::unix::fs::symlink("/bin/sleep", &fake).unwrap();
    let _fake_daemon = fake_daemon_lock();
    let mut daemon = Command::new(&fake).arg("30").spawn().unwrap();
    wait_for_its_arguments(daemon.id());
    let (_, on) = node.doctor(&[], &[]);
    let away = node.path("mps-elsewhere");
    let away = away.to_str().unwrap();
    let (_, elsewhere) = node.doctor(&[], &[("CUDA_MPS_PIPE_DIRECTORY", away)]);
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert!(
        findings(&on, "mps", "info")
            .first()
            .is_some_and(|f| f.starts_with("on: control daemon pid")),
        "{on:#}"
    );
    let w = findings(&elsewhere, "mps", "warn");
    assert!(
        w[0].contains("runs (pid") && w[0].contains(away),
        "{elsewhere:#}"
    );
}

#[test]
fn interposer_problems() {
    let node = Node::new("lib");
    fails(
        &node.doctor(&[], &[("FREERIDE_LIB", "/nonexistent/libfreeride.so")]),
        "interposer",
        &["FREERIDE_LIB=/nonexistent/libfreeride.so is not a file"],
    );
    let text = node.path("libfreeride.so");
    std::fs::write(
        &text,
        b"not a library at all, but long enough to have a header of 64 bytes",
    )
    .unwrap();
    let r = node.doctor(
        &["--", "/bin/true"],
        &[("FREERIDE_LIB", text.to_str().unwrap())],
    );
    fails(&r, "interposer", &["not a 64-bit little-endian ELF file"]);
    // No probe with a broken library.
    assert!(
        findings(&r.1, "probe", "fail")[0].contains("not run"),
        "{:#}",
        r.1
    );
}

#[test]
fn probe_problems() {
    let node = Node::new("probe");
    fails(
        &node.doctor(&["--", "freeride-no-such-command"], &[]),
        "probe",
        &["freeride-no-such-command not found"],
    );
    // The interposer loads into a program that never calls CUDA (its process_start and
    // process_exit lines are written at exit), but sees no launch.
    fails(
        &node.doctor(&["--", "/bin/true"], &[]),
        "probe",
        &["loaded", "saw no kernel launch"],
    );
    // A launcher that clears LD_PRELOAD: nothing at all is recorded.
    fails(
        &node.doctor(
            &["--", "/usr/bin/env", "-u", "LD_PRELOAD", "/bin/true"],
            &[],
        ),
        "probe",
        &["recorded nothing", "LD_PRELOAD"],
    );
    fails(
        &node.doctor(&["--probe-timeout", "0.5", "--", "/bin/sleep", "30"], &[]),
        "probe",
        &["did not finish within 0.5 s"],
    );
    let suid = node.path("suid-true");
    std::fs::copy("/bin/true", &suid).unwrap();
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    fails(
        &node.doctor(&["--", suid.to_str().unwrap()], &[]),
        "probe",
        &["setuid", "ignores LD_PRELOAD"],
    );
    let stat = cc(
        &node,
        "static",
        "int main(void) { return 0; }\n",
        &["-static"],
    )
    .expect("cc -static (libc6-dev has libc.a)");
    fails(
        &node.doctor(&["--", stat.to_str().unwrap()], &[]),
        "probe",
        &["statically linked"],
    );
    // A CUDA call, no kernel launch: the stand-in runtime's cudaDeviceSynchronize.
    let standins = pipesim::standins::ensure_dir_in(&release_dir()).unwrap();
    let nolaunch = cc(
        &node,
        "nolaunch",
        "int cudaDeviceSynchronize(void);\nint main(void) { return cudaDeviceSynchronize(); }\n",
        &[&format!("-L{}", standins.display()), "-l:libcudart.so.13"],
    )
    .expect("cc against the stand-in runtime");
    fails(
        &node.doctor(
            &["--", nolaunch.to_str().unwrap()],
            &[("LD_LIBRARY_PATH", standins.to_str().unwrap())],
        ),
        "probe",
        &["loaded (pid", "saw no kernel launch"],
    );
    // Launches seen, but the command failed: a warning beside the all-clear of the interposer.
    let mut probe = vec![
        "--".to_string(),
        "sh".into(),
        "-c".into(),
        "\"$@\"; exit 3".into(),
    ];
    probe.push("sh".into()); // $0 of the script
    probe.extend(pipesim_probe().into_iter().skip(1));
    let args: Vec<&str> = probe.iter().map(String::as_str).collect();
    let (code, v) = node.doctor(&args, &[]);
    assert_eq!(code, 0, "{v:#}");
    assert!(
        findings(&v, "probe", "warn")[0].contains("exited with exit status: 3"),
        "{v:#}"
    );
    assert_eq!(findings(&v, "probe", "ok").len(), 1, "{v:#}");
}
