//! Permissions and planted files (issue 6): the session directory and the ring files in it must be
//! ours alone. A symlink, a directory or ring open to group/others, or one owned by another uid is
//! refused; another user cannot read a ring or write a grant block. The uid cases need root (to
//! chown to `nobody`, uid 65534, or to run a child as it); without root they are skipped with a
//! message.
mod common;

use common::*;
use freeride_abi::reader::{OpenError, RingReader};
use freeride_abi::session::{ensure_dir, validate_dir};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

const NOBODY: u32 = 65534;

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn valid_ring(dir: &Path) -> std::path::PathBuf {
    let p = ring_path(dir, 7, 9);
    write_file(&p, &ring_bytes(1024, 7, 9), 0o600);
    p
}

#[test]
fn dir_ok_is_accepted() {
    let d = tmpdir("sd-ok");
    validate_dir(&d).unwrap();
    ensure_dir(&d).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn dir_symlink_is_refused() {
    let d = tmpdir("sd-link");
    let link = d.with_extension("lnk");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&d, &link).unwrap();
    assert!(
        validate_dir(&link).is_err(),
        "validate_dir followed a symlink"
    );
    // ensure_dir must not accept (or "fix") a planted symlink either.
    assert!(ensure_dir(&link).is_err(), "ensure_dir accepted a symlink");
    // A dangling symlink where the directory should be.
    let dangling = d.with_extension("dangling");
    let _ = std::fs::remove_file(&dangling);
    std::os::unix::fs::symlink(d.join("nowhere"), &dangling).unwrap();
    assert!(
        ensure_dir(&dangling).is_err(),
        "ensure_dir accepted a dangling symlink"
    );
    std::fs::remove_file(&link).unwrap();
    std::fs::remove_file(&dangling).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn dir_open_to_group_or_others_is_refused() {
    let d = tmpdir("sd-mode");
    for mode in [0o710, 0o750, 0o770, 0o701, 0o705, 0o707, 0o755, 0o777] {
        chmod(&d, mode);
        assert!(validate_dir(&d).is_err(), "mode {mode:o} accepted");
        // An existing loose directory is refused, not silently tightened.
        assert!(ensure_dir(&d).is_err(), "ensure_dir accepted mode {mode:o}");
    }
    chmod(&d, 0o700);
    validate_dir(&d).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn dir_that_is_a_file_is_refused() {
    let d = tmpdir("sd-file");
    let f = d.join("not-a-dir");
    write_file(&f, b"x", 0o600);
    assert!(validate_dir(&f).is_err());
    assert!(ensure_dir(&f).is_err());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn dir_owned_by_another_uid_is_refused() {
    if !is_root() {
        eprintln!("skipped: needs root to chown to uid {NOBODY}");
        return;
    }
    let d = tmpdir("sd-uid");
    std::os::unix::fs::chown(&d, Some(NOBODY), Some(NOBODY)).unwrap();
    assert!(
        validate_dir(&d).is_err(),
        "a directory of uid {NOBODY} accepted"
    );
    assert!(ensure_dir(&d).is_err());
    std::os::unix::fs::chown(&d, Some(0), Some(0)).unwrap();
    validate_dir(&d).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn ring_ok_is_accepted() {
    // The control for the refusals below.
    let d = tmpdir("sd-ring-ok");
    RingReader::open(&valid_ring(&d)).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn ring_symlink_is_refused() {
    let d = tmpdir("sd-ring-link");
    let real = valid_ring(&d);
    let target = d.join("elsewhere");
    std::fs::rename(&real, &target).unwrap();
    std::os::unix::fs::symlink(&target, &real).unwrap();
    assert!(
        RingReader::open(&real).is_err(),
        "RingReader followed a planted symlink"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn ring_open_to_group_or_others_is_refused() {
    let d = tmpdir("sd-ring-mode");
    let p = valid_ring(&d);
    for mode in [0o640, 0o660, 0o604, 0o606, 0o644, 0o666, 0o610] {
        chmod(&p, mode);
        assert!(
            matches!(RingReader::open(&p), Err(OpenError::Invalid(_))),
            "ring of mode {mode:o} accepted"
        );
    }
    chmod(&p, 0o600);
    RingReader::open(&p).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn ring_owned_by_another_uid_is_refused() {
    if !is_root() {
        eprintln!("skipped: needs root to chown to uid {NOBODY}");
        return;
    }
    let d = tmpdir("sd-ring-uid");
    let p = valid_ring(&d);
    std::os::unix::fs::chown(&p, Some(NOBODY), Some(NOBODY)).unwrap();
    // Root could open it; only the owner check refuses it.
    assert!(
        matches!(RingReader::open(&p), Err(OpenError::Invalid(_))),
        "a ring of uid {NOBODY} accepted"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn planted_non_files_with_ring_names_are_refused_without_hanging() {
    let d = tmpdir("sd-fifo");
    // A FIFO: opening it for reading must not block, and it is no ring.
    let fifo = ring_path(&d, 1, 1);
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: c is a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    assert!(RingReader::open(&fifo).is_err());
    // A directory.
    let sub = ring_path(&d, 2, 2);
    std::fs::create_dir(&sub).unwrap();
    chmod(&sub, 0o700);
    assert!(RingReader::open(&sub).is_err());
    // /dev/zero behind a ring name (symlink) would map endless zeros: refused as a symlink.
    let z = ring_path(&d, 3, 3);
    std::os::unix::fs::symlink("/dev/zero", &z).unwrap();
    assert!(RingReader::open(&z).is_err());
    std::fs::remove_dir_all(&d).unwrap();
}

/// Runs `sh -c script` as uid/gid 65534; true if it exited 0.
fn as_nobody(script: &str) -> bool {
    use std::os::unix::process::CommandExt;
    Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .uid(NOBODY)
        .gid(NOBODY)
        .env_clear()
        .status()
        .unwrap()
        .success()
}

#[test]
fn another_user_cannot_read_rings_or_write_grants() {
    if !is_root() {
        eprintln!("skipped: needs root to run a child as uid {NOBODY}");
        return;
    }
    let d = tmpdir("sd-other");
    let ring = valid_ring(&d);
    let grant =
        freeride_abi::grant_shm::GrantWriter::create(&d, freeride_abi::GpuId::unnamed(0)).unwrap();
    let gp = grant.path().to_path_buf();
    // The control: the same child can read and write a file it can reach (so a failure below is
    // the permissions, not the child).
    let open = std::env::temp_dir().join(format!("frabi-sd-ctl-{}", std::process::id()));
    write_file(&open, b"x", 0o666);
    assert!(as_nobody(&format!(
        "cat '{}' >/dev/null && echo y >> '{}'",
        open.display(),
        open.display()
    )));
    std::fs::remove_file(&open).unwrap();
    // Nothing in the session directory is reachable: not listed, not read, not written.
    assert!(!as_nobody(&format!("ls '{}' >/dev/null 2>&1", d.display())));
    assert!(!as_nobody(&format!(
        "cat '{}' >/dev/null 2>&1",
        ring.display()
    )));
    assert!(!as_nobody(&format!(
        "printf 'FRGRANT' 2>/dev/null >> '{}'",
        gp.display()
    )));
    assert!(!as_nobody(&format!(
        "ln -s /tmp '{}/planted' 2>/dev/null",
        d.display()
    )));
    // And the grant block still reads as its writer left it.
    let m = freeride_abi::grant_shm::GrantMap::open(&gp, false).unwrap();
    assert!(m.block().snapshot().is_some_and(|g| !g.open));
    drop(grant);
    std::fs::remove_dir_all(&d).unwrap();
}

// Missing protections found while writing these tests (freeride_abi::grant_shm is owned by
// another change): `GrantMap::open` opens without O_NOFOLLOW and checks neither owner nor mode, so
// a planted symlink or a foreign file named `grant-<bus id>` is mapped and believed. Un-ignore once
// it refuses them.
#[test]
fn grant_symlink_is_refused() {
    let d = tmpdir("sd-grant-link");
    let w =
        freeride_abi::grant_shm::GrantWriter::create(&d, freeride_abi::GpuId::unnamed(1)).unwrap();
    let p = d.join(freeride_abi::session::grant_file_name(
        freeride_abi::GpuId::unnamed(0),
    ));
    std::os::unix::fs::symlink(w.path(), &p).unwrap();
    assert!(
        freeride_abi::grant_shm::GrantMap::open(&p, false).is_err(),
        "a planted grant symlink was followed"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn grant_owned_by_another_uid_is_refused() {
    if !is_root() {
        return;
    }
    let d = tmpdir("sd-grant-uid");
    let w =
        freeride_abi::grant_shm::GrantWriter::create(&d, freeride_abi::GpuId::unnamed(0)).unwrap();
    std::os::unix::fs::chown(w.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    assert!(freeride_abi::grant_shm::GrantMap::open(w.path(), false).is_err());
    std::fs::remove_dir_all(&d).unwrap();
}
