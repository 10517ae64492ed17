//! `freeride run [--role trainer|sidetask] [--dir DIR] [--trace PATH] [--priority N] [--nice N] -- CMD ARGS...`
//!
//! Execs CMD (same pid, signals and exit status as CMD itself) with `LD_PRELOAD` prepended with
//! libfreeride.so, `FREERIDE_ROLE` and `FREERIDE_DIR` set, after creating the session directory
//! (mode 0700). When the directory is unusable (a symlink, another user's, open to others), a
//! trainer still runs, unobserved, with one warning line (freeride never keeps a training job from
//! running); a side task is refused (exit 2: ungated, it would slow the trainer). The library is
//! `$FREERIDE_LIB`, else `libfreeride.so` installed beside this executable, else the copy it
//! carries (`freeride_agent::layout::interposer`). A side task is started at a low CPU priority
//! (nice 19 unless `--nice` or `FREERIDE_SIDETASK_NICE` says otherwise; see `freeride_abi::cpu`).
use clap::{Args, ValueEnum};
use freeride_abi::{cpu, env, session};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum RoleArg {
    Trainer,
    Sidetask,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Role of the process: a trainer is observed; a side task is gated at its launches.
    #[arg(long, value_enum, default_value = "trainer")]
    pub role: RoleArg,
    /// Session directory (default: `$FREERIDE_DIR`, else `/dev/shm/freeride-<uid>`). If it is
    /// unusable (a symlink, another user's, open to others), a trainer runs unobserved and a side
    /// task is refused.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Also write every event as a JSON line to this file (FREERIDE_TRACE).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// A side task's priority (FREERIDE_PRIORITY): grants the agent keeps for more important side
    /// tasks hold it.
    #[arg(long)]
    pub priority: Option<u64>,
    /// A side task's CPU priority, as a nice value 0..=19 (default: $FREERIDE_SIDETASK_NICE, else
    /// 19: the trainer's host threads get the CPU first; 0: as started).
    #[arg(long, value_parser = clap::value_parser!(i32).range(0..=19))]
    pub nice: Option<i32>,
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

pub fn main(a: RunArgs) -> i32 {
    let dir = a.dir.clone().unwrap_or_else(session::resolve_dir);
    let dir = if dir.is_relative() {
        std::env::current_dir().map(|c| c.join(&dir)).unwrap_or(dir)
    } else {
        dir
    };
    // A bad session directory: a trainer runs, unobserved (freeride must never keep a training
    // job from running); a side task is refused, since without a session directory its launches
    // could not be gated and it would run freely beside the trainer.
    let dir_ok = match session::ensure_dir(&dir) {
        Ok(()) => true,
        Err(e) => {
            if let RoleArg::Sidetask = a.role {
                eprintln!(
                    "freeride run: session directory {}: {e}; a side task is not started \
                     without one (it could not be gated and would slow the trainer)",
                    dir.display()
                );
                return 2;
            }
            eprintln!(
                "freeride run: warning: session directory {}: {e}; the trainer runs unobserved",
                dir.display()
            );
            false
        }
    };
    let lib = match freeride_agent::layout::interposer() {
        Ok(l) => l.path().to_path_buf(),
        Err(e) => {
            eprintln!("freeride run: {e}");
            return 2;
        }
    };
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(p) if !p.is_empty() => format!("{} {p}", lib.display()),
        _ => lib.display().to_string(),
    };
    let role = match a.role {
        RoleArg::Trainer => "trainer",
        RoleArg::Sidetask => "sidetask",
    };
    let mut cmd = std::process::Command::new(&a.command[0]);
    if let RoleArg::Sidetask = a.role {
        let nice = match a
            .nice
            .map_or_else(|| cpu::sidetask_nice(cpu::DEFAULT_SIDETASK_NICE), Ok)
        {
            Ok(n) => n,
            Err(e) => {
                eprintln!("freeride run: {e}");
                return 2;
            }
        };
        // Before the exec, so that every thread of the side task starts at it; the interposer and
        // the SDK read the same value.
        if let Err(e) = cpu::lower_process_priority(nice) {
            eprintln!("freeride run: cannot lower the CPU priority to nice {nice}: {e}");
        }
        cmd.env(cpu::ENV_SIDETASK_NICE, nice.to_string());
    } else if a.nice.is_some() {
        eprintln!("freeride run: --nice is for side tasks (--role sidetask)");
        return 2;
    }
    cmd.args(&a.command[1..])
        .env("LD_PRELOAD", preload)
        .env(env::ROLE, role)
        .env(env::DIR, &dir);
    if !dir_ok {
        // Said once, here: the interposer of the trainer (and of its children) stays quiet.
        cmd.env(env::DIR_REPORTED, &dir);
    }
    if let Some(t) = &a.trace {
        cmd.env(env::TRACE, t);
    }
    if let Some(p) = a.priority {
        cmd.env("FREERIDE_PRIORITY", p.to_string());
    }
    let err = cmd.exec();
    eprintln!("freeride run: cannot run {}: {err}", a.command[0]);
    if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}
