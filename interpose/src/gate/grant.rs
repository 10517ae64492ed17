//! The side task's view of each GPU's grant block (`grant-<bus id>`, written by the agent), one per
//! device ordinal of this process, each the block of that ordinal's physical GPU
//! ([`crate::gpus`]: the name an agent gives it, whatever ordinal the trainers there have), read
//! lock-free (the launch gate and the allocation hooks both read it; neither
//! takes a lock for it).
//!
//! Mapped read-only on first use (slow path of a side task). A missing file, a bad block, a block
//! being updated (seqlock odd after a few tries), a stale heartbeat or a deadline in the past all
//! read as CLOSED: a side task never runs ungoverned. While the grant reads closed, the file is
//! looked at again every [`RECHECK_NS`] by one thread at a time (stat, compare the inode; re-map
//! if the agent replaced it, e.g. after a restart). An old mapping is never unmapped (another
//! thread may still read it: 4 KiB per agent restart).
use super::membudget::{self, MAX_GPUS};
use freeride_abi::grant::{Grant, GrantBlock, GRANT_LAYOUT_VERSION, GRANT_MAGIC};
use freeride_abi::grant_shm::GrantMap;
use freeride_abi::shm_file::file_id;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

/// The last foreign grant layout version reported (0: none), so that each is said once.
static REPORTED_VERSION: AtomicU32 = AtomicU32::new(0);

/// A grant block of another layout version (an agent of another release) reads as CLOSED forever:
/// the side task is held, never ungoverned. Says so once on stderr (slow path of a side task).
fn warn_if_other_version(path: &Path, b: &GrantBlock) {
    if b.magic.load(Ordering::Acquire) != GRANT_MAGIC {
        return;
    }
    let v = b.version.load(Ordering::Relaxed);
    if v != GRANT_LAYOUT_VERSION && REPORTED_VERSION.swap(v, Ordering::Relaxed) != v {
        eprintln!(
            "freeride gate: {} has grant layout version {v}, this libfreeride.so reads version \
             {GRANT_LAYOUT_VERSION}: the agent is of another release; launches are held until \
             an agent of this release serves the GPU",
            path.display()
        );
    }
}

/// The (device, inode) of the last grant file reported unusable, so that each is said once.
static REPORTED_UNUSABLE: AtomicU64 = AtomicU64::new(0);

/// A grant file the gate cannot use (another owner, a mode that lets others open it, too short)
/// reads as CLOSED: the side task is held, never ungoverned. Says why once per file on stderr, so a
/// held side task is not silent about it (slow path of a side task).
fn warn_unusable(path: &Path, e: &std::io::Error, id: (u64, u64)) {
    let key = (id.0 << 40 ^ id.1).max(1);
    if REPORTED_UNUSABLE.swap(key, Ordering::Relaxed) != key {
        eprintln!(
            "freeride gate: cannot use the grant block {}: {e}; launches are held until a block \
             this user owns, mode 0600 (as `freeride agent` makes it), is there",
            path.display()
        );
    }
}

pub const RECHECK_NS: u64 = 100_000_000;

/// One GPU's block: the current mapping (leaked, never unmapped) and when the file was last
/// looked at.
struct View {
    map: AtomicPtr<GrantMap>,
    checked_ns: AtomicU64,
}

static VIEWS: [View; MAX_GPUS] = [const {
    View {
        map: AtomicPtr::new(std::ptr::null_mut()),
        checked_ns: AtomicU64::new(0),
    }
}; MAX_GPUS];

