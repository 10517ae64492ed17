//! Time-slicing: which process is resident, when its slice ends, and the switches.
use super::{
    Entry, Sched, ACTIVE, COMM_WAIT, COMM_XFER, COMPUTE, DRAIN, PREEMPTIBLE, RUN, STARTED, SWITCH,
};

/// A set of process slots (bit i: slot i).
type Slots = u128;

impl Sched {
    /// Settles the time-slicing state at `t`: ends a switch that is due, gives an idle device to
    /// a process with work, ends a slice, switches.
    pub(crate) fn decide(&mut self, t: u64) {
        for _ in 0..8 {
            match self.ts.phase {
                SWITCH => {
                    if t < self.ts.switch_end_ns {
                        return;
                    }
                    let (to, at) = (self.ts.switch_to, self.ts.switch_end_ns);
                    self.ts.holder = to;
                    self.ts.switch_to = 0;
                    self.ts.phase = RUN;
                    self.ts.slice_start_ns = at;
                    self.push_residency(at, to);
                }
                RUN => {
                    let runnable = self.runnable(t);
                    if self.ts.holder == 0 {
                        if runnable != 0 {
                            let s = runnable.trailing_zeros() + 1;
                            self.ts.holder = s;
                            self.ts.slice_start_ns = t;
                            self.push_residency(t, s);
                        }
                        return;
                    }
                    let me = bit(self.ts.holder - 1);
                    let others = runnable & !me;
                    if others == 0 {
                        return;
                    }
                    if runnable & me == 0 {
                        self.switch(others, t);
                    } else if t >= self.ts.slice_start_ns.saturating_add(self.knobs.slice_ns) {
                        self.ts.phase = DRAIN;
                    } else {
                        return;
                    }
                }
                _ => {
                    let runnable = self.runnable(t);
                    let h = self.ts.holder - 1;
                    let others = runnable & !bit(h);
                    if others == 0 {
                        self.ts.phase = RUN;
                        return;
                    }
                    if runnable & bit(h) != 0 && self.has_short_running(h) {
                        return;
                    }
                    self.switch(others, t);
                }
            }
        }
    }

    /// When the time-slicing state changes next without new work (u64::MAX: not by itself).
    pub(crate) fn timeslice_next_event(&self, t: u64) -> u64 {
        match self.ts.phase {
            SWITCH => self.ts.switch_end_ns,
            RUN if self.ts.holder != 0 => {
                let runnable = self.runnable(t);
                let me = bit(self.ts.holder - 1);
                if runnable & me != 0 && runnable & !me != 0 {
                    self.ts
                        .slice_start_ns
                        .saturating_add(self.knobs.slice_ns)
                        .max(t + 1)
                } else {
                    u64::MAX
                }
            }
            // A drain ends with its last short kernel (an end event).
            _ => u64::MAX,
        }
    }

    /// Switches to the next process of `candidates` after the holder (round-robin).
    fn switch(&mut self, candidates: Slots, t: u64) {
        let from = self.ts.holder.saturating_sub(1);
        let Some(next) = (1..=128u32)
            .map(|i| (from + i) % 128)
            .find(|&s| candidates & bit(s) != 0)
        else {
            return;
        };
        if self.knobs.switch_ns == 0 {
            self.ts.holder = next + 1;
            self.ts.phase = RUN;
            self.ts.slice_start_ns = t;
            self.push_residency(t, next + 1);
        } else {
            self.ts.phase = SWITCH;
            self.ts.switch_to = next + 1;
            self.ts.switch_end_ns = t + self.knobs.switch_ns;
            self.push_residency(t, 0);
        }
    }

    /// The process slots with work that needs the device at `t`.
    fn runnable(&self, t: u64) -> Slots {
        let spin = self.knobs.comm_spin != 0;
        self.entries
            .iter()
            .filter(|e| needs_device(e, t, spin))
            .fold(0, |acc, e| acc | bit(e.slot))
    }

    /// Whether slot `slot` has a running kernel shorter than a slice (it runs to its end).
    fn has_short_running(&self, slot: u32) -> bool {
        self.entries.iter().any(|e| {
            e.state == ACTIVE
                && e.slot == slot
                && e.kind == COMPUTE
                && e.is(STARTED)
                && !e.is(PREEMPTIBLE)
        })
    }
}

/// Whether `e` needs its process resident at `t`.
fn needs_device(e: &Entry, t: u64, spin: bool) -> bool {
    if e.state != ACTIVE || e.eligible_ns > t {
        return false;
    }
    match e.kind {
        COMM_WAIT => spin,
        COMM_XFER => spin || e.transfer_start_ns == 0 || t >= e.transfer_start_ns,
        _ => true,
    }
}

fn bit(slot: u32) -> Slots {
    if slot < 128 {
        1 << slot
    } else {
        0
    }
}
