//! The session directory (which the agent, the trainers and the side tasks share), the agent that
//! serves it, and the GPU device nodes' permissions.
use super::{Finding, Level};
use freeride_abi::session;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// The session directory `dir`: absent (made by the first `freeride run` or agent), or a real
/// directory of ours at mode 0700; and whether an agent serves it.
pub fn check_session(dir: &Path) -> Vec<Finding> {
    const CHECK: &str = "session";
    let mut out = vec![];
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            out.push(Finding::new(
                CHECK,
                Level::Info,
                format!(
                    "{} does not exist yet (the agent or the first `freeride run` makes it)",
                    dir.display()
                ),
            ));
            return out;
        }
        Err(e) => {
            out.push(Finding::new(
                CHECK,
                Level::Fail,
                format!("{}: {e}", dir.display()),
            ));
            return out;
        }
        Ok(_) => {}
    }
    if let Err(e) = session::validate_dir(dir) {
        out.push(Finding::new(
            CHECK,
            Level::Fail,
            format!("{e}: freeride refuses it (remove it, or chmod 700 it if it is yours)"),
        ));
        return out;
    }
    let pid = std::fs::read_to_string(dir.join(session::AGENT_PID_FILE))
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok());
    match pid {
        Some(p) if session::pid_alive(p) => out.push(Finding::new(
            CHECK,
            Level::Ok,
            format!("{}: served by agent pid {p}", dir.display()),
        )),
        Some(p) => out.push(Finding::new(
            CHECK,
            Level::Warn,
            format!(
                "{}: the agent that served it (pid {p}) is gone: start `freeride agent` (trainers run on unobserved, side tasks wait)",
                dir.display()
            ),
        )),
        None => out.push(Finding::new(
            CHECK,
            Level::Warn,
            format!(
                "{}: no agent serves it: start `freeride agent` (trainers run on unobserved, side tasks wait)",
                dir.display()
            ),
        )),
    }
    out
}

/// The NVIDIA device nodes under `dev` (normally `/dev`): where they exist, this user must be
/// able to open them for reading and writing.
pub fn check_device_nodes(dev: &Path) -> Vec<Finding> {
    const CHECK: &str = "devices";
    let Ok(entries) = std::fs::read_dir(dev) else {
        return vec![];
    };
    let mut nodes: Vec<_> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("nvidia"))
        .filter(|e| {
            e.metadata()
                .is_ok_and(|m| m.file_type().is_char_device() || m.file_type().is_file())
        })
        .map(|e| e.path())
        .collect();
    nodes.sort();
    if nodes.is_empty() {
        return vec![Finding::new(
            CHECK,
            Level::Info,
            format!(
                "no {}/nvidia* device nodes (fine on the test bed; on a GPU node the driver check says more)",
                dev.display()
            ),
        )];
    }
    let mut out = vec![];
    for n in &nodes {
        let Ok(c) = std::ffi::CString::new(n.as_os_str().as_encoded_bytes()) else {
            continue;
        };
        // SAFETY: access() with a NUL-terminated path.
        if unsafe { libc::access(c.as_ptr(), libc::R_OK | libc::W_OK) } != 0 {
            let mode = std::fs::metadata(n).map(|m| m.mode() & 0o777).unwrap_or(0);
            out.push(Finding::new(
                CHECK,
                Level::Fail,
                format!(
                    "{} (mode {mode:03o}) is not readable and writable by this user: CUDA cannot open the GPU (add the user to the device's group)",
                    n.display()
                ),
            ));
        }
    }
    if out.is_empty() {
        out.push(Finding::new(
            CHECK,
            Level::Ok,
            format!("{} NVIDIA device node(s) accessible", nodes.len()),
        ));
    }
    out
}
