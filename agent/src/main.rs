//! `freeride`: the per-node command. A thin dispatcher: each subcommand lives in its own module.
use clap::{Parser, Subcommand};

mod run_cmd;
mod sim_cmd;

#[derive(Parser)]
#[command(
    name = "freeride",
    version,
    about = "Harvest pipeline-parallel bubbles for side tasks"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run any command with the interposer preloaded (zero code change).
    Run(run_cmd::RunArgs),
    /// Run the simulated pipeline (pipesim) under freeride with the agent and score its bubbles.
    Sim(sim_cmd::SimArgs),
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Run(a) => run_cmd::main(a),
        Command::Sim(a) => sim_cmd::main(a),
    };
    std::process::exit(code)
}
