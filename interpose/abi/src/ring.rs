//! The per-process event ring in shared memory.
//!
//! File layout (`ring-<pid>-<start_ns>.ring` in the session directory):
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 8 | `magic` = [`RING_MAGIC`] ("FRRING\0\x01") |
//! | 8 | 4 | `version` = [`crate::RING_LAYOUT_VERSION`] |
//! | 12 | 4 | `header_size` = [`HEADER_SIZE`] (slots start here) |
//! | 16 | 4 | `slot_size` = [`SLOT_SIZE`] |
//! | 20 | 4 | `capacity` (slots, power of two) |
//! | 24 | 4 | `pid` |
//! | 28 | 4 | `role` ([`crate::Role`]) |
//! | 32 | 8 | `start_ns` (CLOCK_MONOTONIC when the ring was made; instance id with `pid`) |
//! | 40 | 4 | `device` (i32: the [`crate::gpu::GpuId`] of the first GPU the process was seen on, -1 unknown) |
//! | 44 | 4 | `state` ([`STATE_LIVE`], [`STATE_EXITED`]) |
//! | 48 | 4 | `features`: bits the writer sets when it starts doing something readers can rely on ([`FEATURE_RINGS_DOORBELL`], [`FEATURE_TSC_CLOCK`]) |
//! | 52 | 4 | `lanes`: independent queues the slots are split into (power of two, 1 to [`MAX_LANES`]) |
//! | 64 | 8 | `head`: producers' reservation cursor of lane 0 |
//! | 128 | 8 | `tail`: consumer cursor of lane 0 (written by the agent) |
//! | 192 | 8 | `dropped`: records lost because a lane was full (all lanes) |
//! | 256 | 8 | `gate_inflight`: side tasks only: launches the gate admitted that it has not seen complete |
//! | 264 | 8 | `gate_due_ns`: when the oldest of them should have finished, by the gate's estimate (0: none) |
//! | 272 | 8 | `gate_checked_ns`: when the gate last looked at its launches' completion |
//! | 280 | 8 | `gate_admitted_ns`: when the oldest of them was admitted (0: none) |
//! | 288 | 8 | `ends_late_until_ns`: until when ends this process's comm threads have not read yet may still reach the agent late (0: never late) |
//! | 320 | 8 | `lazy_ends_until_ns`: written by the agent: until when the process may report its communication ops' ends lazily (0: promptly) |
//! | 1024 + 128 k | 8 | `head` of lane k (k >= 1) |
//! | 1088 + 128 k | 8 | `tail` of lane k (k >= 1) |
//! | 4096 | 64 x capacity | slots: `seq` (commit word) + 7 record words; lane k's are the k-th `capacity / lanes` |
//!
//! **Lanes** (layout version 3): each lane is a queue of its own (the protocol below, on its own
//! `capacity / lanes` slots), so that threads launching at the same time on different cores do not
//! pass one `head` cache line between them on every push (on a 16-core host: 217 ns a launch with
//! two threads and 573 with four through one head, 38 with one). The interposer gives each
//! launching thread a lane of its own while there are lanes (the last lane is its comm threads');
//! the reader merges the lanes in time order ([`crate::reader`]).
//!
//! Protocol (bounded MPMC queue after D. Vyukov, single consumer): slot `i` starts with
//! `seq = i`. A producer reads `head = pos`; if the slot's `seq == pos` it claims `pos` with a CAS
//! on `head`, writes the record words and publishes with `seq = pos + 1` (release). If
//! `seq < pos` the ring is full: the record is dropped and `dropped` incremented (the producer
//! never waits). The consumer at `tail = pos` takes the slot when `seq == pos + 1`, copies the
//! words, then frees it with `seq = pos + capacity` and advances `tail`. A producer whose CAS
//! failed (another producer claimed `pos` first) claims with an atomic add on `head` instead,
//! while `head - tail` is below half the capacity (every slot there is free): producers never
//! lose records to one another, only to a full ring.
//!
//! The `gate_*` words (zero in a trainer's ring, and in rings of builds before them: readers of
//! layout version 1 ignore them) are how the agent's watchdog sees a side task's GPU work that
//! outlives its grant (see [`GateStatus`]). The gate of the side task stores them, plain atomics.
//!
//! `features` (zero in rings of builds before it) works the same way: a reader of an older ring
//! sees no bit set and does without.
//!
//! `lazy_ends_until_ns` is the one word the agent writes besides the tails: while it is in the
//! future (the agent's clock, `CLOCK_MONOTONIC`), nobody on the node harvests bubbles and the
//! process's comm threads may read its ops' ends in batches instead of waking at each
//! ([`RingHeader::ends_lazy`]). Zero, which every ring starts with and agents before it never
//! change, asks for prompt ends as before, and a process before it never reads it: no version
//! change either way. The agent renews it; an agent that dies lets it run out. The process answers
//! in `ends_late_until_ns`: each time one of its comm threads leaves ends to be read later, how
//! long they may wait. The agent grants nothing on a GPU with a trainer whose ends may still be
//! late, however it came to be lazy (the agent's word, or `FREERIDE_COMM_ENDS=lazy`).
//!
//! Safety against hostile memory: the producer keeps `capacity` in its own memory (never re-read
//! from the file), indexes with `pos & mask`, and gives up after a few CAS retries, so garbage in
//! the file can cost it a dropped event, never a hang or an out-of-bounds write.
use crate::event::{Record, RECORD_WORDS};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

