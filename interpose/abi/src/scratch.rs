//! Folders that must not outlive the process that made them (tests, tools): [`remove_at_exit`]
//! for a folder a test binary keeps in a `static` (statics are never dropped) or that a failing
//! test would leave behind, and [`ScratchDir`], a private folder removed when dropped (also
//! while a panic unwinds).
use std::path::{Path, PathBuf};
use std::sync::Mutex;

static AT_EXIT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// The process that registered the handler (a forked child that calls `exit` inherits it, and
/// must not remove its parent's folders).
static OWNER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn remove_registered() {
    if OWNER.load(std::sync::atomic::Ordering::Relaxed) != std::process::id() {
        return;
    }
    let paths = match AT_EXIT.lock() {
        Ok(mut v) => std::mem::take(&mut *v),
        Err(p) => std::mem::take(&mut *p.into_inner()),
    };
    for p in paths {
        let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
    }
}

/// Removes `path` (a folder or a file) when this process exits normally (`exit`, or returning
/// from `main`: what a test binary does whether its tests pass or fail), if it still exists.
pub fn remove_at_exit(path: &Path) {
    let mut v = match AT_EXIT.lock() {
        Ok(v) => v,
        Err(p) => p.into_inner(),
    };
    let me = std::process::id();
    if OWNER.swap(me, std::sync::atomic::Ordering::Relaxed) != me {
        // The first folder of this process (in a forked child: the parent's are not its own).
        v.clear();
        // SAFETY: registers a plain extern "C" function that lives as long as the process.
        unsafe { libc::atexit(remove_registered) };
    }
    v.push(path.to_path_buf());
}

/// A fresh private folder (mode 0700, a valid session directory) `<base>/<prefix>-<pid>-<n>`,
/// removed when dropped and, should the drop never run, at exit.
#[derive(Debug)]
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    pub fn new_in(base: &Path, prefix: &str) -> std::io::Result<ScratchDir> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = base.join(format!("{prefix}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        crate::session::ensure_dir(&p)?;
        remove_at_exit(&p);
        Ok(ScratchDir(p))
    }

    /// Under the system's temporary folder.
    pub fn new(prefix: &str) -> std::io::Result<ScratchDir> {
        ScratchDir::new_in(&std::env::temp_dir(), prefix)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl std::ops::Deref for ScratchDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for ScratchDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scratch_dir_is_private_and_goes_when_dropped_even_in_a_panic() {
        let d = ScratchDir::new("frabi-scratch").unwrap();
        let p = d.path().to_path_buf();
        crate::session::validate_dir(&p).unwrap();
        std::fs::write(d.join("f"), "x").unwrap();
        let r = std::panic::catch_unwind(move || {
            let _d = d;
            panic!("a failing test");
        });
        assert!(r.is_err());
        assert!(!p.exists(), "{} left behind", p.display());
    }

    #[test]
    fn folders_registered_for_exit_are_removed_by_the_process_that_exits() {
        let p = std::env::temp_dir().join(format!("frabi-atexit-{}", std::process::id()));
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "scratch::tests::exit_helper",
                "--ignored",
                "--nocapture",
            ])
            .env("FRABI_ATEXIT_PATH", &p)
            .output()
            .unwrap();
        assert!(child.status.success(), "{child:?}");
        assert!(
            String::from_utf8_lossy(&child.stdout).contains("made"),
            "the helper did not run: {child:?}"
        );
        assert!(!p.exists(), "{} left behind at exit", p.display());
    }

    /// Run by the test above in a child process: makes a folder and leaves it to the exit.
    #[test]
    #[ignore]
    fn exit_helper() {
        let Some(p) = std::env::var_os("FRABI_ATEXIT_PATH") else {
            return;
        };
        let p = PathBuf::from(p);
        std::fs::create_dir_all(p.join("sub")).unwrap();
        remove_at_exit(&p);
        println!("made {}", p.display());
    }
}
