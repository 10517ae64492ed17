//! The state a communicator's ranks share: `$FREERIDE_SIM_DIR/nccl-<id>`, mapped MAP_SHARED.
//!
//! Creation is race-free without a creator: every rank opens the file with O_CREAT, sizes it to
//! the same length (a function of nranks only) and maps it; all-zero is the valid initial state
//! of every field, so nobody has to initialize anything. The first rank to arrive publishes
//! nranks with a compare-and-swap; a rank with another nranks is refused.
//!
//! Layout: [`Header`], then `nranks` x [`RankInfo`], then `nranks²` x [`Channel`] (one per ordered
//! pair src -> dst, index src·n + dst), then [`COLL_SLOTS`] x ([`CollHeader`] + nranks x [`Slot`]).
use std::ffi::CString;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64};

/// "FRNCCLC2" (2: a slot says when its receiver started).
pub const MAGIC: u64 = 0x3243_4c43_434e_5246;
/// Sends a sender may post ahead of its receiver on one channel.
pub const P2P_SLOTS: usize = 512;
/// Collectives in flight per communicator (more than enough: a collective waits for all ranks).
pub const COLL_SLOTS: usize = 16;

#[repr(C)]
pub struct Header {
    pub magic: AtomicU64,
    pub nranks: AtomicU32,
    /// Ranks that arrived in ncclCommInitRank (futex word).
    pub arrived: AtomicU32,
    /// Ranks that destroyed their communicator; the last one unlinks the file.
    pub departed: AtomicU32,
    /// Set by ncclCommAbort on any rank: every wait of every rank gives up.
    pub aborted: AtomicU32,
}

#[repr(C)]
pub struct RankInfo {
    pub present: AtomicU32,
    pub device: AtomicI32,
    pub pid: AtomicU32,
    pub _pad: AtomicU32,
}

/// A posted message or collective arrival: `tag` = sequence number + 1, written last. For a
/// message, its receiver answers in the same slot when its kernel started (`recv_tag` =
/// sequence number + 1, written after `recv_start_ns`), for a sender that waits for it.
#[repr(C)]
pub struct Slot {
    pub tag: AtomicU64,
    pub start_ns: AtomicU64,
    pub bytes: AtomicU64,
    pub recv_tag: AtomicU64,
    pub recv_start_ns: AtomicU64,
}

/// One direction between two ranks.
#[repr(C)]
pub struct Channel {
    /// Bumped on every post (futex word of receivers).
    pub posted: AtomicU32,
    /// Messages consumed by the receiver (futex word of senders waiting for a free slot).
    pub consumed: AtomicU32,
    pub slots: [Slot; P2P_SLOTS],
}

#[repr(C)]
pub struct CollHeader {
    /// Bumped on every arrival (futex word).
    pub gen: AtomicU32,
    pub _pad: AtomicU32,
}

/// A mapped communicator file.
pub struct Mapping {
    base: *mut u8,
    len: usize,
    nranks: usize,
    pub path: PathBuf,
}

// SAFETY: the mapping is only accessed through atomics; the pointer stays valid until Drop.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

const fn align8(x: usize) -> usize {
    (x + 7) & !7
}

fn off_ranks() -> usize {
    align8(std::mem::size_of::<Header>())
}
fn off_channels(n: usize) -> usize {
    off_ranks() + n * std::mem::size_of::<RankInfo>()
}
fn coll_stride(n: usize) -> usize {
    std::mem::size_of::<CollHeader>() + n * std::mem::size_of::<Slot>()
}
fn off_coll(n: usize) -> usize {
    off_channels(n) + n * n * std::mem::size_of::<Channel>()
}
/// File size for `n` ranks.
pub fn size_for(n: usize) -> usize {
    off_coll(n) + COLL_SLOTS * coll_stride(n)
}

/// The folder of the simulated GPUs' shared state.
pub fn sim_dir() -> PathBuf {
    match std::env::var_os(simgpu::abi::env::SIM_DIR) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        // SAFETY: getuid cannot fail.
        _ => PathBuf::from(format!("/dev/shm/freeride-sim-{}", unsafe {
            libc::getuid()
        })),
    }
}

impl Mapping {
    /// Opens (creating if needed) the file of communicator `name` for `nranks` ranks.
    pub fn open(name: &str, nranks: usize) -> io::Result<Mapping> {
        Mapping::open_in(&sim_dir(), name, nranks)
    }

    /// [`Mapping::open`] in an explicit folder.
    pub fn open_in(dir: &std::path::Path, name: &str, nranks: usize) -> io::Result<Mapping> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("nccl-{name}"));
        let len = size_for(nranks);
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| io::ErrorKind::InvalidInput)?;
        // SAFETY: plain syscalls on a NUL-terminated path and our own fd; the mapping is checked.
        unsafe {
            let fd = libc::open(
                c.as_ptr(),
                libc::O_CREAT | libc::O_RDWR | libc::O_CLOEXEC,
                0o600,
            );
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd, &mut st) != 0
                || (st.st_size as usize) < len && libc::ftruncate(fd, len as libc::off_t) != 0
            {
                let e = io::Error::last_os_error();
                libc::close(fd);
                return Err(e);
            }
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            libc::close(fd);
            if base == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            Ok(Mapping {
                base: base.cast(),
                len,
                nranks,
                path,
            })
        }
    }

    pub fn nranks(&self) -> usize {
        self.nranks
    }

    pub fn header(&self) -> &Header {
        // SAFETY: offset 0 of a mapping at least size_for(n) long, page aligned; all fields atomic.
        unsafe { &*(self.base as *const Header) }
    }

    pub fn rank(&self, r: usize) -> &RankInfo {
        assert!(r < self.nranks);
        // SAFETY: in bounds by the layout; 8-aligned; atomics only.
        unsafe {
            &*(self
                .base
                .add(off_ranks() + r * std::mem::size_of::<RankInfo>())
                as *const RankInfo)
        }
    }

    /// Channel src -> dst.
    pub fn channel(&self, src: usize, dst: usize) -> &Channel {
        assert!(src < self.nranks && dst < self.nranks);
        let off =
            off_channels(self.nranks) + (src * self.nranks + dst) * std::mem::size_of::<Channel>();
        // SAFETY: in bounds by the layout; 8-aligned; atomics only.
        unsafe { &*(self.base.add(off) as *const Channel) }
    }

    /// Collective slot `i` (mod COLL_SLOTS): its header and one arrival slot per rank.
    pub fn coll(&self, i: u64) -> (&CollHeader, &[Slot]) {
        let off = off_coll(self.nranks) + (i as usize % COLL_SLOTS) * coll_stride(self.nranks);
        // SAFETY: in bounds by the layout; 8-aligned; atomics only; the slice has nranks entries.
        unsafe {
            let h = &*(self.base.add(off) as *const CollHeader);
            let s = std::slice::from_raw_parts(
                self.base.add(off + std::mem::size_of::<CollHeader>()) as *const Slot,
                self.nranks,
            );
            (h, s)
        }
    }

    pub fn aborted(&self) -> bool {
        self.header()
            .aborted
            .load(std::sync::atomic::Ordering::Acquire)
            != 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what open() mapped; no reference into it outlives self.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_aligned() {
        assert_eq!(std::mem::size_of::<Slot>(), 40);
        assert_eq!(std::mem::size_of::<Channel>() % 8, 0);
        assert_eq!(off_channels(3) % 8, 0);
        assert_eq!(coll_stride(3) % 8, 0);
        assert!(size_for(8) < 2 << 20);
    }
}
