//! Hostile input (issue 6): random bytes, wrong magic or version, bad offsets and huge counts in
//! the shared memory the agent reads (rings) and the side tasks read (grant blocks) must never
//! crash, hang or fool the readers. Property tests (proptest) plus a hand-written corpus of the
//! classic bad files. Failing cases proptest finds are kept in `tests/hostile.proptest-regressions`
//! (commit it) and replayed first on every run.
mod common;

use common::*;
use freeride_abi::event::{Decoded, RECORD_WORDS};
use freeride_abi::grant::{
    GrantBlock, GRANT_FILE_SIZE, GRANT_LAYOUT_VERSION, GRANT_MAGIC, GRANT_OPEN,
};
use freeride_abi::grant_shm::GrantMap;
use freeride_abi::reader::{OpenError, RingReader};
use freeride_abi::ring::{self, HEADER_SIZE, MAX_CAPACITY, MIN_CAPACITY, RING_MAGIC, SLOT_SIZE};
use freeride_abi::{Api, Kind, Record, RING_LAYOUT_VERSION};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

const CAP: u32 = MIN_CAPACITY;
const PID: u32 = 7;
const START: u64 = 9;

fn cfg(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/hostile.proptest-regressions",
        ))),
        ..ProptestConfig::default()
    }
}

/// Polls an open reader many times with the stuck timeout at 0 (the worst case: every pending
/// slot is skipped) and checks every poll is bounded by its `max` and the whole drain by time.
fn drain_bounded(r: &mut RingReader) {
    r.set_stuck_timeout(0);
    let cap = r.info().capacity as usize;
    let max = 2 * cap;
    let t0 = Instant::now();
    for _ in 0..6 {
        let mut out = vec![];
        let st = r.poll(max, &mut out);
        assert!(st.records + st.invalid + st.skipped <= max as u64, "{st:?}");
        assert_eq!(out.len() as u64, st.records);
        for d in &out {
            // Only validated events come out.
            assert!(Kind::from_u8(d.kind as u8).is_some());
            assert!(Api::from_u16(d.api as u16).is_some());
        }
        let _ = r.info();
        let _ = r.writer_gone();
    }
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "drain took {:?}",
        t0.elapsed()
    );
}

fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    b.get(o..o + 4)
        .map(|s| u32::from_le_bytes(s.try_into().unwrap()))
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    b.get(o..o + 8)
        .map(|s| u64::from_le_bytes(s.try_into().unwrap()))
}

/// If `open` accepted `bytes`, the header it accepted must be a valid one for this file.
fn check_open(path: &Path, bytes: &[u8]) {
    match RingReader::open(path) {
        Err(_) => {}
        Ok(mut r) => {
            assert_eq!(u64_at(bytes, off::MAGIC), Some(RING_MAGIC));
            assert_eq!(u32_at(bytes, off::VERSION), Some(RING_LAYOUT_VERSION));
            assert_eq!(u32_at(bytes, off::HEADER_SIZE), Some(HEADER_SIZE as u32));
            assert_eq!(u32_at(bytes, off::SLOT_SIZE), Some(SLOT_SIZE as u32));
            let cap = u32_at(bytes, off::CAPACITY).unwrap();
            assert!(cap.is_power_of_two() && (MIN_CAPACITY..=MAX_CAPACITY).contains(&cap));
            assert!(
                ring::file_size(cap) <= bytes.len(),
                "cap {cap} len {}",
                bytes.len()
            );
            assert_eq!(r.info().capacity, cap);
            let lanes = u32_at(bytes, off::LANES).unwrap();
            assert!(lanes.is_power_of_two() && lanes <= ring::MAX_LANES);
            assert!(cap / lanes >= ring::MIN_LANE_CAPACITY);
            // The header must match the file name (pid, start_ns).
            assert_eq!(u32_at(bytes, off::PID), Some(PID));
            assert_eq!(r.info().start_ns, START);
            drain_bounded(&mut r);
        }
    }
}

fn valid_or<T: std::fmt::Debug + Clone + 'static>(
    v: T,
    other: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<T> {
    prop_oneof![3 => Just(v), 1 => other].boxed()
}

