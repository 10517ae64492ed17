//! The ground truth of a pipesim run, from the simulated GPU's trace (`$FREERIDE_SIM_TRACE`, one JSON
//! line per kernel execution).
//!
//! Conventions (pipesim's, usable by any tool that scores against a run):
//! * rank r runs on device r; its process ("trainer pid") is the pid that ran the most
//!   [`ITERATION_MARKER`] kernels on that device (side tasks on the same GPU are other pids);
//! * every iteration ends with an all-reduce on all ranks: the k-th [`ITERATION_MARKER`] kernel of
//!   each rank. Iteration k's window is [max over ranks of the (k-1)-th marker's end, max over ranks
//!   of the k-th marker's end]; iteration 0 starts at the first kernel of any trainer;
//! * a rank is busy while a compute kernel (`kind == "compute"`) of its trainer pid runs on its
//!   device; the rest of the window is idle.
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// Kernel that marks the end of an iteration.
pub const ITERATION_MARKER: &str = "ncclDevKernel_AllReduce";

/// One line of the trace (fields the analysis needs; others are ignored).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelRecord {
    pub device: u32,
    pub pid: u32,
    #[serde(default)]
    pub stream: u64,
    pub kernel: String,
    pub kind: String,
    #[serde(default)]
    pub api: String,
    #[serde(default)]
    pub graph: bool,
    #[serde(default)]
    pub queued_ns: u64,
    pub start_ns: u64,
    pub end_ns: u64,
}

impl KernelRecord {
    /// A compute (not communication) kernel.
    pub fn is_compute(&self) -> bool {
        self.kind == "compute"
    }
}

/// Reads a trace; lines that do not parse are counted, not fatal.
pub fn read_trace(path: &Path) -> std::io::Result<(Vec<KernelRecord>, usize)> {
    let text = std::fs::read_to_string(path)?;
    Ok(parse_trace(&text))
}

/// Parses trace text: (records, lines that did not parse).
pub fn parse_trace(text: &str) -> (Vec<KernelRecord>, usize) {
    let mut bad = 0;
    let recs = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| match serde_json::from_str::<KernelRecord>(l) {
            Ok(r) => Some(r),
            Err(_) => {
                bad += 1;
                None
            }
        })
        .collect();
    (recs, bad)
}

/// One rank in one iteration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankWindow {
    pub rank: u32,
    pub pid: u32,
    pub busy_ns: u64,
    pub idle_ns: u64,
    /// Maximal idle intervals [start, end) inside the window, in order.
    pub idle_intervals: Vec<(u64, u64)>,
}

/// One iteration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Iteration {
    pub index: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub ranks: Vec<RankWindow>,
}

/// The whole run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Truth {
    /// Trainer pid of each rank.
    pub pids: Vec<u32>,
    pub iterations: Vec<Iteration>,
}

/// Averages over steady-state iterations (what `pipesim --json` prints).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub iteration_ms: f64,
    pub idle_ms_per_rank: Vec<f64>,
    pub idle_fraction: f64,
    /// Iterations averaged.
    pub measured_iterations: u32,
}

/// Finds each rank's trainer pid (see the module docs).
pub fn trainer_pids(records: &[KernelRecord], ranks: u32) -> Result<Vec<u32>, String> {
    (0..ranks)
        .map(|r| {
            let mut count: HashMap<u32, usize> = HashMap::new();
            for k in records
                .iter()
                .filter(|k| k.device == r && k.kernel == ITERATION_MARKER)
            {
                *count.entry(k.pid).or_default() += 1;
            }
            count
                .into_iter()
                .max_by_key(|&(pid, n)| (n, std::cmp::Reverse(pid)))
                .map(|(pid, _)| pid)
                .ok_or_else(|| format!("no {ITERATION_MARKER} kernel on device {r} in the trace"))
        })
        .collect()
}

/// Splits the run into iterations and measures every rank's idle time and intervals.
/// `pids`: the trainer pid per rank, or None to find them from the trace.
pub fn analyze(
    records: &[KernelRecord],
    ranks: u32,
    pids: Option<Vec<u32>>,
) -> Result<Truth, String> {
    let pids = match pids {
        Some(p) if p.len() == ranks as usize => p,
        Some(p) => return Err(format!("{} pids given for {ranks} ranks", p.len())),
        None => trainer_pids(records, ranks)?,
    };
    let mine = |r: usize, k: &KernelRecord| k.device == r as u32 && k.pid == pids[r];
    let mut markers: Vec<Vec<u64>> = Vec::new();
    let mut busy: Vec<Vec<(u64, u64)>> = Vec::new();
    for r in 0..ranks as usize {
        let mut m: Vec<u64> = records
            .iter()
            .filter(|k| mine(r, k) && k.kernel == ITERATION_MARKER)
            .map(|k| k.end_ns)
            .collect();
        m.sort_unstable();
        markers.push(m);
        busy.push(merge(
            records
                .iter()
                .filter(|k| mine(r, k) && k.is_compute())
                .map(|k| (k.start_ns, k.end_ns))
                .collect(),
        ));
    }
    let n_iter = markers.iter().map(Vec::len).min().unwrap_or(0);
    if markers.iter().any(|m| m.len() != n_iter) {
        let counts: Vec<usize> = markers.iter().map(Vec::len).collect();
        return Err(format!(
            "ranks ended different numbers of iterations: {counts:?}"
        ));
    }
    let first = records
        .iter()
        .filter(|k| (0..ranks as usize).any(|r| mine(r, k)))
        .map(|k| k.start_ns)
        .min()
        .unwrap_or(0);
    let mut iterations = Vec::new();
    let mut start = first;
    for k in 0..n_iter {
        let end = markers
            .iter()
            .map(|m| m[k])
            .max()
            .unwrap_or(start)
            .max(start);
        let ranks_w = (0..ranks as usize)
            .map(|r| {
                let idle = gaps(&busy[r], start, end);
                let idle_ns: u64 = idle.iter().map(|(a, b)| b - a).sum();
                RankWindow {
                    rank: r as u32,
                    pid: pids[r],
                    busy_ns: (end - start) - idle_ns,
                    idle_ns,
                    idle_intervals: idle,
                }
            })
            .collect();
        iterations.push(Iteration {
            index: k as u32,
            start_ns: start,
            end_ns: end,
            ranks: ranks_w,
        });
        start = end;
    }
    Ok(Truth { pids, iterations })
}

