//! Helpers shared by the hostile-input and session-directory tests: ring files built byte by byte.
#![allow(dead_code)]
use freeride_abi::ring::{self, HEADER_SIZE, RING_MAGIC, SLOT_SIZE, STATE_LIVE};
use freeride_abi::RING_LAYOUT_VERSION;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A fresh session directory (mode 0700) under the temp dir, unique per call.
pub fn tmpdir(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "frabi-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    freeride_abi::session::ensure_dir(&d).unwrap();
    freeride_abi::scratch::remove_at_exit(&d);
    d
}

fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// The bytes of a valid, empty ring as the interposer makes it.
pub fn ring_bytes(cap: u32, pid: u32, start_ns: u64) -> Vec<u8> {
    ring_bytes_lanes(cap, 1, pid, start_ns)
}

/// A valid, empty ring of `cap` slots in `lanes` lanes, as the interposer initializes it.
pub fn ring_bytes_lanes(cap: u32, lanes: u32, pid: u32, start_ns: u64) -> Vec<u8> {
    let mut b = vec![0u8; ring::file_size(cap)];
    put64(&mut b, 0, RING_MAGIC);
    put32(&mut b, 8, RING_LAYOUT_VERSION);
    put32(&mut b, 12, HEADER_SIZE as u32);
    put32(&mut b, 16, SLOT_SIZE as u32);
    put32(&mut b, 20, cap);
    put32(&mut b, 24, pid);
    put32(&mut b, 28, 0);
    put64(&mut b, 32, start_ns);
    put32(&mut b, 40, -1i32 as u32);
    put32(&mut b, 44, STATE_LIVE);
    put32(&mut b, off::LANES, lanes);
    let per = (cap / lanes) as usize;
    for i in 0..cap as usize {
        put64(&mut b, HEADER_SIZE + i * SLOT_SIZE, (i % per) as u64);
    }
    b
}

/// Header field offsets (see `freeride_abi::ring`).
pub mod off {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const HEADER_SIZE: usize = 12;
    pub const SLOT_SIZE: usize = 16;
    pub const CAPACITY: usize = 20;
    pub const PID: usize = 24;
    pub const LANES: usize = 52;
    pub const HEAD: usize = 64;
    pub const TAIL: usize = 128;
    pub const DROPPED: usize = 192;
}

pub fn set32(b: &mut [u8], off: usize, v: u32) {
    put32(b, off, v)
}
pub fn set64(b: &mut [u8], off: usize, v: u64) {
    put64(b, off, v)
}

/// Writes `bytes` to `path` with `mode` (replacing any file there).
pub fn write_file(path: &Path, bytes: &[u8], mode: u32) {
    let _ = std::fs::remove_file(path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
    // umask may have cleared bits the test wants.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The name the interposer gives the ring of (pid, start_ns).
pub fn ring_path(dir: &Path, pid: u32, start_ns: u64) -> PathBuf {
    dir.join(freeride_abi::session::ring_file_name(pid, start_ns))
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
