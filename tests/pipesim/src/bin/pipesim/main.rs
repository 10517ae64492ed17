//! pipesim: launches a simulated pipeline-parallel training job (one `pipesim-stage` process per
//! stage) on the test bed's simulated GPUs, and reports its ground truth.
//!
//! It links no CUDA library itself. The stages inherit its environment (LD_PRELOAD included) with
//! the stand-in folder prepended to LD_LIBRARY_PATH. Progress goes to stderr; `--json` prints the
//! result on stdout.
use clap::Parser;
use pipesim::cli::JobArgs;
use pipesim::config::{env, JobConfig};
use pipesim::model::{Cost, ModelResult};
use pipesim::{placement, procs, standins, truth, validate};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

/// Runs a simulated pipeline-parallel training job and reports its idle time (ground truth).
#[derive(Parser, Debug)]
#[command(
    name = "pipesim",
    version,
    allow_negative_numbers = true,
    args_override_self = true
)]
struct Cli {
    #[command(flatten)]
    job: JobArgs,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Keep the ground-truth trace at PATH.
    #[arg(long, value_name = "PATH")]
    truth: Option<PathBuf>,
    /// Give up (and kill the stages) after S seconds.
    #[arg(long, value_name = "S", default_value_t = 300.0)]
    timeout: f64,
    /// One freeride session directory per node (comma-separated): the processes of node n get
    /// FREERIDE_DIR=<the n-th> (what `freeride sim --nodes N` passes).
    #[arg(long, value_name = "DIRS", value_delimiter = ',')]
    node_session_dirs: Vec<PathBuf>,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let text = e.render().to_string();
            let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
            let first = lines.next().unwrap_or("bad arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            // clap puts what is missing on the next line.
            let more = if first.ends_with(':') {
                lines.next().unwrap_or("")
            } else {
                ""
            };
            eprintln!("pipesim: {first} {more} (see pipesim --help)");
            return ExitCode::from(2);
        }
    };
    let (cfg, truth_path) = match config(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("pipesim: {e}");
            return ExitCode::from(2);
        }
    };
    // SIGINT/SIGTERM/SIGHUP: the stages are killed and every folder made here removed (the
    // guards in `run` drop on the way out), then the exit status says which signal it was.
    procs::interrupt::install();
    match run(&cli, &cfg, truth_path) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pipesim: {e}");
            match procs::interrupt::pending() {
                Some(sig) => ExitCode::from(procs::interrupt::exit_code(sig) as u8),
                None => ExitCode::from(1),
            }
        }
    }
}

fn config(cli: &Cli) -> Result<(JobConfig, Option<PathBuf>), String> {
    if !(cli.timeout.is_finite() && cli.timeout > 0.0) {
        return Err("--timeout must be a positive number of seconds".into());
    }
    let cfg = cli.job.to_config()?;
    let dirs = cli.node_session_dirs.len();
    if dirs > 0 && dirs != cfg.nodes as usize {
        return Err(format!(
            "--node-session-dirs names {dirs} directories for {} nodes",
            cfg.nodes
        ));
    }
    Ok((cfg, cli.truth.clone()))
}

/// Removes a folder at the end of the run.
struct TempDir(Option<PathBuf>);

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Some(d) = &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{nanos}", std::process::id())
}

