//! The recent history of which process was resident (time-slicing), for transfers reported after
//! the model has moved past their start (a communication kernel's body learns when its transfer
//! began only when its peer posts, in real time, which may be after the clock went by) and for
//! event records whose stream thread reached them after the clock went by.
use super::{Residency, Sched, EPS, HISTORY};
use crate::config::Mode;

impl Sched {
    /// Records that from `from_ns` on, slot `slot1 - 1` is resident (0: none).
    pub(crate) fn push_residency(&mut self, from_ns: u64, slot1: u32) {
        let len = self.hist_len as usize;
        if len > 0 {
            let last = (self.hist_head as usize + len - 1) % HISTORY;
            if self.hist[last].from_ns == from_ns {
                self.hist[last].slot1 = slot1;
                return;
            }
        }
        let r = Residency {
            from_ns,
            slot1,
            _pad: 0,
        };
        if len < HISTORY {
            self.hist[(self.hist_head as usize + len) % HISTORY] = r;
            self.hist_len += 1;
        } else {
            self.hist[self.hist_head as usize] = r;
            self.hist_head = ((self.hist_head as usize + 1) % HISTORY) as u32;
        }
    }

    /// Calls `f(a, b)` for each interval within `[from, to]` during which `slot` was resident.
    /// Time before the remembered history counts as resident.
    fn resident_intervals(
        &self,
        slot: u32,
        from: u64,
        to: u64,
        mut f: impl FnMut(u64, u64) -> bool,
    ) {
        if self.knobs.mode() == Mode::Mps {
            f(from, to);
            return;
        }
        let len = self.hist_len as usize;
        let at = |i: usize| self.hist[(self.hist_head as usize + i) % HISTORY];
        if len == 0 || at(0).from_ns > from {
            let end = if len == 0 { to } else { at(0).from_ns.min(to) };
            if from < end && f(from, end) {
                return;
            }
        }
        for i in 0..len {
            let r = at(i);
            let until = if i + 1 < len {
                at(i + 1).from_ns
            } else {
                u64::MAX
            };
            let (a, b) = (r.from_ns.max(from), until.min(to));
            if r.slot1 == slot + 1 && a < b && f(a, b) {
                return;
            }
        }
    }

    /// The first instant in `[from, to)` at which `slot` was resident, if any.
    pub(crate) fn first_resident(&self, slot: u32, from: u64, to: u64) -> Option<u64> {
        let mut first = None;
        self.resident_intervals(slot, from, to, |a, _| {
            first = Some(a);
            true
        });
        first
    }

    /// Settles a transfer of `work` ns that began at `from` (before the clock `to`) of a kernel of
    /// `slot`: Ok(its end) if it fits in the slot's resident time since, else Err(work left).
    pub(crate) fn settle_past(&self, slot: u32, from: u64, to: u64, work: f64) -> Result<u64, f64> {
        let mut done = 0.0;
        let mut end = None;
        self.resident_intervals(slot, from, to, |a, b| {
            let need = work - done;
            if need <= (b - a) as f64 + EPS {
                end = Some(a + need.max(0.0).ceil() as u64);
                return true;
            }
            done += (b - a) as f64;
            false
        });
        end.map(|e| e.min(to)).ok_or(work - done)
    }
}
