//! One pacing per side task. An iterative SDK task paces itself by the agent's grants; started
//! under the interposer's launch gate as well (`freeride run --role sidetask`, or
//! `FREERIDE_ROLE=sidetask` with `libfreeride.so` preloaded), every launch would be held a second
//! time, by a gate that knows nothing of the task's steps (measured: 4-6x the GPU time per step
//! and 9-15 overruns). The SDK refuses that combination at start with a message saying what to do;
//! `FREERIDE_GATE=off` keeps the interposer observing (the agent then sees the task's ring: its
//! memory, its crash) without holding anything.
use crate::error::{Result, SdkError};

/// Whether a `/proc/<pid>/maps` text maps the interposer (`libfreeride.so`, or the copy a
/// `cargo install`ed freeride writes out, `libfreeride-<version>-<hash>.so`; not the SDK's own
/// `libfreeride_sidetask.so`).
pub fn maps_interposer(maps: &str) -> bool {
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter_map(|p| p.rsplit('/').next())
        .any(|f| f == "libfreeride.so" || (f.starts_with("libfreeride-") && f.ends_with(".so")))
}

/// Whether the environment asks the interposer to gate this process.
pub fn gate_requested(role: Option<&str>, gate: Option<&str>) -> bool {
    role == Some("sidetask") && !gate.is_some_and(|g| matches!(g.trim(), "off" | "0" | "false"))
}

/// Err if this process is gated by the interposer (see the module docs).
pub fn refuse_if_gated(task: &str) -> Result<()> {
    let role = std::env::var(freeride_abi::env::ROLE).ok();
    let gate = std::env::var("FREERIDE_GATE").ok();
    if !gate_requested(role.as_deref(), gate.as_deref()) {
        return Ok(());
    }
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    if !maps_interposer(&maps) {
        return Ok(());
    }
    Err(SdkError::Config(format!(
        "{task}: this SDK side task paces itself by the grants, and the interposer's launch gate would hold its launches a second time (FREERIDE_ROLE=sidetask with libfreeride.so loaded, as under `freeride run --role sidetask`): start it directly, without `freeride run --role sidetask`; or set FREERIDE_GATE=off to keep the interposer observing only"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str =
        "7f0000000000-7f0000001000 r-xp 00000000 00:1f 123 /opt/x/lib/libfreeride_sidetask.so\n";

    #[test]
    fn the_interposer_is_told_from_the_sdk_library() {
        assert!(!maps_interposer(MAPS));
        let with = format!(
            "{MAPS}7f0000002000-7f0000003000 r-xp 00000000 00:1f 124 /t/release/libfreeride.so\n"
        );
        assert!(maps_interposer(&with));
        let bundled = "7f00-7f01 r-xp 0 00:1f 1 /root/.cache/freeride/libfreeride-0.1.0-00ff00ff00ff00ff.so\n";
        assert!(maps_interposer(bundled));
        assert!(!maps_interposer("7f00-7f01 rw-p 0 00:00 0 \n"));
    }

    #[test]
    fn only_a_gating_sidetask_role_counts() {
        assert!(gate_requested(Some("sidetask"), None));
        assert!(!gate_requested(Some("sidetask"), Some("off")));
        assert!(!gate_requested(Some("trainer"), None));
        assert!(!gate_requested(None, None));
    }
}
