//! The programs the experiments run, one process each, on device 0 of the stand-in driver.
//! * `side`: a side task that is not held back: kernels of one length back to back, for ever
//!   (the launch queue keeps its host in step). Prints `ready` once its first kernels run.
//! * `probe`: a trainer's 0.3 ms kernels one at a time, waiting for each and then pausing a few
//!   milliseconds (so that each probe finds the device as a steady side task leaves it); the
//!   latencies come from the ground truth (launch to end on the GPU's timeline). Prints the number
//!   of probes.
//! * `busy`: a trainer's busy phase (kernels back to back between two events), then a
//!   synchronize and an idle gap, per iteration; prints the busy phases (ms) as a JSON array.
use crate::cu::{Cu, Gpu};
use std::time::Duration;

/// Command-line flags of a role: `--name value` pairs.
pub struct Flags(Vec<String>);

impl Flags {
    pub fn new(args: Vec<String>) -> Flags {
        Flags(args)
    }

    /// The value of `--name` parsed, or `default`.
    pub fn get<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        let flag = format!("--{name}");
        match self.0.iter().position(|a| *a == flag) {
            None => Ok(default),
            Some(i) => self
                .0
                .get(i + 1)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{flag} needs a value")),
        }
    }
}

pub fn side(f: &Flags) -> Result<(), String> {
    let ns = f.get("kernel-us", 13_000u64)? * 1_000;
    let cu = Cu::open()?;
    let gpu = Gpu::new(&cu, 0, "side_gemm")?;
    for _ in 0..4 {
        gpu.launch(ns, 100)?;
    }
    gpu.synchronize()?;
    println!("ready");
    loop {
        gpu.launch(ns, 100)?;
    }
}

/// A small deterministic generator for the probes' pauses.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

pub fn probe(f: &Flags) -> Result<(), String> {
    let ns = f.get("kernel-us", 300u64)? * 1_000;
    let count = f.get("count", 400usize)?;
    let gap_us = f.get("gap-us", 4_000u64)?;
    let cu = Cu::open()?;
    let gpu = Gpu::new(&cu, 0, "trainer_gemm")?;
    let mut rng = Lcg(0x5eed);
    for _ in 0..count {
        gpu.launch(ns, 100)?;
        gpu.synchronize()?;
        // A pause of gap..2 x gap, so that probes land at every phase of the side task's kernels.
        let pause = gap_us + rng.next() % gap_us.max(1);
        std::thread::sleep(Duration::from_micros(pause));
    }
    println!("{count}");
    Ok(())
}

pub fn busy(f: &Flags) -> Result<(), String> {
    let kernels = f.get("kernels", 100usize)?;
    let ns = f.get("kernel-us", 176u64)? * 1_000;
    let gap_us = f.get("gap-us", 15_000u64)?;
    let iterations = f.get("iterations", 30usize)?;
    let cu = Cu::open()?;
    let gpu = Gpu::new(&cu, 0, "trainer_gemm")?;
    let (a, b) = (gpu.event()?, gpu.event()?);
    let mut out = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        gpu.record(a)?;
        for _ in 0..kernels {
            gpu.launch(ns, 100)?;
        }
        gpu.record(b)?;
        out.push(gpu.elapsed_ms(a, b)?);
        std::thread::sleep(Duration::from_micros(gap_us));
    }
    println!("{}", serde_json::json!(out));
    Ok(())
}
