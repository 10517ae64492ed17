//! The ground truth: one JSON line per executed kernel, appended to `$FREERIDE_SIM_TRACE` with one
//! `write()` per line (the file is opened `O_APPEND`, so lines of concurrent processes do not mix).
use std::os::unix::io::AsRawFd;
use std::sync::OnceLock;

/// One kernel execution.
pub struct TruthLine<'a> {
    /// The physical device (its bus id, [`crate::identity::pci_bus_id`], is written beside it).
    pub device: i32,
    pub pid: i32,
    /// The `CUstream` handle value the kernel was launched on (0: legacy default stream).
    pub stream: u64,
    pub kernel: &'a str,
    pub comm: bool,
    /// The driver entry point that queued the kernel.
    pub api: &'a str,
    pub graph: bool,
    pub queued_ns: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Communication kernels: when the transfer began (before it, the kernel waited for its
    /// peers; from it to `end_ns` it transferred).
    pub transfer_start_ns: Option<u64>,
    /// Communication kernels that transferred from their start before they waited (a send that
    /// filled its buffer, then waited for its receiver): when that part ended.
    pub eager_end_ns: Option<u64>,
    /// Communication kernels busy again before their transfer (a group's large send moving
    /// its rest before the group's receives' data came): that span.
    pub mid: Option<(u64, u64)>,
}

/// Escapes `s` for a JSON string body.
pub fn json_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o
}

impl TruthLine<'_> {
    /// The line, newline included, in the format of TESTBED.md.
    pub fn to_json(&self) -> String {
        format!(
            "{{\"device\":{},\"bus_id\":\"{}\",\"pid\":{},\"stream\":{},\"kernel\":\"{}\",\"kind\":\"{}\",\"api\":\"{}\",\"graph\":{},\"queued_ns\":{},\"start_ns\":{},\"end_ns\":{}{}{}{}}}\n",
            self.device,
            crate::identity::pci_bus_id(self.device),
            self.pid,
            self.stream,
            json_escape(self.kernel),
            if self.comm { "comm" } else { "compute" },
            json_escape(self.api),
            self.graph,
            self.queued_ns,
            self.start_ns,
            self.end_ns,
            match self.transfer_start_ns {
                Some(t) => format!(",\"transfer_start_ns\":{t}"),
                None => String::new(),
            },
            match self.eager_end_ns {
                Some(t) => format!(",\"eager_end_ns\":{t}"),
                None => String::new(),
            },
            match self.mid {
                Some((a, b)) => format!(",\"mid_start_ns\":{a},\"mid_end_ns\":{b}"),
                None => String::new(),
            }
        )
    }
}

static TRACE: OnceLock<Option<std::fs::File>> = OnceLock::new();

fn trace_file() -> Option<&'static std::fs::File> {
    TRACE
        .get_or_init(|| {
            let path = crate::config::trace_path()?;
            std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(path)
                .ok()
        })
        .as_ref()
}

/// Appends `line` to the trace if `$FREERIDE_SIM_TRACE` is set (errors are ignored).
pub fn write(line: &TruthLine<'_>) {
    let Some(f) = trace_file() else { return };
    let s = line.to_json();
    // SAFETY: one write() of a buffer we own to an fd that lives as long as the process.
    unsafe { libc::write(f.as_raw_fd(), s.as_ptr().cast(), s.len()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_format() {
        let l = TruthLine {
            device: 1,
            pid: 42,
            stream: 0,
            kernel: "fwd\"x",
            comm: false,
            api: "cuLaunchKernel",
            graph: false,
            queued_ns: 1,
            start_ns: 2,
            end_ns: 3,
            transfer_start_ns: None,
            eager_end_ns: None,
            mid: None,
        };
        assert_eq!(
            l.to_json(),
            "{\"device\":1,\"bus_id\":\"0000:11:00.0\",\"pid\":42,\"stream\":0,\"kernel\":\"fwd\\\"x\",\"kind\":\"compute\",\"api\":\"cuLaunchKernel\",\"graph\":false,\"queued_ns\":1,\"start_ns\":2,\"end_ns\":3}\n"
        );
        let c = TruthLine {
            kernel: "ncclDevKernel_SendRecv",
            comm: true,
            transfer_start_ns: Some(2),
            ..l
        };
        assert!(c
            .to_json()
            .ends_with("\"start_ns\":2,\"end_ns\":3,\"transfer_start_ns\":2}\n"));
        let s = TruthLine {
            transfer_start_ns: Some(3),
            eager_end_ns: Some(2),
            ..c
        };
        assert!(s
            .to_json()
            .ends_with("\"transfer_start_ns\":3,\"eager_end_ns\":2}\n"));
        let m = TruthLine {
            end_ns: 9,
            transfer_start_ns: Some(7),
            mid: Some((4, 6)),
            ..s
        };
        assert!(m.to_json().ends_with(
            "\"transfer_start_ns\":7,\"eager_end_ns\":2,\"mid_start_ns\":4,\"mid_end_ns\":6}\n"
        ));
    }
}
