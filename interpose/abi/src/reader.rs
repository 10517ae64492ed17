//! Safe reader for the agent: opens a ring file, validates its header, and pops decoded events.
//!
//! Every value read from the mapping is treated as untrusted: the geometry is validated once at
//! open and then kept in the reader's own memory; records with an unknown kind or api are counted
//! as invalid and skipped; a slot that a producer reserved but never committed is skipped after
//! [`RingReader::set_stuck_timeout`]. Nothing in the file's contents can make the reader read out
//! of bounds, loop forever or panic.
//!
//! A ring of several lanes ([`crate::ring`]: a launching thread's own queue each) is read as one
//! sequence: each poll drains every lane, then hands out the records in time order (`t_ns`) while
//! keeping each lane's own order, up to the time the poll began. A record stamped after that (its
//! thread was pushing while the lanes were read) waits for the next poll, so that one pushed a
//! moment later into a lane already read cannot come out before it; what comes after a record
//! causally (a communication op's GPU-side begin after its issue) is stamped later and comes later.
//! A record pushed late (its thread descheduled between its clock read and its push) comes when it
//! comes, as it did through one queue; but a GPU's declaration (`DeviceInfo`) read in the same poll
//! as records of its lane stamped after it goes before them, whatever the lanes.
//!
//! Threat model: the session directory is 0700 and ring files must be owned by the reader's uid.
//! Shrinking a mapped file (which would raise SIGBUS) needs the same uid, which could also just
//! kill the agent, so it is outside the model.
use crate::event::{Decoded, Kind};
use crate::ring::{Geometry, Pop, RingView, HEADER_SIZE, RING_MAGIC, SLOT_SIZE, STATE_EXITED};
use crate::{Role, RING_LAYOUT_VERSION};
use std::collections::VecDeque;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// Why a ring file was refused.
#[derive(Debug)]
pub enum OpenError {
    Io(io::Error),
    /// Not (yet) a ring: wrong magic (the creator may still be initializing it).
    BadMagic,
    /// A ring of another layout version.
    Version(u32),
    /// Inconsistent header or file (message says what).
    Invalid(String),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Io(e) => write!(f, "i/o error: {e}"),
            OpenError::BadMagic => write!(f, "not a freeride ring (bad magic)"),
            OpenError::Version(v) => {
                write!(
                    f,
                    "ring layout version {v}, this agent reads version {RING_LAYOUT_VERSION}: \
                     the process runs a libfreeride.so of another release and is not observed \
                     (run the agent and the interposer of one release)"
                )
            }
            OpenError::Invalid(s) => write!(f, "invalid ring: {s}"),
        }
    }
}

impl std::error::Error for OpenError {}

impl From<io::Error> for OpenError {
    fn from(e: io::Error) -> Self {
        OpenError::Io(e)
    }
}

/// Header facts of a ring (a snapshot; `device`, `state` and `dropped` change over time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingInfo {
    pub path: PathBuf,
    pub pid: u32,
    pub role: Option<Role>,
    pub start_ns: u64,
    pub capacity: u32,
    pub device: i32,
    pub exited: bool,
    pub dropped: u64,
}

/// Counters of one [`RingReader::poll`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollStats {
    pub records: u64,
    /// Records with an unknown kind/api (corrupt or newer layout), skipped.
    pub invalid: u64,
    /// Slots reserved but never committed, skipped after the stuck timeout.
    pub skipped: u64,
}

/// The reader's state of one lane.
struct Lane {
    cursor: u64,
    /// (cursor, since when) of a slot reserved and not committed yet.
    pending_since: Option<(u64, u64)>,
    /// Drained and not handed out yet (stamped after the poll began), in the lane's order.
    held: VecDeque<Decoded>,
}

pub struct RingReader {
    path: PathBuf,
    map: *mut libc::c_void,
    len: usize,
    view: RingView,
    lanes: Vec<Lane>,
    pid: u32,
    role: Option<Role>,
    start_ns: u64,
    capacity: u32,
    stuck_timeout_ns: u64,
}

// SAFETY: the reader owns its mapping; all shared accesses are atomic.
unsafe impl Send for RingReader {}