impl Truth {
    /// Averages over iterations `skip..` (pipesim skips the first: warm-up); when there are no more
    /// than `skip` iterations, over all of them.
    pub fn summary(&self, skip: usize) -> Summary {
        let its: &[Iteration] = if self.iterations.len() > skip {
            &self.iterations[skip..]
        } else {
            &self.iterations
        };
        let n = its.len().max(1) as f64;
        let ranks = self.pids.len();
        let iteration_ns: f64 = its
            .iter()
            .map(|i| (i.end_ns - i.start_ns) as f64)
            .sum::<f64>()
            / n;
        let idle: Vec<f64> = (0..ranks)
            .map(|r| its.iter().map(|i| i.ranks[r].idle_ns as f64).sum::<f64>() / n)
            .collect();
        let idle_fraction = if iteration_ns > 0.0 && ranks > 0 {
            idle.iter().sum::<f64>() / ranks as f64 / iteration_ns
        } else {
            0.0
        };
        Summary {
            iteration_ms: iteration_ns / 1e6,
            idle_ms_per_rank: idle.iter().map(|v| v / 1e6).collect(),
            idle_fraction,
            measured_iterations: its.len() as u32,
        }
    }
}

/// Sorts and merges overlapping intervals.
fn merge(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// The parts of [start, end) not covered by the sorted, merged `busy` intervals.
fn gaps(busy: &[(u64, u64)], start: u64, end: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut t = start;
    for &(a, b) in busy {
        if b <= t {
            continue;
        }
        if a >= end {
            break;
        }
        if a > t {
            out.push((t, a));
        }
        t = t.max(b);
    }
    if t < end {
        out.push((t, end));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(device: u32, pid: u32, kernel: &str, kind: &str, s: u64, e: u64) -> KernelRecord {
        KernelRecord {
            device,
            pid,
            stream: 0,
            kernel: kernel.into(),
            kind: kind.into(),
            api: "cuLaunchKernel".into(),
            graph: false,
            queued_ns: s,
            start_ns: s,
            end_ns: e,
        }
    }

    #[test]
    fn windows_idle_and_intervals() {
        let recs = vec![
            k(0, 10, "f", "compute", 0, 10),
            k(0, 10, "f", "compute", 20, 30),
            k(0, 99, "side", "compute", 10, 20), // another pid: not the trainer
            k(0, 10, ITERATION_MARKER, "comm", 30, 40),
            k(1, 11, "f", "compute", 10, 40),
            k(1, 11, ITERATION_MARKER, "comm", 40, 40),
            k(0, 10, "f", "compute", 40, 50),
            k(0, 10, ITERATION_MARKER, "comm", 50, 100),
            k(1, 11, "f", "compute", 60, 100),
            k(1, 11, ITERATION_MARKER, "comm", 100, 100),
        ];
        let t = analyze(&recs, 2, None).unwrap();
        assert_eq!(t.pids, vec![10, 11]);
        assert_eq!(t.iterations.len(), 2);
        let i0 = &t.iterations[0];
        assert_eq!((i0.start_ns, i0.end_ns), (0, 40));
        assert_eq!(i0.ranks[0].idle_intervals, vec![(10, 20), (30, 40)]);
        assert_eq!(i0.ranks[1].idle_intervals, vec![(0, 10)]);
        let i1 = &t.iterations[1];
        assert_eq!((i1.start_ns, i1.end_ns), (40, 100));
        assert_eq!(i1.ranks[0].idle_ns, 50);
        assert_eq!(i1.ranks[1].idle_intervals, vec![(40, 60)]);
        let s = t.summary(1);
        assert_eq!(s.measured_iterations, 1);
        assert!((s.iteration_ms - 60e-6).abs() < 1e-12);
        assert!((s.idle_fraction - (70.0 / 2.0 / 60.0)).abs() < 1e-12);
    }

    #[test]
    fn bad_lines_are_counted() {
        let (r, bad) = parse_trace("{\"device\":0}\nnot json\n\n{\"device\":0,\"pid\":1,\"kernel\":\"a\",\"kind\":\"comm\",\"start_ns\":1,\"end_ns\":2,\"extra\":1}\n");
        assert_eq!((r.len(), bad), (1, 2));
    }

    #[test]
    fn missing_marker_is_an_error() {
        assert!(analyze(&[k(0, 1, "f", "compute", 0, 1)], 1, None).is_err());
    }
}
