//! The grant block as a mapped file: [`GrantMap`] (side tasks map it read-only, the agent
//! read-write) and [`GrantWriter`], the agent's side of the seqlock protocol of [`crate::grant`]:
//! `epoch` is made odd, the fields are stored, `epoch` is made even again (Release); readers retry
//! or treat the block as closed while the epoch is odd or changed under them.
use crate::grant::{GrantBlock, GRANT_FILE_SIZE};
use crate::grant::{GRANT_CLOSED, GRANT_LAYOUT_VERSION, GRANT_MAGIC, GRANT_OPEN};
use crate::now_ns;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, Ordering};

pub struct GrantMap {
    ptr: *mut libc::c_void,
    /// (device, inode) of the mapped file, to notice a replaced file.
    pub id: (u64, u64),
}

// SAFETY: the mapping is plain shared memory that is only ever accessed through the atomics of
// `GrantBlock`; the pointer is valid for the life of the value on any thread.
unsafe impl Send for GrantMap {}
// SAFETY: as above: all accesses are atomic loads/stores.
unsafe impl Sync for GrantMap {}

impl GrantMap {
    /// Maps the grant block at `path`. Refused: a symlink, anything but a regular file, a file
    /// owned by another user or open to group/others (a planted block must not open a gate).
    pub fn open(path: &Path, writable: bool) -> io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(writable)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)?;
        let md = file.metadata()?;
        if !md.file_type().is_file() {
            return Err(io::Error::other("grant block is not a regular file"));
        }
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if md.uid() != me {
            return Err(io::Error::other(format!(
                "grant block owned by uid {}, not {me}",
                md.uid()
            )));
        }
        if md.mode() & 0o077 != 0 {
            return Err(io::Error::other(format!(
                "grant block has mode {:o}: group/others may not have access",
                md.mode() & 0o777
            )));
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

    pub fn block(&self) -> &GrantBlock {
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

pub struct GrantWriter {
    map: GrantMap,
    path: PathBuf,
}

/// One grant as the writer publishes it.
#[derive(Clone, Copy, Debug, Default)]
pub struct GrantFields {
    pub open: bool,
    pub open_until_ns: u64,
    pub budget_ns: u64,
    pub mem_budget_bytes: u64,
    /// See [`crate::grant::Grant::min_priority`].
    pub min_priority: u64,
    /// See [`crate::grant::Grant::side_mem_held_bytes`].
    pub side_mem_held_bytes: u64,
}

impl GrantWriter {
    /// Creates (or replaces, atomically) `grant-gpu<device>` in `dir`, closed, with this process
    /// as its agent.
    pub fn create(dir: &Path, device: u32) -> io::Result<Self> {
        let path = dir.join(crate::session::grant_file_name(device));
        let tmp = dir.join(format!(".grant-gpu{device}.tmp-{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            // A new file (never through a planted symlink), readable by this user only.
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)?;
            f.write_all(&[0u8; GRANT_FILE_SIZE])?;
        }
        let map = GrantMap::open(&tmp, true)?;
        let b = map.block();
        b.version.store(GRANT_LAYOUT_VERSION, Ordering::Relaxed);
        b.device.store(device, Ordering::Relaxed);
        b.agent_pid.store(std::process::id(), Ordering::Relaxed);
        b.state.store(GRANT_CLOSED, Ordering::Relaxed);
        b.heartbeat_ns.store(now_ns(), Ordering::Relaxed);
        b.magic.store(GRANT_MAGIC, Ordering::Release);
        std::fs::rename(&tmp, &path)?;
        Ok(GrantWriter { map, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn publish(&self, f: GrantFields) {
        let b = self.map.block();
        let e = b.epoch.load(Ordering::Relaxed);
        b.epoch.store(e | 1, Ordering::Relaxed);
        fence(Ordering::Release);
        b.state.store(
            if f.open { GRANT_OPEN } else { GRANT_CLOSED },
            Ordering::Relaxed,
        );
        b.open_until_ns.store(f.open_until_ns, Ordering::Relaxed);
        b.budget_ns.store(f.budget_ns, Ordering::Relaxed);
        b.mem_budget_bytes
            .store(f.mem_budget_bytes, Ordering::Relaxed);
        b.min_priority.store(f.min_priority, Ordering::Relaxed);
        b.side_mem_held_bytes
            .store(f.side_mem_held_bytes, Ordering::Relaxed);
        b.heartbeat_ns.store(now_ns(), Ordering::Relaxed);
        b.epoch.store((e | 1) + 1, Ordering::Release);
        b.wake_all();
    }

    /// Opens a grant of `dur_ns` from now with `budget_ns` of GPU time.
    pub fn open_for(&self, dur_ns: u64, budget_ns: u64, mem_budget_bytes: u64) -> u64 {
        let until = now_ns() + dur_ns;
        self.publish(GrantFields {
            open: true,
            open_until_ns: until,
            budget_ns,
            mem_budget_bytes,
            ..Default::default()
        });
        until
    }

    pub fn close(&self, mem_budget_bytes: u64) {
        self.publish(GrantFields {
            open: false,
            mem_budget_bytes,
            ..Default::default()
        });
    }

    /// Corrupts the magic (tests: an invalid block must read as "no agent").
    pub fn invalidate(&self) {
        self.map.block().magic.store(0, Ordering::Release);
    }
}

impl GrantWriter {
    /// Refreshes the heartbeat only (readers treat a stale heartbeat as "closed": a dead agent's
    /// grant closes by itself).
    pub fn heartbeat(&self) {
        self.map
            .block()
            .heartbeat_ns
            .store(now_ns(), Ordering::Release);
    }
}
