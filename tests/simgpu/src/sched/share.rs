//! Who runs at a given instant and how fast: the SMs of the device handed out to the kernels that
//! may run, oldest eligible first, each up to its demand (no kernel loses SMs to a younger one, so
//! nothing is preempted this way); a kernel's rate is the share of what it fills that it got,
//! under MPS further slowed by the other processes' SM load.
use super::{
    Entry, Sched, ACTIVE, COMM_WAIT, COMM_XFER, COMPUTE, DRAIN, MARK, MAX_ENTRIES, RUN, STARTED,
};
use crate::config::Mode;
use crate::shm::MAX_SLOTS;

/// The whole device, in percent of its SMs.
const FULL: u32 = 100;

impl Sched {
    /// Sets every entry's `alloc` and `rate` for the instant `t` (and marks the ones that start).
    pub(crate) fn assign(&mut self, t: u64) {
        for e in self.entries.iter_mut() {
            e.alloc = 0;
            e.rate = 0.0;
        }
        let mode = self.knobs.mode();
        let spin = self.knobs.comm_spin != 0;
        let (holder, phase) = (self.ts.holder, self.ts.phase);
        // Whether `e` may progress (or start) at `t`.
        let may_run = |e: &Entry| -> bool {
            if e.state != ACTIVE || e.eligible_ns > t {
                return false;
            }
            match mode {
                Mode::Mps => true,
                Mode::Timeslice => {
                    if e.kind == COMM_WAIT && !spin {
                        return true; // it waits off the device (see Knobs::comm_spin)
                    }
                    // A record is fed to the device while its process is resident, draining or
                    // not (it starts no kernel).
                    holder == e.slot + 1
                        && (phase == RUN || (phase == DRAIN && (e.is(STARTED) || e.kind == MARK)))
                }
            }
        };
        let mut order = [0u16; MAX_ENTRIES];
        let mut n = 0;
        for (i, e) in self.entries.iter_mut().enumerate() {
            if !may_run(e) {
                continue;
            }
            if e.kind == COMPUTE {
                order[n] = i as u16;
                n += 1;
                continue;
            }
            // Communication kernels: no SM share; a transfer runs at full speed once begun. A
            // record: done as soon as it runs.
            start(e, t);
            if e.kind == MARK {
                e.rate = 1.0;
            } else if e.kind == COMM_XFER {
                if e.transfer_start_ns == 0 {
                    e.transfer_start_ns = e.start_ns;
                }
                if t >= e.transfer_start_ns {
                    e.rate = 1.0;
                }
            }
        }
        let order = &mut order[..n];
        order.sort_by_key(|&i| self.entries[i as usize].key());
        let mut free = FULL;
        let mut by_slot = [0u32; MAX_SLOTS];
        for &i in order.iter() {
            let e = &mut self.entries[i as usize];
            let a = e.demand.min(free);
            free -= a;
            e.alloc = a;
            if a > 0 {
                start(e, t);
                e.rate = f64::from(a) / f64::from(e.fill);
                if let Some(s) = by_slot.get_mut(e.slot as usize) {
                    *s += a;
                }
            }
        }
        if mode == Mode::Mps && self.knobs.interference > 0.0 {
            let total = FULL - free;
            for &i in order.iter() {
                let e = &mut self.entries[i as usize];
                if e.alloc > 0 {
                    let mine = by_slot.get(e.slot as usize).copied().unwrap_or(0);
                    let others = f64::from(total.saturating_sub(mine)) / f64::from(FULL);
                    e.rate /= 1.0 + self.knobs.interference * others;
                }
            }
        }
    }
}

fn start(e: &mut Entry, t: u64) {
    if !e.is(STARTED) {
        e.flags |= STARTED;
        e.start_ns = t;
    }
}
