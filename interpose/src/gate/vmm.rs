//! A side task's physical allocations of the virtual memory API, charged to its budget
//! ([`super::membudget`]) from `cuMemCreate` until nothing refers to them any more, as the driver
//! keeps them (the rules of `freeride_abi::event::MemEffect`): their handle (`cuMemRelease`;
//! `cuMemRetainAllocationHandle` adds a reference) and every mapping (`cuMemMap` .. `cuMemUnmap`).
//! Releasing a handle while it is mapped frees nothing, so a task cannot shed its charge that way.
//! Lock-free tables only ([`crate::memtable`]); nothing here calls the driver.
use super::membudget;
use crate::memtable::Table;
use std::sync::atomic::Ordering;

/// Handle -> [bytes, device, references].
static HANDLES: Table<4096> = Table::new();
/// Virtual address -> [bytes, handle, 0].
static MAPS: Table<8192> = Table::new();

/// Takes one reference away from `handle`; the last one gives its bytes back.
fn deref(handle: u64) {
    let Some(s) = HANDLES.find(handle) else {
        return;
    };
    let prev = s.words[2]
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| r.checked_sub(1))
        .unwrap_or(0);
    if prev == 1 {
        if let Some([bytes, d, _]) = HANDLES.remove(handle) {
            membudget::cancel(d as i32, bytes);
        }
    }
}

/// `cuMemCreate` succeeded: `handle` holds `bytes` (already reserved) on device `d`.
pub fn created(handle: u64, bytes: u64, d: i32) {
    // A full table: the bytes stay charged (conservative).
    HANDLES.insert(handle, [bytes, d.max(0) as u64, 1]);
}

/// `cuMemRetainAllocationHandle` handed out `handle` once more.
pub fn retained(handle: u64) {
    if let Some(s) = HANDLES.find(handle) {
        s.words[2].fetch_add(1, Ordering::AcqRel);
    }
}

/// `cuMemRelease(handle)` succeeded.
pub fn released(handle: u64) {
    deref(handle);
}

/// `cuMemMap(va, bytes, handle)` succeeded.
pub fn mapped(va: u64, bytes: u64, handle: u64) {
    if let Some(s) = HANDLES.find(handle) {
        if MAPS.insert(va, [bytes, handle, 0]) {
            s.words[2].fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// `cuMemUnmap(va, bytes)` succeeded: every mapping in the range is gone.
pub fn unmapped(va: u64, bytes: u64) {
    // The usual case: one mapping, unmapped as it was mapped.
    if let Some([b, _, _]) = MAPS.get(va) {
        if b == bytes {
            if let Some([_, h, _]) = MAPS.remove(va) {
                deref(h);
            }
            return;
        }
    }
    let mut gone = [0u64; 64];
    let mut n = 0;
    loop {
        MAPS.keys_in(va, va.saturating_add(bytes), |k| {
            if n < gone.len() {
                gone[n] = k;
                n += 1;
            }
        });
        if n == 0 {
            return;
        }
        for &k in &gone[..n] {
            if let Some([_, h, _]) = MAPS.remove(k) {
                deref(h);
            }
        }
        n = 0;
    }
}

/// Fork child: device memory is not inherited.
pub fn reset_after_fork() {
    HANDLES.clear();
    MAPS.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_charged_while_a_handle_or_a_mapping_refers_to_it() {
        let mib = 1u64 << 20;
        // Device 5 is this test's own.
        let d = 5;
        let base = membudget::held(d);
        let held = || membudget::held(d) - base;
        assert!(membudget::reserve(d, 20 * mib, u64::MAX));
        created(0x51, 20 * mib, d);
        assert!(membudget::reserve(d, 20 * mib, u64::MAX));
        created(0x52, 20 * mib, d);
        mapped(0x5000_0000, 20 * mib, 0x51);
        mapped(0x5000_0000 + 20 * mib, 20 * mib, 0x52);
        // Released while mapped: still held.
        released(0x51);
        assert_eq!(held(), 40 * mib);
        retained(0x52);
        // One unmap over both mappings.
        unmapped(0x5000_0000, 40 * mib);
        assert_eq!(
            held(),
            20 * mib,
            "0x51 had nothing left; 0x52 has its handles"
        );
        released(0x52);
        assert_eq!(held(), 20 * mib);
        released(0x52);
        assert_eq!(held(), 0);
        // Unknown handles and double releases change nothing.
        released(0x52);
        mapped(0x6000_0000, mib, 0x99);
        unmapped(0x6000_0000, mib);
        assert_eq!(held(), 0);
    }
}
