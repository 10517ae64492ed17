//! The job's command-line flags, shared by `pipesim` and `freeride sim`.
use crate::config::{ms_to_ns, JobConfig, Parallel, Style};
use crate::csv::CsvSchedule;
use crate::noise::Noise;
use crate::schedule::{Schedule, Shape};
use crate::topology::Visible;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ScheduleArg {
    Gpipe,
    #[value(name = "1f1b")]
    OneFOneB,
    Interleaved,
    Zbh1,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StyleArg {
    Batched,
    Blocking,
    Torch,
    Overlapped,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum P2pStreamsArg {
    PerPeer,
    Shared,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum VisibleArg {
    All,
    PerRank,
}

/// Tensor and data parallelism.
#[derive(Args, Clone, Debug, Default)]
pub struct ParallelArgs {
    /// Tensor-parallel processes per stage (one GPU each).
    #[arg(long, default_value_t = 1, value_parser = at_least_one::<u32>)]
    pub tp: u32,
    /// Transformer layers per stage (each with its tensor-parallel collectives).
    #[arg(long, default_value_t = 1, value_parser = at_least_one::<u32>)]
    pub layers: u32,
    /// Sequence parallelism: all-gather + reduce-scatter instead of each all-reduce.
    #[arg(long)]
    pub sequence_parallel: bool,
    /// Transfer time of one tensor-parallel collective, ms.
    #[arg(long, value_name = "MS", default_value_t = 0.0)]
    pub tp_comm: f64,
    /// Data-parallel pipeline replicas.
    #[arg(long, default_value_t = 1, value_parser = at_least_one::<u32>)]
    pub dp: u32,
    /// Gradient buckets per model chunk, reduced during the last micro-batch's backward.
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = at_least_one::<u32>)]
    pub dp_buckets: u32,
    /// Transfer time of a model chunk's gradient reduction (all buckets; with a CSV: of each
    /// UNSHARD and REDUCE_GRAD), ms.
    #[arg(long, value_name = "MS", default_value_t = 0.0)]
    pub dp_comm: f64,
    /// Reduce-scatter gradients, all-gather parameters after the step (Megatron's distributed
    /// optimizer).
    #[arg(long)]
    pub distributed_optimizer: bool,
    /// Gradient clipping: a grad-norm all-reduce before the step.
    #[arg(long)]
    pub clip_grad: bool,
}

/// A real cluster's noise.
#[derive(Args, Clone, Debug, Default)]
pub struct NoiseArgs {
    /// Kernel durations vary by up to PCT percent (uniform).
    #[arg(long, value_name = "PCT", default_value_t = 0.0)]
    pub jitter: f64,
    /// Each micro-batch's compute and message sizes vary by up to PCT percent (per iteration).
    #[arg(long, value_name = "PCT", default_value_t = 0.0)]
    pub seq_var: f64,
    /// Every N iterations one rank's host stalls (--stall-ms).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub stall_every: u32,
    #[arg(long, value_name = "MS", default_value_t = 0.0)]
    pub stall_ms: f64,
    /// Every N iterations every rank pauses (--pause-ms: an evaluation, a checkpoint).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub pause_every: u32,
    #[arg(long, value_name = "MS", default_value_t = 0.0)]
    pub pause_ms: f64,
    /// The first iteration's kernels take PCT percent longer (a real job's warm-up).
    #[arg(long, value_name = "PCT", default_value_t = 0.0)]
    pub warmup: f64,
    /// Seed of every noise draw (the same seed repeats a noisy run exactly).
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
}

/// How processes see GPUs.
#[derive(Args, Clone, Debug)]
pub struct PlacementArgs {
    /// all: every process sees its node's GPUs and picks its own; per-rank: each process gets
    /// `CUDA_VISIBLE_DEVICES=<its GPU>` (and calls it device 0).
    #[arg(long, value_enum, default_value = "all")]
    pub visible_devices: VisibleArg,
    /// Simulated nodes the ranks are spread over (each with its own session directory).
    #[arg(long, default_value_t = 1, value_parser = at_least_one::<u32>)]
    pub nodes: u32,
}

/// A count's value: a whole number, at least 1. Clap names the flag and the value around the
/// message (`"invalid value '-1' for '--stages <STAGES>': must be at least 1"`); a command that
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
    /// A compute_comms CSV of torch.distributed.pipelining (one row per pipeline rank), run with
    /// torch's semantics instead of --schedule.
    #[arg(long, value_name = "FILE")]
    pub schedule_csv: Option<PathBuf>,
    /// Pipeline stages (default 4; a CSV's rows). Every process gets its own simulated GPU: the
    /// job gets as many as it needs, at least 8, unless FREERIDE_SIM_DEVICES says how many there
    /// are.
    #[arg(long, value_parser = at_least_one::<u32>)]
    pub stages: Option<u32>,
    /// Micro-batches per iteration (default 8; a CSV's).
    #[arg(long, value_parser = at_least_one::<u32>)]
    pub microbatches: Option<u32>,
    /// Model chunks per rank (interleaved only; default 2 there, 1 otherwise).
    #[arg(long, value_parser = at_least_one::<u32>)]
    pub chunks: Option<u32>,
    /// Forward time of one micro-batch on one stage, ms (with a CSV: per CSV stage).
    #[arg(long, default_value_t = 10.0)]
    pub f: f64,
    /// Input-gradient backward time, ms (a CSV's I).
    #[arg(long, default_value_t = 10.0)]
    pub b: f64,
    /// Weight-gradient backward time, ms (0: backward is B only; a CSV's W).
    #[arg(long, default_value_t = 10.0)]
    pub w: f64,
    /// Point-to-point transfer time, ms (sizes the messages).
    #[arg(long, default_value_t = 0.0)]
    pub comm: f64,
    /// Loss all-reduce time at the end of each iteration, ms.
    #[arg(long, default_value_t = 0.0)]
    pub allreduce: f64,
    /// How stages talk: batched (Megatron), blocking (DeepSpeed), torch
    /// (torch.distributed.pipelining; a CSV's), overlapped (Megatron's overlap_p2p_comm).
    #[arg(long, value_enum)]
    pub style: Option<StyleArg>,
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
    /// torch, overlapped and CSV jobs: per-peer: each peer pair's sends and receives on its own
    /// 2-rank communicator and stream; shared: all of a rank's on one stream and the pipeline's
    /// communicator (ProcessGroupNCCL's batched P2P on the group's main communicator).
    #[arg(long, value_enum, default_value = "per-peer")]
    pub p2p_streams: P2pStreamsArg,
    /// Compute kernels per phase (default: one per 0.4 ms of the phase, 2 to 24).
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub kernels_per_phase: u32,
    #[command(flatten)]
    pub par: ParallelArgs,
    #[command(flatten)]
    pub noise: NoiseArgs,
    #[command(flatten)]
    pub place: PlacementArgs,
}

