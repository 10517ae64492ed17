//! The ground truth of a pipesim run, from the simulated GPU's trace (`$FREERIDE_SIM_TRACE`, one JSON
//! line per kernel execution).
//!
//! Conventions (pipesim's, usable by any tool that scores against a run):
//! * each rank is one process ("trainer pid") on one physical GPU (the `device` of its kernel
//!   lines, named by `bus_id`); the pid of a rank comes from the stage's mark lines (or is
//!   given); its GPU is the device its kernels ran on; side tasks on the same GPU are other pids;
//! * iterations: every stage appends a mark line at the end of each iteration
//!   (`{"mark":"iteration","pid","rank","bus_id","iteration","t_ns"}`, written after the host
//!   returned from the iteration's synchronize): rank r's iteration k ends at the latest end of
//!   its kernels queued (`queued_ns`) before its k-th mark. Iteration k's window is [the latest
//!   rank's end of iteration k-1, the latest rank's end of iteration k]; iteration 0 starts at
//!   the first kernel of any trainer. A trace without marks (an older one) uses the old rule:
//!   the k-th [`ITERATION_MARKER`] kernel of each rank ends iteration k;
//! * a rank is busy while a compute kernel of its pid runs on its GPU or one of its
//!   communication kernels transfers (from `transfer_start_ns` to `end_ns`, and from `start_ns`
//!   to `eager_end_ns` where a send filled its buffer before it waited for its receiver, and from
//!   `mid_start_ns` to `mid_end_ns` where a group's send moved its rest before its receives; a line
//!   without `transfer_start_ns` transfers for 0 ns); the rest of the window is idle (no kernel running,
//!   or only communication kernels waiting for their peers).
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// Kernel that marks the end of an iteration.
pub const ITERATION_MARKER: &str = "ncclDevKernel_AllReduce";

/// One line of the trace (fields the analysis needs; others are ignored).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelRecord {
    /// The physical GPU.
    pub device: u32,
    /// Its PCI bus id (absent in older traces).
    #[serde(default)]
    pub bus_id: String,
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
    /// A communication kernel: when its transfer began (it waited for its peer before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_start_ns: Option<u64>,
    /// A communication kernel that transferred from its start before it waited (a send that
    /// filled its buffer, then waited for its receiver): when that part ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eager_end_ns: Option<u64>,
    /// A communication kernel busy again before its transfer (a group's large send moving its
    /// rest before the group's receives' data came): that span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mid_start_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mid_end_ns: Option<u64>,
}

impl KernelRecord {
    /// A compute (not communication) kernel.
    pub fn is_compute(&self) -> bool {
        self.kind == "compute"
    }

    /// When the kernel keeps its GPU busy: a compute kernel throughout, a communication kernel
    /// while it transfers (from its start for what it moved before it waited, if anything, its
    /// mid span, and from its transfer's start to its end).
    pub fn busy_spans(&self) -> impl Iterator<Item = (u64, u64)> {
        let (eager, mid, transfer) = if self.is_compute() {
            (None, None, Some((self.start_ns, self.end_ns)))
        } else {
            (
                self.eager_end_ns
                    .map(|e| (self.start_ns, e.min(self.end_ns))),
                self.mid_start_ns
                    .zip(self.mid_end_ns)
                    .map(|(a, b)| (a.max(self.start_ns), b.min(self.end_ns))),
                self.transfer_start_ns
                    .map(|t| (t.max(self.start_ns), self.end_ns)),
            )
        };
        eager
            .into_iter()
            .chain(mid)
            .chain(transfer)
            .filter(|(a, b)| a < b)
    }
}

/// A stage's mark at the end of an iteration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkRecord {
    pub mark: String,
    pub pid: u32,
    pub rank: u32,
    #[serde(default)]
    pub bus_id: String,
    pub iteration: u32,
    pub t_ns: u64,
}

/// Everything in a trace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    pub kernels: Vec<KernelRecord>,
    pub marks: Vec<MarkRecord>,
    /// Lines that are neither.
    pub bad: usize,
}

impl Trace {
    pub fn read(path: &Path) -> std::io::Result<Trace> {
        Ok(Trace::parse(&std::fs::read_to_string(path)?))
    }

    pub fn parse(text: &str) -> Trace {
        let mut t = Trace::default();
        for l in text.lines().filter(|l| !l.trim().is_empty()) {
            if let Ok(k) = serde_json::from_str::<KernelRecord>(l) {
                t.kernels.push(k);
            } else if let Ok(m) = serde_json::from_str::<MarkRecord>(l) {
                t.marks.push(m);
            } else {
                t.bad += 1;
            }
        }
        t
    }
}

/// Reads a trace's kernels; lines that are neither kernels nor marks are counted, not fatal.
pub fn read_trace(path: &Path) -> std::io::Result<(Vec<KernelRecord>, usize)> {
    let t = Trace::read(path)?;
    Ok((t.kernels, t.bad))
}

