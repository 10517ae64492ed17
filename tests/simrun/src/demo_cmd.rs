//! `freeride demo`: the README's first command. A 4-stage 1F1B pipeline on the simulated GPUs under
//! freeride; prints what the agent found and writes a timeline picture and a Perfetto trace.
use clap::{Args, Parser};
use freeride_agent::timeline::Timeline;
use freeride_agent::truth_kernels::Kernel;
use freeride_sim::sim::{self, p50_p99};
use pipesim::cli::JobArgs;
use pipesim::truth::KernelRecord;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Folder for the picture (freeride-demo.svg) and the trace (freeride-demo.trace.json).
    #[arg(long, default_value = ".")]
    out: PathBuf,
    /// Training iterations to run (at least 3: the agent learns during the first two).
    #[arg(long, default_value_t = 6, value_parser = pipesim::cli::at_least_one::<u32>)]
    iterations: u32,
}

/// The demo's job, spelled as `freeride sim` flags.
#[derive(Parser)]
struct Job {
    #[command(flatten)]
    job: JobArgs,
}

/// The ground truth's kernels as the product's timeline draws them (what `freeride report
/// --truth` reads from the file).
fn timeline_kernels(records: &[KernelRecord]) -> Vec<Kernel> {
    records
        .iter()
        .map(|k| Kernel {
            device: k.device,
            pid: k.pid,
            kernel: k.kernel.clone(),
            kind: k.kind.clone(),
            api: k.api.clone(),
            start_ns: k.start_ns,
            end_ns: k.end_ns,
        })
        .collect()
}

pub fn main(a: DemoArgs) -> i32 {
    if a.iterations < 3 {
        eprintln!("freeride demo: --iterations must be at least 3 (the agent learns during two)");
        return 2;
    }
    pipesim::procs::interrupt::install();
    let fail = |e: String| crate::sim_cmd::fail("demo", e);
    if let Err(e) = sim::ensure_testbed_built() {
        return fail(e);
    }
    let iterations = a.iterations.to_string();
    let job = Job::parse_from([
        "demo",
        "--schedule",
        "1f1b",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--iterations",
        &iterations,
    ])
    .job;
    eprintln!(
        "freeride demo: a 4-stage 1F1B pipeline (8 micro-batches, F = B = W = 10 ms) on simulated GPUs, \
         under libfreeride.so, with the agent finding its bubbles online"
    );
    eprintln!("freeride demo: 1/2: the job alone (baseline)");
    let baseline = match sim::run(&job, None, true) {
        Ok(r) => sim::score(&r, None).iteration_ms,
        Err(e) => return fail(e),
    };
    eprintln!("freeride demo: 2/2: the job with one side task per GPU (an SDK training loop), gated by the agent's grants");
    let side = sim::SideTasks {
        per_gpu: 1,
        kind: "train_loop".into(),
        mode: sim::SideMode::Gated,
        args: vec![
            "--batch".into(),
            "256".into(),
            "--margin".into(),
            "1.0".into(),
        ],
    };
    let res = match sim::run(&job, Some(&side), true) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let s = sim::score(&res, None);
    let h = sim::harvest(&res);
    let (lat50, lat99) = p50_p99(&s.detect_latency_us);
    println!(
        "iteration time           {:8.1} ms (ground truth, iterations after the second)",
        s.iteration_ms
    );
    println!(
        "bubble share             {:8.1} % of GPU time (ground truth; ideal 1F1B: 27.3 %)",
        s.bubble_fraction * 100.0
    );
    println!(
        "agent precision / recall {:8.3} / {:.3} (inferred bubbles vs true idle time; live view {:.3} / {:.3})",
        s.inferred.precision(),
        s.inferred.recall(),
        s.live.precision(),
        s.live.recall()
    );
    println!(
        "agent detection latency  {:8.0} us p50, {:.0} us p99",
        lat50, lat99
    );
    println!(
        "agent events             {:8} read from the rings, {} dropped",
        res.events, res.dropped
    );
    println!(
        "harvested                {:8.1} % of the bubble time kept busy by side tasks",
        h.bubble_busy_ratio * 100.0
    );
    println!(
        "side-task GPU time       {:8.1} ms in the measured iterations",
        h.sidetask_busy_ms
    );
    println!(
        "trainer slowdown         {:8.2} % (iteration {:.1} ms alone, {:.1} ms with side tasks)",
        (s.iteration_ms / baseline - 1.0) * 100.0,
        baseline,
        s.iteration_ms
    );
    let ends = freeride_sim::sim_report::sidetask_ends_json(&res, side.per_gpu);
    for line in freeride_sim::sim_report::sidetask_end_lines(&ends, a.iterations as u64) {
        println!("note                     {line}");
    }
    if let Err(e) = std::fs::create_dir_all(&a.out) {
        eprintln!("freeride demo: cannot create {}: {e}", a.out.display());
        return 1;
    }
    let kernels = timeline_kernels(&res.kernels);
    let tl = Timeline {
        pids: &res.truth.pids,
        kernels: &kernels,
        bubbles: &res.bubbles,
    };
    let its = &res.truth.iterations;
    let (from, to) = match its.len() {
        0 => (0, 0),
        n => (its[n.saturating_sub(2)].start_ns, its[n - 1].end_ns),
    };
    let svg = a.out.join("freeride-demo.svg");
    let trace = a.out.join("freeride-demo.trace.json");
    for (path, text) in [(&svg, tl.svg(from, to)), (&trace, tl.perfetto())] {
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("freeride demo: cannot write {}: {e}", path.display());
            return 1;
        }
    }
    println!("timeline picture         {}", svg.display());
    println!(
        "Perfetto trace           {} (open in https://ui.perfetto.dev)",
        trace.display()
    );
    0
}
