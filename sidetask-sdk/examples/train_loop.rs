//! A small model-training loop as a freeride side task: a 2-layer MLP regression trained with
//! minibatch SGD. Each step's GPU work is real: the six GEMMs of a 2-layer MLP of width
//! `--gpu-width` (default 1024) over the minibatch (forward, then input and weight gradients of
//! each layer), through cuBLAS on the task's stream, 6 x batch x width^2 multiply-adds (1.6 ms on
//! the test bed's stand-in BLAS at `--batch 256`; some 50 µs on an H200). The host runs a small
//! regression of the same minibatch size (`--input`, `--hidden`) whose loss it reports: the test
//! bed's GPU computes nothing, so that is what shows the task making progress there.
//!
//! `cargo run --release -p freeride-sidetask-sdk --example train_loop -- --device 0 --standalone \
//!   --steps 200 --batch 64 [--gpu-width 1024] [--min-fraction 0.25]`
//!
//! At a grant's end, where a full step no longer fits, it takes a smaller minibatch (down to
//! `--min-fraction` of `--batch`; 1 turns that off).
use freeride_sidetask::blas::Operands;
use freeride_sidetask::cli::{opt, Args, TaskOption};
use freeride_sidetask::{Ctx, Runtime, SideTask, StepOutcome, TaskResult};

struct Rng(u64);
impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

struct Mlp {
    d_in: usize,
    hidden: usize,
    w1: Vec<f64>, // hidden x d_in
    w2: Vec<f64>, // hidden
}

struct Trainer {
    model: Mlp,
    teacher: Vec<f64>,
    rng: Rng,
    batch: usize,
    lr: f64,
    steps: u64,
    max_steps: u64,
    first_loss: f64,
    loss: f64,
    /// Width of the MLP whose GEMMs run on the GPU.
    gpu_width: u32,
    gpu: Option<Operands>,
    /// The smallest minibatch share a step may shrink to at a grant's end (`--min-fraction`).
    min_fraction: f64,
    scratch: Scratch,
}