pub const RING_MAGIC: u64 = u64::from_le_bytes(*b"FRRING\0\x01");
pub const HEADER_SIZE: usize = 4096;
pub const SLOT_SIZE: usize = 64;
pub const MIN_CAPACITY: u32 = 1 << 10;
/// Most lanes a ring is split into.
pub const MAX_LANES: u32 = 8;
/// Fewest slots a lane holds (a ring with fewer slots a lane gets fewer lanes).
pub const MIN_LANE_CAPACITY: u32 = 1 << 8;
/// Offset of lane 1's `head` (lane k's at `LANES_OFFSET + (k - 1) * LANE_STRIDE`, its `tail` 64 bytes
/// further): a cache line each.
pub const LANES_OFFSET: usize = 1024;
pub const LANE_STRIDE: usize = 128;
pub const MAX_CAPACITY: u32 = 1 << 22;
pub const DEFAULT_CAPACITY: u32 = 1 << 17;
/// Lanes of a process's ring by default: seven for the threads that launch (PyTorch's main and
/// autograd threads, one autograd thread per GPU, get one each), one for freeride's comm threads.
/// Four (three for launching threads) made two of four launching threads share a lane: 161 ns a
/// launch at four threads on the 16-core GPU host, against 45-52 ns with one or two threads.
pub const DEFAULT_LANES: u32 = 8;

pub const STATE_INIT: u32 = 0;
pub const STATE_LIVE: u32 = 1;
pub const STATE_EXITED: u32 = 2;

/// `features` bit: this process's comm poller rings the session doorbell
/// ([`crate::doorbell`]) whenever it pushes a comm begin or end.
pub const FEATURE_RINGS_DOORBELL: u32 = 1;

/// `features` bit, set at exit: this process's hook clock was reading the calibrated TSC
/// ([`crate::clock`]) rather than `clock_gettime`. Informative: `t_ns` is `CLOCK_MONOTONIC`
/// either way.
pub const FEATURE_TSC_CLOCK: u32 = 2;

/// Max attempts of a producer before it drops the record, once the ring is more than half full
/// (below that a failed claim is retried by atomic add, which cannot lose). Each failed attempt
/// means another producer claimed a slot meanwhile (or the file holds garbage).
const PUSH_RETRIES: u32 = 256;

