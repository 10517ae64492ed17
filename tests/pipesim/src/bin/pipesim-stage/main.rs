//! pipesim-stage: one rank of the simulated training job, written like an unmodified training
//! process that knows nothing of freeride: it links the CUDA runtime and cuBLAS dynamically,
//! reaches NCCL through a dlopen'ed (RTLD_LOCAL) library, and runs its rank's program
//! (`pipesim::lower`) for N iterations. Started by `pipesim`; prints nothing to stdout.
mod comm;
mod cuda;
mod exec;
mod kernels;
mod mark;

use comm::PipeComm;
use cuda::check;
use exec::Executor;
use kernels::Kernels;
use mark::Marks;
use pipesim::config::{env, JobConfig};
use pipesim::lower;
use std::path::PathBuf;

fn main() {
    let rank = std::env::var(env::RANK)
        .ok()
        .and_then(|v| v.parse::<usize>().ok());
    let label = rank
        .map(|r| format!("rank {r}"))
        .unwrap_or_else(|| "?".into());
    if let Err(e) = run() {
        eprintln!("pipesim-stage {label}: {e}");
        std::process::exit(1);
    }
}

fn var(name: &str) -> Result<String, String> {
    std::env::var(name)
        .map_err(|_| format!("{name} is not set (pipesim-stage is started by pipesim)"))
}

fn number<T: std::str::FromStr>(name: &str) -> Result<T, String> {
    var(name)?.parse().map_err(|_| format!("bad {name}"))
}

fn run() -> Result<(), String> {
    let rank: u32 = number(env::RANK)?;
    let world: u32 = number(env::WORLD_SIZE)?;
    let device: i32 = number(env::DEVICE).unwrap_or(rank as i32);
    let job_dir = PathBuf::from(var(env::JOB_DIR)?);
    // Sleep-based simulated kernels overshoot by the timer slack (50 µs by default); the stream
    // threads the runtime starts inherit this thread's slack.
    // SAFETY: PR_SET_TIMERSLACK only changes this thread's timer slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    let cfg: JobConfig = serde_json::from_str(&var(env::CONFIG)?)
        .map_err(|e| format!("bad {}: {e}", env::CONFIG))?;
    let plan = lower::plan_job(&cfg)?;
    if world as usize != plan.ranks.len() || rank >= world {
        return Err(format!(
            "rank {rank} of {world} does not fit a job of {} processes",
            plan.ranks.len()
        ));
    }
    // SAFETY: plain runtime calls; cudaFree(NULL) initializes the context, as PyTorch does.
    unsafe {
        check("cudaSetDevice", cuda::cudaSetDevice(device))?;
        check("cudaFree", cuda::cudaFree(std::ptr::null_mut()))?;
    }
    let setup = &plan.ranks[rank as usize];
    let streams = setup
        .streams
        .iter()
        .map(|_| exec::new_stream())
        .collect::<Result<Vec<_>, _>>()?;
    let kernels = Kernels::new(streams[pipesim::program::COMPUTE], setup.graph_ns)?;
    let marks = Marks::open(rank, device)?;
    let nccl = PipeComm::load()?;
    // Every process joins its communicators in the job's one global order: none waits forever.
    let mut comms = vec![None; plan.comms.len()];
    for &c in &setup.comms {
        let spec = &plan.comms[c];
        let index = spec.index_of(rank).expect("a member of its communicators");
        comms[c] = Some(nccl.init(&job_dir, &spec.name, spec.members.len(), index)?);
    }
    let mut ex = Executor {
        nccl: &nccl,
        plan: &plan,
        rank,
        streams,
        events: vec![],
        comms,
        kernels,
        marks,
        launches: 0,
    };
    let result = train(&mut ex, &cfg);
    for c in ex.comms.iter().flatten() {
        nccl.destroy(*c);
    }
    result
}

fn train(ex: &mut Executor, cfg: &JobConfig) -> Result<(), String> {
    for it in 0..cfg.iterations {
        let program = lower::program(cfg, ex.plan, ex.rank, it)?;
        ex.run(&program, it)?;
        if ex.rank == 0 {
            eprintln!(
                "pipesim: iteration {} of {} done ({})",
                it + 1,
                cfg.iterations,
                ex.marks.bus_id()
            );
        }
    }
    Ok(())
}
