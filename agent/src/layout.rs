//! Where freeride's files are once installed: the `freeride` executable and the files it runs
//! (`libfreeride.so`; where the route ships the test bed, its program `freeride-sim` that
//! `freeride sim`/`demo` exec ([`crate::testbed`]), the programs and libraries that one runs, the
//! side-task examples) live in one folder, as cargo lays them out in `target/<profile>/`:
//!
//! | install route | that folder |
//! | --- | --- |
//! | a cargo build | `target/release/` |
//! | the Python wheel (`pip install freeride`) | `site-packages/freeride/_lib/` (the `freeride` on `PATH` is a launcher that execs the binary there) |
//! | the container image (the product only), a tarball | `<prefix>/lib/freeride/` (`<prefix>/bin/freeride` a symlink to it) |
//! | `cargo install --path agent` | `~/.cargo/bin/` holds only `freeride` (no test bed): it carries `libfreeride.so` inside ([`crate::bundled`]) |
//!
//! A file is looked for beside the executable (symlinks resolved: `/proc/self/exe`), then in
//! `../`, `../lib/` and `../lib/freeride/` relative to it.
use std::path::{Path, PathBuf};

/// The folders searched, in order, for a file that ships with `freeride`.
pub fn search_dirs(exe: &Path) -> Vec<PathBuf> {
    let Some(dir) = exe.parent() else {
        return vec![];
    };
    vec![
        dir.to_path_buf(),
        dir.join(".."),
        dir.join("../lib"),
        dir.join("../lib/freeride"),
    ]
}

/// `name` (a relative path such as `pipesim` or `examples/train_loop`) in the first folder of
/// [`search_dirs`] of the running executable that holds it.
pub fn sibling(name: &str) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find my own executable: {e}"))?;
    find_in(&search_dirs(&exe), name).ok_or_else(|| {
        format!(
            "{name} not found next to {} (build the workspace: cargo build --release; or install the wheel: pip install freeride)",
            exe.display()
        )
    })
}

fn find_in(dirs: &[PathBuf], name: &str) -> Option<PathBuf> {
    dirs.iter().map(|d| d.join(name)).find(|p| p.exists())
}

/// Where `freeride run` takes `libfreeride.so` from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LibSource {
    /// `$FREERIDE_LIB`.
    Env(PathBuf),
    /// Installed beside the executable.
    Installed(PathBuf),
    /// The copy this executable carries, written out to the cache folder.
    Bundled(PathBuf),
}

impl LibSource {
    pub fn path(&self) -> &Path {
        match self {
            LibSource::Env(p) | LibSource::Installed(p) | LibSource::Bundled(p) => p,
        }
    }
}

/// The interposer `freeride run` preloads: `$FREERIDE_LIB`; else `libfreeride.so` in the
/// [`search_dirs`]; else the copy this executable carries (a `cargo install`), written once to
/// [`crate::bundled::cache_dir`]. The error says what was tried.
pub fn interposer() -> Result<LibSource, String> {
    if let Some(p) = std::env::var_os("FREERIDE_LIB").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if !p.is_file() {
            return Err(format!("FREERIDE_LIB={} is not a file", p.display()));
        }
        return Ok(LibSource::Env(absolute(p)));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find my own executable: {e}"))?;
    if let Some(p) = find_in(&search_dirs(&exe), "libfreeride.so") {
        return Ok(LibSource::Installed(p.canonicalize().unwrap_or(p)));
    }
    match crate::bundled::extract() {
        Ok(Some(p)) => Ok(LibSource::Bundled(p)),
        Ok(None) => Err(format!(
            "libfreeride.so not found beside {} (nor in ../lib/freeride/) and this build carries none: set FREERIDE_LIB, or install it next to the freeride binary",
            exe.display()
        )),
        Err(e) => Err(format!(
            "libfreeride.so not found beside {}, and the copy this build carries cannot be written out: {e} (set FREERIDE_LIB or XDG_CACHE_HOME)",
            exe.display()
        )),
    }
}

fn absolute(p: PathBuf) -> PathBuf {
    if p.is_relative() {
        std::env::current_dir().map(|c| c.join(&p)).unwrap_or(p)
    } else {
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_layouts_are_searched_in_order() {
        let d = search_dirs(Path::new("/opt/x/bin/freeride"));
        assert_eq!(
            d,
            [
                PathBuf::from("/opt/x/bin"),
                PathBuf::from("/opt/x/bin/.."),
                PathBuf::from("/opt/x/bin/../lib"),
                PathBuf::from("/opt/x/bin/../lib/freeride"),
            ]
        );
    }

    #[test]
    fn a_file_in_lib_freeride_is_found() {
        let root = std::env::temp_dir().join(format!("freeride-layout-{}", std::process::id()));
        let lib = root.join("lib/freeride");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::write(lib.join("pipesim"), b"").unwrap();
        let found = find_in(&search_dirs(&root.join("bin/freeride")), "pipesim");
        let missing = find_in(&search_dirs(&root.join("bin/freeride")), "nothing");
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(found, Some(root.join("bin/../lib/freeride/pipesim")));
        assert_eq!(missing, None);
    }
}
