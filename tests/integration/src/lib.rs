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
