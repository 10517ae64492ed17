//! Reading the agent's grant for one GPU (`grant-<bus id>` in the session directory: the block of
//! the physical GPU, whatever ordinal this process has for it). The GPU is named by the driver
//! once the task's process has it loaded and initialized ([`crate::gpu::named_gpu`]); until then
//! (and in a process that never loads one: a task without GPU work) the block read is that of
//! [`freeride_abi::GpuId::unnamed`], and the name is asked for again at every check.
//!
//! The file is mapped read-only and re-checked about once a second: a missing file is looked for
//! again, a replaced file (new inode) is re-mapped, and an agent whose pid is gone counts as no
//! agent. A block that is mid-update (odd epoch) reads as closed, as `GrantBlock::snapshot` asks.
use crate::shm_map::GrantMap;
use freeride_abi::grant::{Grant, GRANT_LAYOUT_VERSION, GRANT_MAGIC};
use freeride_abi::now_ns;
use freeride_abi::shm_file::file_id;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

const RECHECK_NS: u64 = 1_000_000_000;

/// What the grant block says right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrantRead {
    /// No valid block, or its agent is dead.
    NoAgent,
    /// The block is being updated; try again (treat as closed).
    Busy,
    /// A live agent's block of another layout version (an agent of another release): closed,
    /// whatever the task's no-agent policy (a task never runs ungoverned beside an agent).
    OtherVersion(u32),
    Grant(Grant),
}

pub struct GrantWatch {
    dir: PathBuf,
    device: u32,
    /// The driver named the GPU (`path` is final).
    named: bool,
    path: PathBuf,
    map: Option<GrantMap>,
    next_check_ns: u64,
    agent_alive: bool,
}

impl GrantWatch {
    /// The grant of device ordinal `device` of this process.
    pub fn new(session_dir: &Path, device: u32) -> Self {
        let unnamed = freeride_abi::GpuId::unnamed(device);
        GrantWatch {
            dir: session_dir.to_path_buf(),
            device,
            named: false,
            path: session_dir.join(freeride_abi::session::grant_file_name(unnamed)),
            map: None,
            next_check_ns: 0,
            agent_alive: true,
        }
    }

    /// The GPU as the records' `device` field (-1: the driver has not named it yet).
    pub fn gpu_field(&self) -> i64 {
        if !self.named {
            return -1;
        }
        self.path
            .file_name()
            .and_then(|n| freeride_abi::session::parse_grant_file_name(&n.to_string_lossy()))
            .map_or(-1, |g| g.field() as i64)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn recheck(&mut self, now: u64) {
        self.next_check_ns = now + RECHECK_NS;
        if !self.named {
            if let Some(g) = crate::gpu::named_gpu(self.device) {
                self.named = true;
                self.path = self.dir.join(freeride_abi::session::grant_file_name(g));
            }
        }
        let current = file_id(&self.path);
        let mapped = self.map.as_ref().map(|m| m.id());
        if current != mapped {
            self.map = current.and_then(|_| GrantMap::open(&self.path, false).ok());
        }
        self.agent_alive = match &self.map {
            Some(m) => {
                let pid = m.block().agent_pid.load(Ordering::Relaxed);
                pid == 0 || freeride_abi::session::pid_alive(pid)
            }
            None => false,
        };
    }

    /// Sleeps until the agent publishes the grant again or `timeout_ns` passes (a futex on the
    /// block: a grant that opens wakes the task at once); plain sleep when there is no block.
    pub fn wait_for_change(&self, timeout_ns: u64) {
        match &self.map {
            Some(m) => {
                let b = m.block();
                b.wait_for_change(b.epoch_now(), timeout_ns);
            }
            None => std::thread::sleep(std::time::Duration::from_nanos(timeout_ns)),
        }
    }

    /// Sleeps until the agent publishes a grant after the one read at `epoch` (at once if it
    /// already has) or `timeout_ns` passes; plain sleep when there is no block.
    pub fn wait_for_publish_after(&self, epoch: u64, timeout_ns: u64) {
        match &self.map {
            Some(m) => m.block().wait_for_change(epoch, timeout_ns),
            None => std::thread::sleep(std::time::Duration::from_nanos(timeout_ns)),
        }
    }

    pub fn read(&mut self) -> GrantRead {
        let now = now_ns();
        if self.map.is_none() || now >= self.next_check_ns {
            self.recheck(now);
        }
        let Some(map) = &self.map else {
            return GrantRead::NoAgent;
        };
        let b = map.block();
        let version = b.version.load(Ordering::Relaxed);
        if self.agent_alive
            && b.magic.load(Ordering::Acquire) == GRANT_MAGIC
            && version != GRANT_LAYOUT_VERSION
        {
            return GrantRead::OtherVersion(version);
        }
        if !self.agent_alive
            || b.magic.load(Ordering::Acquire) != GRANT_MAGIC
            || version != GRANT_LAYOUT_VERSION
        {
            // Let a freshly written block be noticed soon.
            self.next_check_ns = self.next_check_ns.min(now + RECHECK_NS / 10);
            return GrantRead::NoAgent;
        }
        match b.snapshot() {
            Some(g) => GrantRead::Grant(g),
            None => GrantRead::Busy,
        }
    }
}
