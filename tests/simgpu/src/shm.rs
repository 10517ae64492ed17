//! The layout of a device's shared state and its creation/opening.
//!
//! `$FREERIDE_SIM_DIR/gpu<N>` is a file mapped `MAP_SHARED` by every process that uses device N.
//! It is created race-free: `O_CREAT|O_EXCL`, sized, initialized, then [`DeviceShm::magic`] is
//! published last; everyone else waits for the magic. Every field is an atomic, so the state is
//! only ever touched through shared references; the fields other than `magic`, `lock` and `gen`
//! are read and written only under `lock` ([`crate::lock`]).
use crate::arbiter::Mode;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// "FRSIMGPU", published last by the creator.
pub const MAGIC: u64 = 0x5550_474d_4953_5246;
/// Layout version.
pub const VERSION: u32 = 2;
/// Processes that can use one device at the same time.
pub const MAX_SLOTS: usize = 128;
/// Compute kernels that can wait for admission on one device at the same time.
pub const MAX_WAITERS: usize = 512;
/// How long an opener waits for the creator to publish the state.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// What one process holds on a device (`pid == 0`: free).
#[repr(C)]
pub struct Slot {
    pub pid: AtomicI32,
    /// Sum of the shares of this process's running kernels.
    pub share_held: AtomicU32,
    /// Device memory this process has allocated, in bytes.
    pub mem_used: AtomicU64,
}

/// A compute kernel waiting for admission (`ticket == 0`: free).
#[repr(C)]
pub struct Waiter {
    pub ticket: AtomicU64,
    pub slot: AtomicU32,
    pub share: AtomicU32,
}

/// The shared state of one simulated device.
#[repr(C)]
pub struct DeviceShm {
    pub magic: AtomicU64,
    pub version: AtomicU32,
    /// [`Mode`] as u32.
    pub mode: AtomicU32,
    pub mem_total: AtomicU64,
    /// The lock word ([`crate::lock`]).
    pub lock: AtomicU32,
    /// Bumped (and futex-woken) whenever a share is given back or the waiters change.
    pub gen: AtomicU32,
    pub next_ticket: AtomicU64,
    /// Next fake device address handed out on this device.
    pub next_addr: AtomicU64,
    /// The logical end (GPU time, ns) of the latest-ending kernel released so far that held a
    /// share of the device: in `timeslice` mode the compute kernels, in `mps` mode all kernels.
    /// A kernel that needs a share starts (logically) no earlier than this; see
    /// [`crate::stream`].
    pub last_release_ns: AtomicU64,
    pub slots: [Slot; MAX_SLOTS],
    pub waiters: [Waiter; MAX_WAITERS],
}

/// A mapping of a [`DeviceShm`].
pub struct ShmMap {
    ptr: *mut DeviceShm,
    len: usize,
}

// SAFETY: the mapping is only accessed through atomics (every field of DeviceShm is one).
unsafe impl Send for ShmMap {}
// SAFETY: as above.
unsafe impl Sync for ShmMap {}

impl std::ops::Deref for ShmMap {
    type Target = DeviceShm;
    fn deref(&self) -> &DeviceShm {
        // SAFETY: ptr is a live MAP_SHARED mapping of at least size_of::<DeviceShm>() bytes that
        // stays mapped until drop; all-zero bytes are a valid DeviceShm (atomics of 0).
        unsafe { &*self.ptr }
    }
}

impl Drop for ShmMap {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe the mapping we created; nothing borrows it past self.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

fn map_len() -> usize {
    let page = 4096;
    std::mem::size_of::<DeviceShm>().div_ceil(page) * page
}

fn map(file: &std::fs::File, len: usize) -> io::Result<ShmMap> {
    // SAFETY: mapping a file we opened read-write; the kernel picks the address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(ShmMap { ptr: p.cast(), len })
}

/// Creates the folder (mode 0700) if needed.
pub fn ensure_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Opens the state at `path`, creating and initializing it (with `mode` and `mem_total`) if this
/// process is first.
pub fn open_or_create(
    path: &Path,
    mode: Mode,
    mem_total: u64,
    addr_base: u64,
) -> io::Result<ShmMap> {
    let len = map_len();
    match OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(file) => {
            file.set_len(len as u64)?;
            let m = map(&file, len)?;
            m.version.store(VERSION, Ordering::Relaxed);
            m.mode.store(mode as u32, Ordering::Relaxed);
            m.mem_total.store(mem_total, Ordering::Relaxed);
            m.next_ticket.store(1, Ordering::Relaxed);
            m.next_addr.store(addr_base, Ordering::Relaxed);
            m.magic.store(MAGIC, Ordering::Release);
            Ok(m)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let file = OpenOptions::new().read(true).write(true).open(path)?;
            let t0 = Instant::now();
            while (file.metadata()?.size() as usize) < len {
                if t0.elapsed() > READY_TIMEOUT {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("{} never got its size", path.display()),
                    ));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            let m = map(&file, len)?;
            while m.magic.load(Ordering::Acquire) != MAGIC {
                if t0.elapsed() > READY_TIMEOUT {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("{} never became ready", path.display()),
                    ));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            if m.version.load(Ordering::Relaxed) != VERSION {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: layout version mismatch", path.display()),
                ));
            }
            Ok(m)
        }
        Err(e) => Err(e),
    }
}