/// Parses trace text: (kernels, lines that are neither kernels nor marks).
pub fn parse_trace(text: &str) -> (Vec<KernelRecord>, usize) {
    let t = Trace::parse(text);
    (t.kernels, t.bad)
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
    /// Physical GPU of each rank.
    #[serde(default)]
    pub devices: Vec<u32>,
    /// PCI bus id of each rank's GPU.
    #[serde(default)]
    pub bus_ids: Vec<String>,
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

/// Splits the run into iterations with the legacy rule (the k-th [`ITERATION_MARKER`] of each
/// rank; rank r on device r) and measures every rank's idle time and intervals.
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
    let devices: Vec<u32> = (0..ranks).collect();
    let ends: Vec<Vec<u64>> = (0..ranks as usize)
        .map(|r| {
            let mut m: Vec<u64> = records
                .iter()
                .filter(|k| {
                    k.device == devices[r] && k.pid == pids[r] && k.kernel == ITERATION_MARKER
                })
                .map(|k| k.end_ns)
                .collect();
            m.sort_unstable();
            m
        })
        .collect();
    windows(records, pids, devices, ends)
}

/// The truth of a run (see the module docs): marks when the trace has them, the legacy rule
/// otherwise. `pids`: the trainer pid per rank, or None to take them from the marks.
pub fn analyze_trace(trace: &Trace, ranks: u32, pids: Option<Vec<u32>>) -> Result<Truth, String> {
    if trace.marks.is_empty() {
        return analyze(&trace.kernels, ranks, pids);
    }
    let pids = match pids {
        Some(p) if p.len() == ranks as usize => p,
        Some(p) => return Err(format!("{} pids given for {ranks} ranks", p.len())),
        None => (0..ranks)
            .map(|r| {
                trace
                    .marks
                    .iter()
                    .find(|m| m.rank == r)
                    .map(|m| m.pid)
                    .ok_or_else(|| format!("no mark of rank {r} in the trace"))
            })
            .collect::<Result<_, _>>()?,
    };
    let devices: Vec<u32> = pids
        .iter()
        .enumerate()
        .map(|(r, &pid)| {
            let mut count: HashMap<u32, usize> = HashMap::new();
            for k in trace.kernels.iter().filter(|k| k.pid == pid) {
                *count.entry(k.device).or_default() += 1;
            }
            count
                .into_iter()
                .max_by_key(|&(d, n)| (n, std::cmp::Reverse(d)))
                .map(|(d, _)| d)
                .ok_or_else(|| format!("rank {r} (pid {pid}) ran no kernel"))
        })
        .collect::<Result<_, _>>()?;
    let ends: Vec<Vec<u64>> = (0..ranks as usize)
        .map(|r| {
            let mut marks: Vec<&MarkRecord> =
                trace.marks.iter().filter(|m| m.pid == pids[r]).collect();
            marks.sort_by_key(|m| m.iteration);
            let mine: Vec<&KernelRecord> = trace
                .kernels
                .iter()
                .filter(|k| k.pid == pids[r] && k.device == devices[r])
                .collect();
            marks
                .iter()
                .map(|m| {
                    mine.iter()
                        .filter(|k| k.queued_ns <= m.t_ns)
                        .map(|k| k.end_ns)
                        .max()
                        .unwrap_or(0)
                })
                .collect()
        })
        .collect();
    let mut t = windows(&trace.kernels, pids, devices, ends)?;
    t.bus_ids = t
        .pids
        .iter()
        .zip(&t.devices)
        .map(|(&pid, &d)| {
            trace
                .kernels
                .iter()
                .find(|k| k.pid == pid && k.device == d)
                .map(|k| k.bus_id.clone())
                .unwrap_or_default()
        })
        .collect();
    // The bus id a rank's runtime reported for the device it used is the one its kernels ran on.
    for (r, (&pid, bus)) in t.pids.iter().zip(&t.bus_ids).enumerate() {
        if let Some(m) = trace
            .marks
            .iter()
            .find(|m| m.pid == pid && !m.bus_id.is_empty() && !bus.is_empty() && &m.bus_id != bus)
        {
            return Err(format!(
                "rank {r} (pid {pid}) names its GPU {} but its kernels ran on {bus}",
                m.bus_id
            ));
        }
    }
    Ok(t)
}

