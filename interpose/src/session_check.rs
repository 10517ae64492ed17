//! What the interposer says about an unusable session directory: one line on stderr, once per
//! process (a forked child inherits the "said" flag), and then it fails open (the process runs
//! unobserved, exactly as without freeride). Nothing is said when there is simply no session
//! directory at the default place (no agent ever ran on this node: a preload set for every
//! process must stay silent there), nor when `freeride run` already said it
//! ([`freeride_abi::env::DIR_REPORTED`]). Slow path (process initialization) only.
use freeride_abi::{env, session};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

static SAID: AtomicBool = AtomicBool::new(false);

/// `validate_dir(dir)` failed with `e`: says so, unless one of the quiet cases above.
pub fn report_unusable(dir: &Path, e: &std::io::Error, sidetask: bool) {
    let explicit = std::env::var_os(env::DIR).is_some_and(|v| !v.is_empty());
    if !explicit && e.kind() == std::io::ErrorKind::NotFound && dir == session::default_dir() {
        return;
    }
    if std::env::var_os(env::DIR_REPORTED).is_some_and(|v| Path::new(&v) == dir) {
        return;
    }
    if SAID.swap(true, Ordering::Relaxed) {
        return;
    }
    let what = if sidetask {
        "this side task's launches are not gated"
    } else {
        "this process runs unobserved, as without freeride"
    };
    eprintln!("freeride: session directory {}: {e}; {what}", dir.display());
}
