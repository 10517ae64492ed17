//! A writer for a grant block (for tests, demos and tools that stand in for the agent): the one in
//! freeride-abi, which the agent uses too.
pub use freeride_abi::grant_shm::{GrantFields, GrantWriter};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grant_watch::{GrantRead, GrantWatch};

    #[test]
    fn writer_and_watch_agree() {
        let dir = crate::testutil::temp_dir("gw");
        let mut w = GrantWatch::new(&dir, 2);
        assert_eq!(w.read(), GrantRead::NoAgent);
        let g = GrantWriter::create(&dir, freeride_abi::GpuId::unnamed(2)).unwrap();
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

    #[test]
    fn a_live_agents_block_of_another_version_reads_as_that_version() {
        let dir = crate::testutil::temp_dir("gw-version");
        let g = GrantWriter::create(&dir, freeride_abi::GpuId::unnamed(0)).unwrap();
        g.open_for(50_000_000, 0, 0);
        let other = freeride_abi::grant::GRANT_LAYOUT_VERSION + 1;
        freeride_abi::grant_shm::GrantMap::open(g.path(), true)
            .unwrap()
            .block()
            .version
            .store(other, std::sync::atomic::Ordering::Release);
        let mut w = GrantWatch::new(&dir, 0);
        assert_eq!(w.read(), GrantRead::OtherVersion(other));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// An agent that stops removes its grant blocks (issue 16): a task that follows one reads
    /// "no agent" at its next look (about a second), as with a dead agent's block, and its old
    /// mapping stays valid meanwhile (it reads the block closed).
    #[test]
    fn a_removed_block_reads_as_no_agent() {
        let dir = crate::testutil::temp_dir("gw-removed");
        let g = GrantWriter::create(&dir, freeride_abi::GpuId::unnamed(1)).unwrap();
        g.open_for(60_000_000_000, 1_000_000, 0);
        let mut w = GrantWatch::new(&dir, 1);
        assert!(matches!(w.read(), GrantRead::Grant(s) if s.open));
        g.close(0);
        std::fs::remove_file(g.path()).unwrap();
        assert!(matches!(w.read(), GrantRead::Grant(s) if !s.open));
        let t0 = std::time::Instant::now();
        while w.read() != GrantRead::NoAgent {
            assert!(t0.elapsed() < std::time::Duration::from_secs(10));
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