#[repr(C, align(64))]
pub struct RingHeader {
    pub magic: AtomicU64,
    pub version: AtomicU32,
    pub header_size: AtomicU32,
    pub slot_size: AtomicU32,
    pub capacity: AtomicU32,
    pub pid: AtomicU32,
    pub role: AtomicU32,
    pub start_ns: AtomicU64,
    pub device: AtomicI32,
    pub state: AtomicU32,
    pub features: AtomicU32,
    pub lanes: AtomicU32,
    _r0: [u32; 2],
    pub head: AtomicU64,
    _r1: [u64; 7],
    pub tail: AtomicU64,
    _r2: [u64; 7],
    pub dropped: AtomicU64,
    _r3: [u64; 7],
    pub gate_inflight: AtomicU64,
    pub gate_due_ns: AtomicU64,
    pub gate_checked_ns: AtomicU64,
    pub gate_admitted_ns: AtomicU64,
    /// The process's answer to `lazy_ends_until_ns` (see the module docs).
    pub ends_late_until_ns: AtomicU64,
    _r4: [u64; 3],
    /// The agent's word, on a cache line of its own (see the module docs).
    pub lazy_ends_until_ns: AtomicU64,
    _r5: [u64; 7],
}

/// What a side task's gate last published about its GPU work in flight (header words at 256).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GateStatus {
    /// Launches admitted and not yet seen complete.
    pub inflight: u64,
    /// When the oldest of them should have finished, by the gate's own estimate (0: none).
    pub due_ns: u64,
    /// When the gate last checked completions (launches, synchronize calls).
    pub checked_ns: u64,
    /// When the oldest of them was admitted (0: none): on a GPU that runs work in the order it
    /// was queued, the hung task among several overdue ones is the one admitted first.
    pub admitted_ns: u64,
}

impl RingHeader {
    /// The gate's status as last published (untrusted values: a reader only compares them).
    pub fn gate_status(&self) -> GateStatus {
        GateStatus {
            inflight: self.gate_inflight.load(Ordering::Relaxed),
            due_ns: self.gate_due_ns.load(Ordering::Relaxed),
            admitted_ns: self.gate_admitted_ns.load(Ordering::Relaxed),
            checked_ns: self.gate_checked_ns.load(Ordering::Acquire),
        }
    }

    // The four accessors of the two ends words are sequentially consistent: a comm thread says
    // how late its ends may come, then reads the agent's word again before it sleeps; the agent
    // writes its word, then reads what the process said. Either the agent sees the process's
    // word or the process sees the agent's (a store-then-load on each side, as in Dekker's
    // algorithm), so a grant never opens while a comm thread sleeps on ends it was told to
    // report promptly.

    /// Whether the process may report its ops' ends lazily at `now` (the agent said nobody
    /// harvests, until a time still ahead).
    pub fn ends_lazy(&self, now: u64) -> bool {
        self.lazy_ends_until_ns.load(Ordering::SeqCst) > now
    }

    /// The agent's side: ends may be lazy until `until_ns` (0: prompt from now on).
    pub fn let_ends_be_lazy_until(&self, until_ns: u64) {
        self.lazy_ends_until_ns.store(until_ns, Ordering::SeqCst);
    }

    /// The process's side: an end that completes from now on may reach the agent as late as
    /// `until_ns` (kept if an earlier call said later).
    pub fn say_ends_late_until(&self, until_ns: u64) {
        self.ends_late_until_ns
            .fetch_max(until_ns, Ordering::SeqCst);
    }

    /// Until when this process's ends may reach the agent late (0: never said; untrusted).
    pub fn ends_late_until(&self) -> u64 {
        self.ends_late_until_ns.load(Ordering::SeqCst)
    }

    /// Publishes the gate's status (the side task's gate, under its lock).
    pub fn publish_gate_status(&self, g: GateStatus) {
        self.gate_inflight.store(g.inflight, Ordering::Relaxed);
        self.gate_due_ns.store(g.due_ns, Ordering::Relaxed);
        self.gate_admitted_ns
            .store(g.admitted_ns, Ordering::Relaxed);
        self.gate_checked_ns.store(g.checked_ns, Ordering::Release);
    }
}

