//! A `grant-gpu<N>` file mapped into memory (read-only for side tasks, read-write for the test
//! writer), checked for size first so that a short file can never be read past its end.
use freeride_abi::grant::{GrantBlock, GRANT_FILE_SIZE};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

pub(crate) struct GrantMap {
    ptr: *mut libc::c_void,
    /// (device, inode) of the mapped file, to notice a replaced file.
    pub(crate) id: (u64, u64),
}

// SAFETY: the mapping is plain shared memory that is only ever accessed through the atomics of
// `GrantBlock`; the pointer is valid for the life of the value on any thread.
unsafe impl Send for GrantMap {}
// SAFETY: as above: all accesses are atomic loads/stores.
unsafe impl Sync for GrantMap {}

impl GrantMap {
    pub(crate) fn open(path: &Path, writable: bool) -> io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)?;
        let md = file.metadata()?;
        if !md.file_type().is_file() {
            return Err(io::Error::other("grant block is not a regular file"));
        }
        if md.len() < GRANT_FILE_SIZE as u64 {
            return Err(io::Error::other(format!(
                "grant block is {} bytes, needs {GRANT_FILE_SIZE}",
                md.len()
            )));
        }
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: mapping GRANT_FILE_SIZE bytes of a file we just checked is at least that long;
        // the kernel validates the descriptor and flags. The descriptor may be closed afterwards.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                GRANT_FILE_SIZE,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(GrantMap {
            ptr,
            id: (md.dev(), md.ino()),
        })
    }

    pub(crate) fn block(&self) -> &GrantBlock {
        // SAFETY: `ptr` is a live, page-aligned mapping of GRANT_FILE_SIZE >= size_of::<GrantBlock>()
        // bytes (a compile-time check in freeride_abi), GrantBlock is repr(C) of atomics only, so
        // any bytes are a valid value, and concurrent writers are fine through atomics.
        unsafe { &*(self.ptr as *const GrantBlock) }
    }
}

impl Drop for GrantMap {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping we own exactly once; no reference from `block()` outlives
        // `self`.
        unsafe { libc::munmap(self.ptr, GRANT_FILE_SIZE) };
    }
}
