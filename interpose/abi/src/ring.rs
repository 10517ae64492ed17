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
//! | 64 | 8 | `head`: producers' reservation cursor |
//! | 128 | 8 | `tail`: consumer cursor (written by the agent) |
//! | 192 | 8 | `dropped`: records lost because the ring was full |
//! | 256 | 8 | `gate_inflight`: side tasks only: launches the gate admitted that it has not seen complete |
//! | 264 | 8 | `gate_due_ns`: when the oldest of them should have finished, by the gate's estimate (0: none) |
//! | 272 | 8 | `gate_checked_ns`: when the gate last looked at its launches' completion |
//! | 280 | 8 | `gate_admitted_ns`: when the oldest of them was admitted (0: none) |
//! | 4096 | 64 x capacity | slots: `seq` (commit word) + 7 record words |
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
//! Safety against hostile memory: the producer keeps `capacity` in its own memory (never re-read
//! from the file), indexes with `pos & mask`, and gives up after a few CAS retries, so garbage in
//! the file can cost it a dropped event, never a hang or an out-of-bounds write.
use crate::event::{Record, RECORD_WORDS};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

pub const RING_MAGIC: u64 = u64::from_le_bytes(*b"FRRING\0\x01");
pub const HEADER_SIZE: usize = 4096;
pub const SLOT_SIZE: usize = 64;
pub const MIN_CAPACITY: u32 = 1 << 10;
pub const MAX_CAPACITY: u32 = 1 << 22;
pub const DEFAULT_CAPACITY: u32 = 1 << 16;

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
    _r0: [u32; 3],
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
    _r4: [u64; 4],
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

/// Bytes of a ring file with `capacity` slots.
pub const fn file_size(capacity: u32) -> usize {
    HEADER_SIZE + capacity as usize * SLOT_SIZE
}

/// Rounds a requested capacity to a power of two within bounds.
pub fn clamp_capacity(req: u64) -> u32 {
    let c = req.clamp(MIN_CAPACITY as u64, MAX_CAPACITY as u64);
    (c as u32).next_power_of_two().min(MAX_CAPACITY)
}

/// Parameters of a ring known to be valid, kept in the user's own memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub capacity: u32,
}

/// A view of a mapped ring. All access goes through atomics at offsets computed from the local
/// [`Geometry`], so the mapping's contents cannot make it read or write out of bounds.
#[derive(Clone, Copy, Debug)]
pub struct RingView {
    base: *mut u8,
    mask: u64,
    capacity: u64,
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
    /// that stays mapped for as long as the view (and its copies) are used.
    #[inline]
    pub unsafe fn new(base: *mut u8, geom: Geometry) -> RingView {
        RingView {
            base,
            mask: geom.capacity as u64 - 1,
            capacity: geom.capacity as u64,
        }
    }

    #[inline]
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    #[inline]
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    #[inline(always)]
    pub fn header(&self) -> &RingHeader {
        // SAFETY: `new`'s contract: the mapping holds at least HEADER_SIZE bytes at `base`, aligned.
        unsafe { &*(self.base as *const RingHeader) }
    }

    #[inline(always)]
    fn slot(&self, pos: u64) -> &Slot {
        let i = (pos & self.mask) as usize;
        // SAFETY: i < capacity, and the mapping holds HEADER_SIZE + capacity * SLOT_SIZE bytes.
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
        h.capacity.store(self.capacity as u32, Ordering::Relaxed);
        h.pid.store(pid, Ordering::Relaxed);
        h.role.store(role, Ordering::Relaxed);
        h.start_ns.store(start_ns, Ordering::Relaxed);
        h.device.store(-1, Ordering::Relaxed);
        h.state.store(STATE_LIVE, Ordering::Relaxed);
        h.features.store(0, Ordering::Relaxed);
        h.head.store(0, Ordering::Relaxed);
        h.tail.store(0, Ordering::Relaxed);
        h.dropped.store(0, Ordering::Relaxed);
        h.publish_gate_status(GateStatus::default());
        for i in 0..self.capacity {
            let s = self.slot(i);
            s.seq.store(i, Ordering::Relaxed);
            for w in &s.words {
                w.store(0, Ordering::Relaxed);
            }
        }
        h.magic.store(RING_MAGIC, Ordering::Release);
    }

