//! `freeride doctor`: checks that a node can run freeride and says plainly what is wrong. Each
//! check returns [`Finding`]s; a `Fail` is something that stops freeride from working (or from
//! working safely), a `Warn` something that works but is likely not what was meant.
//!
//! | check | module |
//! | --- | --- |
//! | CUDA driver: loads, initializes, driver API version, devices; NVIDIA kernel module version | [`driver`] |
//! | `/dev/shm`: present, tmpfs, mode, room for the rings | [`shm`] |
//! | the session directory, the agent serving it, the GPU device nodes | [`node`] |
//! | CUDA MPS: control daemon, pipe directory | [`mps`] |
//! | `libfreeride.so`: found, an ELF library, on a mount that allows mapping it executable | [`interposer`] |
//! | a command run under the interposer: it loads and sees the command's launches | [`probe`] |
pub mod driver;
pub mod interposer;
pub mod mps;
pub mod node;
pub mod probe;
pub mod shm;

use serde_json::{json, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Ok,
    Info,
    Warn,
    Fail,
}

impl Level {
    pub fn word(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Info => "info",
            Level::Warn => "WARN",
            Level::Fail => "FAIL",
        }
    }
}

/// One line of the report: which check, how bad, and what it found (for a problem: what is wrong
/// and what to do).
#[derive(Clone, Debug)]
pub struct Finding {
    pub check: &'static str,
    pub level: Level,
    pub what: String,
}

impl Finding {
    pub fn new(check: &'static str, level: Level, what: impl Into<String>) -> Finding {
        Finding {
            check,
            level,
            what: what.into(),
        }
    }
}

/// The findings as the text `freeride doctor` prints: one line each, then a verdict.
pub fn render_text(findings: &[Finding]) -> String {
    let mut s = String::new();
    for f in findings {
        s.push_str(&format!(
            "{:<5} {:<11} {}\n",
            f.level.word(),
            f.check,
            f.what
        ));
    }
    let fails = findings.iter().filter(|f| f.level == Level::Fail).count();
    let warns = findings.iter().filter(|f| f.level == Level::Warn).count();
    s.push_str(&match (fails, warns) {
        (0, 0) => "no problem found\n".to_string(),
        (0, w) => format!("no problem that stops freeride; {w} warning(s)\n"),
        (f, w) => format!("{f} problem(s), {w} warning(s)\n"),
    });
    s
}

pub fn render_json(findings: &[Finding]) -> Value {
    json!({
        "findings": findings.iter().map(|f| json!({
            "check": f.check, "level": f.level.word().to_ascii_lowercase(), "what": f.what,
        })).collect::<Vec<_>>(),
        "problems": findings.iter().filter(|f| f.level == Level::Fail).count(),
        "warnings": findings.iter().filter(|f| f.level == Level::Warn).count(),
    })
}

/// `bytes` as MiB or GiB, for messages.
pub fn size(bytes: u64) -> String {
    if bytes >= 10 << 30 {
        format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.0} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_counts_problems_and_warnings() {
        let ok = [Finding::new("a", Level::Ok, "fine")];
        assert!(render_text(&ok).ends_with("no problem found\n"));
        let bad = [
            Finding::new("a", Level::Fail, "broken"),
            Finding::new("b", Level::Warn, "odd"),
        ];
        let t = render_text(&bad);
        assert!(t.contains("FAIL  a           broken"), "{t}");
        assert!(t.ends_with("1 problem(s), 1 warning(s)\n"), "{t}");
        assert_eq!(render_json(&bad)["problems"], 1);
    }
}
