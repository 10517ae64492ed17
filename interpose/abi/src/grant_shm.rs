//! The grant block as a mapped file: [`GrantMap`] (side tasks map it read-only, the agent
//! read-write) and [`GrantWriter`], the agent's side of the seqlock protocol of [`crate::grant`]:
//! `epoch` is made odd, the fields are stored, `epoch` is made even again (Release); readers retry
//! or treat the block as closed while the epoch is odd or changed under them.
use crate::grant::{GrantBlock, GRANT_FILE_SIZE};
use crate::grant::{GRANT_CLOSED, GRANT_LAYOUT_VERSION, GRANT_MAGIC, GRANT_OPEN};
use crate::now_ns;
use crate::shm_file::{create_staging, SharedMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, Ordering};

pub struct GrantMap {
    map: SharedMap,
}

impl GrantMap {
    /// Maps the grant block at `path`. Refused: a symlink, anything but a regular file, a file
    /// owned by another user or open to group/others (a planted block must not open a gate).
    pub fn open(path: &Path, writable: bool) -> io::Result<Self> {
        let map = SharedMap::open(path, GRANT_FILE_SIZE, writable, "grant block")?;
        Ok(GrantMap { map })
    }

    /// (device, inode) of the mapped file, to notice a replaced file.
    pub fn id(&self) -> (u64, u64) {
        self.map.id
    }

    pub fn block(&self) -> &GrantBlock {
        // SAFETY: the mapping is live, page-aligned and GRANT_FILE_SIZE >= size_of::<GrantBlock>()
        // bytes (a compile-time check in freeride_abi), GrantBlock is repr(C) of atomics only, so
        // any bytes are a valid value, and concurrent writers are fine through atomics.
        unsafe { &*(self.map.ptr() as *const GrantBlock) }
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
    /// See [`crate::grant::Grant::fresh_ns`] (0: no limit).
    pub fresh_ns: u64,
}

impl GrantWriter {
    /// Creates (or replaces, atomically) GPU `gpu`'s block (`grant-<bus id>`) in `dir`, closed,
    /// with this process as its agent.
    pub fn create(dir: &Path, gpu: crate::gpu::GpuId) -> io::Result<Self> {
        if !gpu.is_known() {
            return Err(io::Error::other("no grant block for an unknown GPU"));
        }
        let name = crate::session::grant_file_name(gpu);
        let path = dir.join(&name);
        let tmp = create_staging(dir, &name, GRANT_FILE_SIZE)?;
        let map = GrantMap::open(&tmp, true)?;
        let b = map.block();
        b.version.store(GRANT_LAYOUT_VERSION, Ordering::Relaxed);
        b.device.store(gpu.0, Ordering::Relaxed);
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

    /// (device, inode) of the block this writer publishes to.
    pub fn id(&self) -> (u64, u64) {
        self.map.id()
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
        b.fresh_ns.store(f.fresh_ns, Ordering::Relaxed);
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