prop_compose! {
    /// A ring file: a valid header with each field kept or replaced (by an interesting or an
    /// arbitrary value), arbitrary cursors, sparse arbitrary words over header and slots, and a
    /// file length that is right, short or long.
    fn hostile_ring()(
        magic in valid_or(RING_MAGIC, any::<u64>()),
        version in valid_or(RING_LAYOUT_VERSION, any::<u32>()),
        hs in valid_or(HEADER_SIZE as u32, any::<u32>()),
        ss in valid_or(SLOT_SIZE as u32, prop_oneof![Just(0u32), Just(32), Just(128), any::<u32>()]),
        cap in valid_or(CAP, prop_oneof![
            Just(0u32), Just(1), Just(MIN_CAPACITY / 2), Just(MIN_CAPACITY + 1), Just(3000),
            Just(2 * CAP), Just(MAX_CAPACITY), Just(MAX_CAPACITY * 2), Just(1 << 31),
            Just(u32::MAX), any::<u32>()]),
        lanes in valid_or(1u32, prop_oneof![Just(0u32), Just(2), Just(3), Just(8), Just(16),
            Just(CAP), any::<u32>()]),
        pid in valid_or(PID, any::<u32>()),
        start in valid_or(START, any::<u64>()),
        head in prop_oneof![0u64..4 * CAP as u64, any::<u64>()],
        tail in prop_oneof![0u64..4 * CAP as u64, any::<u64>()],
        dropped in any::<u64>(),
        len in valid_or(ring::file_size(CAP), 0usize..ring::file_size(CAP) + 3 * 4096),
        words in prop::collection::vec((0usize..ring::file_size(CAP) / 8, any::<u64>()), 0..64),
        dense_seed in prop::option::of(any::<u64>()),
    ) -> Vec<u8> {
        let mut b = ring_bytes(CAP, PID, START);
        set64(&mut b, off::MAGIC, magic);
        set32(&mut b, off::VERSION, version);
        set32(&mut b, off::HEADER_SIZE, hs);
        set32(&mut b, off::LANES, lanes);
        set32(&mut b, off::SLOT_SIZE, ss);
        set32(&mut b, off::CAPACITY, cap);
        set32(&mut b, off::PID, pid);
        set64(&mut b, 32, start);
        set64(&mut b, off::HEAD, head);
        set64(&mut b, off::TAIL, tail);
        set64(&mut b, off::DROPPED, dropped);
        // Slot words: sparse chosen ones, or (sometimes) every slot word pseudo-random.
        if let Some(mut x) = dense_seed {
            for i in HEADER_SIZE / 8..b.len() / 8 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                set64(&mut b, i * 8, x);
            }
        }
        for (i, v) in words {
            // Keep the header fields chosen above (they are what shrinking should point at).
            if i * 8 >= 256 {
                set64(&mut b, i * 8, v);
            }
        }
        b.resize(len, 0);
        b
    }
}

/// Records worth decoding: each word arbitrary, with kind and api often valid.
fn record_words() -> impl Strategy<Value = [u64; RECORD_WORDS]> {
    (
        any::<[u64; RECORD_WORDS]>(),
        prop_oneof![0u8..=14, any::<u8>()],
        prop_oneof![
            prop::sample::select(Api::ALL.iter().map(|a| *a as u16).collect::<Vec<_>>()),
            any::<u16>()
        ],
    )
        .prop_map(|(mut w, kind, api)| {
            w[1] = (w[1] & !0xff_00ff) | kind as u64 | (api as u64) << 16;
            w
        })
}

#[repr(C, align(4096))]
struct Page([u8; GRANT_FILE_SIZE]);

prop_compose! {
    /// The first 128 bytes of a grant block (its fields), arbitrary with magic, version and an
    /// even epoch often right.
    fn grant_bytes()(
        mut raw in prop::collection::vec(any::<u8>(), 128),
        magic in valid_or(GRANT_MAGIC, any::<u64>()),
        version in valid_or(GRANT_LAYOUT_VERSION, any::<u32>()),
        epoch in prop_oneof![any::<u64>().prop_map(|e| e & !1), any::<u64>()],
        state in prop_oneof![0u32..3, any::<u32>()],
    ) -> Vec<u8> {
        raw[0..8].copy_from_slice(&magic.to_le_bytes());
        raw[8..12].copy_from_slice(&version.to_le_bytes());
        raw[20..24].copy_from_slice(&state.to_le_bytes());
        raw[64..72].copy_from_slice(&epoch.to_le_bytes());
        raw
    }
}

