//! The side task's view of its GPU's grant block (`grant-gpu<N>`, written by the agent).
//!
//! Mapped read-only on first use (slow path, gate lock held). A missing file, a bad block, a block
//! being updated (seqlock odd after a few tries), a stale heartbeat or a deadline in the past all
//! read as CLOSED: a side task never runs ungoverned. While the grant reads closed, the file is
//! looked at again every [`RECHECK_NS`] (stat, compare the inode; re-map if the agent replaced it,
//! e.g. after a restart). An old mapping is never unmapped (another thread may still read it:
//! 4 KiB per agent restart).
use freeride_abi::grant::{Grant, GrantBlock, GRANT_LAYOUT_VERSION, GRANT_MAGIC};
use freeride_abi::grant_shm::GrantMap;
use freeride_abi::shm_file::file_id;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

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

pub const RECHECK_NS: u64 = 100_000_000;

pub struct GrantView {
    map: Option<&'static GrantMap>,
    path: Option<PathBuf>,
    checked_ns: u64,
}

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

impl Default for GrantView {
    fn default() -> Self {
        Self::new()
    }
}

impl GrantView {
    pub const fn new() -> Self {
        GrantView {
            map: None,
            path: None,
            checked_ns: 0,
        }
    }

    /// Sets the file this process follows (first use): `grant-gpu<device>` in the session dir.
    fn ensure_path(&mut self, device: i32) {
        if self.path.is_none() {
            let dir = freeride_abi::session::resolve_dir();
            let dev = if device >= 0 { device as u32 } else { 0 };
            self.path = Some(dir.join(freeride_abi::session::grant_file_name(dev)));
        }
    }

    fn block(&self) -> Option<&'static GrantBlock> {
        self.map.map(|m| m.block())
    }

    fn snapshot(&self) -> Option<Grant> {
        let b = self.block()?;
        for _ in 0..4 {
            if let Some(g) = b.snapshot() {
                return Some(g);
            }
            std::hint::spin_loop();
        }
        None
    }

    /// (Re-)maps the file if it is new, replaced, or was missing. Slow path.
    fn recheck(&mut self, now: u64) {
        if self.checked_ns != 0 && now.saturating_sub(self.checked_ns) < RECHECK_NS {
            return;
        }
        self.checked_ns = now.max(1);
        let Some(path) = self.path.as_ref() else {
            return;
        };
        match file_id(path) {
            Some(id) => {
                if self.map.is_some_and(|m| m.id() == id) {
                    return;
                }
                // Leaked on purpose: readers on other threads may still hold the old block.
                self.map = GrantMap::open(path, false)
                    .ok()
                    .map(|m| &*Box::leak(Box::new(m)));
                if let Some(b) = self.block() {
                    warn_if_other_version(path, b);
                }
            }
            None => self.map = None,
        }
    }

    /// The grant as it stands at `now` for a side task of `priority`; `device` picks the file on
    /// first use. A grant whose `min_priority` is above `priority` reads closed (it is reserved for
    /// more important side tasks).
    pub fn now(&mut self, now: u64, device: i32, stale_ns: u64, priority: u64) -> Now {
        self.ensure_path(device);
        if self.map.is_none() {
            self.recheck(now);
        }
        let read = |v: &Self| {
            let g = v.snapshot()?;
            let fresh = now.saturating_sub(g.heartbeat_ns) <= stale_ns;
            Some(Now {
                read_at: v.block().map(|b| (b, g.epoch)),
                open: g.open && fresh && g.open_until_ns > now && g.min_priority <= priority,
                open_until_ns: g.open_until_ns,
                budget_ns: g.budget_ns,
                mem_budget_bytes: g.mem_budget_bytes,
                side_mem_held_bytes: g.side_mem_held_bytes,
            })
        };
        match read(self) {
            Some(n) if n.open => n,
            _ => {
                // Closed, stale or unreadable: maybe the agent restarted with a new file.
                self.recheck(now);
                read(self).unwrap_or_default()
            }
        }
    }
}