fn run(cli: &Cli, cfg: &JobConfig, truth_path: Option<PathBuf>) -> Result<(), String> {
    let stage_exe = std::env::current_exe()
        .map_err(|e| format!("current_exe: {e}"))?
        .with_file_name("pipesim-stage");
    if !stage_exe.exists() {
        return Err(format!(
            "{} not found (build the pipesim crate)",
            stage_exe.display()
        ));
    }
    let libs = standins::ensure_dir().map_err(|e| format!("making the stand-in folder: {e}"))?;

    // The simulated GPUs' folder: the caller's (shared with freeride), else a fresh one.
    let (sim_dir, _sim_cleanup) =
        match std::env::var_os(simgpu_env::SIM_DIR).filter(|v| !v.is_empty()) {
            Some(d) => (PathBuf::from(d), TempDir(None)),
            None => {
                let d = PathBuf::from("/dev/shm").join(unique("pipesim-sim"));
                (d.clone(), TempDir(Some(d)))
            }
        };
    std::fs::create_dir_all(&sim_dir)
        .map_err(|e| format!("creating {}: {e}", sim_dir.display()))?;
    let job_dir = sim_dir.join(unique("pipesim-job"));
    std::fs::create_dir_all(&job_dir)
        .map_err(|e| format!("creating {}: {e}", job_dir.display()))?;
    let _job_cleanup = TempDir(Some(job_dir.clone()));
    let (trace, _trace_cleanup) = match truth_path {
        Some(p) => {
            // Truncate, not remove: other processes on the same simulated GPUs (side tasks) may
            // already append to this file, and must keep writing to the file that is read.
            std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .open(&p)
                .map_err(|e| format!("creating {}: {e}", p.display()))?;
            (p, TempDir(None))
        }
        None => {
            let d = std::env::temp_dir().join(unique("pipesim-truth"));
            std::fs::create_dir_all(&d).map_err(|e| format!("creating {}: {e}", d.display()))?;
            (d.join("truth.jsonl"), TempDir(Some(d)))
        }
    };
    let trace = std::path::absolute(&trace).unwrap_or(trace);

    let topo = cfg.topology();
    let world = topo.world() as usize;
    eprintln!(
        "pipesim: {} p={} m={} v={} tp={} dp={} style={} iterations={} ({world} processes on {} node{})",
        cli.job.schedule_name(),
        cfg.shape.stages,
        cfg.shape.microbatches,
        cfg.shape.chunks,
        topo.tp,
        topo.dp,
        cfg.style.name(),
        cfg.iterations,
        topo.nodes,
        if topo.nodes == 1 { "" } else { "s" }
    );
    let model = validate::expected(cfg, Cost::from_env())?;
    for w in &model.warnings {
        eprintln!("pipesim: note: {w}");
    }
    let cfg_json = serde_json::to_string(cfg).map_err(|e| e.to_string())?;
    let mut children: Vec<Child> = Vec::with_capacity(world);
    for r in 0..world {
        let env = placement::stage_env(cfg, r as u32, &cli.node_session_dirs);
        let mut cmd = Command::new(&stage_exe);
        // A stage dies with the launcher, however the launcher ends.
        procs::tie_to_parent(&mut cmd, false, libc::SIGKILL);
        cmd.env(env::JOB_DIR, &job_dir)
            .env(env::CONFIG, &cfg_json)
            .env(simgpu_env::SIM_DIR, &sim_dir)
            .env(simgpu_env::SIM_TRACE, &trace)
            .env("LD_LIBRARY_PATH", standins::library_path_with(&libs));
        for k in &env.remove {
            cmd.env_remove(k);
        }
        cmd.envs(env.set.iter().map(|(k, v)| (k, v)));
        match cmd.spawn() {
            Ok(c) => children.push(c),
            Err(e) => {
                kill_all(&mut children);
                return Err(format!("starting rank {r}: {e}"));
            }
        }
    }
    wait_all(&mut children, Duration::from_secs_f64(cli.timeout))?;
    if let Some(sig) = procs::interrupt::pending() {
        return Err(format!("interrupted ({})", procs::interrupt::name(sig)));
    }

    let tr = truth::Trace::read(&trace)
        .map_err(|e| format!("reading the truth {}: {e}", trace.display()))?;
    if tr.bad > 0 {
        eprintln!(
            "pipesim: warning: {} unreadable lines in {}",
            tr.bad,
            trace.display()
        );
    }
    let pids: Vec<u32> = children.iter().map(Child::id).collect();
    let t = truth::analyze_trace(&tr, world as u32, Some(pids))?;
    let s = t.summary(1);
    eprintln!(
        "pipesim: iteration {:.3} ms, idle fraction {:.4}, idle per rank {:?} ms",
        s.iteration_ms,
        s.idle_fraction,
        s.idle_ms_per_rank
            .iter()
            .map(|v| (v * 1000.0).round() / 1000.0)
            .collect::<Vec<_>>()
    );
    if cli.json {
        let out = serde_json::json!({
            "iteration_ms": s.iteration_ms,
            "idle_ms_per_rank": s.idle_ms_per_rank,
            "idle_fraction": s.idle_fraction,
            "schedule": cli.job.schedule_name(),
            "style": cfg.style.name(),
            "stages": cfg.shape.stages,
            "microbatches": cfg.shape.microbatches,
            "chunks": cfg.shape.chunks,
            "tp": topo.tp,
            "dp": topo.dp,
            "world": world,
            "nodes": topo.nodes,
            "iterations": cfg.iterations,
            "measured_iterations": s.measured_iterations,
            "pids": t.pids,
            "devices": t.devices,
            "bus_ids": t.bus_ids,
            "model": model_json(&model),
        });
        println!("{out}");
    }
    Ok(())
}

/// What the discrete-event model expects for one iteration (NCCL cost of the simulated GPU).
fn model_json(m: &ModelResult) -> serde_json::Value {
    let ms = |ns: u64| ns as f64 / 1e6;
    serde_json::json!({
        "iteration_ms": ms(m.makespan_ns),
        "idle_ms_per_rank": m.ranks.iter().map(|r| ms(r.idle_ns)).collect::<Vec<_>>(),
        "idle_without_transfers_ms_per_rank":
            m.ranks.iter().map(|r| ms(r.idle_without_transfers_ns)).collect::<Vec<_>>(),
    })
}

/// Names of the simulated GPU's environment (simgpu::abi::env; pipesim does not link simgpu).
mod simgpu_env {
    pub const SIM_DIR: &str = "FREERIDE_SIM_DIR";
    pub const SIM_TRACE: &str = "FREERIDE_SIM_TRACE";
}

fn kill_all(children: &mut [Child]) {
    for c in children.iter_mut() {
        let _ = c.kill();
    }
    for c in children.iter_mut() {
        let _ = c.wait();
    }
}

fn describe(status: std::process::ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => status.to_string(),
    }
}

/// Waits for every stage; the first failure (or the timeout) kills the others.
fn wait_all(children: &mut [Child], timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut done = vec![false; children.len()];
    while done.iter().any(|d| !d) {
        for (r, c) in children.iter_mut().enumerate() {
            if done[r] {
                continue;
            }
            match c.try_wait() {
                Ok(Some(st)) if st.success() => done[r] = true,
                Ok(Some(st)) => {
                    kill_all(children);
                    return Err(format!("stage {r} died: {}", describe(st)));
                }
                Ok(None) => {}
                Err(e) => {
                    kill_all(children);
                    return Err(format!("stage {r}: wait failed: {e}"));
                }
            }
        }
        if let Some(sig) = procs::interrupt::pending() {
            kill_all(children);
            return Err(format!(
                "interrupted ({}); stages killed",
                procs::interrupt::name(sig)
            ));
        }
        if Instant::now() > deadline {
            kill_all(children);
            return Err(format!(
                "timed out after {:.0} s; stages killed",
                timeout.as_secs_f64()
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}
