//! `target/<profile>/standins/`: the folder the dynamic linker searches for the stand-in libraries
//! under their real names (cargo cannot name a file `libcuda.so.1`).
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

/// (link name, file cargo writes next to it in `target/<profile>/`). `libcuda.so` too: loaders
/// that try the unversioned name first (cudarc's dynamic loading) must find the stand-in before
/// any real driver's development link elsewhere on the system.
pub const LINKS: [(&str, &str); 5] = [
    ("libcuda.so.1", "libcuda.so"),
    ("libcuda.so", "libcuda.so"),
    ("libcudart.so.13", "libcudart.so"),
    ("libnccl.so.2", "libnccl.so"),
    ("libcublas.so.13", "libcublas.so"),
];

/// The NCCL-using part of the stage, opened with `dlopen(RTLD_LOCAL)` like a Python extension.
pub const PIPECOMM: &str = "libpipecomm.so";

/// The library image built by build.rs, embedded so the folder can be made from any binary.
static PIPECOMM_IMAGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libpipecomm.so"));

/// `target/<profile>/` of the running executable (`target/<profile>/deps/` counts as its parent).
pub fn profile_dir() -> io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir
        .file_name()
        .is_some_and(|n| n == "deps" || n == "examples")
    {
        dir.pop();
    }
    Ok(dir)
}

/// Makes `<profile>/standins/` (race-free: each entry is made under a temporary name, then renamed
/// over the final one) and returns its path.
pub fn ensure_dir() -> io::Result<PathBuf> {
    ensure_dir_in(&profile_dir()?)
}

/// [`ensure_dir`] for an explicit `target/<profile>/` folder.
pub fn ensure_dir_in(profile: &Path) -> io::Result<PathBuf> {
    let dir = profile.join("standins");
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    for (link, target) in LINKS {
        let path = dir.join(link);
        let want = Path::new("..").join(target);
        if std::fs::read_link(&path).ok().as_deref() == Some(want.as_path()) {
            continue;
        }
        let tmp = dir.join(tmp_name(link));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&want, &tmp)?;
        std::fs::rename(&tmp, &path)?;
    }
    let lib = dir.join(PIPECOMM);
    if std::fs::read(&lib).ok().as_deref() != Some(PIPECOMM_IMAGE) {
        let tmp = dir.join(tmp_name(PIPECOMM));
        std::fs::write(&tmp, PIPECOMM_IMAGE)?;
        std::fs::rename(&tmp, &lib)?;
    }
    Ok(dir)
}

fn tmp_name(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(".{name}.tmp-{}-{nanos}", std::process::id())
}

/// `dir` prepended to `LD_LIBRARY_PATH` as it is now.
pub fn library_path_with(dir: &Path) -> OsString {
    let mut v = OsString::from(dir);
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        v.push(":");
        v.push(old);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn makes_links_idempotently_and_concurrently() {
        let base =
            std::env::temp_dir().join(format!("pipesim-standins-test-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let b = base.clone();
                std::thread::spawn(move || ensure_dir_in(&b).unwrap())
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let dir = ensure_dir_in(&base).unwrap();
        assert_eq!(
            std::fs::read_link(dir.join("libcuda.so.1")).unwrap(),
            Path::new("../libcuda.so")
        );
        assert_eq!(std::fs::read(dir.join(PIPECOMM)).unwrap(), PIPECOMM_IMAGE);
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 6, "{names:?}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
