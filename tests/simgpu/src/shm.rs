//! The layout of a device's shared state and its creation/opening.
//!
//! `$FREERIDE_SIM_DIR/gpu<N>` is a file mapped `MAP_SHARED` by every process that uses device N.
//! It is created race-free: `O_CREAT|O_EXCL`, sized, initialized, then [`DeviceShm::magic`] is
//! published last; everyone else waits for the magic. Every field but the model is an atomic; the
//! fields other than `magic`, `lock` and `gen` are read and written only under `lock`
//! ([`crate::lock`]), and the model ([`Sched`], plain memory) only through [`DeviceShm::model`],
//! which holds the lock.
use crate::lock::{self, ShmLockGuard};
use crate::sched::{Knobs, Sched};
use std::cell::UnsafeCell;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// "FRSIMGPU", published last by the creator.
pub const MAGIC: u64 = 0x5550_474d_4953_5246;
/// Layout version (3: the shared model of `crate::sched` replaced the admission tickets; 4: a
/// communication kernel's `eager_ns`; 5: its mid span).
pub const VERSION: u32 = 5;
/// Processes that can use one device at the same time.
pub const MAX_SLOTS: usize = 128;
/// How long an opener waits for the creator to publish the state.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// What one process holds on a device (`pid == 0`: free).
#[repr(C)]
pub struct Slot {
    pub pid: AtomicI32,
    pub _pad: AtomicU32,
    /// Device memory this process has allocated, in bytes.
    pub mem_used: AtomicU64,
}

/// The shared state of one simulated device.
#[repr(C)]
pub struct DeviceShm {
    pub magic: AtomicU64,
    pub version: AtomicU32,
    /// [`crate::config::Mode`] as u32.
    pub mode: AtomicU32,
    pub mem_total: AtomicU64,
    /// The lock word ([`crate::lock`]).
    pub lock: AtomicU32,
    /// Bumped (and futex-woken) when a kernel's predicted time may have come earlier.
    pub gen: AtomicU32,
    /// Bumped (and futex-woken) when a hold on the model's clock went away.
    pub hold_gen: AtomicU32,
    /// Next fake device address handed out on this device.
    pub next_addr: AtomicU64,
    pub slots: [Slot; MAX_SLOTS],
    /// The device's model ([`crate::sched`]); only through [`DeviceShm::model`].
    sched: UnsafeCell<Sched>,
}

/// The model of a device, locked: the device lock is held while it lives.
pub struct ModelGuard<'a> {
    _lock: ShmLockGuard<'a>,
    sched: *mut Sched,
}

impl std::ops::Deref for ModelGuard<'_> {
    type Target = Sched;
    fn deref(&self) -> &Sched {
        // SAFETY: the pointer is into the live mapping the guard borrows, and the device lock
        // (held by `_lock`) gives this guard the only access to the model in any process.
        unsafe { &*self.sched }
    }
}

impl std::ops::DerefMut for ModelGuard<'_> {
    fn deref_mut(&mut self) -> &mut Sched {
        // SAFETY: as in deref; `&mut self` makes this the only reference through the guard.
        unsafe { &mut *self.sched }
    }
}

impl DeviceShm {
    /// Locks the device and gives its model.
    pub fn model(&self) -> ModelGuard<'_> {
        ModelGuard {
            _lock: lock::lock(&self.lock),
            sched: self.sched.get(),
        }
    }

    /// Locks the device without the model (slots, memory).
    pub fn lock(&self) -> ShmLockGuard<'_> {
        lock::lock(&self.lock)
    }
}

/// A mapping of a [`DeviceShm`].
pub struct ShmMap {
    ptr: *mut DeviceShm,
    len: usize,
}

// SAFETY: the mapping is only accessed through atomics, except the model, which is only accessed
// under the process-shared device lock (DeviceShm::model).
unsafe impl Send for ShmMap {}
// SAFETY: as above.
unsafe impl Sync for ShmMap {}

impl std::ops::Deref for ShmMap {
    type Target = DeviceShm;
    fn deref(&self) -> &DeviceShm {
        // SAFETY: ptr is a live MAP_SHARED mapping of at least size_of::<DeviceShm>() bytes that
        // stays mapped until drop; all-zero bytes are a valid DeviceShm (atomics of 0, a zeroed
        // model).
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

/// Opens the state at `path`, creating and initializing it (with `knobs` and `mem_total`) if this
/// process is first.
pub fn open_or_create(
    path: &Path,
    knobs: Knobs,
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
            m.mode.store(knobs.mode, Ordering::Relaxed);
            m.mem_total.store(mem_total, Ordering::Relaxed);
            m.next_addr.store(addr_base, Ordering::Relaxed);
            m.model().knobs = knobs;
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
