//! Which stream waits for what, as far as the hooks need it: per stream, the last communication op
//! queued on it ([`comm_queued`]); per event, its latest record: the stream and that stream's last
//! communication op then ([`recorded`], [`last_record`]). So an `EventRecord` names the comm op it
//! follows, and a `StreamWait` whether the event it waits for follows one (such a wait is timed:
//! it is where a compute stream may stall on communication).
//!
//! Hook path: fixed direct-mapped tables of seqlocked slots, no allocation, no lock, no system
//! call. A slot is keyed by the handle; two handles that map to one slot replace each other (the
//! older is forgotten: its op key reads 0, "none seen"), and a writer that finds a slot being
//! written by another thread skips its write. Both only lose an op key, never invent one.
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

const STREAM_SLOTS: usize = 256;
const EVENT_SLOTS: usize = 1024;

struct Slot {
    /// Even: stable; odd: being written.
    seq: AtomicU32,
    key: AtomicU64,
    a: AtomicU64,
    b: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const SLOT_INIT: Slot = Slot {
    seq: AtomicU32::new(0),
    key: AtomicU64::new(0),
    a: AtomicU64::new(0),
    b: AtomicU64::new(0),
};

static STREAMS: [Slot; STREAM_SLOTS] = [SLOT_INIT; STREAM_SLOTS];
static EVENTS: [Slot; EVENT_SLOTS] = [SLOT_INIT; EVENT_SLOTS];

/// The slot of handle `h` in a table of `n` slots (handles are aligned addresses or small values).
#[inline(always)]
fn index(h: u64, n: usize) -> usize {
    let x = (h ^ (h >> 17)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 40) as usize % n
}

/// Stored keys are the handle + 1, so that handle 0 (the legacy default stream) is a key.
#[inline(always)]
fn write(t: &[Slot], h: u64, a: u64, b: u64) {
    let s = &t[index(h, t.len())];
    let seq = s.seq.load(Ordering::Relaxed);
    if seq & 1 == 1
        || s.seq
            .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    fence(Ordering::Release);
    s.key.store(h.wrapping_add(1), Ordering::Relaxed);
    s.a.store(a, Ordering::Relaxed);
    s.b.store(b, Ordering::Relaxed);
    s.seq.store(seq + 2, Ordering::Release);
}

#[inline(always)]
fn read(t: &[Slot], h: u64) -> Option<(u64, u64)> {
    let s = &t[index(h, t.len())];
    for _ in 0..4 {
        let s1 = s.seq.load(Ordering::Acquire);
        if s1 & 1 == 1 {
            std::hint::spin_loop();
            continue;
        }
        let (k, a, b) = (
            s.key.load(Ordering::Relaxed),
            s.a.load(Ordering::Relaxed),
            s.b.load(Ordering::Relaxed),
        );
        fence(Ordering::Acquire);
        if s.seq.load(Ordering::Relaxed) == s1 {
            return (k == h.wrapping_add(1)).then_some((a, b));
        }
    }
    None
}

/// Hook path: comm op `key` ([`freeride_abi::event::op_key`]) was queued on `stream`.
#[inline]
pub fn comm_queued(stream: u64, key: u64) {
    write(&STREAMS, stream, key, 0);
}

/// The last comm op queued on `stream` (0: none seen).
#[inline]
pub fn last_comm(stream: u64) -> u64 {
    read(&STREAMS, stream).map_or(0, |(k, _)| k)
}

/// Hook path: `event` was recorded on `stream`, after comm op `key` (0: none).
#[inline]
pub fn recorded(event: u64, stream: u64, key: u64) {
    write(&EVENTS, event, stream, key);
}

/// The latest record of `event`: (stream, the comm op it followed); `None`: not seen.
#[inline]
pub fn last_record(event: u64) -> Option<(u64, u64)> {
    read(&EVENTS, event)
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
        assert_eq!(last_comm(0), 7);
        assert_eq!(last_comm(0x7f00_0000_1000), 9 << 32);
        assert_eq!(last_comm(0x7f00_0000_2000), 0);
        recorded(0x5500_0000_0040, 0x7f00_0000_1000, 9 << 32);
        assert_eq!(
            last_record(0x5500_0000_0040),
            Some((0x7f00_0000_1000, 9 << 32))
        );
        // A later record replaces the earlier one.
        recorded(0x5500_0000_0040, 3, 0);
        assert_eq!(last_record(0x5500_0000_0040), Some((3, 0)));
        assert_eq!(last_record(0x5500_0000_0080), None);
    }
}
