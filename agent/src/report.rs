//! The agent's bubble log (JSON lines, written by `freeride agent --bubble-log`) and its reading
//! back for `freeride report`.
use crate::inference::{Bubble, GpuId};
use crate::node::BubbleRecord;
use serde_json::{json, Value};

/// One bubble as a JSON line: `{"pid","device","start_ns","end_ns","opened_seen_ns",
/// "closed_seen_ns","predicted_end_ns","confidence","cut_by_exit"}`.
pub fn bubble_line(b: &BubbleRecord) -> String {
    let x = &b.bubble;
    json!({
        "pid": b.pid, "device": b.gpu.0, "start_ns": x.start, "end_ns": x.end,
        "opened_seen_ns": x.opened_seen, "closed_seen_ns": x.closed_seen,
        "predicted_end_ns": x.predicted_end, "confidence": x.confidence,
        "cut_by_exit": x.cut_by_exit,
    })
    .to_string()
}

/// Parses a bubble log; returns the bubbles and the number of lines that were not bubbles.
pub fn parse_bubble_log(text: &str) -> (Vec<BubbleRecord>, usize) {
    let (mut out, mut bad) = (vec![], 0);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(_) => {
                bad += 1;
                continue;
            }
        };
        let u = |k: &str| v[k].as_u64();
        match (u("pid"), u("device"), u("start_ns"), u("end_ns")) {
            (Some(pid), Some(device), Some(start), Some(end)) if end >= start => {
                out.push(BubbleRecord {
                    pid: pid as u32,
                    gpu: GpuId(device as u32),
                    bubble: Bubble {
                        start,
                        end,
                        opened_seen: u("opened_seen_ns").unwrap_or(start),
                        closed_seen: u("closed_seen_ns").unwrap_or(end),
                        predicted_end: u("predicted_end_ns"),
                        confidence: v["confidence"].as_f64().unwrap_or(0.0),
                        cut_by_exit: v["cut_by_exit"].as_bool().unwrap_or(false),
                    },
                })
            }
            _ => bad += 1,
        }
    }
    (out, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_round_trip_and_garbage_is_counted() {
        let b = BubbleRecord {
            pid: 7,
            gpu: GpuId(1),
            bubble: Bubble {
                start: 10,
                end: 30,
                opened_seen: 12,
                closed_seen: 31,
                predicted_end: Some(29),
                confidence: 0.5,
                cut_by_exit: true,
            },
        };
        let text = format!("{}\nnot json\n{{\"pid\":1}}\n", bubble_line(&b));
        let (v, bad) = parse_bubble_log(&text);
        assert_eq!(v, vec![b]);
        assert_eq!(bad, 2);
    }
}
