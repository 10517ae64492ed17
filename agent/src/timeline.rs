//! Pictures of a run: a Chrome/Perfetto trace and an SVG timeline, with the stages as rows, the
//! trainers' kernels (from the simulated GPU's ground truth, [`crate::truth_kernels`]), the
//! agent's bubbles and side-task kernels.
use crate::node::BubbleRecord;
use crate::truth_kernels::Kernel;
use serde_json::json;
use std::fmt::Write as _;

/// What to draw: kernels of the ground truth and bubbles, for the trainers `pids` (row = index).
pub struct Timeline<'a> {
    pub pids: &'a [u32],
    pub kernels: &'a [Kernel],
    pub bubbles: &'a [BubbleRecord],
}

fn row_of(pids: &[u32], pid: u32) -> Option<usize> {
    pids.iter().position(|&p| p == pid)
}

impl Timeline<'_> {
    fn origin(&self) -> u64 {
        self.kernels.iter().map(|k| k.start_ns).min().unwrap_or(0)
    }

    /// Chrome trace-event JSON (opens in Perfetto and chrome://tracing): one process per GPU,
    /// threads "trainer compute", "trainer comm", "bubbles (agent)", "side tasks".
    pub fn perfetto(&self) -> String {
        let t0 = self.origin();
        let us = |ns: u64| (ns.saturating_sub(t0)) as f64 / 1e3;
        let mut ev = vec![];
        for (row, _) in self.pids.iter().enumerate() {
            ev.push(json!({"ph": "M", "name": "process_name", "pid": row, "args": {"name": format!("GPU {row} (stage {row})")}}));
            for (tid, name) in [
                (1, "trainer compute"),
                (2, "trainer comm"),
                (3, "bubbles (agent)"),
                (4, "side tasks"),
            ] {
                ev.push(json!({"ph": "M", "name": "thread_name", "pid": row, "tid": tid, "args": {"name": name}}));
            }
        }
        for k in self.kernels {
            let row = k.device as usize;
            let tid = match row_of(self.pids, k.pid) {
                Some(_) if k.is_compute() => 1,
                Some(_) => 2,
                None => 4,
            };
            ev.push(json!({"ph": "X", "name": k.kernel, "pid": row, "tid": tid, "ts": us(k.start_ns),
                "dur": (k.end_ns - k.start_ns) as f64 / 1e3, "args": {"api": k.api, "os_pid": k.pid}}));
        }
        for b in self.bubbles {
            let Some(row) = row_of(self.pids, b.pid) else {
                continue;
            };
            let bb = &b.bubble;
            ev.push(json!({"ph": "X", "name": "bubble", "pid": row, "tid": 3, "ts": us(bb.start),
                "dur": (bb.end - bb.start) as f64 / 1e3,
                "args": {"seen_open_us": us(bb.opened_seen), "seen_close_us": us(bb.closed_seen),
                         "predicted_end_us": bb.predicted_end.map(us), "confidence": bb.confidence}}));
        }
        json!({"traceEvents": ev, "displayTimeUnit": "ms"}).to_string()
    }

    /// An SVG picture of `[from_ns, to_ns)`: a row per stage, compute kernels in blue, comm kernels
    /// in grey, the agent's bubbles in orange under them, side-task kernels in green.
    pub fn svg(&self, from_ns: u64, to_ns: u64) -> String {
        let (w, left, row_h) = (1200.0, 90.0, 44.0);
        let span = (to_ns.saturating_sub(from_ns)).max(1) as f64;
        let x =
            |ns: u64| left + (ns.clamp(from_ns, to_ns) - from_ns) as f64 / span * (w - left - 10.0);
        let h = 40.0 + row_h * self.pids.len() as f64 + 30.0;
        let mut s = String::new();
        let _ = write!(
            s,
            r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="#fff"/>"##
        );
        let _ = write!(
            s,
            r##"<text x="{left}" y="18">{:.1} ms shown; blue: trainer compute, grey: trainer communication, orange: bubbles found by the agent, green: side tasks</text>"##,
            span / 1e6
        );
        for (row, _) in self.pids.iter().enumerate() {
            let y = 30.0 + row_h * row as f64;
            let _ = write!(s, r##"<text x="4" y="{}">stage {row}</text>"##, y + 22.0);
            let _ = write!(
                s,
                r##"<rect x="{left}" y="{y}" width="{}" height="{}" fill="#f4f4f4"/>"##,
                w - left - 10.0,
                row_h - 6.0
            );
        }
        let rect = |s: &mut String, a: u64, b: u64, y: f64, hh: f64, color: &str| {
            if b <= from_ns || a >= to_ns {
                return;
            }
            let (xa, xb) = (x(a), x(b));
            let _ = write!(
                s,
                r##"<rect x="{xa:.2}" y="{y:.1}" width="{:.2}" height="{hh}" fill="{color}"/>"##,
                (xb - xa).max(0.5)
            );
        };
        for k in self.kernels {
            let y = 30.0 + row_h * k.device as f64;
            match row_of(self.pids, k.pid) {
                Some(_) if k.is_compute() => {
                    rect(&mut s, k.start_ns, k.end_ns, y + 2.0, 16.0, "#3b6fb6")
                }
                Some(_) => rect(&mut s, k.start_ns, k.end_ns, y + 2.0, 16.0, "#b8b8b8"),
                None => rect(&mut s, k.start_ns, k.end_ns, y + 20.0, 8.0, "#2e9e4f"),
            }
        }
        for b in self.bubbles {
            let Some(row) = row_of(self.pids, b.pid) else {
                continue;
            };
            let y = 30.0 + row_h * row as f64;
            rect(
                &mut s,
                b.bubble.start,
                b.bubble.end,
                y + 30.0,
                6.0,
                "#f08c00",
            );
        }
        let _ = write!(s, "</svg>");
        s
    }
}