#[repr(C, align(64))]
pub struct Slot {
    pub seq: AtomicU64,
    pub words: [AtomicU64; RECORD_WORDS],
}

const _: () = assert!(std::mem::size_of::<Slot>() == SLOT_SIZE);
const _: () = assert!(std::mem::size_of::<RingHeader>() <= HEADER_SIZE);
const _: () = assert!(std::mem::offset_of!(RingHeader, head) == 64);
const _: () = assert!(std::mem::offset_of!(RingHeader, tail) == 128);
const _: () = assert!(std::mem::offset_of!(RingHeader, dropped) == 192);
const _: () = assert!(std::mem::offset_of!(RingHeader, device) == 40);
const _: () = assert!(std::mem::offset_of!(RingHeader, features) == 48);
const _: () = assert!(std::mem::offset_of!(RingHeader, gate_inflight) == 256);
const _: () = assert!(std::mem::offset_of!(RingHeader, lanes) == 52);
const _: () = assert!(std::mem::offset_of!(RingHeader, lazy_ends_until_ns) == 320);
const _: () = assert!(std::mem::offset_of!(RingHeader, ends_late_until_ns) == 288);
const _: () = assert!(std::mem::size_of::<RingHeader>() <= LANES_OFFSET);
const _: () = assert!(LANES_OFFSET + (MAX_LANES as usize - 1) * LANE_STRIDE <= HEADER_SIZE);

/// Bytes of a ring file with `capacity` slots.
pub const fn file_size(capacity: u32) -> usize {
    HEADER_SIZE + capacity as usize * SLOT_SIZE
}

/// Rounds a requested capacity to a power of two within bounds.
pub fn clamp_capacity(req: u64) -> u32 {
    let c = req.clamp(MIN_CAPACITY as u64, MAX_CAPACITY as u64);
    (c as u32).next_power_of_two().min(MAX_CAPACITY)
}

/// The lanes a ring of `capacity` slots is split into when `req` are asked for: a power of two, at
/// most [`MAX_LANES`], each lane at least [`MIN_LANE_CAPACITY`] slots.
pub fn clamp_lanes(capacity: u32, req: u64) -> u32 {
    let mut l = (req.clamp(1, MAX_LANES as u64) as u32)
        .next_power_of_two()
        .min(MAX_LANES);
    while l > 1 && capacity / l < MIN_LANE_CAPACITY {
        l /= 2;
    }
    l
}

/// Parameters of a ring known to be valid, kept in the user's own memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Slots in all (a power of two).
    pub capacity: u32,
    /// Lanes the slots are split into (a power of two dividing `capacity`; see [`clamp_lanes`]).
    pub lanes: u32,
}

impl Geometry {
    /// One lane: the layout before lanes, and what a private ring (the trace's) uses.
    pub const fn single(capacity: u32) -> Geometry {
        Geometry { capacity, lanes: 1 }
    }
}

/// A view of a mapped ring. All access goes through atomics at offsets computed from the local
/// [`Geometry`], so the mapping's contents cannot make it read or write out of bounds.
#[derive(Clone, Copy, Debug)]
pub struct RingView {
    base: *mut u8,
    /// Slots a lane, less one (a lane's capacity is a power of two).
    mask: u64,
    /// log2 of the slots a lane.
    lane_shift: u32,
    /// Lanes, less one (a power of two less one).
    lane_mask: u32,
}

// SAFETY: a RingView is a pointer into a shared mapping accessed only through atomics.
unsafe impl Send for RingView {}
// SAFETY: as above; all accesses are atomic.
unsafe impl Sync for RingView {}

/// Result of one consumer step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pop {
    Record(Record),
    /// Nothing committed at the cursor.
    Empty,
    /// A producer reserved the slot at the cursor but has not committed it (yet).
    Pending,
}

