//! `freeride doctor [--dir D] [--shm PATH] [--processes N] [--cuda-lib LIB] [--json]
//! [--probe-timeout S] [-- CMD ARGS...]`: checks this node (see `freeride_agent::doctor`) and,
//! with a command, that the interposer loads into it and sees its launches. Exit status 0 when
//! nothing stops freeride, 1 when something does.
use clap::Args;
use freeride_abi::session;
use freeride_agent::doctor::{self, driver, interposer, mps, node, probe, shm, Level};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Session directory to check (default: `$FREERIDE_DIR`, else `/dev/shm/freeride-<uid>`).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The shared-memory folder the rings live in.
    #[arg(long, default_value = "/dev/shm", value_name = "PATH")]
    shm: PathBuf,
    /// Processes (trainer ranks and side tasks) whose rings /dev/shm must have room for.
    #[arg(long, default_value_t = 16, value_name = "N")]
    processes: u64,
    /// The CUDA driver library to load (as a trainer's loader would find it).
    #[arg(long, default_value = "libcuda.so.1", value_name = "LIB")]
    cuda_lib: String,
    /// Seconds the probe command may run before it is killed.
    #[arg(long, default_value_t = 120.0, value_name = "S")]
    probe_timeout: f64,
    /// Where the GPU device nodes are (tests point it elsewhere).
    #[arg(long, default_value = "/dev", value_name = "PATH", hide = true)]
    dev: PathBuf,
    /// Print the findings as JSON.
    #[arg(long)]
    json: bool,
    /// A short command that uses the GPU (e.g. `python -c "import torch; torch.ones(1).cuda()"`):
    /// run under the interposer to check that it loads and sees the launches.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    command: Vec<String>,
}

pub fn main(a: DoctorArgs) -> i32 {
    if !(a.probe_timeout.is_finite() && a.probe_timeout > 0.0) {
        eprintln!(
            "freeride doctor: --probe-timeout must be a positive number of seconds, got {}",
            a.probe_timeout
        );
        return 2;
    }
    let dir = a.dir.clone().unwrap_or_else(session::resolve_dir);
    let mut findings = vec![doctor::Finding::new(
        "freeride",
        Level::Info,
        format!("version {}", env!("CARGO_PKG_VERSION")),
    )];
    findings.extend(driver::check(&a.cuda_lib));
    findings.extend(node::check_device_nodes(&a.dev));
    findings.extend(mps::check(Path::new("/proc")));
    findings.extend(shm::check(&a.shm, a.processes));
    findings.extend(node::check_session(&dir));
    let lib = interposer::check();
    let lib_ok = lib.iter().all(|f| f.level != Level::Fail);
    findings.extend(lib);
    if !a.command.is_empty() {
        match freeride_agent::layout::interposer() {
            Ok(src) if lib_ok => findings.extend(probe::run(
                &a.command,
                src.path(),
                Duration::from_secs_f64(a.probe_timeout),
            )),
            _ => findings.push(doctor::Finding::new(
                "probe",
                Level::Fail,
                "not run: no usable libfreeride.so (above)",
            )),
        }
    } else {
        findings.push(doctor::Finding::new(
            "probe",
            Level::Info,
            "not run: give a short GPU command after `--` to check that the interposer sees its launches",
        ));
    }
    if a.json {
        println!("{}", doctor::render_json(&findings));
    } else {
        print!("{}", doctor::render_text(&findings));
    }
    i32::from(findings.iter().any(|f| f.level == Level::Fail))
}
