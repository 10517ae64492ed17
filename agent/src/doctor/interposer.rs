//! `libfreeride.so` as `freeride run` would preload it: found, an ELF shared object, and on a
//! mount that lets the loader map it executable (a `noexec` mount makes every preload fail).
use super::{Finding, Level};
use crate::layout::{self, LibSource};
use std::io::Read;
use std::path::Path;

const CHECK: &str = "interposer";

/// The mount flags (`statvfs` `f_flag`) of the filesystem holding `path`.
pub fn mount_flags(path: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: a zeroed statvfs is a valid out-buffer; `c` is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: see above.
    (unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0).then_some(st.f_flag as u64)
}

/// The problem with preloading `path` from a filesystem with mount flags `flags`, if any.
pub fn noexec_problem(path: &Path, flags: u64) -> Option<Finding> {
    (flags & libc::ST_NOEXEC != 0).then(|| {
        Finding::new(
            CHECK,
            Level::Fail,
            format!(
                "{} is on a filesystem mounted noexec: the loader cannot preload it (install it elsewhere, or point FREERIDE_LIB / XDG_CACHE_HOME at an exec mount)",
                path.display()
            ),
        )
    })
}

/// The ELF header's type (`e_type`: 2 executable, 3 shared object or PIE) and whether it has a
/// program interpreter (a dynamically linked program), or why it is not an ELF file.
pub fn elf_kind(path: &Path) -> Result<(u16, bool), String> {
    let mut f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut head = vec![0u8; 64];
    f.read_exact(&mut head)
        .map_err(|_| format!("{} is not an ELF file (too short)", path.display()))?;
    if &head[..4] != b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return Err(format!(
            "{} is not a 64-bit little-endian ELF file",
            path.display()
        ));
    }
    let e_type = u16::from_le_bytes([head[16], head[17]]);
    let phoff = u64::from_le_bytes(head[32..40].try_into().expect("8 bytes"));
    let phentsize = u16::from_le_bytes([head[54], head[55]]) as u64;
    let phnum = u16::from_le_bytes([head[56], head[57]]) as u64;
    let mut all = vec![];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut all))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let interp = (0..phnum).any(|i| {
        let at = (phoff + i * phentsize) as usize;
        all.get(at..at + 4)
            .is_some_and(|t| u32::from_le_bytes(t.try_into().expect("4 bytes")) == 3)
    });
    Ok((e_type, interp))
}

pub fn check() -> Vec<Finding> {
    let src = match layout::interposer() {
        Ok(s) => s,
        Err(e) => return vec![Finding::new(CHECK, Level::Fail, e)],
    };
    let p = src.path();
    let how = match &src {
        LibSource::Env(_) => "from FREERIDE_LIB",
        LibSource::Installed(_) => "installed beside freeride",
        LibSource::Bundled(_) => "carried by this freeride binary, written out",
    };
    match elf_kind(p) {
        Ok((3, _)) => {}
        Ok((t, _)) => {
            return vec![Finding::new(
                CHECK,
                Level::Fail,
                format!(
                    "{} is an ELF file of type {t}, not a shared library",
                    p.display()
                ),
            )]
        }
        Err(e) => return vec![Finding::new(CHECK, Level::Fail, e)],
    }
    if let Some(f) = mount_flags(p).and_then(|fl| noexec_problem(p, fl)) {
        return vec![f];
    }
    vec![Finding::new(
        CHECK,
        Level::Ok,
        format!("{} ({how})", p.display()),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No test machine has a noexec mount to put a library on: the decision is tested alone.
    #[test]
    fn a_noexec_mount_is_a_problem() {
        let p = Path::new("/mnt/x/libfreeride.so");
        let f = noexec_problem(p, libc::ST_NOEXEC | libc::ST_NOSUID).unwrap();
        assert_eq!(f.level, Level::Fail);
        assert!(f.what.contains("noexec"), "{}", f.what);
        assert!(noexec_problem(p, libc::ST_NOSUID).is_none());
    }
}
