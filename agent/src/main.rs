//! `freeride`: the per-node command. A thin dispatcher: each subcommand lives in its own module.
use clap::{Parser, Subcommand};
use freeride_agent::testbed;

mod agent_cmd;
mod doctor_cmd;
mod report_cmd;
mod run_cmd;
mod status_cmd;

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

/// Every subcommand takes `-1` as a value (`--stages -1` is refused as "must be at least 1", not
/// as an unknown flag `-1`). `sim` and `demo` belong to the test bed: their arguments are passed
/// on to it as they are ([`testbed`]).
#[derive(Subcommand)]
enum Command {
    /// Run any command with the interposer preloaded (zero code change).
    #[command(allow_negative_numbers = true)]
    Run(run_cmd::RunArgs),
    /// The per-node daemon: infers every GPU's bubbles from the rings, publishes state and metrics.
    #[command(allow_negative_numbers = true)]
    Agent(agent_cmd::AgentArgs),
    /// A Chrome/Perfetto trace of the agent's bubbles (and a test bed's kernels).
    #[command(allow_negative_numbers = true)]
    Report(report_cmd::ReportArgs),
    /// The live per-GPU view of the node's agent.
    #[command(allow_negative_numbers = true)]
    Status(status_cmd::StatusArgs),
    /// The simulated 4-stage 1F1B pipeline under freeride: what the agent finds, with pictures.
    ///
    /// Runs the test bed's freeride-sim, found beside freeride (`freeride demo --help`: its
    /// options).
    #[command(disable_help_flag = true)]
    Demo(testbed::Forward),
    /// Run the simulated pipeline (pipesim) under freeride with the agent and score its bubbles.
    ///
    /// Runs the test bed's freeride-sim, found beside freeride (`freeride sim --help`: its
    /// options).
    #[command(disable_help_flag = true)]
    Sim(testbed::Forward),
    /// Check this node (driver, /dev/shm, MPS, permissions) and, given a command, that the
    /// interposer loads into it and sees its launches.
    Doctor(doctor_cmd::DoctorArgs),
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Run(a) => run_cmd::main(a),
        Command::Sim(_) => testbed::exec("sim"),
        Command::Demo(_) => testbed::exec("demo"),
        Command::Agent(a) => agent_cmd::main(a),
        Command::Status(a) => status_cmd::main(a),
        Command::Report(a) => report_cmd::main(a),
        Command::Doctor(a) => doctor_cmd::main(a),
    };
    std::process::exit(code)
}