impl RingView {
    /// # Safety
    /// `base` must point to a mapping of at least `file_size(geom.capacity)` bytes, aligned to 64,
    /// that stays mapped for as long as the view (and its copies) are used. `geom.lanes` must be a
    /// power of two no larger than [`MAX_LANES`] nor than `geom.capacity` (every index a view
    /// computes then stays within the mapping).
    #[inline]
    pub unsafe fn new(base: *mut u8, geom: Geometry) -> RingView {
        // A power of two (the contract; another value is taken as its lowest set bit's): a shift,
        // not a division, on every push's view.
        let shift = geom.lanes.clamp(1, MAX_LANES).trailing_zeros();
        let lane_cap = (geom.capacity >> shift).max(1);
        RingView {
            base,
            mask: lane_cap as u64 - 1,
            // lane_cap is a power of two (capacity is, the contract): its trailing zeros are its log2.
            lane_shift: lane_cap.trailing_zeros(),
            lane_mask: (1u32 << shift) - 1,
        }
    }

    /// The view's geometry as computed by [`RingView::new`]: (slot mask of a lane, log2 of a
    /// lane's slots, lane mask). A hook rebuilds its view from them with
    /// [`RingView::from_parts`], computing nothing on each push.
    #[inline]
    pub fn parts(&self) -> (u64, u32, u32) {
        (self.mask, self.lane_shift, self.lane_mask)
    }

    /// A view rebuilt from [`RingView::parts`].
    ///
    /// # Safety
    /// `parts` must come from [`RingView::parts`] of a view made by [`RingView::new`] over this
    /// same `base`, whose contract still holds.
    #[inline(always)]
    pub unsafe fn from_parts(base: *mut u8, parts: (u64, u32, u32)) -> RingView {
        RingView {
            base,
            mask: parts.0,
            lane_shift: parts.1,
            lane_mask: parts.2,
        }
    }

    #[inline]
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// Slots in all lanes.
    #[inline]
    pub fn capacity(&self) -> u64 {
        self.lane_cap() * self.lanes() as u64
    }

    #[inline]
    pub fn lanes(&self) -> u32 {
        self.lane_mask + 1
    }

    /// Slots a lane.
    #[inline(always)]
    fn lane_cap(&self) -> u64 {
        self.mask + 1
    }

    /// Lane `lane`'s producers' cursor (lane 0's is the header's `head`).
    #[inline(always)]
    pub(crate) fn head(&self, lane: u32) -> &AtomicU64 {
        self.cursor(lane, false)
    }

    /// Lane `lane`'s consumer cursor (lane 0's is the header's `tail`).
    #[inline(always)]
    fn tail(&self, lane: u32) -> &AtomicU64 {
        self.cursor(lane, true)
    }

