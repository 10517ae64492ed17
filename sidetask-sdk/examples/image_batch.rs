//! Batch image processing as a freeride side task: resize + watermark. One step = one image. Its
//! GPU work is real: the bilinear resize of its three channels as two cuBLAS GEMMs with the
//! interpolation matrices (rows: out x in . in x 3 in; then columns: 3 out x in . in x out), on
//! the task's stream. The host generates the images and resizes and watermarks them too, for the
//! checksum it reports (the test bed's GPU computes nothing).
//!
//! `cargo run --release -p freeride-sidetask-sdk --example image_batch -- --device 0 --standalone \
//!   --images 40 --size 96 --out-size 48`
use freeride_sidetask::blas::Operands;
use freeride_sidetask::cli::{opt, Args, TaskOption};
use freeride_sidetask::{Ctx, Runtime, SideTask, StepOutcome, TaskResult};

#[derive(Clone)]
struct Image {
    w: usize,
    h: usize,
    px: Vec<[u8; 3]>,
}

fn generate(i: usize, size: usize) -> Image {
    let px = (0..size * size)
        .map(|k| {
            let (x, y) = (k % size, k / size);
            [
                ((x * 255 / size) ^ (i * 37)) as u8,
                ((y * 255 / size) + i * 11) as u8,
                (((x + y) * 3 + i) % 256) as u8,
            ]
        })
        .collect();
    Image {
        w: size,
        h: size,
        px,
    }
}

fn resize(src: &Image, w: usize, h: usize) -> Image {
    let mut px = Vec::with_capacity(w * h);
    for y in 0..h {
        let fy = (y as f64 + 0.5) * src.h as f64 / h as f64 - 0.5;
        let y0 = fy.floor().clamp(0.0, (src.h - 1) as f64) as usize;
        let y1 = (y0 + 1).min(src.h - 1);
        let ty = (fy - y0 as f64).clamp(0.0, 1.0);
        for x in 0..w {
            let fx = (x as f64 + 0.5) * src.w as f64 / w as f64 - 0.5;
            let x0 = fx.floor().clamp(0.0, (src.w - 1) as f64) as usize;
            let x1 = (x0 + 1).min(src.w - 1);
            let tx = (fx - x0 as f64).clamp(0.0, 1.0);
            let p = |xx: usize, yy: usize, c: usize| src.px[yy * src.w + xx][c] as f64;
            let mut out = [0u8; 3];
            for (c, o) in out.iter_mut().enumerate() {
                let top = p(x0, y0, c) * (1.0 - tx) + p(x1, y0, c) * tx;
                let bot = p(x0, y1, c) * (1.0 - tx) + p(x1, y1, c) * tx;
                *o = (top * (1.0 - ty) + bot * ty).round() as u8;
            }
            px.push(out);
        }
    }
    Image { w, h, px }
}

/// A diagonal-stripes mark blended at 30 % in the bottom-right quarter.
fn watermark(img: &mut Image) {
    for y in img.h / 2..img.h {
        for x in img.w / 2..img.w {
            if (x + y) % 6 < 2 {
                for c in img.px[y * img.w + x].iter_mut() {
                    *c = ((*c as u32 * 7 + 255 * 3) / 10) as u8;
                }
            }
        }
    }
}

struct Batch {
    n: usize,
    size: usize,
    out: usize,
    done: usize,
    checksum: u64,
    gpu: Option<Operands>,
}

impl SideTask for Batch {
    fn init(&mut self, ctx: &mut Ctx) -> TaskResult<()> {
        // The interpolation matrices, an image's channels and the intermediate, on the device.
        let (i, o) = (self.size as u64, self.out as u64);
        self.gpu = Some(Operands::alloc(
            ctx,
            3 * o * i,
            (3 * i * i).max(i * o),
            (3 * o * i).max(3 * o * o),
        )?);
        Ok(())
    }

    fn step(&mut self, ctx: &mut Ctx) -> TaskResult<StepOutcome> {
        let src = generate(self.done, self.size);
        let (i, o) = (u32::try_from(self.size)?, u32::try_from(self.out)?);
        let ops = self.gpu.as_ref().ok_or("init did not run")?;
        ops.gemm(ctx, o, 3 * i, i)?; // rows: Rh (out x in) . channels (in x 3 in)
        ops.gemm(ctx, 3 * o, o, i)?; // columns: (3 out x in) . Rw^T (in x out)
        let mut img = resize(&src, self.out, self.out);
        watermark(&mut img);
        for (k, p) in img.px.iter().enumerate() {
            self.checksum = self
                .checksum
                .wrapping_mul(31)
                .wrapping_add(k as u64 ^ (p[0] as u64 | (p[1] as u64) << 8 | (p[2] as u64) << 16));
        }
        self.done += 1;
        if self.done.checked_rem(10) == Some(0) {
            println!("image_batch: {}/{} images", self.done, self.n);
        }
        Ok(StepOutcome::Continue)
    }

    fn is_finished(&self) -> bool {
        self.done >= self.n
    }
}

/// This task's own options (`--help` lists them with the common ones).
const OPTIONS: [TaskOption; 3] = [
    opt("size", "source image side, pixels (default 96)"),
    opt("images", "images to process (default 40)"),
    opt("out-size", "output image side, pixels (default 48)"),
];

fn main() {
    let args = Args::from_env(
        "image_batch",
        "resizes and watermarks generated images, one image per step",
        &OPTIONS,
    );
    let size = args.get_u64("size", 96).max(2) as usize;
    let mut task = Batch {
        n: args.get_u64("images", 40) as usize,
        size,
        out: args.get_u64("out-size", 48).clamp(1, 4096) as usize,
        done: 0,
        checksum: 17,
        gpu: None,
    };
    let mut rt = Runtime::new(args.config.clone()).unwrap_or_else(|e| {
        eprintln!("image_batch: {e}");
        std::process::exit(1)
    });
    match rt.run(&mut task) {
        Ok(s) => println!(
            "{}",
            s.to_json_with(serde_json::json!({
                "images": task.done,
                "checksum": format!("{:016x}", task.checksum),
                "gpu_operands": task.gpu.is_some(),
            }))
        ),
        Err(e) => {
            eprintln!("image_batch: {e}");
            std::process::exit(1);
        }
    }
}
