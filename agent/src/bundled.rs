//! The `libfreeride.so` this executable carries, for installs that ship the `freeride` binary
//! alone (`cargo install --path agent`). `build.rs` builds the interposer crate in a folder of its
//! own and embeds the library; `FREERIDE_BUNDLE_INTERPOSER=0` at build time embeds nothing.
//!
//! [`extract`] writes it once to `<cache>/libfreeride-<version>-<hash>.so` (the cache folder:
//! `$XDG_CACHE_HOME/freeride`, else `~/.cache/freeride`; not /dev/shm, which containers mount
//! `noexec`), named by its content, so every `freeride run` of this build preloads the same file
//! and a build with another library writes another one. A file of that name whose bytes differ is
//! replaced.
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;

static LIB: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libfreeride.so"));

/// Whether this build carries a library.
pub fn carried() -> bool {
    !LIB.is_empty()
}

/// The folder the carried library is written to.
pub fn cache_dir() -> Option<PathBuf> {
    let xdg = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    let base = xdg.or_else(|| {
        std::env::var_os("HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .map(|h| h.join(".cache"))
    })?;
    Some(base.join("freeride"))
}

/// FNV-1a, 64 bits: names the file by its content (not a security measure: the file is compared
/// byte for byte before it is used).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Writes the carried library out (if it is not there already) and returns its path; `Ok(None)`
/// when this build carries none.
pub fn extract() -> Result<Option<PathBuf>, String> {
    if !carried() {
        return Ok(None);
    }
    let dir = cache_dir().ok_or("neither XDG_CACHE_HOME nor HOME is set")?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let name = format!(
        "libfreeride-{}-{:016x}.so",
        env!("CARGO_PKG_VERSION"),
        fnv1a(LIB)
    );
    let path = dir.join(&name);
    if std::fs::read(&path).is_ok_and(|b| b == LIB) {
        return Ok(Some(path));
    }
    // Written under a name of this process's own, then renamed over: a concurrent `freeride run`
    // sees either no file or the whole one.
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o755)
            .open(&tmp)?;
        f.write_all(LIB)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot write {}: {e}", path.display())
    })?;
    Ok(Some(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_is_the_reference_function() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
