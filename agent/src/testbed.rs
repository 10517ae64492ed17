//! How `freeride sim` and `freeride demo` reach the test bed. The test bed (the simulated GPU, the
//! stand-in CUDA/NCCL/BLAS libraries, pipesim and the program that runs it under freeride and
//! scores the agent, `freeride-sim`) is not part of the product and is not linked into
//! `freeride`: it is a program shipped beside it (a workspace build's `target/<profile>/`, the
//! wheel's `_lib/`; see [`crate::layout`]). `freeride sim ARGS` and `freeride demo ARGS` exec
//! `freeride-sim sim ARGS` / `freeride-sim demo ARGS` (the same process: its exit status and
//! signals are the test bed's).
//!
//! Where it is missing and this `freeride` is a build of the source tree it was compiled from
//! (`target/<profile>/freeride`, as after `cargo run -p freeride-agent`, which builds only the
//! agent package), [`ensure_built`] builds the workspace first; a `freeride` anywhere else (copied,
//! installed) never starts a build: the error names what is missing and how to get it.
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

/// The test bed's program, beside `freeride`.
pub const PROGRAM: &str = "freeride-sim";

/// What `freeride sim` / `freeride demo` take: everything after the subcommand is the test bed's
/// (`freeride sim --help` prints its options).
#[derive(clap::Args, Debug)]
pub struct Forward {
    /// Passed on to the test bed's `freeride-sim` as they are.
    // What is passed on is the raw command line (a `--` included), not these values: see [`exec`].
    #[allow(dead_code)]
    #[arg(
        value_name = "ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        num_args = 0..
    )]
    args: Vec<OsString>,
}

/// Runs `freeride <sub> ...` as `freeride-sim <sub> ...` (this process's own command line, its
/// `argv[0]` kept, so that the test bed's messages and help name `freeride`); returns only when
/// that cannot be done (exit status 1, the cause on stderr).
pub fn exec(sub: &str) -> i32 {
    let fail = |e: String| {
        eprintln!("freeride {sub}: {e}");
        1
    };
    if let Err(e) = ensure_built(&[PROGRAM]) {
        return fail(e);
    }
    let prog = match crate::layout::sibling(PROGRAM) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let mut argv = std::env::args_os();
    let argv0 = argv.next().unwrap_or_else(|| "freeride".into());
    let err = Command::new(&prog).arg0(argv0).args(argv).exec();
    fail(format!("cannot run {}: {err}", prog.display()))
}

/// Builds the test bed if one of `files` is missing next to this executable (see
/// [`crate::layout::sibling`]), when this executable is a build of the source tree it was
/// compiled from: runs `cargo build --workspace --all-targets` there, with this binary's profile.
/// Elsewhere the error names what is missing and how to get it.
pub fn ensure_built(files: &[&str]) -> Result<(), String> {
    let sibling = crate::layout::sibling;
    let missing: Vec<&str> = files
        .iter()
        .copied()
        .filter(|f| sibling(f).is_err())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let manifest = root.join("Cargo.toml");
    let exe = std::env::current_exe().map_err(|e| format!("cannot find my own executable: {e}"))?;
    let exe_dir = exe.parent().unwrap_or(Path::new("/"));
    let built_here = match (exe_dir.canonicalize(), root.canonicalize()) {
        (Ok(d), Ok(r)) => d.starts_with(r.join("target")) || via_cargo_run(),
        _ => false,
    };
    if !built_here || !manifest.exists() {
        return Err(format!(
            "the test bed that `freeride sim` and `freeride demo` run is not next to {}: {} \
             missing. It ships with the wheel (pip install freeride) and is built with the \
             workspace, not with the freeride package alone (cargo install): in a checkout of \
             freeride, `cargo build --release --workspace --all-targets`, then run \
             target/release/freeride from there (or `cargo run --release -p freeride-agent -- \
             demo`)",
            exe.display(),
            missing.join(", ")
        ));
    }
    let release = exe_dir.ends_with("release");
    eprintln!("freeride: building the test bed first (stand-in CUDA/NCCL, pipesim, libfreeride.so, side tasks)...");
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.args(["build", "--workspace", "--all-targets", "--manifest-path"])
        .arg(&manifest);
    if release {
        cmd.arg("--release");
    }
    let st = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !st.success() {
        return Err(format!("building the test bed failed ({st})"));
    }
    match files.iter().find(|f| sibling(f).is_err()) {
        Some(f) => Err(format!(
            "{f} still missing next to {} after building the workspace at {}",
            exe.display(),
            root.display()
        )),
        None => Ok(()),
    }
}

/// Whether `cargo run` of the agent's package started this process (cargo sets
/// `CARGO_MANIFEST_DIR` for what it runs, as for what it compiles; `freeride-sim` exec'd by such
/// a `freeride` inherits it).
fn via_cargo_run() -> bool {
    let ours = Path::new(env!("CARGO_MANIFEST_DIR")).canonicalize().ok();
    std::env::var_os("CARGO_MANIFEST_DIR")
        .and_then(|d| Path::new(&d).canonicalize().ok())
        .is_some_and(|d| Some(d) == ours)
}
