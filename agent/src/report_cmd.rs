//! `freeride report --trace FILE`: a Chrome/Perfetto trace of the agent's bubbles (from its bubble
//! log), with the kernels of a test-bed ground truth when one is given.
use clap::Args;
use freeride_agent::report::parse_bubble_log;
use freeride_agent::timeline::Timeline;
use freeride_agent::truth_kernels;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Where to write the trace (open it in <https://ui.perfetto.dev>).
    #[arg(long, value_name = "FILE")]
    trace: PathBuf,
    /// The agent's bubble log (`freeride agent --bubble-log PATH`).
    #[arg(long, value_name = "PATH")]
    bubbles: PathBuf,
    /// A simulated GPU's ground truth (`pipesim --truth PATH`; the format: tests/TESTBED.md): adds
    /// every kernel.
    #[arg(long, value_name = "PATH")]
    truth: Option<PathBuf>,
}

pub fn main(a: ReportArgs) -> i32 {
    let text = match std::fs::read_to_string(&a.bubbles) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("freeride report: cannot read {}: {e}", a.bubbles.display());
            return 1;
        }
    };
    let (bubbles, bad) = parse_bubble_log(&text);
    if bad > 0 {
        eprintln!(
            "freeride report: {bad} lines of {} are not bubbles; skipped",
            a.bubbles.display()
        );
    }
    let kernels = match &a.truth {
        Some(p) => match truth_kernels::read(p) {
            Ok((k, _)) => k,
            Err(e) => {
                eprintln!("freeride report: cannot read {}: {e}", p.display());
                return 1;
            }
        },
        None => vec![],
    };
    // Rows: one per trainer, by device.
    let mut pids: Vec<(u32, u32)> = bubbles.iter().map(|b| (b.gpu.0, b.pid)).collect();
    pids.sort_unstable();
    pids.dedup();
    let pids: Vec<u32> = pids.into_iter().map(|(_, p)| p).collect();
    let tl = Timeline {
        pids: &pids,
        kernels: &kernels,
        bubbles: &bubbles,
    };
    if let Err(e) = std::fs::write(&a.trace, tl.perfetto()) {
        eprintln!("freeride report: cannot write {}: {e}", a.trace.display());
        return 1;
    }
    eprintln!(
        "freeride report: {} bubbles of {} trainers{} -> {}",
        bubbles.len(),
        pids.len(),
        if kernels.is_empty() {
            String::new()
        } else {
            format!(", {} kernels", kernels.len())
        },
        a.trace.display()
    );
    0
}
