//! The kernels of a test bed's ground truth (`pipesim --truth PATH`, `$FREERIDE_SIM_TRACE`), for
//! `freeride report --truth`: read from the documented format (JSON lines, tests/TESTBED.md,
//! "Ground truth"), so that the product reads the file without linking the test bed. A kernel
//! line: `{"device","pid","kernel","kind","api","start_ns","end_ns",...}` (other fields ignored);
//! a stage's mark line (`{"mark":"iteration",...}`) is not a kernel.
use serde_json::Value;
use std::path::Path;

/// One kernel execution on a GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// The physical GPU.
    pub device: u32,
    pub pid: u32,
    /// Its name.
    pub kernel: String,
    /// `compute` or `comm`.
    pub kind: String,
    /// The driver entry point that queued it (empty when the line has none).
    pub api: String,
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Kernel {
    /// A compute (not communication) kernel.
    pub fn is_compute(&self) -> bool {
        self.kind == "compute"
    }
}

/// The kernel of one line, if it is one.
fn kernel_of(v: &Value) -> Option<Kernel> {
    let u = |k: &str| v[k].as_u64();
    let s = |k: &str| v[k].as_str().map(str::to_string);
    Some(Kernel {
        device: u32::try_from(u("device")?).ok()?,
        pid: u32::try_from(u("pid")?).ok()?,
        kernel: s("kernel")?,
        kind: s("kind")?,
        api: s("api").unwrap_or_default(),
        start_ns: u("start_ns")?,
        end_ns: u("end_ns")?,
    })
}

/// The kernels of a ground truth's text, and the number of lines that are neither kernels nor
/// marks.
pub fn parse(text: &str) -> (Vec<Kernel>, usize) {
    let (mut kernels, mut bad) = (vec![], 0);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Value>(line) {
            Ok(v) => match kernel_of(&v) {
                Some(k) => kernels.push(k),
                None if v["mark"].is_string() => {}
                None => bad += 1,
            },
            Err(_) => bad += 1,
        }
    }
    (kernels, bad)
}

/// [`parse`] of the file at `path`.
pub fn read(path: &Path) -> std::io::Result<(Vec<Kernel>, usize)> {
    Ok(parse(&std::fs::read_to_string(path)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_lines_are_read_and_marks_skipped() {
        let text = concat!(
            r#"{"device":1,"bus_id":"0000:11:00.0","pid":42,"stream":0,"kernel":"fwd","kind":"compute","api":"cuLaunchKernel","graph":false,"queued_ns":5,"start_ns":10,"end_ns":20}"#,
            "\n",
            r#"{"mark":"iteration","pid":42,"rank":0,"bus_id":"0000:11:00.0","iteration":0,"t_ns":25}"#,
            "\n\n",
            r#"{"device":1,"pid":42,"kernel":"ncclDevKernel_SendRecv","kind":"comm","start_ns":20,"end_ns":30,"transfer_start_ns":22}"#,
            "\nnot json\n",
            r#"{"device":-1,"pid":42,"kernel":"x","kind":"compute","start_ns":1,"end_ns":2}"#,
            "\n"
        );
        let (k, bad) = parse(text);
        assert_eq!(bad, 2);
        assert_eq!(
            k,
            [
                Kernel {
                    device: 1,
                    pid: 42,
                    kernel: "fwd".into(),
                    kind: "compute".into(),
                    api: "cuLaunchKernel".into(),
                    start_ns: 10,
                    end_ns: 20,
                },
                Kernel {
                    device: 1,
                    pid: 42,
                    kernel: "ncclDevKernel_SendRecv".into(),
                    kind: "comm".into(),
                    api: String::new(),
                    start_ns: 20,
                    end_ns: 30,
                },
            ]
        );
        assert!(k[0].is_compute() && !k[1].is_compute());
    }
}