/// `snapshot` of a quiescent block: `Some` exactly when magic, version are right and the epoch is
/// even, and then it reports the bytes as they are.
fn check_grant(b: &GrantBlock, bytes: &[u8]) {
    let magic = u64_at(bytes, 0).unwrap();
    let version = u32_at(bytes, 8).unwrap();
    let epoch = u64_at(bytes, 64).unwrap();
    let valid = magic == GRANT_MAGIC && version == GRANT_LAYOUT_VERSION && epoch & 1 == 0;
    match b.snapshot() {
        None => assert!(!valid, "a valid block read as closed"),
        Some(g) => {
            assert!(
                valid,
                "accepted magic {magic:#x} version {version} epoch {epoch}"
            );
            assert_eq!(g.open, u32_at(bytes, 20) == Some(GRANT_OPEN));
            assert_eq!(g.epoch, epoch);
            assert_eq!(g.open_until_ns, u64_at(bytes, 72).unwrap());
            assert_eq!(g.budget_ns, u64_at(bytes, 80).unwrap());
            assert_eq!(g.mem_budget_bytes, u64_at(bytes, 88).unwrap());
            assert_eq!(g.heartbeat_ns, u64_at(bytes, 96).unwrap());
            assert_eq!(g.min_priority, u64_at(bytes, 104).unwrap());
        }
    }
}

