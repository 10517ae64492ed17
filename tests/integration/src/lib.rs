//! Helpers shared by the integration tests in `tests/` (which run the built binaries as processes).
use std::path::PathBuf;

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

/// A fresh folder `/dev/shm/freeride-<tag>-<pid>` (the caller removes it) with a session folder
/// (mode 0700, as the interposer requires) in it: (root, session).
pub fn shm_session(tag: &str) -> (PathBuf, PathBuf) {
    let root = PathBuf::from(format!("/dev/shm/freeride-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let session = root.join("session");
    std::fs::create_dir_all(&session).expect("session folder");
    std::fs::set_permissions(
        &session,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .expect("session folder mode");
    (root, session)
}

/// Compiles `tests/cprogs/gate_side.c` (a small CUDA-runtime program: kernel loops, allocations)
/// against the stand-in runtime into a folder of this test process (`tag` names it); returns the
/// executable.
pub fn gate_side_bin(tag: &str) -> PathBuf {
    runtime_cprog("gate_side", tag)
}

/// Compiles `tests/cprogs/<name>.c`, a C program of the CUDA runtime API, against the stand-in
/// runtime into a folder of this test process (`tag` names it); returns the executable.
pub fn runtime_cprog(name: &str, tag: &str) -> PathBuf {
    let t = release_dir();
    for f in ["libfreeride.so", "libcuda.so", "libcudart.so"] {
        assert!(
            t.join(f).exists(),
            "{f} not built (cargo build --release --workspace)"
        );
    }
    let d = std::env::temp_dir().join(format!("freeride-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp folder");
    let out = d.join(name);
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../cprogs/{name}.c"));
    let o = std::process::Command::new("cc")
        .args(["-O1", "-o"])
        .arg(&out)
        .arg(&src)
        .arg(format!("-L{}", t.display()))
        .args(["-lcudart", "-lpthread"])
        .output()
        .expect("cc");
    assert!(
        o.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&o.stderr)
    );
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
