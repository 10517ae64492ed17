//! A writer for a grant block, following the seqlock protocol of `freeride_abi::grant`: for tests,
//! demos and tools that stand in for the agent (the agent has its own writer).
//!
//! Protocol: `epoch` is made odd, the fields are stored, `epoch` is made even again (Release);
//! readers retry or treat the block as closed while the epoch is odd or changed under them.
use crate::shm_map::GrantMap;
use freeride_abi::grant::{
    GRANT_CLOSED, GRANT_FILE_SIZE, GRANT_LAYOUT_VERSION, GRANT_MAGIC, GRANT_OPEN,
};
use freeride_abi::now_ns;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, Ordering};

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
}

impl GrantWriter {
    /// Creates (or replaces, atomically) `grant-gpu<device>` in `dir`, closed, with this process
    /// as its agent.
    pub fn create(dir: &Path, device: u32) -> io::Result<Self> {
        let path = dir.join(freeride_abi::session::grant_file_name(device));
        let tmp = dir.join(format!(".grant-gpu{device}.tmp-{}", std::process::id()));
        std::fs::write(&tmp, vec![0u8; GRANT_FILE_SIZE])?;
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
        b.heartbeat_ns.store(now_ns(), Ordering::Relaxed);
        b.epoch.store((e | 1) + 1, Ordering::Release);
    }

    /// Opens a grant of `dur_ns` from now with `budget_ns` of GPU time.
    pub fn open_for(&self, dur_ns: u64, budget_ns: u64, mem_budget_bytes: u64) -> u64 {
        let until = now_ns() + dur_ns;
        self.publish(GrantFields {
            open: true,
            open_until_ns: until,
            budget_ns,
            mem_budget_bytes,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grant_watch::{GrantRead, GrantWatch};

    #[test]
    fn writer_and_watch_agree() {
        let dir = crate::testutil::temp_dir("gw");
        let mut w = GrantWatch::new(&dir, 2);
        assert_eq!(w.read(), GrantRead::NoAgent);
        let g = GrantWriter::create(&dir, 2).unwrap();
        let mut w = GrantWatch::new(&dir, 2);
        match w.read() {
            GrantRead::Grant(s) => assert!(!s.open),
            other => panic!("{other:?}"),
        }
        let until = g.open_for(5_000_000, 4_000_000, 1 << 20);
        match w.read() {
            GrantRead::Grant(s) => {
                assert!(s.open);
                assert_eq!(s.open_until_ns, until);
                assert_eq!(s.budget_ns, 4_000_000);
                assert_eq!(s.mem_budget_bytes, 1 << 20);
                assert_eq!(s.epoch % 2, 0);
            }
            other => panic!("{other:?}"),
        }
        g.invalidate();
        assert_eq!(w.read(), GrantRead::NoAgent);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