impl Trainer {
    /// One SGD step on a fresh minibatch of `batch` samples; returns its loss (MSE). The host
    /// work stays small beside the step's simulated GPU time (buffers reused, no allocation per
    /// sample): on the test bed the side tasks' host threads share the CPU with the simulated GPUs
    /// and the trainer.
    fn sgd_step(&mut self, batch: usize) -> f64 {
        let (d, h) = (self.model.d_in, self.model.hidden);
        let Scratch { x, z, g1, g2 } = &mut self.scratch;
        x.resize(d, 0.0);
        z.resize(h, 0.0);
        g1.clear();
        g1.resize(h * d, 0.0);
        g2.clear();
        g2.resize(h, 0.0);
        let mut loss = 0.0;
        for _ in 0..batch {
            for v in x.iter_mut() {
                *v = self.rng.next_f64();
            }
            let y = dot(x, &self.teacher).tanh();
            for (j, zj) in z.iter_mut().enumerate() {
                *zj = dot(&self.model.w1[j * d..(j + 1) * d], x).tanh();
            }
            let err = dot(z, &self.model.w2) - y;
            loss += err * err;
            for j in 0..h {
                g2[j] += err * z[j];
                let dz = err * self.model.w2[j] * (1.0 - z[j] * z[j]);
                for (g, xi) in g1[j * d..(j + 1) * d].iter_mut().zip(x.iter()) {
                    *g += dz * xi;
                }
            }
        }
        let s = self.lr / batch as f64;
        for (w, g) in self.model.w1.iter_mut().zip(g1.iter()) {
            *w -= s * g;
        }
        for (w, g) in self.model.w2.iter_mut().zip(g2.iter()) {
            *w -= s * g;
        }
        loss / batch as f64
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Buffers of one SGD step, kept between steps.
#[derive(Default)]
struct Scratch {
    x: Vec<f64>,
    z: Vec<f64>,
    g1: Vec<f64>,
    g2: Vec<f64>,
}

impl SideTask for Trainer {
    fn init(&mut self, ctx: &mut Ctx) -> TaskResult<()> {
        // A weight matrix (width x width), activations and gradients (width x batch).
        let (w, b) = (self.gpu_width as u64, self.batch as u64);
        self.gpu = Some(Operands::alloc(
            ctx,
            w * w.max(b),
            w.max(b) * b,
            w * w.max(b),
        )?);
        Ok(())
    }

    fn step(&mut self, ctx: &mut Ctx) -> TaskResult<StepOutcome> {
        // At a grant's end the runtime may offer part of a step: a smaller minibatch fits it.
        let b = ((self.batch as f64 * ctx.step_fraction()).floor() as usize).clamp(1, self.batch);
        let (w, n) = (self.gpu_width, b as u32);
        let ops = self.gpu.as_ref().ok_or("init did not run")?;
        for _layer in 0..2 {
            ops.gemm(ctx, w, n, w)?; // forward: activations = W . X
        }
        for _layer in 0..2 {
            ops.gemm(ctx, w, n, w)?; // input gradient: W^T . dY
            ops.gemm(ctx, w, w, n)?; // weight gradient: dY . X^T
        }
        self.loss = self.sgd_step(b);
        if self.steps == 0 {
            self.first_loss = self.loss;
        }
        self.steps += 1;
        if self.steps.checked_rem(25) == Some(0) {
            println!("train_loop: step {} loss {:.5}", self.steps, self.loss);
        }
        Ok(StepOutcome::Continue)
    }

    fn is_finished(&self) -> bool {
        self.steps >= self.max_steps
    }

    fn min_step_fraction(&self) -> f64 {
        self.min_fraction
    }

    fn on_paused(&mut self, _ctx: &mut Ctx) {
        // A real task could checkpoint here; paused tasks keep their GPU memory.
    }
}

/// This task's own options (`--help` lists them with the common ones).
const OPTIONS: [TaskOption; 8] = [
    opt("input", "input width (default 16)"),
    opt("hidden", "hidden width (default 32)"),
    opt("seed", "seed (default 7)"),
    opt("batch", "minibatch size (default 64)"),
    opt("lr", "learning rate (default 0.1)"),
    opt("steps", "SGD steps (default 200)"),
    opt(
        "gpu-width",
        "the GEMMs' hidden width on the GPU: a step is six batch x width^2 GEMMs (default 1024)",
    ),
    opt(
        "min-fraction",
        "the smallest minibatch share at a grant's end (default 0.25; 1: full steps only)",
    ),
];

fn main() {
    let args = Args::from_env(
        "train_loop",
        "a 2-layer MLP trained with minibatch SGD, one SGD step per step",
        &OPTIONS,
    );
    let d = args.get_u64("input", 16) as usize;
    let h = args.get_u64("hidden", 32) as usize;
    let mut rng = Rng(args.get_u64("seed", 7) | 1);
    let teacher: Vec<f64> = (0..d).map(|_| rng.next_f64() * 0.5).collect();
    let model = Mlp {
        d_in: d,
        hidden: h,
        w1: (0..h * d).map(|_| rng.next_f64() * 0.3).collect(),
        w2: (0..h).map(|_| rng.next_f64() * 0.3).collect(),
    };
    let mut task = Trainer {
        model,
        teacher,
        rng,
        batch: args.get_u64("batch", 64) as usize,
        lr: args.get_f64("lr", 0.1),
        steps: 0,
        max_steps: args.get_u64("steps", 200),
        first_loss: 0.0,
        loss: 0.0,
        gpu_width: args.get_u64("gpu-width", 1024).clamp(1, 16_384) as u32,
        gpu: None,
        min_fraction: args.get_f64("min-fraction", 0.25).clamp(0.01, 1.0),
        scratch: Scratch::default(),
    };
    let mut rt = Runtime::new(args.config.clone()).unwrap_or_else(|e| {
        eprintln!("train_loop: {e}");
        std::process::exit(1)
    });
    match rt.run(&mut task) {
        Ok(s) => println!(
            "{}",
            s.to_json_with(serde_json::json!({
                "first_loss": task.first_loss,
                "final_loss": task.loss,
            }))
        ),
        Err(e) => {
            eprintln!("train_loop: {e}");
            std::process::exit(1);
        }
    }
}
