//! `freeride-sim`: the test bed's `freeride sim` and `freeride demo`. The product's `freeride`
//! execs it with its own command line (`freeride sim ARGS` runs `freeride-sim sim ARGS`, argv[0]
//! kept: the usage lines name `freeride`); it also runs alone (`freeride-sim demo`).
use clap::{Parser, Subcommand};

mod demo_cmd;
mod sim_cmd;

#[derive(Parser)]
#[command(
    name = "freeride-sim",
    version,
    about = "The test bed's freeride sim and freeride demo: the simulated pipeline under freeride"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Every subcommand takes `-1` as a value (`--stages -1` is refused as "must be at least 1", not
/// as an unknown flag `-1`), and a flag given again overrides the first (a zoo job's flags, then
/// the ones a run changes: `freeride sim $(grep -v '^#' scripts/jobs/NAME) --warmup 0`).
#[derive(Subcommand)]
enum Command {
    /// The simulated 4-stage 1F1B pipeline under freeride: what the agent finds, with pictures.
    #[command(allow_negative_numbers = true, args_override_self = true)]
    Demo(demo_cmd::DemoArgs),
    /// Run the simulated pipeline (pipesim) under freeride with the agent and score its bubbles.
    #[command(allow_negative_numbers = true, args_override_self = true)]
    Sim(Box<sim_cmd::SimArgs>),
}

/// The simulated cluster's NCCL buffer is the stand-in's (`FREERIDE_SIM_NCCL_BUFFER_BYTES`); its
/// agent, like a real cluster's, reads it as `NCCL_BUFFSIZE` (where that is not set already).
fn share_nccl_buffer() {
    if std::env::var_os("NCCL_BUFFSIZE").is_none() {
        if let Ok(v) = std::env::var("FREERIDE_SIM_NCCL_BUFFER_BYTES") {
            // Single-threaded still: nothing else reads the environment yet.
            std::env::set_var("NCCL_BUFFSIZE", v);
        }
    }
}

fn main() {
    share_nccl_buffer();
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Sim(a) => sim_cmd::main(*a),
        Command::Demo(a) => demo_cmd::main(a),
    };
    std::process::exit(code)
}