impl RingReader {
    /// Opens and validates a ring file. The reader becomes the ring's (single) consumer.
    pub fn open(path: &Path) -> Result<RingReader, OpenError> {
        let c = crate::session::cstring(path)?;
        // SAFETY: c is a valid NUL-terminated path; flags are plain constants.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error().into());
        }
        let res = Self::open_fd(path, fd);
        // SAFETY: fd is ours; the mapping (if any) stays valid after close.
        unsafe { libc::close(fd) };
        res
    }

    fn open_fd(path: &Path, fd: i32) -> Result<RingReader, OpenError> {
        let md = std::fs::metadata(format!("/proc/self/fd/{fd}"))?;
        if !md.file_type().is_file() {
            return Err(OpenError::Invalid("not a regular file".into()));
        }
        // SAFETY: geteuid has no preconditions.
        if md.uid() != unsafe { libc::geteuid() } {
            return Err(OpenError::Invalid(format!("owned by uid {}", md.uid())));
        }
        // The interposer creates rings 0600; group/other bits mean someone else made or loosened it.
        if md.mode() & 0o077 != 0 {
            return Err(OpenError::Invalid(format!(
                "mode {:o}: accessible to group or others",
                md.mode() & 0o777
            )));
        }
        let len = md.len();
        if len < HEADER_SIZE as u64
            || len > crate::ring::file_size(crate::ring::MAX_CAPACITY) as u64
        {
            return Err(OpenError::Invalid(format!("file size {len}")));
        }
        let len = len as usize;
        // SAFETY: mapping `len` bytes of a regular file of that size, shared, read-write.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error().into());
        }
        let unmap = |e: OpenError| {
            // SAFETY: map/len come from the successful mmap above and are unmapped once.
            unsafe { libc::munmap(map, len) };
            Err(e)
        };
        // Read the header through a minimal view (capacity 1 covers only the header words).
        // SAFETY: the mapping holds at least HEADER_SIZE bytes and is page aligned.
        let hv = unsafe { RingView::new(map as *mut u8, Geometry::single(1)) };
        let h = hv.header();
        if h.magic.load(Ordering::Acquire) != RING_MAGIC {
            return unmap(OpenError::BadMagic);
        }
        let version = h.version.load(Ordering::Relaxed);
        if version != RING_LAYOUT_VERSION {
            return unmap(OpenError::Version(version));
        }
        let hs = h.header_size.load(Ordering::Relaxed);
        let ss = h.slot_size.load(Ordering::Relaxed);
        let cap = h.capacity.load(Ordering::Relaxed);
        let lanes = h.lanes.load(Ordering::Relaxed);
        if hs as usize != HEADER_SIZE || ss as usize != SLOT_SIZE {
            return unmap(OpenError::Invalid(format!(
                "header_size {hs}, slot_size {ss}"
            )));
        }
        if !cap.is_power_of_two()
            || !(crate::ring::MIN_CAPACITY..=crate::ring::MAX_CAPACITY).contains(&cap)
        {
            return unmap(OpenError::Invalid(format!("capacity {cap}")));
        }
        if !lanes.is_power_of_two()
            || lanes > crate::ring::MAX_LANES
            || cap / lanes < crate::ring::MIN_LANE_CAPACITY
        {
            return unmap(OpenError::Invalid(format!(
                "{lanes} lanes of a {cap}-slot ring"
            )));
        }
        if crate::ring::file_size(cap) > len {
            return unmap(OpenError::Invalid(format!(
                "capacity {cap} exceeds file size {len}"
            )));
        }
        let pid = h.pid.load(Ordering::Relaxed);
        let start_ns = h.start_ns.load(Ordering::Relaxed);
        let role = Role::from_u32(h.role.load(Ordering::Relaxed));
        if let Some((fp, ft)) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(crate::session::parse_ring_file_name)
        {
            if fp != pid || ft != start_ns {
                return unmap(OpenError::Invalid("header does not match file name".into()));
            }
        }
        // SAFETY: validated: the mapping holds file_size(cap) bytes and stays mapped until drop.
        let view = unsafe {
            RingView::new(
                map as *mut u8,
                Geometry {
                    capacity: cap,
                    lanes,
                },
            )
        };
        let lanes = (0..lanes)
            .map(|l| Lane {
                cursor: view.tail_of(l),
                pending_since: None,
                held: VecDeque::new(),
            })
            .collect();
        Ok(RingReader {
            path: path.to_path_buf(),
            map,
            len,
            view,
            lanes,
            pid,
            role,
            start_ns,
            capacity: cap,
            stuck_timeout_ns: 200_000_000,
        })
    }

    /// How long a reserved-but-uncommitted slot may block the reader before it is skipped
    /// (default 200 ms).
    pub fn set_stuck_timeout(&mut self, ns: u64) {
        self.stuck_timeout_ns = ns;
    }

    pub fn info(&self) -> RingInfo {
        let h = self.view.header();
        RingInfo {
            path: self.path.clone(),
            pid: self.pid,
            role: self.role,
            start_ns: self.start_ns,
            capacity: self.capacity,
            device: h.device.load(Ordering::Relaxed),
            exited: h.state.load(Ordering::Relaxed) == STATE_EXITED,
            dropped: h.dropped.load(Ordering::Relaxed),
        }
    }

    /// How many records each lane has taken so far (its `head`; untrusted values): which lanes the
    /// writer's threads push to.
    pub fn lane_heads(&self) -> Vec<u64> {
        (0..self.lanes.len() as u32)
            .map(|l| self.view.head(l).load(Ordering::Acquire))
            .collect()
    }

    /// Lets the writer report its ops' ends lazily until `until_ns` (0: promptly), the one
    /// header word the agent writes besides the tails ([`crate::ring::RingHeader::ends_lazy`]).
    pub fn let_ends_be_lazy_until(&self, until_ns: u64) {
        self.view.header().let_ends_be_lazy_until(until_ns);
    }

    /// Until when the writer's ends may reach this reader late (0: never; untrusted).
    pub fn ends_late_until(&self) -> u64 {
        self.view.header().ends_late_until()
    }

    /// What the process's side-task gate last published (all zero for a trainer, or a side task
    /// whose gate has admitted nothing yet). Untrusted values.
    pub fn gate_status(&self) -> crate::ring::GateStatus {
        self.view.header().gate_status()
    }

    /// Whether the writer's comm poller rings the session doorbell (read from the header now).
    pub fn rings_doorbell(&self) -> bool {
        self.view.header().features.load(Ordering::Acquire) & crate::ring::FEATURE_RINGS_DOORBELL
            != 0
    }

    /// True when the writer marked the ring exited, or its process is gone.
    pub fn writer_gone(&self) -> bool {
        self.info().exited || !crate::session::pid_alive(self.pid)
    }

    /// Pops up to `max` events into `out` (in time order across lanes, see the module docs).
    pub fn poll(&mut self, max: usize, out: &mut Vec<Decoded>) -> PollStats {
        let mut st = PollStats::default();
        if self.lanes.len() == 1 {
            // One queue: its order is the order (but for declarations, see `place`).
            let mut taken = 0;
            let before = out.len();
            self.drain(0, max, &mut taken, &mut st, &mut |d| {
                let at = before + place(out[before..].iter(), &d);
                out.insert(at, d)
            });
            st.records = taken as u64;
            return st;
        }
        let began = crate::now_ns();
        let mut taken: usize = self.lanes.iter().map(|l| l.held.len()).sum();
        // The comm threads' lane (the last) first: a GPU-side begin or end read there was pushed
        // after the issue it reports on, which is then in its lane by the time that is read.
        for lane in (0..self.lanes.len()).rev() {
            let mut held = std::mem::take(&mut self.lanes[lane].held);
            self.drain(lane, max, &mut taken, &mut st, &mut |d| {
                held.insert(place(held.iter(), &d), d)
            });
            self.lanes[lane].held = held;
        }
        let before = out.len();
        self.merge(began, out);
        if self.lanes.iter().any(|l| !l.held.is_empty()) && self.writer_gone() {
            // Nothing more will come: what was held goes now.
            self.merge(u64::MAX, out);
        }
        st.records = (out.len() - before) as u64;
        st
    }

    /// Pops lane `lane` into `put` while `*taken` (records popped, held ones counted) is below
    /// `max`; counts invalid and skipped records in `st` and popped ones in `taken`.
    fn drain(
        &mut self,
        lane: usize,
        max: usize,
        taken: &mut usize,
        st: &mut PollStats,
        put: &mut dyn FnMut(Decoded),
    ) {
        let l = lane as u32;
        while (*taken as u64 + st.invalid + st.skipped) < max as u64 {
            match self.view.pop_lane(l, &mut self.lanes[lane].cursor) {
                Pop::Record(r) => {
                    self.lanes[lane].pending_since = None;
                    match Decoded::from_record(&r) {
                        Some(d) => {
                            *taken += 1;
                            put(d);
                        }
                        None => st.invalid += 1,
                    }
                }
                Pop::Empty => break,
                Pop::Pending => {
                    let now = crate::now_ns();
                    let cursor = self.lanes[lane].cursor;
                    match self.lanes[lane].pending_since {
                        Some((pos, since)) if pos == cursor => {
                            if now.saturating_sub(since) >= self.stuck_timeout_ns
                                || self.writer_gone()
                            {
                                self.view.skip(l, &mut self.lanes[lane].cursor);
                                self.lanes[lane].pending_since = None;
                                st.skipped += 1;
                                continue;
                            }
                        }
                        _ => self.lanes[lane].pending_since = Some((cursor, now)),
                    }
                    break;
                }
            }
        }
    }

    /// Hands out the held records stamped at or before `upto`, earliest first, each lane in its
    /// own order (a lane's next record waits while an earlier one of its lane is held).
    fn merge(&mut self, upto: u64, out: &mut Vec<Decoded>) {
        loop {
            let next = self
                .lanes
                .iter()
                .enumerate()
                .filter_map(|(i, l)| l.held.front().map(|d| (d.t_ns, i)))
                .min();
            match next {
                Some((t, i)) if t <= upto => out.extend(self.lanes[i].held.pop_front()),
                _ => return,
            }
        }
    }
}

