//! A fixed, lock-free, open-addressed table of `u64` keys with three `u64` words each (no
//! allocation, atomics only: usable on any hook path). Keys 0 and `u64::MAX` are reserved (free
//! and deleted slots). A key is looked for in [`PROBES`] slots from its home: an insert that
//! finds none of them free fails (the caller decides what that means), and so does a look-up of
//! a key that was never inserted. Words are stored after the key is claimed: a reader that finds
//! a key while its insert is under way may see zeros (callers look up only keys whose insert
//! returned, e.g. a pointer the allocation hook handed back).
use std::sync::atomic::{AtomicU64, Ordering};

pub const PROBES: usize = 64;
const EMPTY: u64 = 0;
const TOMB: u64 = u64::MAX;

pub struct Slot {
    key: AtomicU64,
    pub words: [AtomicU64; 3],
}

#[allow(clippy::declare_interior_mutable_const)]
const SLOT_INIT: Slot = Slot {
    key: AtomicU64::new(EMPTY),
    words: [const { AtomicU64::new(0) }; 3],
};

pub struct Table<const N: usize> {
    slots: [Slot; N],
}

impl<const N: usize> Default for Table<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Table<N> {
    pub const fn new() -> Self {
        Table {
            slots: [SLOT_INIT; N],
        }
    }

    fn home(key: u64) -> usize {
        // Fibonacci hashing of a pointer- or handle-like key.
        ((key >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize % N
    }

    fn usable(key: u64) -> bool {
        key != EMPTY && key != TOMB
    }

    /// The slot holding `key`, if any.
    pub fn find(&self, key: u64) -> Option<&Slot> {
        if !Self::usable(key) {
            return None;
        }
        let h = Self::home(key);
        for i in 0..PROBES {
            let s = &self.slots[(h + i) % N];
            match s.key.load(Ordering::Acquire) {
                k if k == key => return Some(s),
                EMPTY => return None,
                _ => {}
            }
        }
        None
    }

    /// Inserts `key` with `words` (replacing them if `key` is there already). False: no room
    /// near its home, or a reserved key.
    pub fn insert(&self, key: u64, words: [u64; 3]) -> bool {
        if !Self::usable(key) {
            return false;
        }
        let slot = self.find(key).or_else(|| {
            let h = Self::home(key);
            (0..PROBES).map(|i| &self.slots[(h + i) % N]).find(|s| {
                let k = s.key.load(Ordering::Acquire);
                (k == EMPTY || k == TOMB)
                    && s.key
                        .compare_exchange(k, key, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
            })
        });
        let Some(s) = slot else { return false };
        for (w, v) in s.words.iter().zip(words) {
            w.store(v, Ordering::Release);
        }
        true
    }

    /// Removes `key`; its words, if it was there.
    pub fn remove(&self, key: u64) -> Option<[u64; 3]> {
        let s = self.find(key)?;
        let w = [0, 1, 2].map(|i| s.words[i].swap(0, Ordering::AcqRel));
        s.key
            .compare_exchange(key, TOMB, Ordering::AcqRel, Ordering::Relaxed)
            .ok()?;
        Some(w)
    }

    /// The words of `key`, if it is there.
    pub fn get(&self, key: u64) -> Option<[u64; 3]> {
        self.find(key)
            .map(|s| [0, 1, 2].map(|i| s.words[i].load(Ordering::Acquire)))
    }

    /// Every key in `[lo, hi)` (a scan of the whole table: for rare calls only).
    pub fn keys_in(&self, lo: u64, hi: u64, mut f: impl FnMut(u64)) {
        for s in &self.slots {
            let k = s.key.load(Ordering::Acquire);
            if Self::usable(k) && k >= lo && k < hi {
                f(k);
            }
        }
    }

    /// Fork child (async-signal-safe stores only): everything forgotten.
    pub fn clear(&self) {
        for s in &self.slots {
            s.key.store(EMPTY, Ordering::Relaxed);
            for w in &s.words {
                w.store(0, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_find_remove_and_reuse() {
        let t: Table<256> = Table::new();
        assert!(t.insert(0x7000_0000, [1, 2, 3]));
        assert_eq!(t.get(0x7000_0000), Some([1, 2, 3]));
        // Replacing keeps one entry.
        assert!(t.insert(0x7000_0000, [4, 5, 6]));
        assert_eq!(t.remove(0x7000_0000), Some([4, 5, 6]));
        assert_eq!(t.get(0x7000_0000), None);
        assert_eq!(t.remove(0x7000_0000), None);
        assert!(!t.insert(0, [1, 1, 1]));
        assert!(!t.insert(u64::MAX, [1, 1, 1]));
        // Fill it: inserts fail once a key's probe window is full; what went in is all found.
        let mut ok = vec![];
        for k in 1..=400u64 {
            if t.insert(k << 21, [k, 0, 0]) {
                ok.push(k);
            }
        }
        assert!(ok.len() >= 200 && ok.len() <= 256, "{}", ok.len());
        for &k in &ok {
            assert_eq!(t.get(k << 21), Some([k, 0, 0]));
        }
        let mut n = 0;
        t.keys_in(0, u64::MAX, |_| n += 1);
        assert_eq!(n, ok.len());
        // Deleted slots are reused.
        for &k in &ok {
            t.remove(k << 21);
        }
        assert!(t.insert(5 << 21, [9, 9, 9]));
        let mut inside = vec![];
        t.keys_in(4 << 21, 6 << 21, |k| inside.push(k));
        assert_eq!(inside, [5 << 21]);
        t.clear();
        assert_eq!(t.get(5 << 21), None);
    }
}
