//! Reading the agent's grant for one GPU (`grant-gpu<N>` in the session directory).
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
    path: PathBuf,
    map: Option<GrantMap>,
    next_check_ns: u64,
    agent_alive: bool,
}

impl GrantWatch {
    pub fn new(session_dir: &Path, device: u32) -> Self {
        GrantWatch {
            path: session_dir.join(freeride_abi::session::grant_file_name(device)),
            map: None,
            next_check_ns: 0,
            agent_alive: true,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn recheck(&mut self, now: u64) {
        self.next_check_ns = now + RECHECK_NS;
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