/// Where `d` goes among the records of its lane read in this poll, `lane` (in the lane's order):
/// at the end, unless it is a declaration ([`Kind::DeviceInfo`], stamped just after the process's
/// start): that goes before the first of them stamped after it. Another thread may have pushed
/// into the same lane a record naming the GPU before the declaring thread got to push (descheduled
/// while the other gave up waiting for it); the declaration still comes before what names it.
/// Anything else goes at the end without looking at the lane: a poll reads up to its `max` records,
/// and walking them for each would make the poll quadratic.
fn place<'a>(mut lane: impl ExactSizeIterator<Item = &'a Decoded>, d: &Decoded) -> usize {
    let len = lane.len();
    if d.kind != Kind::DeviceInfo {
        return len;
    }
    lane.position(|r| r.t_ns > d.t_ns).unwrap_or(len)
}

impl Drop for RingReader {
    fn drop(&mut self) {
        // SAFETY: map/len come from our successful mmap and are unmapped exactly once.
        unsafe { libc::munmap(self.map, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Api, Kind, Record};
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("frabi-rd-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        crate::session::ensure_dir(&d).unwrap();
        crate::scratch::remove_at_exit(&d);
        d
    }

    /// Creates a ring file like the interposer does and returns a writer view on it.
    fn make(dir: &Path, cap: u32) -> (PathBuf, RingView) {
        make_ring(dir, cap, 1, 7)
    }

    /// A ring of `lanes` lanes made like the interposer's, by this (live) process.
    fn make_lanes(dir: &Path, cap: u32, lanes: u32) -> (PathBuf, RingView) {
        make_ring(dir, cap, lanes, std::process::id())
    }

    fn make_ring(dir: &Path, cap: u32, lanes: u32, pid: u32) -> (PathBuf, RingView) {
        let p = dir.join(crate::session::ring_file_name(pid, 9));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&p)
            .unwrap();
        f.set_len(crate::ring::file_size(cap) as u64).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: mapping the file we just sized.
        let m = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                crate::ring::file_size(cap),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(m, libc::MAP_FAILED);
        // SAFETY: m maps file_size(cap) bytes; leaked for the test's duration.
        let v = unsafe {
            RingView::new(
                m as *mut u8,
                Geometry {
                    capacity: cap,
                    lanes,
                },
            )
        };
        v.initialize(pid, 0, 9);
        (p, v)
    }

    fn at(t: u64) -> Record {
        Record {
            t_ns: t,
            kind: Kind::Launch as u8,
            api: Api::CuLaunchKernel as u16,
            ..Default::default()
        }
    }

    #[test]
    fn lanes_come_out_in_time_order_each_in_its_own_order() {
        let d = tmpdir("lanes");
        let (p, w) = make_lanes(&d, 4096, 4);
        let mut r = RingReader::open(&p).unwrap();
        for t in [10, 40, 70] {
            w.push_lane(0, &at(t));
        }
        for t in [20, 50] {
            w.push_lane(1, &at(t));
        }
        // A lane whose own order is not its times' (a comm thread reporting GPU times): kept.
        for t in [60, 30] {
            w.push_lane(3, &at(t));
        }
        let mut out = vec![];
        let st = r.poll(100, &mut out);
        assert_eq!(st.records, 7);
        let ts: Vec<u64> = out.iter().map(|d| d.t_ns).collect();
        assert_eq!(ts, [10, 20, 40, 50, 60, 30, 70]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_declaration_pushed_late_into_a_shared_lane_still_comes_first() {
        let d = tmpdir("lanes-decl");
        for lanes in [1, 4] {
            let (p, w) = make_lanes(&d, 4096, lanes);
            let mut r = RingReader::open(&p).unwrap();
            // Thread B's launch went into the lane before thread A, which declares the GPU
            // (stamped at start + 1 ns), got to push.
            w.push_lane(0, &at(1000));
            let decl = Record {
                t_ns: 10,
                kind: Kind::DeviceInfo as u8,
                api: Api::None as u16,
                ..Default::default()
            };
            w.push_lane(0, &decl);
            w.push_lane(0, &at(1001));
            let mut out = vec![];
            assert_eq!(r.poll(100, &mut out).records, 3);
            let got: Vec<(u64, Kind)> = out.iter().map(|d| (d.t_ns, d.kind)).collect();
            assert_eq!(
                got,
                [
                    (10, Kind::DeviceInfo),
                    (1000, Kind::Launch),
                    (1001, Kind::Launch)
                ],
                "{lanes} lanes"
            );
            drop(r);
            std::fs::remove_file(&p).unwrap();
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Records already read in a poll, which may be counted but never walked.
    struct Unwalkable<'a>(usize, std::marker::PhantomData<&'a Decoded>);
    impl<'a> Iterator for Unwalkable<'a> {
        type Item = &'a Decoded;
        fn next(&mut self) -> Option<&'a Decoded> {
            panic!("a record that is not a declaration made place() walk the lane");
        }
        fn size_hint(&self) -> (usize, Option<usize>) {
            (self.0, Some(self.0))
        }
    }
    impl ExactSizeIterator for Unwalkable<'_> {}

    /// The 2026-12-04 GPU run: walking the lane for every record made a poll of 4096 records take
    /// 4096 * 4096 / 2 steps (`scripts/bench-hook` did not finish in 60 s on the 16-core host).
    #[test]
    fn only_a_declaration_looks_back_into_its_lane() {
        let launch = Decoded::from_record(&at(1000)).unwrap();
        assert_eq!(
            place(Unwalkable(4096, std::marker::PhantomData), &launch),
            4096
        );
        let decl = Decoded::from_record(&Record {
            t_ns: 10,
            kind: Kind::DeviceInfo as u8,
            api: Api::None as u16,
            ..Default::default()
        })
        .unwrap();
        let lane = [Decoded::from_record(&at(5)).unwrap(), launch];
        assert_eq!(place(lane.iter(), &decl), 1);
        assert_eq!(place(lane[..1].iter(), &decl), 1);
    }

    #[test]
    fn a_record_stamped_after_the_poll_began_waits_for_the_next() {
        let d = tmpdir("lanes-late");
        let (p, w) = make_lanes(&d, 4096, 4);
        let mut r = RingReader::open(&p).unwrap();
        let later = crate::now_ns() + 60_000_000_000;
        w.push_lane(0, &at(later));
        w.push_lane(0, &at(5));
        w.push_lane(1, &at(7));
        let mut out = vec![];
        // Lane 0's second record waits behind its first; lane 1's goes.
        assert_eq!(r.poll(100, &mut out).records, 1);
        assert_eq!(out[0].t_ns, 7);
        assert_eq!(
            r.poll(100, &mut out).records,
            0,
            "held while its writer lives"
        );
        // Its writer gone, what was held goes, in the lane's order.
        w.header()
            .state
            .store(crate::ring::STATE_EXITED, Ordering::Relaxed);
        assert_eq!(r.poll(100, &mut out).records, 2);
        assert_eq!(out[1].t_ns, later);
        assert_eq!(out[2].t_ns, 5);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_stuck_slot_of_one_lane_is_skipped_and_the_others_go_on() {
        let d = tmpdir("lanes-stuck");
        let (p, w) = make_lanes(&d, 4096, 4);
        let mut r = RingReader::open(&p).unwrap();
        r.set_stuck_timeout(1_000_000);
        // Lane 2: slot 0 reserved and never committed, a record committed after it.
        w.head(2).store(1, Ordering::Relaxed);
        w.push_lane(2, &at(2));
        w.push_lane(1, &at(3));
        let mut out = vec![];
        let st = r.poll(10, &mut out);
        assert_eq!((st.records, st.skipped), (1, 0), "lane 1 goes on");
        assert_eq!(out[0].t_ns, 3);
        std::thread::sleep(std::time::Duration::from_millis(3));
        let st = r.poll(10, &mut out);
        assert_eq!((st.records, st.skipped), (1, 1));
        assert_eq!(out[1].t_ns, 2);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn read_back() {
        let d = tmpdir("rb");
        let (p, w) = make(&d, 1024);
        for i in 0..10 {
            w.push(&Record {
                t_ns: i,
                kind: Kind::Launch as u8,
                api: Api::CuLaunchKernel as u16,
                ..Default::default()
            });
        }
        w.push(&Record {
            kind: 250,
            ..Default::default()
        });
        let mut r = RingReader::open(&p).unwrap();
        assert_eq!(r.info().pid, 7);
        let mut out = vec![];
        let st = r.poll(1000, &mut out);
        assert_eq!(st.records, 10);
        assert_eq!(st.invalid, 1);
        assert_eq!(out[3].t_ns, 3);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn stuck_slot_is_skipped() {
        let d = tmpdir("stuck");
        let (p, w) = make(&d, 1024);
        // Reserve slot 0 without committing it, then commit one after it.
        w.header().head.store(1, Ordering::Relaxed);
        w.push(&Record {
            kind: Kind::Launch as u8,
            api: 1,
            ..Default::default()
        });
        let mut r = RingReader::open(&p).unwrap();
        r.set_stuck_timeout(1_000_000);
        let mut out = vec![];
        assert_eq!(r.poll(10, &mut out).records, 0);
        std::thread::sleep(std::time::Duration::from_millis(3));
        let st = r.poll(10, &mut out);
        assert_eq!(st.skipped, 1);
        assert_eq!(st.records + r.poll(10, &mut out).records, 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn hostile_files_never_crash() {
        let d = tmpdir("hostile");
        // Too small, wrong magic, absurd capacity, lying sizes.
        let p = d.join("ring-1-1.ring");
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&p)
            .unwrap()
            .write_all(&[0u8; 100])
            .unwrap();
        assert!(RingReader::open(&p).is_err());
        let (p2, w) = make(&d, 1024);
        w.header().capacity.store(1 << 30, Ordering::Relaxed);
        assert!(RingReader::open(&p2).is_err());
        w.header().capacity.store(3000, Ordering::Relaxed);
        assert!(RingReader::open(&p2).is_err());
        w.header().capacity.store(1 << 20, Ordering::Relaxed);
        assert!(RingReader::open(&p2).is_err());
        w.header().capacity.store(1024, Ordering::Relaxed);
        w.header().version.store(99, Ordering::Relaxed);
        assert!(matches!(RingReader::open(&p2), Err(OpenError::Version(99))));
        w.header()
            .version
            .store(RING_LAYOUT_VERSION, Ordering::Relaxed);
        let mut r = RingReader::open(&p2).unwrap();
        r.set_stuck_timeout(0);
        // Scribble pseudo-random garbage over all slots and the cursors, then poll a lot.
        let mut x = 0x1234_5678_9abc_def0u64;
        for round in 0..50 {
            // SAFETY: writing within the file_size(1024) bytes the writer view maps.
            unsafe {
                let base = w.base() as *mut u64;
                for i in 8..(crate::ring::file_size(1024) / 8) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if (x & 7) == 0 || round % 5 == 0 {
                        std::ptr::write_volatile(base.add(i), x);
                    }
                }
            }
            let mut out = vec![];
            let _ = r.poll(5000, &mut out);
            let _ = r.info();
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}