    #[inline(always)]
    fn cursor(&self, lane: u32, tail: bool) -> &AtomicU64 {
        let lane = lane & self.lane_mask;
        if lane == 0 {
            let h = self.header();
            return if tail { &h.tail } else { &h.head };
        }
        let off = LANES_OFFSET + (lane as usize - 1) * LANE_STRIDE + if tail { 64 } else { 0 };
        // SAFETY: lane < lanes <= MAX_LANES: within the header page (a compile-time check above),
        // 64-aligned, inside the mapping `new`'s contract guarantees.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    #[inline(always)]
    pub fn header(&self) -> &RingHeader {
        // SAFETY: `new`'s contract: the mapping holds at least HEADER_SIZE bytes at `base`, aligned.
        unsafe { &*(self.base as *const RingHeader) }
    }

    #[inline(always)]
    fn slot(&self, lane: u32, pos: u64) -> &Slot {
        let lane = (lane & self.lane_mask) as u64;
        let i = ((lane << self.lane_shift) | (pos & self.mask)) as usize;
        // SAFETY: i < lanes * lane_cap <= capacity, and the mapping holds HEADER_SIZE + capacity *
        // SLOT_SIZE bytes.
        unsafe { &*(self.base.add(HEADER_SIZE + i * SLOT_SIZE) as *const Slot) }
    }

    /// Writes a fresh header and slot sequence numbers (creator only, before publishing the file),
    /// touching every page so later pushes take no page faults.
    pub fn initialize(&self, pid: u32, role: u32, start_ns: u64) {
        let h = self.header();
        h.magic.store(0, Ordering::Relaxed);
        h.version
            .store(crate::RING_LAYOUT_VERSION, Ordering::Relaxed);
        h.header_size.store(HEADER_SIZE as u32, Ordering::Relaxed);
        h.slot_size.store(SLOT_SIZE as u32, Ordering::Relaxed);
        h.capacity.store(self.capacity() as u32, Ordering::Relaxed);
        h.lanes.store(self.lanes(), Ordering::Relaxed);
        h.pid.store(pid, Ordering::Relaxed);
        h.role.store(role, Ordering::Relaxed);
        h.start_ns.store(start_ns, Ordering::Relaxed);
        h.device.store(-1, Ordering::Relaxed);
        h.state.store(STATE_LIVE, Ordering::Relaxed);
        h.features.store(0, Ordering::Relaxed);
        h.dropped.store(0, Ordering::Relaxed);
        h.publish_gate_status(GateStatus::default());
        for lane in 0..self.lanes() {
            self.head(lane).store(0, Ordering::Relaxed);
            self.tail(lane).store(0, Ordering::Relaxed);
            for i in 0..self.lane_cap() {
                let s = self.slot(lane, i);
                s.seq.store(i, Ordering::Relaxed);
                for w in &s.words {
                    w.store(0, Ordering::Relaxed);
                }
            }
        }
        h.magic.store(RING_MAGIC, Ordering::Release);
    }

    /// [`RingView::push_lane`] into lane 0.
    #[inline(always)]
    pub fn push(&self, rec: &Record) -> bool {
        self.push_lane(0, rec)
    }

    /// Multi-producer push into lane `lane` (taken modulo the lanes). Lock-free, no system call,
    /// never waits: returns false (and counts the record in `dropped`) when the lane is full or
    /// contended beyond a few retries. The uncontended case (the slot at the lane's `head` is free
    /// and the claim succeeds first time) is inlined; retries are out of line.
    #[inline(always)]
    pub fn push_lane(&self, lane: u32, rec: &Record) -> bool {
        let head = self.head(lane);
        let pos = head.load(Ordering::Relaxed);
        let slot = self.slot(lane, pos);
        if slot.seq.load(Ordering::Acquire) == pos
            && head
                .compare_exchange(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            Self::commit(slot, pos, rec);
            return true;
        }
        self.push_contended(lane, rec)
    }

    /// Single-producer push into lane `lane`: the caller guarantees that no other producer pushes
    /// into this lane until it returns (a lane that one thread owns). The head moves by a plain
    /// store, not a read-modify-write (a `lock cmpxchg` is a fifth of the hook's cost); otherwise
    /// as [`RingView::push_lane`]: the slot is claimed by moving `head` before its words are
    /// written, so the consumer sees the same states (free, claimed, committed). A full lane
    /// takes the multi-producer path, which is correct for one producer too.
    #[inline(always)]
    pub fn push_lane_owned(&self, lane: u32, rec: &Record) -> bool {
        let head = self.head(lane);
        let pos = head.load(Ordering::Relaxed);
        let slot = self.slot(lane, pos);
        if slot.seq.load(Ordering::Acquire) == pos {
            head.store(pos.wrapping_add(1), Ordering::Relaxed);
            Self::commit(slot, pos, rec);
            return true;
        }
        self.push_contended(lane, rec)
    }

    /// Writes the record words into the claimed slot and publishes it.
    #[inline(always)]
    fn commit(slot: &Slot, pos: u64, rec: &Record) {
        let w = rec.encode();
        for (dst, v) in slot.words.iter().zip(w) {
            dst.store(v, Ordering::Relaxed);
        }
        slot.seq.store(pos.wrapping_add(1), Ordering::Release);
    }

    #[cold]
    #[inline(never)]
    fn push_contended(&self, lane: u32, rec: &Record) -> bool {
        let h = self.header();
        let (head, tail) = (self.head(lane), self.tail(lane));
        // While the ring is at most half full, claim by atomic add: a claim that cannot lose to
        // other producers (a compare-and-swap can, over and over, to a thread that keeps the
        // head's cache line). A position less than a ring ahead of the consumer's `tail` is free
        // (the consumer frees a slot before it moves `tail` past it). Should the ring have filled
        // between the look and the claim (this thread descheduled meanwhile, half a ring pushed
        // by others, the consumer stalled), the position is left uncommitted and the record
        // counted dropped: the consumer skips the slot after its stuck timeout, as it does a
        // producer's that died mid-push. Garbage in the file costs records, never an access out
        // of bounds.
        if head
            .load(Ordering::Relaxed)
            .wrapping_sub(tail.load(Ordering::Acquire))
            < self.lane_cap() / 2
        {
            let pos = head.fetch_add(1, Ordering::Relaxed);
            if pos.wrapping_sub(tail.load(Ordering::Acquire)) < self.lane_cap() {
                Self::commit(self.slot(lane, pos), pos, rec);
                return true;
            }
            h.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let mut pos = head.load(Ordering::Relaxed);
        let mut tries = 0;
        loop {
            let slot = self.slot(lane, pos);
            let seq = slot.seq.load(Ordering::Acquire);
            let diff = seq.wrapping_sub(pos) as i64;
            if diff == 0 {
                match head.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        Self::commit(slot, pos, rec);
                        return true;
                    }
                    Err(cur) => pos = cur,
                }
            } else if diff < 0 {
                h.dropped.fetch_add(1, Ordering::Relaxed);
                return false;
            } else {
                pos = head.load(Ordering::Relaxed);
            }
            // Let the producer that won finish its slot (and release the lines) first.
            std::hint::spin_loop();
            tries += 1;
            if tries >= PUSH_RETRIES {
                h.dropped.fetch_add(1, Ordering::Relaxed);
                return false;
            }
        }
    }

