//! Which stream waits for what, as far as the hooks need it: per stream, the last communication op
//! queued on it ([`comm_queued`]) and the timing event that completes with it ([`comm_timed`]);
//! per event, its latest record: the stream and that stream's last communication op then, with
//! the op's end event ([`recorded`], [`last_record`]). So an `EventRecord` names the comm op it
//! follows, and a `StreamWait` whether the event it waits for follows one (such a wait is timed:
//! it is where a compute stream may stall on communication), and whether that op has already
//! ended (then the wait cannot hold its stream and is not timed).
//!
//! Hook path: fixed tables of seqlocked slots, no allocation, no lock, no system call. A handle
//! lives in one of `PROBES` consecutive slots from its hash: its own if it has one, else the
//! first free one; only when all of them hold other handles does it replace the first (that older
//! handle is forgotten: its op key reads 0, "none seen"). A writer that finds a slot being written
//! by another thread, or taken by another handle meanwhile, skips its write. Both only lose an op
//! key, never invent one. Until 2026-12-07 a handle had one slot: two comm streams of a process
//! that hashed alike replaced each other for the process's life, and every wait on one of them
//! read as following no communication (by the tables' sizes, about 1 run in 250 of a program with
//! two comm streams; it failed `stream_waits`'s two-GPU test once on 2026-12-07).
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

const STREAM_SLOTS: usize = 256;
const EVENT_SLOTS: usize = 1024;
/// Slots a handle may live in, from its hash on.
const PROBES: usize = 4;

