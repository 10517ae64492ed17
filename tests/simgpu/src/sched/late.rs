//! Work whose stream's thread submits it after the model's clock passed the time its stream
//! reached it (the thread woke late, was starved of the CPU, or the hold that kept the clock for
//! it expired): a GPU's front end starts queued work as soon as what it follows is done, whatever
//! the host threads do, so where the model can tell what the work would have done since, it
//! starts it then, in the past, instead of at the clock.
//!
//! * A communication kernel that waits for its peers takes no SMs: it starts when its stream
//!   reached it (under time-slicing with spinning, at the first instant since that its process was
//!   resident); its body posts that start to its peers as its arrival.
//! * A compute kernel starts in the past only if no compute kernel of any process ran on the
//!   device since its stream reached it ([`Sched::compute_quiet_since_ns`]): then it had the device
//!   to itself, at the rate its demand and fill give it alone, in its process's resident time. It
//!   may have ended already (then it is done at once, and its stream's next work is held for at
//!   the clock). Otherwise it starts at the clock, as before: the SMs of the past were given to
//!   others, and what the model has settled never changes.
//!
//! Before 2026-12-07 every such kernel started at the clock: on 2 cores with 8 simulated GPUs the
//! truth showed idle gaps of 0.1-1 ms after most receives (the compute that waited for them
//! started when its thread came, not when the data was there), which a GPU does not have and no
//! detector can see.
use super::{Sched, COMM_WAIT, COMPUTE, DONE, EPS, HOLD_AFTER, STARTED};
use crate::config::Mode;

impl Sched {
    /// Entry `index`, just submitted, was reached by its stream at `ready` (before the clock):
    /// starts it then where the model can tell what it did since (see the module's doc).
    pub(super) fn start_in_past(&mut self, index: usize, ready: u64) {
        let clock = self.clock_ns;
        let e = self.entries[index];
        match e.kind {
            COMM_WAIT => {
                let off_device = self.knobs.mode() == Mode::Timeslice && self.knobs.comm_spin == 0;
                let start = if off_device {
                    Some(ready)
                } else {
                    self.first_resident(e.slot, ready, clock)
                };
                if let Some(t) = start {
                    let e = &mut self.entries[index];
                    e.flags |= STARTED;
                    e.start_ns = t;
                    e.eligible_ns = t;
                }
            }
            COMPUTE if self.compute_quiet_since_ns <= ready => {
                let Some(start) = self.first_resident(e.slot, ready, clock) else {
                    return;
                };
                // Alone on the device: its demand's share of what it fills, nobody's load beside.
                let rate = f64::from(e.demand.min(100)) / f64::from(e.fill.max(1));
                let settled = self.settle_past(e.slot, start, clock, e.work / rate);
                let e = &mut self.entries[index];
                e.flags |= STARTED;
                e.start_ns = start;
                e.eligible_ns = start;
                match settled {
                    Ok(end) => {
                        self.compute_quiet_since_ns = end;
                        self.ended_in_past(index, end);
                    }
                    Err(left) => {
                        e.work = (left * rate).max(EPS);
                        self.compute_quiet_since_ns = u64::MAX;
                    }
                }
            }
            _ => {}
        }
    }

    /// Entry `index` ended at `end`, before the clock: done, its chained kernels released, and
    /// its stream's next work, due at `end`, held for at the clock (as a record that takes its
    /// time in the past is).
    pub(super) fn ended_in_past(&mut self, index: usize, end: u64) {
        let e = &mut self.entries[index];
        e.state = DONE;
        e.end_ns = end;
        e.work = 0.0;
        let (hold, key, slot) = (e.is(HOLD_AFTER), e.stream_key, e.slot);
        self.release_after(index);
        if hold {
            self.set_hold(key, slot, self.clock_ns, self.visited_real_ns);
        }
    }

    /// After the SMs were handed out at `t`: whether a compute kernel runs from `t` on.
    pub(super) fn note_compute(&mut self, t: u64) {
        let runs = self
            .entries
            .iter()
            .any(|e| e.state == super::ACTIVE && e.kind == COMPUTE && e.alloc > 0);
        if runs {
            self.compute_quiet_since_ns = u64::MAX;
        } else if self.compute_quiet_since_ns == u64::MAX {
            self.compute_quiet_since_ns = t;
        }
    }
}
