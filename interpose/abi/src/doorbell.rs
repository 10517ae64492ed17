//! The session doorbell: how trainers' comm pollers wake a sleeping agent.
//!
//! Between bubbles the agent has nothing to do until a communication op begins on some GPU (that
//! is what opens a bubble, see the agent's detector), and only the interposer's comm poller
//! thread learns of that. So instead of polling every 50 µs all the time, the agent sleeps on
//! this futex word while no bubble is open, and a poller that has pushed a comm begin or end
//! rings it. While a bubble is open the agent polls as before (a compute launch, pushed by a
//! hook, which never makes a system call, closes it).
//!
//! File `doorbell` in the session directory, made by the agent (0600), never replaced while
//! valid (pollers keep their mapping):
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 8 | `magic` = [`DOORBELL_MAGIC`] ("FRBELL\0\x01") |
//! | 8 | 4 | `version` = [`DOORBELL_LAYOUT_VERSION`] |
//! | 16 | 4 | `seq`: the futex word, +1 per ring |
//! | 20 | 4 | `sleeping`: non-zero while the agent waits (a ringer makes the system call only then) |
//!
//! A ringer adds to `seq` and then reads `sleeping`; the agent sets `sleeping` and then reads
//! `seq` (both sequentially consistent), and FUTEX_WAIT sleeps only while `seq` still holds the
//! value the agent last saw: a ring is never lost. A trainer's ring says its poller rings (see
//! [`crate::ring::FEATURE_RINGS_DOORBELL`]); the agent sleeps on the doorbell only while every
//! trainer's does.
use crate::futex;
use crate::shm_file::{create_staging, SharedMap};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub const DOORBELL_FILE: &str = "doorbell";
pub const DOORBELL_MAGIC: u64 = u64::from_le_bytes(*b"FRBELL\0\x01");
pub const DOORBELL_LAYOUT_VERSION: u32 = 1;
/// The file's size (one page).
pub const DOORBELL_FILE_SIZE: usize = 4096;

#[repr(C)]
pub struct DoorbellBlock {
    pub magic: AtomicU64,
    pub version: AtomicU32,
    _r0: u32,
    pub seq: AtomicU32,
    pub sleeping: AtomicU32,
}

const _: () = assert!(std::mem::size_of::<DoorbellBlock>() <= DOORBELL_FILE_SIZE);
const _: () = assert!(std::mem::offset_of!(DoorbellBlock, seq) == 16);
const _: () = assert!(std::mem::offset_of!(DoorbellBlock, sleeping) == 20);

/// A mapped, validated doorbell.
pub struct Doorbell {
    map: SharedMap,
}

impl Doorbell {
    /// The agent's side: opens the valid doorbell of `dir`, or makes one (replacing an invalid
    /// file atomically).
    pub fn open_or_create(dir: &Path) -> io::Result<Doorbell> {
        if let Ok(d) = Doorbell::open(dir) {
            return Ok(d);
        }
        let tmp = create_staging(dir, DOORBELL_FILE, DOORBELL_FILE_SIZE)?;
        let map = SharedMap::open(&tmp, DOORBELL_FILE_SIZE, true, "doorbell")?;
        let d = Doorbell { map };
        let b = d.block();
        b.version.store(DOORBELL_LAYOUT_VERSION, Ordering::Relaxed);
        b.magic.store(DOORBELL_MAGIC, Ordering::Release);
        std::fs::rename(&tmp, dir.join(DOORBELL_FILE))?;
        Ok(d)
    }

    /// A ringer's side: maps `dir`'s doorbell; refused if missing, planted or of another layout.
    pub fn open(dir: &Path) -> io::Result<Doorbell> {
        let map = SharedMap::open(
            &dir.join(DOORBELL_FILE),
            DOORBELL_FILE_SIZE,
            true,
            "doorbell",
        )?;
        let d = Doorbell { map };
        let b = d.block();
        if b.magic.load(Ordering::Acquire) != DOORBELL_MAGIC {
            return Err(io::Error::other("doorbell: bad magic"));
        }
        let v = b.version.load(Ordering::Relaxed);
        if v != DOORBELL_LAYOUT_VERSION {
            return Err(io::Error::other(format!(
                "doorbell layout version {v}, this build uses {DOORBELL_LAYOUT_VERSION}"
            )));
        }
        Ok(d)
    }