struct Slot {
    /// Even: stable; odd: being written.
    seq: AtomicU32,
    key: AtomicU64,
    a: AtomicU64,
    b: AtomicU64,
    c: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const SLOT_INIT: Slot = Slot {
    seq: AtomicU32::new(0),
    key: AtomicU64::new(0),
    a: AtomicU64::new(0),
    b: AtomicU64::new(0),
    c: AtomicU64::new(0),
};

static STREAMS: [Slot; STREAM_SLOTS] = [SLOT_INIT; STREAM_SLOTS];
static EVENTS: [Slot; EVENT_SLOTS] = [SLOT_INIT; EVENT_SLOTS];

/// The slot of handle `h` in a table of `n` slots (handles are aligned addresses or small values).
#[inline(always)]
fn index(h: u64, n: usize) -> usize {
    let x = (h ^ (h >> 17)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 40) as usize % n
}

/// Takes slot `s` for writing (its sequence made odd); None if another thread is writing it.
#[inline(always)]
fn lock(s: &Slot) -> Option<u32> {
    let seq = s.seq.load(Ordering::Relaxed);
    if seq & 1 == 1
        || s.seq
            .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
    {
        return None;
    }
    fence(Ordering::Release);
    Some(seq)
}

/// The slot holding handle `h`'s entry, if one does. Stored keys are the handle + 1, so that
/// handle 0 (the legacy default stream) is a key and 0 means a free slot.
#[inline(always)]
fn find(t: &[Slot], h: u64) -> Option<&Slot> {
    let i = index(h, t.len());
    (0..PROBES)
        .map(|p| &t[(i + p) % t.len()])
        .find(|s| s.key.load(Ordering::Relaxed) == h.wrapping_add(1))
}

/// The slot for a new entry of handle `h`: its own, else the first free one, else the first
/// (another handle's, which it replaces).
#[inline(always)]
fn place(t: &[Slot], h: u64) -> &Slot {
    let i = index(h, t.len());
    let probe = |p: usize| &t[(i + p) % t.len()];
    find(t, h)
        .or_else(|| {
            (0..PROBES)
                .map(probe)
                .find(|s| s.key.load(Ordering::Relaxed) == 0)
        })
        .unwrap_or_else(|| probe(0))
}

#[inline(always)]
fn write(t: &[Slot], h: u64, [a, b, c]: [u64; 3]) {
    let s = place(t, h);
    let before = s.key.load(Ordering::Relaxed);
    let Some(seq) = lock(s) else { return };
    // Another handle took the slot between the look and the lock: skip (an op key lost).
    if s.key.load(Ordering::Relaxed) != before {
        s.seq.store(seq, Ordering::Release);
        return;
    }
    s.key.store(h.wrapping_add(1), Ordering::Relaxed);
    s.a.store(a, Ordering::Relaxed);
    s.b.store(b, Ordering::Relaxed);
    s.c.store(c, Ordering::Relaxed);
    s.seq.store(seq + 2, Ordering::Release);
}

/// Sets the `b` word of handle `h`'s slot if the slot is still `h`'s and its `a` word passes
/// `check` (checked and written under the slot's lock: no other writer in between).
#[inline(always)]
fn update_b(t: &[Slot], h: u64, check: impl FnOnce(u64) -> bool, b: u64) {
    let Some(s) = find(t, h) else { return };
    let Some(seq) = lock(s) else { return };
    if s.key.load(Ordering::Relaxed) == h.wrapping_add(1) && check(s.a.load(Ordering::Relaxed)) {
        s.b.store(b, Ordering::Relaxed);
    }
    s.seq.store(seq + 2, Ordering::Release);
}

#[inline(always)]
fn read(t: &[Slot], h: u64) -> Option<[u64; 3]> {
    let s = find(t, h)?;
    for _ in 0..4 {
        let s1 = s.seq.load(Ordering::Acquire);
        if s1 & 1 == 1 {
            std::hint::spin_loop();
            continue;
        }
        let (k, a, b, c) = (
            s.key.load(Ordering::Relaxed),
            s.a.load(Ordering::Relaxed),
            s.b.load(Ordering::Relaxed),
            s.c.load(Ordering::Relaxed),
        );
        fence(Ordering::Acquire);
        if s.seq.load(Ordering::Relaxed) == s1 {
            return (k == h.wrapping_add(1)).then_some([a, b, c]);
        }
    }
    None
}

/// Hook path: comm op `key` ([`freeride_abi::event::op_key`]) was queued on `stream` (its end
/// event is not known yet).
#[inline]
pub fn comm_queued(stream: u64, key: u64) {
    write(&STREAMS, stream, [key, 0, 0]);
}

/// Hook path: the work of comm op `key` (its [`freeride_abi::event::op_key`]: a group's for all
/// its ops on the stream) is timed on `stream`; `end_event` (a driver event handle) completes with
/// it, or later: a timing event is recorded again only after its op has ended. Noted only while
/// the stream's last comm op is still that one.
#[inline]
pub fn comm_timed(stream: u64, key: u64, end_event: u64) {
    update_b(&STREAMS, stream, |k| k == key, end_event);
}

/// The last comm op queued on `stream` and its end event: (op key, event); (0, _): none seen,
/// (_, 0): its end event is not known.
#[inline]
pub fn last_comm(stream: u64) -> (u64, u64) {
    read(&STREAMS, stream).map_or((0, 0), |[k, e, _]| (k, e))
}

/// Hook path: `event` was recorded on `stream`, after comm op `key` (0: none), whose end event
/// is `end_event` (0: not known).
#[inline]
pub fn recorded(event: u64, stream: u64, key: u64, end_event: u64) {
    write(&EVENTS, event, [stream, key, end_event]);
}

/// The latest record of `event`: (stream, the comm op it followed, that op's end event);
/// `None`: not seen.
#[inline]
pub fn last_record(event: u64) -> Option<(u64, u64, u64)> {
    read(&EVENTS, event).map(|[s, k, e]| (s, k, e))
}

/// Fork child: the parent's streams and events are not the child's.
pub fn reset_after_fork() {
    for s in STREAMS.iter().chain(EVENTS.iter()) {
        s.key.store(0, Ordering::Relaxed);
        s.seq.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_comm_ops_are_remembered_per_handle() {
        comm_queued(0, 7);
        comm_queued(0x7f00_0000_1000, 9 << 32);
        assert_eq!(last_comm(0), (7, 0));
        assert_eq!(last_comm(0x7f00_0000_1000), (9 << 32, 0));
        assert_eq!(last_comm(0x7f00_0000_2000), (0, 0));
        // Its timing names the op's end event; a new op on the stream forgets it.
        comm_timed(0x7f00_0000_1000, 9 << 32, 0xe0);
        assert_eq!(last_comm(0x7f00_0000_1000), (9 << 32, 0xe0));
        comm_timed(0, 8, 0xe4);
        assert_eq!(last_comm(0), (7, 0), "another op's timing");
        comm_timed(0, 7, 0xe4);
        assert_eq!(last_comm(0), (7, 0xe4));
        // A group's timing (its key: the group's) covers its ops on the stream.
        comm_queued(0x7f00_0000_4000, 11 << 32);
        comm_timed(0x7f00_0000_4000, 12 << 32, 0xec);
        assert_eq!(last_comm(0x7f00_0000_4000), (11 << 32, 0), "another group");
        comm_timed(0x7f00_0000_4000, 11 << 32, 0xec);
        assert_eq!(last_comm(0x7f00_0000_4000), (11 << 32, 0xec));
        comm_timed(0x7f00_0000_3000, 0, 0xe8);
        assert_eq!(last_comm(0x7f00_0000_3000), (0, 0), "no op on that stream");
        recorded(0x5500_0000_0040, 0x7f00_0000_1000, 9 << 32, 0xe0);
        assert_eq!(
            last_record(0x5500_0000_0040),
            Some((0x7f00_0000_1000, 9 << 32, 0xe0))
        );
        comm_queued(0x7f00_0000_1000, 10 << 32);
        assert_eq!(last_comm(0x7f00_0000_1000), (10 << 32, 0));
        // A later record replaces the earlier one.
        recorded(0x5500_0000_0040, 3, 0, 0);
        assert_eq!(last_record(0x5500_0000_0040), Some((3, 0, 0)));
        assert_eq!(last_record(0x5500_0000_0080), None);
    }

    #[test]
    fn handles_that_hash_alike_keep_their_own_entries() {
        // A table of its own (the global ones are shared with the other tests).
        let t: [Slot; 64] = [SLOT_INIT; 64];
        let first = 0x7f00_0000_1000u64;
        let alike: Vec<u64> = (1..)
            .map(|k| first + k * 0x40)
            .filter(|&h| index(h, t.len()) == index(first, t.len()))
            .take(PROBES)
            .collect();
        write(&t, first, [1, 0, 0]);
        for (k, &h) in alike[..PROBES - 1].iter().enumerate() {
            write(&t, h, [k as u64 + 2, 0, 0]);
        }
        // All four are there (one slot each would have kept only the last).
        assert_eq!(read(&t, first), Some([1, 0, 0]));
        for (k, &h) in alike[..PROBES - 1].iter().enumerate() {
            assert_eq!(read(&t, h), Some([k as u64 + 2, 0, 0]));
        }
        // A handle's own entry is rewritten in place, and updated there.
        write(&t, alike[1], [9, 0, 0]);
        update_b(&t, alike[1], |a| a == 9, 0xe0);
        assert_eq!(read(&t, alike[1]), Some([9, 0xe0, 0]));
        // A fifth replaces the first slot's (its op key lost, never another's read as its own).
        write(&t, alike[PROBES - 1], [5, 0, 0]);
        assert_eq!(read(&t, alike[PROBES - 1]), Some([5, 0, 0]));
        assert_eq!(read(&t, first), None);
        assert_eq!(read(&t, alike[0]), Some([2, 0, 0]));
    }
}