/// Iteration windows from each rank's iteration ends, and every rank's busy and idle time in them.
fn windows(
    records: &[KernelRecord],
    pids: Vec<u32>,
    devices: Vec<u32>,
    ends: Vec<Vec<u64>>,
) -> Result<Truth, String> {
    let ranks = pids.len();
    let mine = |r: usize, k: &KernelRecord| k.device == devices[r] && k.pid == pids[r];
    let busy: Vec<Vec<(u64, u64)>> = (0..ranks)
        .map(|r| {
            merge(
                records
                    .iter()
                    .filter(|k| mine(r, k))
                    .flat_map(KernelRecord::busy_spans)
                    .collect(),
            )
        })
        .collect();
    let n_iter = ends.iter().map(Vec::len).min().unwrap_or(0);
    if ends.iter().any(|m| m.len() != n_iter) {
        let counts: Vec<usize> = ends.iter().map(Vec::len).collect();
        return Err(format!(
            "ranks ended different numbers of iterations: {counts:?}"
        ));
    }
    let first = records
        .iter()
        .filter(|k| (0..ranks).any(|r| mine(r, k)))
        .map(|k| k.start_ns)
        .min()
        .unwrap_or(0);
    let mut iterations = Vec::new();
    let mut start = first;
    for k in 0..n_iter {
        let end = ends.iter().map(|m| m[k]).max().unwrap_or(start).max(start);
        let ranks_w = (0..ranks)
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
    Ok(Truth {
        pids,
        devices,
        bus_ids: vec![],
        iterations,
    })
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
            bus_id: String::new(),
            pid,
            stream: 0,
            kernel: kernel.into(),
            kind: kind.into(),
            api: "cuLaunchKernel".into(),
            graph: false,
            queued_ns: s,
            start_ns: s,
            end_ns: e,
            transfer_start_ns: None,
            eager_end_ns: None,
            mid_start_ns: None,
            mid_end_ns: None,
        }
    }

    #[test]
    fn a_send_that_filled_its_buffer_is_busy_at_its_start_and_from_its_transfer() {
        let mut send = k(0, 1, "ncclDevKernel_SendRecv", "comm", 10, 40);
        send.transfer_start_ns = Some(30);
        send.eager_end_ns = Some(14);
        assert_eq!(
            send.busy_spans().collect::<Vec<_>>(),
            vec![(10, 14), (30, 40)]
        );
        send.mid_start_ns = Some(18);
        send.mid_end_ns = Some(22);
        assert_eq!(
            send.busy_spans().collect::<Vec<_>>(),
            vec![(10, 14), (18, 22), (30, 40)]
        );
        send.eager_end_ns = None;
        send.mid_start_ns = None;
        send.mid_end_ns = None;
        assert_eq!(send.busy_spans().collect::<Vec<_>>(), vec![(30, 40)]);
        let f = k(0, 1, "f", "compute", 10, 40);
        assert_eq!(f.busy_spans().collect::<Vec<_>>(), vec![(10, 40)]);
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

    fn mark(pid: u32, rank: u32, iteration: u32, t_ns: u64) -> MarkRecord {
        MarkRecord {
            mark: "iteration".into(),
            pid,
            rank,
            bus_id: String::new(),
            iteration,
            t_ns,
        }
    }

    /// Iterations cut by the marks (kernels queued before a rank's k-th mark end its iteration
    /// k), on each rank's own GPU whatever its number; transfers count as busy.
    #[test]
    fn marks_cut_iterations_and_transfers_are_busy() {
        let q = |mut k: KernelRecord, queued: u64| {
            k.queued_ns = queued;
            k
        };
        let mut comm = k(7, 11, "ncclDevKernel_SendRecv", "comm", 10, 40);
        comm.transfer_start_ns = Some(30);
        let kernels = vec![
            q(k(3, 10, "f", "compute", 0, 10), 0),
            q(k(3, 10, "f", "compute", 20, 50), 1),
            q(k(3, 99, "side", "compute", 10, 20), 1),
            q(comm, 2),
            q(k(7, 11, "f", "compute", 40, 45), 2),
            // Iteration 1: queued after the marks at 5 and 6.
            q(k(3, 10, "f", "compute", 50, 60), 8),
            q(k(7, 11, "f", "compute", 60, 90), 9),
        ];
        let trace = Trace {
            kernels,
            marks: vec![
                mark(10, 0, 0, 5),
                mark(11, 1, 0, 6),
                mark(10, 0, 1, 100),
                mark(11, 1, 1, 100),
            ],
            bad: 0,
        };
        let t = analyze_trace(&trace, 2, None).unwrap();
        assert_eq!(
            (t.pids.clone(), t.devices.clone()),
            (vec![10, 11], vec![3, 7])
        );
        let i0 = &t.iterations[0];
        assert_eq!((i0.start_ns, i0.end_ns), (0, 50));
        assert_eq!(i0.ranks[0].idle_intervals, vec![(10, 20)]);
        // Rank 1: idle until its transfer starts at 30 (waiting at 10..30), then busy to 45.
        assert_eq!(i0.ranks[1].idle_intervals, vec![(0, 30), (45, 50)]);
        let i1 = &t.iterations[1];
        assert_eq!((i1.start_ns, i1.end_ns), (50, 90));
        assert_eq!(i1.ranks[0].idle_ns, 30);
        assert_eq!(i1.ranks[1].idle_intervals, vec![(50, 60)]);
    }

    #[test]
    fn bad_lines_are_counted() {
        let (r, bad) = parse_trace("{\"device\":0}\nnot json\n\n{\"device\":0,\"pid\":1,\"kernel\":\"a\",\"kind\":\"comm\",\"start_ns\":1,\"end_ns\":2,\"extra\":1}\n{\"mark\":\"iteration\",\"pid\":1,\"rank\":0,\"iteration\":0,\"t_ns\":3}\n");
        assert_eq!((r.len(), bad), (1, 2));
    }

    #[test]
    fn missing_marker_is_an_error() {
        assert!(analyze(&[k(0, 1, "f", "compute", 0, 1)], 1, None).is_err());
    }
}