/// The name clap gives a value.
fn name_of<T: ValueEnum>(v: &T) -> String {
    v.to_possible_value()
        .expect("no skipped variants")
        .get_name()
        .to_string()
}

impl JobArgs {
    /// The schedule's name: the built-in one, or the CSV's file name.
    pub fn schedule_name(&self) -> String {
        match &self.schedule_csv {
            Some(p) => p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| p.display().to_string()),
            None => name_of(&self.schedule),
        }
    }

    /// The style's name.
    pub fn style_name(&self) -> String {
        self.style().name().to_string()
    }

    /// The style the job runs with (a CSV's is torch's).
    pub fn style(&self) -> Style {
        match self.style {
            Some(StyleArg::Batched) => Style::Batched,
            Some(StyleArg::Blocking) => Style::Blocking,
            Some(StyleArg::Torch) => Style::Torch,
            Some(StyleArg::Overlapped) => Style::Overlapped,
            None if self.schedule_csv.is_some() => Style::Torch,
            None => Style::Batched,
        }
    }

    /// The flags again, as `pipesim` takes them.
    pub fn to_argv(&self) -> Vec<String> {
        let mut v: Vec<String> = vec![];
        let mut push = |flag: &str, val: String| {
            v.push(flag.into());
            v.push(val);
        };
        match &self.schedule_csv {
            Some(p) => push("--schedule-csv", p.display().to_string()),
            None => push("--schedule", name_of(&self.schedule)),
        }
        for (flag, val) in [
            ("--stages", self.stages),
            ("--microbatches", self.microbatches),
            ("--chunks", self.chunks),
        ] {
            if let Some(x) = val {
                push(flag, x.to_string());
            }
        }
        for (flag, ms) in [
            ("--f", self.f),
            ("--b", self.b),
            ("--w", self.w),
            ("--comm", self.comm),
            ("--allreduce", self.allreduce),
        ] {
            push(flag, ms.to_string());
        }
        if let Some(s) = self.style {
            push("--style", name_of(&s));
        }
        push("--iterations", self.iterations.to_string());
        if let (Some(at), Some(m)) = (self.change_at, self.then_microbatches) {
            push("--change-at", at.to_string());
            push("--then-microbatches", m.to_string());
        }
        push("--kernels-per-phase", self.kernels_per_phase.to_string());
        push("--p2p-streams", name_of(&self.p2p_streams));
        let p = &self.par;
        for (flag, x) in [
            ("--tp", p.tp),
            ("--layers", p.layers),
            ("--dp", p.dp),
            ("--dp-buckets", p.dp_buckets),
        ] {
            push(flag, x.to_string());
        }
        push("--tp-comm", p.tp_comm.to_string());
        push("--dp-comm", p.dp_comm.to_string());
        let n = &self.noise;
        push("--jitter", n.jitter.to_string());
        push("--seq-var", n.seq_var.to_string());
        push("--stall-every", n.stall_every.to_string());
        push("--stall-ms", n.stall_ms.to_string());
        push("--pause-every", n.pause_every.to_string());
        push("--pause-ms", n.pause_ms.to_string());
        push("--warmup", n.warmup.to_string());
        push("--seed", n.seed.to_string());
        push("--visible-devices", name_of(&self.place.visible_devices));
        push("--nodes", self.place.nodes.to_string());
        for (flag, on) in [
            ("--sequence-parallel", p.sequence_parallel),
            ("--distributed-optimizer", p.distributed_optimizer),
            ("--clip-grad", p.clip_grad),
        ] {
            if on {
                v.push(flag.into());
            }
        }
        v
    }

    /// The pipeline shape (and the CSV, if any).
    fn shape(&self) -> Result<(Shape, Option<CsvSchedule>), String> {
        let (f_ns, b_ns, w_ns) = (ms_to_ns(self.f), ms_to_ns(self.b), ms_to_ns(self.w));
        if let Some(path) = &self.schedule_csv {
            let csv = CsvSchedule::read(path)?;
            let rows = csv.rows.len() as u32;
            let m = csv.microbatches();
            for (flag, given, has) in [
                ("--stages", self.stages, rows),
                ("--microbatches", self.microbatches, m),
            ] {
                if given.is_some_and(|g| g != has) {
                    return Err(format!(
                        "{flag} {} does not match {} (it has {has})",
                        given.unwrap_or(0),
                        path.display()
                    ));
                }
            }
            if self.chunks.is_some() || self.change_at.is_some() {
                return Err(
                    "--chunks and --change-at do not apply to --schedule-csv (the CSV fixes its stages and micro-batches)"
                        .into(),
                );
            }
            let shape = Shape {
                schedule: Schedule::Csv,
                stages: rows,
                microbatches: m,
                chunks: csv.stages_per_rank(),
                f_ns,
                b_ns,
                w_ns,
            };
            return Ok((shape, Some(csv)));
        }
        let schedule = match self.schedule {
            ScheduleArg::Gpipe => Schedule::Gpipe,
            ScheduleArg::OneFOneB => Schedule::OneFOneB,
            ScheduleArg::Interleaved => Schedule::Interleaved,
            ScheduleArg::Zbh1 => Schedule::Zbh1,
        };
        let chunks = self.chunks.unwrap_or(if schedule == Schedule::Interleaved {
            2
        } else {
            1
        });
        let shape = Shape {
            schedule,
            stages: self.stages.unwrap_or(4),
            microbatches: self.microbatches.unwrap_or(8),
            chunks,
            f_ns,
            b_ns,
            w_ns,
        };
        shape.plan()?;
        Ok((shape, None))
    }

    fn parallel(&self) -> Result<Parallel, String> {
        let p = &self.par;
        for (flag, v) in [
            ("--tp", p.tp),
            ("--layers", p.layers),
            ("--dp", p.dp),
            ("--dp-buckets", p.dp_buckets),
        ] {
            if v == 0 {
                return Err(format!("{flag} must be at least 1"));
            }
        }
        if p.sequence_parallel && p.tp < 2 {
            return Err("--sequence-parallel needs --tp 2 or more".into());
        }
        if self.schedule_csv.is_some() && (p.distributed_optimizer || p.dp_buckets > 1) {
            return Err(
                "--distributed-optimizer and --dp-buckets do not apply to --schedule-csv (its UNSHARD and REDUCE_GRAD are the data-parallel communication)"
                    .into(),
            );
        }
        Ok(Parallel {
            tp: p.tp,
            layers: p.layers,
            sequence_parallel: p.sequence_parallel,
            tp_comm_ns: ms_to_ns(p.tp_comm),
            dp: p.dp,
            dp_buckets: p.dp_buckets,
            dp_comm_ns: ms_to_ns(p.dp_comm),
            distributed_optimizer: p.distributed_optimizer,
            clip_grad: p.clip_grad,
        })
    }

    fn noise(&self) -> Result<Noise, String> {
        let n = &self.noise;
        for (flag, v) in [("--stall-ms", n.stall_ms), ("--pause-ms", n.pause_ms)] {
            if !v.is_finite() || v < 0.0 {
                return Err(format!(
                    "{flag} must be a non-negative number of ms, got {v}"
                ));
            }
        }
        let noise = Noise {
            seed: n.seed,
            jitter_pct: n.jitter,
            seq_var_pct: n.seq_var,
            stall_every: n.stall_every,
            stall_ns: ms_to_ns(n.stall_ms),
            pause_every: n.pause_every,
            pause_ns: ms_to_ns(n.pause_ms),
            warmup_pct: n.warmup,
        };
        noise.validate()?;
        Ok(noise)
    }

    /// Checks the flags, describes the job and validates every rank's program with the model;
    /// the error says what is wrong (naming the CSV cell where it is one).
    pub fn to_config(&self) -> Result<JobConfig, String> {
        for (name, v) in [
            ("--f", self.f),
            ("--b", self.b),
            ("--w", self.w),
            ("--comm", self.comm),
            ("--allreduce", self.allreduce),
            ("--tp-comm", self.par.tp_comm),
            ("--dp-comm", self.par.dp_comm),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(format!(
                    "{name} must be a non-negative number of ms, got {v}"
                ));
            }
        }
        if self.iterations == 0 {
            return Err("--iterations must be at least 1".into());
        }
        if self.schedule_csv.is_some() && matches!(self.style, Some(s) if s != StyleArg::Torch) {
            return Err("--schedule-csv runs with torch's semantics (--style torch)".into());
        }
        let (shape, csv) = self.shape()?;
        if self.style == Some(StyleArg::Overlapped) && shape.schedule != Schedule::Interleaved {
            return Err(
                "--style overlapped is Megatron's interleaved schedule's (overlap_p2p_comm): use it with --schedule interleaved"
                    .into(),
            );
        }
        let mut cfg = JobConfig {
            shape,
            style: self.style(),
            comm_ns: ms_to_ns(self.comm),
            allreduce_ns: ms_to_ns(self.allreduce),
            iterations: self.iterations,
            change: None,
            csv,
            par: self.parallel()?,
            kernels_per_phase: self.kernels_per_phase,
            noise: self.noise()?,
            visible: match self.place.visible_devices {
                VisibleArg::All => Visible::All,
                VisibleArg::PerRank => Visible::PerRank,
            },
            nodes: self.place.nodes,
            p2p_shared: self.p2p_streams == P2pStreamsArg::Shared,
        };
        if cfg.p2p_shared && !cfg.style.host_runs_ahead() {
            return Err(
                "--p2p-streams shared applies to --style torch and overlapped (and CSVs); batched has one pipeline stream, blocking one per pair"
                    .into(),
            );
        }
        if let (Some(at), Some(m)) = (self.change_at, self.then_microbatches) {
            if at == 0 || at >= self.iterations {
                return Err(format!(
                    "--change-at must be between 1 and --iterations - 1 ({}), got {at}",
                    self.iterations.saturating_sub(1)
                ));
            }
            cfg.change = Some(crate::config::Change {
                at_iteration: at,
                microbatches: m,
            });
            cfg.shape_at(at)
                .plan()
                .map_err(|e| format!("--then-microbatches {m}: {e}"))?;
        }
        cfg.topology().validate()?;
        crate::devices::for_job(cfg.topology().world())?;
        crate::validate::validate(&cfg)?;
        Ok(cfg)
    }
}
