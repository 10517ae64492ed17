//! The job's command-line flags, shared by `pipesim` and `freeride sim`.
use crate::config::{ms_to_ns, JobConfig, Style};
use crate::schedule::{Schedule, Shape};
use crate::sim;
use clap::{Args, ValueEnum};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ScheduleArg {
    Gpipe,
    #[value(name = "1f1b")]
    OneFOneB,
    Interleaved,
    Zbh1,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum StyleArg {
    Batched,
    Blocking,
}

/// A count's value: a whole number, at least 1. Clap names the flag and the value around the
/// message ("invalid value '-1' for '--stages <STAGES>': must be at least 1"); a command that
/// takes such flags sets `allow_negative_numbers`, so that `-1` reads as a value, not a flag.
pub fn at_least_one<T>(s: &str) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + From<u8>,
{
    match s.trim().parse::<T>() {
        Ok(v) if v >= T::from(1) => Ok(v),
        Ok(_) => Err("must be at least 1".into()),
        Err(_) => match s.trim().parse::<i128>() {
            Ok(n) if n < 1 => Err("must be at least 1".into()),
            Ok(_) => Err("too large".into()),
            Err(_) => Err("must be a whole number, at least 1".into()),
        },
    }
}

/// The flags that describe a simulated training job.
#[derive(Args, Clone, Debug)]
pub struct JobArgs {
    /// Pipeline schedule.
    #[arg(long, value_enum, default_value = "1f1b")]
    pub schedule: ScheduleArg,
    /// Pipeline stages (one process and one simulated GPU each: the job gets as many simulated
    /// GPUs as it needs, at least 8, unless FREERIDE_SIM_DEVICES says how many there are).
    #[arg(long, default_value_t = 4, value_parser = at_least_one::<u32>)]
    pub stages: u32,
    /// Micro-batches per iteration.
    #[arg(long, default_value_t = 8, value_parser = at_least_one::<u32>)]
    pub microbatches: u32,
    /// Model chunks per rank (interleaved only; default 2 there, 1 otherwise).
    #[arg(long, value_parser = at_least_one::<u32>)]
    pub chunks: Option<u32>,
    /// Forward time of one micro-batch on one stage, ms.
    #[arg(long, default_value_t = 10.0)]
    pub f: f64,
    /// Input-gradient backward time, ms.
    #[arg(long, default_value_t = 10.0)]
    pub b: f64,
    /// Weight-gradient backward time, ms (0: backward is B only).
    #[arg(long, default_value_t = 10.0)]
    pub w: f64,
    /// Point-to-point transfer time, ms (sizes the messages).
    #[arg(long, default_value_t = 0.0)]
    pub comm: f64,
    /// All-reduce time at the end of each iteration, ms.
    #[arg(long, default_value_t = 0.0)]
    pub allreduce: f64,
    /// How stages talk: batched (Megatron) or blocking (DeepSpeed).
    #[arg(long, value_enum, default_value = "batched")]
    pub style: StyleArg,
    /// Training iterations (pipesim's report leaves the first out; freeride sim scores those after
    /// the second, and needs at least 3).
    #[arg(long, default_value_t = 3, value_parser = at_least_one::<u32>)]
    pub iterations: u32,
    /// Change the micro-batch count from iteration ITER (0-based) on (with --then-microbatches).
    #[arg(long, value_name = "ITER", requires = "then_microbatches", value_parser = at_least_one::<u32>)]
    pub change_at: Option<u32>,
    /// The micro-batch count from --change-at on.
    #[arg(long, value_name = "M", requires = "change_at", value_parser = at_least_one::<u32>)]
    pub then_microbatches: Option<u32>,
}

impl JobArgs {
    /// The schedule's name on the command line.
    pub fn schedule_name(&self) -> String {
        self.schedule
            .to_possible_value()
            .expect("no skipped variants")
            .get_name()
            .to_string()
    }

    /// The style's name on the command line.
    pub fn style_name(&self) -> String {
        self.style
            .to_possible_value()
            .expect("no skipped variants")
            .get_name()
            .to_string()
    }

    /// The flags again, as `pipesim` takes them.
    pub fn to_argv(&self) -> Vec<String> {
        let schedule = self
            .schedule
            .to_possible_value()
            .expect("no skipped variants");
        let style = self.style.to_possible_value().expect("no skipped variants");
        let mut v = vec![
            "--schedule".into(),
            schedule.get_name().into(),
            "--stages".into(),
            self.stages.to_string(),
            "--microbatches".into(),
            self.microbatches.to_string(),
        ];
        if let Some(c) = self.chunks {
            v.extend(["--chunks".into(), c.to_string()]);
        }
        for (flag, ms) in [
            ("--f", self.f),
            ("--b", self.b),
            ("--w", self.w),
            ("--comm", self.comm),
            ("--allreduce", self.allreduce),
        ] {
            v.extend([flag.into(), ms.to_string()]);
        }
        v.extend([
            "--style".into(),
            style.get_name().into(),
            "--iterations".into(),
            self.iterations.to_string(),
        ]);
        if let (Some(at), Some(m)) = (self.change_at, self.then_microbatches) {
            v.extend([
                "--change-at".into(),
                at.to_string(),
                "--then-microbatches".into(),
                m.to_string(),
            ]);
        }
        v
    }

    /// Checks the flags and describes the job; the error says what is wrong.
    pub fn to_config(&self) -> Result<JobConfig, String> {
        let cli = self;
        let schedule = match cli.schedule {
            ScheduleArg::Gpipe => Schedule::Gpipe,
            ScheduleArg::OneFOneB => Schedule::OneFOneB,
            ScheduleArg::Interleaved => Schedule::Interleaved,
            ScheduleArg::Zbh1 => Schedule::Zbh1,
        };
        for (name, v) in [
            ("--f", cli.f),
            ("--b", cli.b),
            ("--w", cli.w),
            ("--comm", cli.comm),
            ("--allreduce", cli.allreduce),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(format!(
                    "{name} must be a non-negative number of ms, got {v}"
                ));
            }
        }
        if cli.iterations == 0 {
            return Err("--iterations must be at least 1".into());
        }
        let chunks = cli.chunks.unwrap_or(if schedule == Schedule::Interleaved {
            2
        } else {
            1
        });
        let shape = Shape {
            schedule,
            stages: cli.stages,
            microbatches: cli.microbatches,
            chunks,
            f_ns: ms_to_ns(cli.f),
            b_ns: ms_to_ns(cli.b),
            w_ns: ms_to_ns(cli.w),
        };
        let plan = shape.plan()?;
        sim::simulate(&plan, 0)?;
        let style = match cli.style {
            StyleArg::Batched => Style::Batched,
            StyleArg::Blocking => Style::Blocking,
        };
        let cfg = JobConfig {
            shape,
            style,
            comm_ns: ms_to_ns(cli.comm),
            allreduce_ns: ms_to_ns(cli.allreduce),
            iterations: cli.iterations,
            change: None,
        };
        let mut cfg = cfg;
        if let (Some(at), Some(m)) = (cli.change_at, cli.then_microbatches) {
            if at == 0 || at >= cli.iterations {
                return Err(format!(
                    "--change-at must be between 1 and --iterations - 1 ({}), got {at}",
                    cli.iterations.saturating_sub(1)
                ));
            }
            let change = crate::config::Change {
                at_iteration: at,
                microbatches: m,
            };
            cfg.change = Some(change);
            let after = cfg.shape_at(at);
            let plan = after
                .plan()
                .map_err(|e| format!("--then-microbatches {m}: {e}"))?;
            sim::simulate(&plan, 0)?;
        }
        Ok(cfg)
    }
}