proptest! {
    #![proptest_config(cfg(256))]

    /// (a) A ring file with a corrupted header, cursors, slots or length: `open` refuses it or
    /// accepts only a consistent header, and then polling is bounded and never panics.
    #[test]
    fn ring_file_garbage_is_refused_or_drained(bytes in hostile_ring()) {
        let d = tmpdir("hp-ring");
        let p = ring_path(&d, PID, START);
        write_file(&p, &bytes, 0o600);
        check_open(&p, &bytes);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// (a) Pure random bytes (any length up to two pages) are never a ring.
    #[test]
    fn random_bytes_are_never_a_ring(bytes in prop::collection::vec(any::<u8>(), 0..8192)) {
        let d = tmpdir("hp-rand");
        let p = ring_path(&d, PID, START);
        write_file(&p, &bytes, 0o600);
        prop_assert!(RingReader::open(&p).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// (a) Memory scribbled on after `open` (the writer turned hostile: a huge capacity, new
    /// cursors, garbage slots): the reader keeps its own geometry and still terminates.
    #[test]
    fn ring_scribbled_while_open(
        writes in prop::collection::vec((0usize..ring::file_size(CAP) / 8, any::<u64>()), 1..128),
        pre in prop::collection::vec(record_words(), 0..32),
        lanes in prop_oneof![Just(1u32), Just(4)],
    ) {
        let d = tmpdir("hp-live");
        let p = ring_path(&d, PID, START);
        let mut b = ring_bytes_lanes(CAP, lanes, PID, START);
        // Some committed records first (valid or not), as a producer would leave them.
        for (i, w) in pre.iter().enumerate() {
            let s = HEADER_SIZE + i * SLOT_SIZE;
            set64(&mut b, s, i as u64 + 1);
            for (k, v) in w.iter().enumerate() {
                set64(&mut b, s + 8 + 8 * k, *v);
            }
        }
        set64(&mut b, off::HEAD, pre.len() as u64);
        write_file(&p, &b, 0o600);
        let mut r = RingReader::open(&p).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        for (i, v) in &writes {
            f.write_all_at(&v.to_le_bytes(), (*i * 8) as u64).unwrap();
        }
        drain_bounded(&mut r);
        prop_assert_eq!(r.info().capacity, CAP);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// (b) Any record words: `from_record` never panics, is `Some` exactly for a known kind and
    /// api, and the word layout round-trips.
    #[test]
    fn any_record_decodes_safely(w in record_words()) {
        let r = Record::decode(&w);
        prop_assert_eq!(r.encode(), w);
        let known = Kind::from_u8(r.kind).is_some() && Api::from_u16(r.api).is_some();
        match Decoded::from_record(&r) {
            None => prop_assert!(!known),
            Some(d) => {
                prop_assert!(known);
                prop_assert_eq!(d.kind as u8, r.kind);
                prop_assert_eq!(d.api as u16, r.api);
                prop_assert_eq!(d.t_ns, r.t_ns);
                prop_assert_eq!(d.device, r.device);
                prop_assert_eq!(d.tid, r.tid);
                prop_assert_eq!(d.stream, r.stream);
            }
        }
    }

    /// (c) Any bytes in a grant block: `snapshot` never panics and is `None` (closed) unless magic
    /// and version are right and the epoch is even.
    #[test]
    fn grant_block_garbage_reads_closed(bytes in grant_bytes(), tail in any::<u64>()) {
        let mut page = Box::new(Page([0; GRANT_FILE_SIZE]));
        page.0[..bytes.len()].copy_from_slice(&bytes);
        page.0[GRANT_FILE_SIZE - 8..].copy_from_slice(&tail.to_le_bytes());
        // SAFETY: a 4096-aligned page of GRANT_FILE_SIZE >= size_of::<GrantBlock>() bytes; a
        // GrantBlock is atomics only, so any bytes are a valid value.
        let b = unsafe { &*(page.0.as_ptr() as *const GrantBlock) };
        check_grant(b, &bytes);
        let _ = b.epoch_now();
    }

    /// (c) A grant file of any length and contents: `GrantMap::open` refuses a short one (mapping
    /// it would fault on read) and reads any other one safely.
    #[test]
    fn grant_file_garbage(
        bytes in grant_bytes(),
        len in prop_oneof![Just(GRANT_FILE_SIZE), 0usize..GRANT_FILE_SIZE, GRANT_FILE_SIZE..3 * GRANT_FILE_SIZE],
    ) {
        let d = tmpdir("hp-grant");
        let p = d.join(freeride_abi::session::grant_file_name(freeride_abi::GpuId::unnamed(0)));
        let mut f = bytes.clone();
        f.resize(len, 0xa5);
        write_file(&p, &f, 0o600);
        match GrantMap::open(&p, false) {
            Err(_) => prop_assert!(len < GRANT_FILE_SIZE, "refused a {len}-byte block"),
            Ok(m) => {
                prop_assert!(len >= GRANT_FILE_SIZE, "mapped a {len}-byte block");
                check_grant(m.block(), &f);
            }
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}

// ---- The kept corpus: classic bad ring files, by hand. ----

/// Writes `bytes` as the ring of (PID, START) and opens it.
fn open_bytes(tag: &str, bytes: &[u8]) -> Result<RingReader, OpenError> {
    let d = tmpdir(tag);
    let p = ring_path(&d, PID, START);
    write_file(&p, bytes, 0o600);
    let r = RingReader::open(&p);
    std::fs::remove_dir_all(&d).unwrap();
    r
}

fn with(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut b = ring_bytes(CAP, PID, START);
    f(&mut b);
    b
}

fn invalid(r: Result<RingReader, OpenError>, what: &str) {
    match r {
        Err(OpenError::Invalid(_)) => {}
        Err(e) => panic!("{what}: expected Invalid, got {e}"),
        Ok(_) => panic!("{what}: accepted"),
    }
}

#[test]
fn corpus_lanes() {
    // A ring of 4 lanes opens; lane counts the reader refuses: none, not a power of two, more
    // than MAX_LANES, lanes of fewer than MIN_LANE_CAPACITY slots.
    let mut r = open_bytes("c-lanes", &ring_bytes_lanes(CAP, 4, PID, START)).unwrap();
    drain_bounded(&mut r);
    for l in [
        0,
        3,
        2 * ring::MAX_LANES,
        CAP / ring::MIN_LANE_CAPACITY * 2,
        u32::MAX,
    ] {
        invalid(
            open_bytes(&format!("c-lanes-{l}"), &with(|b| set32(b, off::LANES, l))),
            &format!("{l} lanes"),
        );
    }
}

#[test]
fn corpus_valid_ring_opens() {
    // The control: the builder makes a ring the reader accepts (so the refusals below are real).
    let mut r = open_bytes("c-ok", &ring_bytes(CAP, PID, START)).unwrap();
    assert_eq!(r.info().capacity, CAP);
    drain_bounded(&mut r);
}

#[test]
fn corpus_empty_and_truncated_files() {
    invalid(open_bytes("c-empty", &[]), "empty file");
    invalid(open_bytes("c-short", &[0u8; 100]), "100-byte file");
    let b = ring_bytes(CAP, PID, START);
    invalid(
        open_bytes("c-hdr", &b[..HEADER_SIZE - 1]),
        "header cut short",
    );
    // A valid header over a file cut anywhere in the slots.
    for cut in [
        HEADER_SIZE,
        HEADER_SIZE + 1,
        HEADER_SIZE + SLOT_SIZE * 100,
        b.len() - 1,
    ] {
        invalid(
            open_bytes("c-trunc", &b[..cut]),
            &format!("truncated to {cut}"),
        );
    }
}

#[test]
fn corpus_huge_file_is_refused_before_mapping() {
    let d = tmpdir("c-huge");
    let p = ring_path(&d, PID, START);
    write_file(&p, &ring_bytes(CAP, PID, START), 0o600);
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(ring::file_size(MAX_CAPACITY) as u64 + 1).unwrap(); // sparse
    invalid(RingReader::open(&p), "file larger than the largest ring");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn corpus_bad_capacity() {
    for cap in [
        0,
        1,
        MIN_CAPACITY / 2,
        MIN_CAPACITY + 1,
        3000,
        2 * CAP,
        MAX_CAPACITY,
        MAX_CAPACITY * 2,
        1 << 31,
        u32::MAX,
    ] {
        invalid(
            open_bytes("c-cap", &with(|b| set32(b, off::CAPACITY, cap))),
            &format!("capacity {cap} in a {CAP}-slot file"),
        );
    }
}

#[test]
fn corpus_bad_slot_and_header_size() {
    for ss in [0, 8, 32, 63, 65, 128, u32::MAX] {
        invalid(
            open_bytes("c-ss", &with(|b| set32(b, off::SLOT_SIZE, ss))),
            &format!("slot size {ss}"),
        );
    }
    for hs in [0, 64, 4095, 8192, u32::MAX] {
        invalid(
            open_bytes("c-hs", &with(|b| set32(b, off::HEADER_SIZE, hs))),
            &format!("header size {hs}"),
        );
    }
}

#[test]
fn corpus_bad_magic_and_version() {
    for m in [
        0,
        u64::MAX,
        u64::from_le_bytes(*b"FRRING\0\x02"),
        GRANT_MAGIC,
    ] {
        assert!(matches!(
            open_bytes("c-magic", &with(|b| set64(b, off::MAGIC, m))),
            Err(OpenError::BadMagic)
        ));
    }
    for v in [0, RING_LAYOUT_VERSION + 1, u32::MAX] {
        assert!(matches!(
            open_bytes("c-ver", &with(|b| set32(b, off::VERSION, v))),
            Err(OpenError::Version(x)) if x == v
        ));
    }
}

#[test]
fn corpus_header_not_matching_file_name() {
    invalid(
        open_bytes("c-pid", &with(|b| set32(b, off::PID, PID + 1))),
        "pid",
    );
    invalid(
        open_bytes("c-start", &with(|b| set64(b, 32, START + 1))),
        "start_ns",
    );
}

#[test]
fn corpus_huge_cursors_and_counts_terminate() {
    for (head, tail) in [
        (u64::MAX, 0),
        (0, u64::MAX),
        (u64::MAX, u64::MAX - 1),
        (1 << 63, 3),
        (CAP as u64 * 1000, 0),
    ] {
        let b = with(|b| {
            set64(b, off::HEAD, head);
            set64(b, off::TAIL, tail);
            set64(b, off::DROPPED, u64::MAX);
            // Every slot claims to be committed for some lap.
            for i in 0..CAP as usize {
                set64(
                    b,
                    HEADER_SIZE + i * SLOT_SIZE,
                    tail.wrapping_add(i as u64 + 1),
                );
            }
        });
        let mut r = open_bytes("c-cursor", &b).unwrap();
        drain_bounded(&mut r);
    }
}