    /// Lane `lane`'s consumer cursor as published (a reader starts from it).
    pub fn tail_of(&self, lane: u32) -> u64 {
        self.tail(lane).load(Ordering::Acquire)
    }

    /// Single-consumer pop of lane 0 (see [`RingView::pop_lane`]).
    pub fn pop(&self, cursor: &mut u64) -> Pop {
        self.pop_lane(0, cursor)
    }

    /// Single-consumer pop at `*cursor` of lane `lane` (the consumer's own copy of the lane's
    /// `tail`). On success advances the cursor, frees the slot and publishes the new `tail`.
    pub fn pop_lane(&self, lane: u32, cursor: &mut u64) -> Pop {
        let pos = *cursor;
        let slot = self.slot(lane, pos);
        let seq = slot.seq.load(Ordering::Acquire);
        if seq == pos.wrapping_add(1) {
            let mut w = [0u64; RECORD_WORDS];
            for (d, s) in w.iter_mut().zip(&slot.words) {
                *d = s.load(Ordering::Relaxed);
            }
            slot.seq
                .store(pos.wrapping_add(self.lane_cap()), Ordering::Release);
            *cursor = pos.wrapping_add(1);
            self.tail(lane).store(*cursor, Ordering::Release);
            Pop::Record(Record::decode(&w))
        } else {
            let head = self.head(lane).load(Ordering::Acquire);
            if head.wrapping_sub(pos) as i64 > 0 {
                Pop::Pending
            } else {
                Pop::Empty
            }
        }
    }

    /// Skips the slot at `*cursor` of lane `lane` whose producer never committed (it died or the
    /// memory is corrupt): the slot is handed to the next lap. Counted as dropped.
    pub fn skip(&self, lane: u32, cursor: &mut u64) {
        let pos = *cursor;
        self.slot(lane, pos)
            .seq
            .store(pos.wrapping_add(self.lane_cap()), Ordering::Release);
        *cursor = pos.wrapping_add(1);
        self.tail(lane).store(*cursor, Ordering::Release);
        self.header().dropped.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