    /// Multi-producer push. Lock-free, no system call, never waits: returns false (and counts
    /// the record in `dropped`) when the ring is full or contended beyond a few retries.
    /// The uncontended case (the slot at `head` is free and the claim succeeds first time) is
    /// inlined; retries are out of line.
    #[inline(always)]
    pub fn push(&self, rec: &Record) -> bool {
        let h = self.header();
        let pos = h.head.load(Ordering::Relaxed);
        let slot = self.slot(pos);
        if slot.seq.load(Ordering::Acquire) == pos
            && h.head
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
        self.push_contended(rec)
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
    fn push_contended(&self, rec: &Record) -> bool {
        let h = self.header();
        // While the ring is at most half full, claim by atomic add: a claim that cannot lose to
        // other producers (a compare-and-swap can, over and over, to a thread that keeps the
        // head's cache line). A position less than a ring ahead of the consumer's `tail` is free
        // (the consumer frees a slot before it moves `tail` past it). Should the ring have filled
        // between the look and the claim (this thread descheduled meanwhile, half a ring pushed
        // by others, the consumer stalled), the position is left uncommitted and the record
        // counted dropped: the consumer skips the slot after its stuck timeout, as it does a
        // producer's that died mid-push. Garbage in the file costs records, never an access out
        // of bounds.
        if h.head
            .load(Ordering::Relaxed)
            .wrapping_sub(h.tail.load(Ordering::Acquire))
            < self.capacity / 2
        {
            let pos = h.head.fetch_add(1, Ordering::Relaxed);
            if pos.wrapping_sub(h.tail.load(Ordering::Acquire)) < self.capacity {
                Self::commit(self.slot(pos), pos, rec);
                return true;
            }
            h.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let mut pos = h.head.load(Ordering::Relaxed);
        let mut tries = 0;
        loop {
            let slot = self.slot(pos);
            let seq = slot.seq.load(Ordering::Acquire);
            let diff = seq.wrapping_sub(pos) as i64;
            if diff == 0 {
                match h.head.compare_exchange_weak(
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
                pos = h.head.load(Ordering::Relaxed);
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

    /// Single-consumer pop at `*cursor` (the consumer's own copy of `tail`). On success advances
    /// the cursor, frees the slot and publishes the new `tail`.
    pub fn pop(&self, cursor: &mut u64) -> Pop {
        let pos = *cursor;
        let slot = self.slot(pos);
        let seq = slot.seq.load(Ordering::Acquire);
        if seq == pos.wrapping_add(1) {
            let mut w = [0u64; RECORD_WORDS];
            for (d, s) in w.iter_mut().zip(&slot.words) {
                *d = s.load(Ordering::Relaxed);
            }
            slot.seq
                .store(pos.wrapping_add(self.capacity), Ordering::Release);
            *cursor = pos.wrapping_add(1);
            self.header().tail.store(*cursor, Ordering::Release);
            Pop::Record(Record::decode(&w))
        } else {
            let head = self.header().head.load(Ordering::Acquire);
            if head.wrapping_sub(pos) as i64 > 0 {
                Pop::Pending
            } else {
                Pop::Empty
            }
        }
    }

    /// Skips the slot at `*cursor` whose producer never committed (it died or the memory is
    /// corrupt): the slot is handed to the next lap. Counted as dropped.
    pub fn skip(&self, cursor: &mut u64) {
        let pos = *cursor;
        self.slot(pos)
            .seq
            .store(pos.wrapping_add(self.capacity), Ordering::Release);
        *cursor = pos.wrapping_add(1);
        self.header().tail.store(*cursor, Ordering::Release);
        self.header().dropped.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[repr(C, align(4096))]
    struct Page([u8; 4096]);

    fn mem(cap: u32) -> Vec<Page> {
        let pages = file_size(cap).div_ceil(4096);
        (0..pages).map(|_| Page([0; 4096])).collect()
    }

    fn rec(i: u64) -> Record {
        Record {
            t_ns: i,
            kind: 3,
            api: 1,
            p0: i,
            ..Default::default()
        }
    }

    #[test]
    fn push_pop_and_full() {
        let cap = MIN_CAPACITY;
        let mut m = mem(cap);
        // SAFETY: m holds file_size(cap) bytes, 4096-aligned, and outlives r.
        let r = unsafe { RingView::new(m.as_mut_ptr() as *mut u8, Geometry { capacity: cap }) };
        r.initialize(1, 0, 0);
        for i in 0..cap as u64 {
            assert!(r.push(&rec(i)));
        }
        assert!(!r.push(&rec(9999)));
        assert_eq!(r.header().dropped.load(Ordering::Relaxed), 1);
        let mut cur = 0;
        for i in 0..cap as u64 {
            assert_eq!(r.pop(&mut cur), Pop::Record(rec(i)));
        }
        assert_eq!(r.pop(&mut cur), Pop::Empty);
        assert!(r.push(&rec(5)));
        assert_eq!(r.pop(&mut cur), Pop::Record(rec(5)));
    }

    #[test]
    fn many_producers_one_consumer() {
        let cap = 1 << 12;
        let mut m = mem(cap);
        let base = m.as_mut_ptr() as usize;
        // SAFETY: m outlives all threads (joined below).
        let r = unsafe { RingView::new(base as *mut u8, Geometry { capacity: cap }) };
        r.initialize(1, 0, 0);
        let per = 20_000u64;
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut hs = vec![];
        for t in 0..4u64 {
            hs.push(std::thread::spawn(move || {
                let mut ok = 0u64;
                for i in 0..per {
                    if r.push(&rec(t << 32 | i)) {
                        ok += 1;
                    }
                }
                ok
            }));
        }
        let d2 = done.clone();
        let c = std::thread::spawn(move || {
            let mut cur = 0;
            let mut got = 0u64;
            let mut last = [None::<u64>; 4];
            loop {
                match r.pop(&mut cur) {
                    Pop::Record(x) => {
                        got += 1;
                        let t = (x.p0 >> 32) as usize;
                        let i = x.p0 & 0xffff_ffff;
                        if let Some(l) = last[t] {
                            assert!(i > l, "per-producer order");
                        }
                        last[t] = Some(i);
                    }
                    _ => {
                        if d2.load(Ordering::Acquire) && r.pop(&mut cur.clone()) == Pop::Empty {
                            break;
                        }
                        std::thread::yield_now();
                    }
                }
            }
            got
        });
        let pushed: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
        done.store(true, Ordering::Release);
        let got = c.join().unwrap();
        assert_eq!(pushed, got);
        let dropped = r.header().dropped.load(Ordering::Relaxed);
        assert_eq!(pushed + dropped, 4 * per);
        drop(m);
    }

    /// Producers racing for the head never lose a record to one another: with room in the ring,
    /// every push succeeds and every record is there once, in each producer's order.
    #[test]
    fn contended_producers_lose_nothing() {
        let cap = 1 << 18;
        let mut m = mem(cap);
        let base = m.as_mut_ptr() as usize;
        // SAFETY: m outlives all threads (joined below).
        let r = unsafe { RingView::new(base as *mut u8, Geometry { capacity: cap }) };
        r.initialize(1, 0, 0);
        let per = 30_000u64;
        let hs: Vec<_> = (0..4u64)
            .map(|t| std::thread::spawn(move || (0..per).all(|i| r.push(&rec(t << 32 | i)))))
            .collect();
        for h in hs {
            assert!(
                h.join().unwrap(),
                "a push failed with the ring far from full"
            );
        }
        assert_eq!(r.header().dropped.load(Ordering::Relaxed), 0);
        let (mut cur, mut next) = (0, [0u64; 4]);
        for _ in 0..4 * per {
            let Pop::Record(x) = r.pop(&mut cur) else {
                panic!("record missing at {cur}");
            };
            let t = (x.p0 >> 32) as usize;
            assert_eq!(x.p0 & 0xffff_ffff, next[t], "producer {t} out of order");
            next[t] += 1;
        }
        assert_eq!(r.pop(&mut cur), Pop::Empty);
        drop(m);
    }

    #[test]
    fn garbage_seq_never_hangs_producer() {
        let cap = MIN_CAPACITY;
        let mut m = mem(cap);
        // SAFETY: as above.
        let r = unsafe { RingView::new(m.as_mut_ptr() as *mut u8, Geometry { capacity: cap }) };
        r.initialize(1, 0, 0);
        for i in 0..cap as u64 {
            r.slot(i).seq.store(u64::MAX / 3 + i * 7, Ordering::Relaxed);
        }
        r.header().head.store(0xdead_beef_1234, Ordering::Relaxed);
        for i in 0..100 {
            let _ = r.push(&rec(i));
        }
    }
}
