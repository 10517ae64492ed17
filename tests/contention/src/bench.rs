//! `contend bench`: the two H200 experiments of `shared/reference/launch-paths.md` ("Sharing the
//! GPU with a side task") on the simulated GPU, printed beside the H200's figures.
//! * Latency: a trainer's 0.3 ms kernels (`probe`) beside a side task of ~13 ms or ~1.7 ms
//!   kernels, under time-slicing, MPS with the side task unlimited, MPS with it at 50 %.
//! * Busy phase: 100 kernels of 0.176 ms (17.6 ms) then a 15 ms gap per iteration (`busy`) beside
//!   a side task that is not held back, of ~1.7 ms kernels (the length at which the H200's 10x
//!   under MPS is one side kernel per trainer kernel: 100 x (0.176 + 1.65) ms = 182 ms), under
//!   time-slicing, MPS unlimited, MPS 50 % and MPS 30 %.
//!
//! Each setting runs in a fresh simulated GPU of its own (a folder under /dev/shm, removed after).
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// One setting of the device and its side task.
struct Setting {
    mode: &'static str,
    /// The side task's `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` (None: no side task).
    side: Option<(u32, u64)>,
}

const ALONE: Setting = Setting {
    mode: "timeslice",
    side: None,
};

/// A latency row: key, label, setting, H200 p50 / p99 (ms).
struct LatencyRow {
    key: &'static str,
    label: &'static str,
    setting: Setting,
    h200: (f64, f64),
}

/// A busy-phase row: key, label, setting, the H200's busy phase (ms) and which percentile.
struct BusyRow {
    key: &'static str,
    label: &'static str,
    setting: Setting,
    h200_ms: Option<f64>,
    p90: bool,
    /// The H200 side task's TFLOP/s.
    h200_side_tflops: Option<f64>,
}

/// The H200 trainer alone: busy phase 17.6 ms; kernels 0.30 / 0.37 ms.
const H200_BUSY_ALONE_MS: f64 = 17.6;
/// What the H200's side task reaches alone (8192^3 bf16 matmuls, "about 650 without the limit").
const H200_SIDE_ALONE_TFLOPS: f64 = 650.0;
/// The busy experiment's side kernels (µs).
const BUSY_SIDE_US: u64 = 1_700;

fn latency_rows() -> Vec<LatencyRow> {
    let ts = |us| Setting {
        mode: "timeslice",
        side: Some((100, us)),
    };
    let mps = |share, us| Setting {
        mode: "mps",
        side: Some((share, us)),
    };
    vec![
        LatencyRow {
            key: "alone",
            label: "alone",
            setting: ALONE,
            h200: (0.30, 0.37),
        },
        LatencyRow {
            key: "timeslice_13ms",
            label: "default time-slicing, side kernels of ~13 ms",
            setting: ts(13_000),
            h200: (0.30, 0.37),
        },
        LatencyRow {
            key: "timeslice_1_7ms",
            label: "default time-slicing, side kernels of ~1.7 ms",
            setting: ts(1_700),
            h200: (0.33, 2.46),
        },
        LatencyRow {
            key: "mps_unlimited_13ms",
            label: "MPS, side task unlimited, ~13 ms kernels",
            setting: mps(100, 13_000),
            h200: (0.30, 9.3),
        },
        LatencyRow {
            key: "mps_unlimited_1_7ms",
            label: "MPS, side task unlimited, ~1.7 ms kernels",
            setting: mps(100, 1_700),
            h200: (0.32, 1.17),
        },
        LatencyRow {
            key: "mps50",
            label: "MPS, side task at 50% of threads (~13 ms kernels)",
            setting: mps(50, 13_000),
            h200: (0.31, 0.51),
        },
    ]
}

fn busy_rows() -> Vec<BusyRow> {
    let side = |mode, share| Setting {
        mode,
        side: Some((share, BUSY_SIDE_US)),
    };
    vec![
        BusyRow {
            key: "alone",
            label: "alone",
            setting: ALONE,
            h200_ms: Some(H200_BUSY_ALONE_MS),
            p90: false,
            h200_side_tflops: None,
        },
        BusyRow {
            key: "timeslice",
            label: "default time-slicing",
            setting: side("timeslice", 100),
            h200_ms: Some(41.7),
            p90: false,
            h200_side_tflops: Some(430.0),
        },
        BusyRow {
            key: "mps_unlimited",
            label: "MPS, side task unlimited (p90)",
            setting: side("mps", 100),
            h200_ms: Some(182.0),
            p90: true,
            h200_side_tflops: Some(588.0),
        },
        BusyRow {
            key: "mps50",
            label: "MPS, side task at 50% of threads",
            setting: side("mps", 50),
            h200_ms: None,
            p90: false,
            h200_side_tflops: None,
        },
        BusyRow {
            key: "mps30",
            label: "MPS, side task at 30% of threads",
            setting: side("mps", 30),
            h200_ms: Some(31.6),
            p90: false,
            h200_side_tflops: Some(242.0),
        },
    ]
}