/// What the gate needs to know now.
#[derive(Clone, Copy, Default)]
pub struct Now {
    /// Open, fresh and not past its deadline.
    pub open: bool,
    pub open_until_ns: u64,
    pub budget_ns: u64,
    pub mem_budget_bytes: u64,
    /// What all side tasks on the GPU hold (see [`Grant::mem_limit_for`]).
    pub side_mem_held_bytes: u64,
    /// The block read and the epoch this was read at (None: no block, or it could not be read):
    /// a closed grant is waited for on it, woken by the agent's next publish.
    pub read_at: Option<(&'static GrantBlock, u64)>,
}

impl Now {
    /// The memory this process may hold in all, holding `own_held` (0: no budget from the agent).
    pub fn mem_limit_for(&self, own_held: u64) -> u64 {
        Grant {
            mem_budget_bytes: self.mem_budget_bytes,
            side_mem_held_bytes: self.side_mem_held_bytes,
            ..Grant::default()
        }
        .mem_limit_for(own_held)
    }
}

/// The block of device ordinal `ordinal`'s GPU (`None`: the driver cannot name it now: closed).
fn path_of(ordinal: usize) -> Option<PathBuf> {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let gpu = crate::gpus::of_ordinal(ordinal as i32);
    gpu.is_known().then(|| {
        DIR.get_or_init(freeride_abi::session::resolve_dir)
            .join(freeride_abi::session::grant_file_name(gpu))
    })
}

fn block(v: &View) -> Option<&'static GrantBlock> {
    let p = v.map.load(Ordering::Acquire);
    // SAFETY: a non-null pointer here came from Box::leak of a live GrantMap: never freed.
    (!p.is_null()).then(|| unsafe { &*p }.block())
}

fn snapshot(b: &GrantBlock) -> Option<Grant> {
    for _ in 0..4 {
        if let Some(g) = b.snapshot() {
            return Some(g);
        }
        std::hint::spin_loop();
    }
    None
}

/// (Re-)maps GPU `gpu`'s file if it is new, replaced, or was missing: at most every
/// [`RECHECK_NS`], by the thread that claims the look (the others go on with what is mapped).
fn recheck(gpu: usize, now: u64) {
    let v = &VIEWS[gpu];
    let last = v.checked_ns.load(Ordering::Acquire);
    if last != 0 && now.saturating_sub(last) < RECHECK_NS {
        return;
    }
    if v.checked_ns
        .compare_exchange(last, now.max(1), Ordering::AcqRel, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    let Some(path) = path_of(gpu) else {
        v.map.store(std::ptr::null_mut(), Ordering::Release);
        return;
    };
    let cur = v.map.load(Ordering::Acquire);
    match file_id(&path) {
        Some(id) => {
            // SAFETY: as in `block`.
            if !cur.is_null() && unsafe { &*cur }.id() == id {
                return;
            }
            // Leaked on purpose: readers on other threads may still hold the old block.
            let m = match GrantMap::open(&path, false) {
                Ok(m) => Box::into_raw(Box::new(m)),
                Err(e) => {
                    warn_unusable(&path, &e, id);
                    std::ptr::null_mut()
                }
            };
            v.map.store(m, Ordering::Release);
            if let Some(b) = block(v) {
                warn_if_other_version(&path, b);
            }
        }
        None => v.map.store(std::ptr::null_mut(), Ordering::Release),
    }
}

/// The grant of device `device` as it stands at `now` for a side task of `priority`. A grant
/// whose `min_priority` is above `priority` reads closed (it is kept for more important side
/// tasks). Lock-free.
pub fn now(device: i32, now: u64, stale_ns: u64, priority: u64) -> Now {
    let gpu = membudget::gpu(device);
    let v = &VIEWS[gpu];
    if v.map.load(Ordering::Acquire).is_null() {
        recheck(gpu, now);
    }
    let read = || {
        let b = block(v)?;
        let g = snapshot(b)?;
        Some(Now {
            read_at: Some((b, g.epoch)),
            open: g.open_at(now, stale_ns) && g.min_priority <= priority,
            open_until_ns: g.open_until_ns,
            budget_ns: g.budget_ns,
            mem_budget_bytes: g.mem_budget_bytes,
            side_mem_held_bytes: g.side_mem_held_bytes,
        })
    };
    match read() {
        Some(n) if n.open => n,
        _ => {
            // Closed, stale or unreadable: maybe the agent restarted with a new file.
            recheck(gpu, now);
            read().unwrap_or_default()
        }
    }
}
