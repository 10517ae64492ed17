//! Mapping a small control file of the session directory (a grant block, the doorbell) with the
//! checks that keep a planted file out: no symlink, a regular file, owned by this user, closed to
//! group and others, at least as long as the layout.
use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// (device, inode) of the file at `path` now, to tell whether a mapping ([`SharedMap::id`]) is
/// still of the file there; `None` if there is none.
pub fn file_id(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// A shared mapping of the first `len` bytes of a checked file; unmapped on drop.
pub struct SharedMap {
    ptr: *mut libc::c_void,
    len: usize,
    /// (device, inode) of the mapped file, to notice a replaced file.
    pub id: (u64, u64),
}

// SAFETY: the mapping is plain shared memory that its users only access through atomics; the
// pointer is valid for the life of the value on any thread.
unsafe impl Send for SharedMap {}
// SAFETY: as above.
unsafe impl Sync for SharedMap {}

impl SharedMap {
    /// Maps `len` bytes of `path` (`what` names it in errors: "grant block", "doorbell").
    pub fn open(path: &Path, len: usize, writable: bool, what: &str) -> io::Result<SharedMap> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(writable)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)?;
        let md = file.metadata()?;
        if !md.file_type().is_file() {
            return Err(io::Error::other(format!("{what} is not a regular file")));
        }
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if md.uid() != me {
            return Err(io::Error::other(format!(
                "{what} owned by uid {}, not {me}",
                md.uid()
            )));
        }
        if md.mode() & 0o077 != 0 {
            return Err(io::Error::other(format!(
                "{what} has mode {:o}: group/others may not have access",
                md.mode() & 0o777
            )));
        }
        if md.len() < len as u64 {
            return Err(io::Error::other(format!(
                "{what} is {} bytes, needs {len}",
                md.len()
            )));
        }
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: mapping `len` bytes of a file we just checked is at least that long; the kernel
        // validates the descriptor and flags. The descriptor may be closed afterwards.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedMap {
            ptr,
            len,
            id: (md.dev(), md.ino()),
        })
    }

    /// The start of the mapping (page aligned, `len` bytes).
    pub fn ptr(&self) -> *mut u8 {
        self.ptr as *mut u8
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping we own exactly once; references into it are tied to
        // `self` by their users.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// Writes a new file `dir/.<name>.tmp-<pid>` of `len` zero bytes (0600, never through a symlink):
/// the caller fills it and renames it into place.
pub fn create_staging(dir: &Path, name: &str, len: usize) -> io::Result<std::path::PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    f.write_all(&vec![0u8; len])?;
    Ok(tmp)
}