    /// (device, inode) of the mapped file.
    pub fn file_id(&self) -> (u64, u64) {
        self.map.id
    }

    fn block(&self) -> &DoorbellBlock {
        // SAFETY: the mapping is live, page aligned and DOORBELL_FILE_SIZE >= size_of::<DoorbellBlock>()
        // bytes (checked at compile time); the block is repr(C) of atomics only, so any bytes are
        // a valid value and concurrent access is through atomics.
        unsafe { &*(self.map.ptr() as *const DoorbellBlock) }
    }

    /// The current count of rings (pass it to [`Doorbell::wait`]).
    pub fn seq(&self) -> u32 {
        self.block().seq.load(Ordering::SeqCst)
    }

    /// Rings: a system call only while the agent sleeps.
    pub fn ring(&self) {
        let b = self.block();
        b.seq.fetch_add(1, Ordering::SeqCst);
        if b.sleeping.load(Ordering::SeqCst) != 0 {
            // SAFETY: `seq` is an aligned 32-bit word of the live mapping.
            unsafe { futex::wake_all(b.seq.as_ptr()) };
        }
    }

    /// Sleeps until a ring after `seen` (at once if one came already) or `timeout_ns`, whichever
    /// is first; returns the count then. Spurious wake-ups are possible.
    pub fn wait(&self, seen: u32, timeout_ns: u64) -> u32 {
        let b = self.block();
        b.sleeping.store(1, Ordering::SeqCst);
        if b.seq.load(Ordering::SeqCst) == seen {
            // SAFETY: as in `ring`; it returns at once if `seq` no longer holds `seen`.
            unsafe { futex::wait(b.seq.as_ptr(), seen, timeout_ns) };
        }
        b.sleeping.store(0, Ordering::SeqCst);
        b.seq.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("frbell-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        crate::session::ensure_dir(&d).unwrap();
        crate::scratch::remove_at_exit(&d);
        d
    }

    #[test]
    fn a_ring_wakes_the_waiter_and_is_never_lost() {
        let d = dir("wake");
        assert!(Doorbell::open(&d).is_err(), "no doorbell yet");
        let agent = Doorbell::open_or_create(&d).unwrap();
        let poller = Doorbell::open(&d).unwrap();
        // A ring before the wait: the wait returns at once.
        let seen = agent.seq();
        poller.ring();
        assert_eq!(agent.wait(seen, 60_000_000_000), seen.wrapping_add(1));
        // A ring during the wait wakes it long before its timeout.
        let seen = agent.seq();
        let t0 = Instant::now();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            poller.ring();
        });
        let now = agent.wait(seen, 60_000_000_000);
        h.join().unwrap();
        assert_ne!(now, seen);
        assert!(t0.elapsed() < Duration::from_secs(30), "not woken");
        // No ring: the timeout ends the wait.
        let seen = agent.seq();
        assert_eq!(agent.wait(seen, 1_000_000), seen);
        // The agent's next start keeps the file (the pollers' mapping stays the one in use).
        let again = Doorbell::open_or_create(&d).unwrap();
        assert_eq!(again.map.id, agent.map.id);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn an_invalid_doorbell_is_refused_and_replaced_by_the_agent() {
        use std::os::unix::fs::PermissionsExt;
        let d = dir("bad");
        let p = d.join(DOORBELL_FILE);
        std::fs::write(&p, vec![7u8; DOORBELL_FILE_SIZE]).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Doorbell::open(&d).is_err(), "garbage accepted");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Doorbell::open(&d).err().unwrap().to_string();
        assert!(e.contains("mode"), "{e}");
        std::fs::write(&p, [0u8; 16]).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Doorbell::open(&d).is_err(), "short file accepted");
        let agent = Doorbell::open_or_create(&d).unwrap();
        assert!(Doorbell::open(&d).is_ok());
        assert_eq!(agent.map.id, Doorbell::open(&d).unwrap().map.id);
        let _ = std::fs::remove_dir_all(&d);
    }
}
