//! Learned GPU durations per launched function (or graph exec), from the side task's own
//! completion events. A fixed open-addressed table (no allocation), only touched under the gate
//! lock. Per key: an EWMA of the duration and of its absolute deviation (weight 1/4 each); the
//! estimate is `ewma + 2 * deviation`, never below the last sample's half, so a kernel that got
//! slower is believed quickly and a noisy one is over- rather than under-estimated.

const SLOTS: usize = 512;
const PROBES: usize = 16;

#[derive(Clone, Copy)]
struct Slot {
    key: u64,
    ewma: u64,
    dev: u64,
    last: u64,
    n: u32,
}

const EMPTY: Slot = Slot {
    key: 0,
    ewma: 0,
    dev: 0,
    last: 0,
    n: 0,
};

pub struct Durations {
    slots: [Slot; SLOTS],
}

impl Default for Durations {
    fn default() -> Self {
        Self::new()
    }
}

impl Durations {
    pub const fn new() -> Self {
        Durations {
            slots: [EMPTY; SLOTS],
        }
    }

    fn norm(key: u64) -> u64 {
        if key == 0 {
            1
        } else {
            key
        }
    }

    fn home(key: u64) -> usize {
        // Fibonacci hashing of a pointer-like key.
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % SLOTS
    }

    /// Estimated GPU ns of one launch of `key`, or `None` if never seen complete.
    pub fn estimate(&self, key: u64) -> Option<u64> {
        let key = Self::norm(key);
        let h = Self::home(key);
        for i in 0..PROBES {
            let s = &self.slots[(h + i) % SLOTS];
            if s.key == key {
                return Some((s.ewma + 2 * s.dev).max(s.last / 2).max(1));
            }
            if s.key == 0 {
                return None;
            }
        }
        None
    }

    /// One measured duration of `key`.
    pub fn learn(&mut self, key: u64, ns: u64) {
        let key = Self::norm(key);
        let h = Self::home(key);
        let mut victim = h;
        for i in 0..PROBES {
            let j = (h + i) % SLOTS;
            let s = &mut self.slots[j];
            if s.key == key {
                let diff = s.ewma.abs_diff(ns);
                s.ewma = (s.ewma * 3 + ns) / 4;
                s.dev = (s.dev * 3 + diff) / 4;
                s.last = ns;
                s.n = s.n.saturating_add(1);
                return;
            }
            if s.key == 0 {
                victim = j;
                break;
            }
            if s.n < self.slots[victim].n {
                victim = j;
            }
        }
        // New key (or evict the least-sampled of the probe window): the first sample with a
        // deviation of 1/8 of it.
        self.slots[victim] = Slot {
            key,
            ewma: ns,
            dev: ns / 8,
            last: ns,
            n: 1,
        };
    }

    pub fn clear(&mut self) {
        self.slots = [EMPTY; SLOTS];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_and_converges() {
        let mut d = Durations::new();
        assert_eq!(d.estimate(0x1234), None);
        d.learn(0x1234, 500_000);
        let e = d.estimate(0x1234).unwrap();
        assert!((500_000..=700_000).contains(&e), "{e}");
        for _ in 0..50 {
            d.learn(0x1234, 500_000);
        }
        let e = d.estimate(0x1234).unwrap();
        assert!((500_000..=520_000).contains(&e), "{e}");
        // A slower kernel is believed quickly.
        d.learn(0x1234, 2_000_000);
        assert!(d.estimate(0x1234).unwrap() >= 1_000_000);
    }

    #[test]
    fn many_keys_no_panic() {
        let mut d = Durations::new();
        for k in 0..10_000u64 {
            d.learn(k * 64, k);
        }
        assert!(d.estimate(9_999 * 64).is_some());
    }
}