/// A fresh simulated GPU: its folder and truth file, removed on drop with the side task.
struct Bed {
    dir: PathBuf,
    side: Option<Child>,
}

impl Bed {
    fn new(n: usize) -> Result<Bed, String> {
        let dir = PathBuf::from(format!(
            "/dev/shm/freeride-bench-contention-{}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Bed { dir, side: None })
    }

    fn cmd(&self, role: &str, mode: &str, libs: &Path) -> Result<Command, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut ld = libs.as_os_str().to_owned();
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
            ld.push(":");
            ld.push(old);
        }
        let mut c = Command::new(exe);
        c.arg(role)
            .env("FREERIDE_SIM_DIR", self.dir.join("sim"))
            .env("FREERIDE_SIM_TRACE", self.dir.join("truth.jsonl"))
            .env("FREERIDE_SIM_MODE", mode)
            .env("LD_LIBRARY_PATH", ld)
            .env_remove("LD_PRELOAD")
            .env_remove("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
            .stdin(Stdio::null())
            .stderr(Stdio::inherit());
        Ok(c)
    }

    /// Runs `role` beside the setting's side task; returns what the role printed (JSON).
    fn run(
        &mut self,
        s: &Setting,
        role: &str,
        args: &[String],
        libs: &Path,
    ) -> Result<Value, String> {
        if let Some((share, us)) = s.side {
            let mut c = self.cmd("side", s.mode, libs)?;
            c.args(["--kernel-us", &us.to_string()])
                .env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", share.to_string())
                .stdout(Stdio::piped());
            let mut child = c.spawn().map_err(|e| format!("side task: {e}"))?;
            let mut line = String::new();
            let out = child.stdout.take().ok_or("side task: no stdout")?;
            BufReader::new(out)
                .read_line(&mut line)
                .map_err(|e| e.to_string())?;
            self.side = Some(child);
            if line.trim() != "ready" {
                return Err("the side task did not start".into());
            }
        }
        let out = self
            .cmd(role, s.mode, libs)?
            .args(args)
            .stdout(Stdio::piped())
            .output()
            .map_err(|e| format!("{role}: {e}"))?;
        if !out.status.success() {
            return Err(format!("{role} failed: {}", out.status));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(text.trim()).map_err(|e| format!("{role} output: {e}: {text}"))
    }

    /// The trainer's kernels from its launch to its end on the GPU's timeline (ms).
    fn launch_to_end_ms(&self) -> Vec<f64> {
        let text = std::fs::read_to_string(self.dir.join("truth.jsonl")).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["kernel"] == "trainer_gemm")
            .filter_map(|l| Some((l["end_ns"].as_u64()? - l["queued_ns"].as_u64()?) as f64 / 1e6))
            .collect()
    }

    /// The side task's share of the device over the last `window_ms` of the run: its kernels
    /// that ended then, at their full-speed length, over the window.
    fn side_share(&self, side_us: u64, window_ms: f64) -> Option<f64> {
        let text = std::fs::read_to_string(self.dir.join("truth.jsonl")).ok()?;
        let lines: Vec<Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let last = lines.iter().filter_map(|l| l["end_ns"].as_u64()).max()?;
        let from = last.saturating_sub((window_ms * 1e6) as u64);
        let n = lines
            .iter()
            .filter(|l| l["kernel"] == "side_gemm")
            .filter(|l| l["end_ns"].as_u64().is_some_and(|e| e >= from))
            .count();
        Some(n as f64 * side_us as f64 / 1e3 / window_ms)
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        if let Some(mut c) = self.side.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The `q`-quantile (nearest rank) of `v`.
fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let i = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
    s[i]
}

fn r2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn sim_h200(sim: f64, h200: Option<f64>) -> Value {
    json!({"sim": r2(sim), "h200": h200.map(r2)})
}

pub fn run(probes: usize, iterations: usize) -> Result<(), String> {
    let libs = pipesim::standins::ensure_dir().map_err(|e| format!("stand-in folder: {e}"))?;
    let knobs = simgpu::config::knobs();
    let mut n = 0;
    let mut bed = || {
        n += 1;
        Bed::new(n)
    };
    let mut latency = serde_json::Map::new();
    println!(
        "Trainer kernel latency, 0.3 ms kernels, from the launch to the kernel's end on the GPU \
         ({probes} probes each; ms):\n"
    );
    println!("| setting | p50 sim / H200 | p90 sim | p99 sim / H200 |\n|---|---|---|---|");
    for row in latency_rows() {
        let args = vec!["--count".into(), probes.to_string()];
        let mut b = bed()?;
        b.run(&row.setting, "probe", &args, &libs)?;
        let v = b.launch_to_end_ms();
        if v.len() != probes {
            return Err(format!(
                "{} trainer kernels in the truth, {probes} launched",
                v.len()
            ));
        }
        let (p50, p90, p99) = (quantile(&v, 0.5), quantile(&v, 0.9), quantile(&v, 0.99));
        println!(
            "| {} | {:.2} / {:.2} | {:.2} | {:.2} / {:.2} |",
            row.label, p50, row.h200.0, p90, p99, row.h200.1
        );
        latency.insert(
            row.key.into(),
            json!({"p50": sim_h200(p50, Some(row.h200.0)), "p90_sim": r2(p90),
                   "p99": sim_h200(p99, Some(row.h200.1))}),
        );
    }
    println!(
        "\nTrainer busy phase, 100 kernels of 0.176 ms + a 15 ms gap, beside a side task of \
         {} ms kernels ({iterations} iterations each):\n",
        BUSY_SIDE_US as f64 / 1e3
    );
    println!("| setting | busy phase ms sim / H200 | slowdown sim / H200 | side task's share of the device sim / H200 |\n|---|---|---|---|");
    let mut busy = serde_json::Map::new();
    let mut alone_ms = H200_BUSY_ALONE_MS;
    for row in busy_rows() {
        let args = vec!["--iterations".into(), iterations.to_string()];
        let mut b = bed()?;
        let v: Vec<f64> = serde_json::from_value(b.run(&row.setting, "busy", &args, &libs)?)
            .map_err(|e| format!("busy output: {e}"))?;
        let ms = quantile(&v, if row.p90 { 0.9 } else { 0.5 });
        if row.setting.side.is_none() {
            alone_ms = quantile(&v, 0.5);
        }
        let x = ms / alone_ms;
        let hx = row.h200_ms.map(|h| h / H200_BUSY_ALONE_MS);
        let share = row
            .setting
            .side
            .and_then(|_| b.side_share(BUSY_SIDE_US, (ms + 15.0) * 10.0));
        let hshare = row.h200_side_tflops.map(|t| t / H200_SIDE_ALONE_TFLOPS);
        let opt = |x: Option<f64>| x.map_or("—".to_string(), |x| format!("{x:.2}"));
        println!(
            "| {} | {:.1} / {} | {:.2}x / {} | {} / {} |",
            row.label,
            ms,
            opt(row.h200_ms),
            x,
            hx.map_or("—".into(), |h| format!("{h:.2}x")),
            opt(share),
            opt(hshare)
        );
        busy.insert(
            row.key.into(),
            json!({"busy_ms": sim_h200(ms, row.h200_ms), "x": sim_h200(x, hx),
                   "side_share": share.map(r2), "side_share_h200": hshare.map(r2)}),
        );
    }
    let x = |k: &str| busy[k]["x"].clone();
    let within = |v: &Value, tol: f64| {
        let (s, h) = (
            v["sim"].as_f64().unwrap_or(0.0),
            v["h200"].as_f64().unwrap_or(1.0),
        );
        (s - h).abs() <= tol * h
    };
    let p99_within_2x = latency.values().all(|l| {
        let (s, h) = (
            l["p99"]["sim"].as_f64().unwrap_or(0.0),
            l["p99"]["h200"].as_f64().unwrap_or(1.0),
        );
        s <= 2.0 * h && s >= h / 2.0
    });
    let summary = json!({
        "timeslice_busy_x": x("timeslice"),
        "mps30_busy_x": x("mps30"),
        "mps_unlimited_busy_x_p90": x("mps_unlimited"),
        "mps50_busy_x": x("mps50"),
        "latency": latency,
        "busy": busy,
        "knobs": {"slice_us": knobs.slice_ns / 1000, "switch_us": knobs.switch_ns / 1000,
                  "mps_interference": knobs.interference, "comm_spin": knobs.comm_spin != 0},
        "checks": {
            "timeslice_busy_within_25pct": within(&x("timeslice"), 0.25),
            "mps30_busy_within_25pct": within(&x("mps30"), 0.25),
            "mps_unlimited_p90_at_least_5x": x("mps_unlimited")["sim"].as_f64().unwrap_or(0.0) >= 5.0,
            "latency_p99_within_2x": p99_within_2x,
        },
    });
    println!("\n{summary}");
    Ok(())
}
