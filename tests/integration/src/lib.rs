//! Helpers shared by the integration tests in `tests/` (which run the built binaries as processes).
use std::path::PathBuf;

/// `target/<profile>/`, where the binaries and libraries under test are.
pub fn release_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// A built binary or library of the workspace; panics with the build command if it is missing.
pub fn built(name: &str) -> PathBuf {
    let p = release_dir().join(name);
    assert!(
        p.exists(),
        "{} missing: run `cargo build --release --workspace` first",
        p.display()
    );
    p
}
