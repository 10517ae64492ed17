//! One step of the model: settle the time-slicing state at the clock, hand out the SMs, end the
//! kernels that are due, and jump to the next event.
use super::{Sched, ACTIVE, COMM_XFER, DONE, EPS, HOLD_AFTER};
use crate::config::Mode;

/// What a step did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StepResult {
    /// The clock moved.
    pub moved: bool,
    /// Kernels that ended (one may have asked for a hold: the horizon may have come down).
    pub ended: u32,
}

impl Sched {
    /// One event, with the clock moving at most to `limit`; `real_now` stamps the holds of
    /// entries that end. With no event before `limit`, the clock goes to `limit` (unless that is
    /// `u64::MAX`: then nothing moves and nothing ends).
    pub(crate) fn step(&mut self, limit: u64, real_now: u64) -> StepResult {
        let t = self.clock_ns;
        if self.knobs.mode() == Mode::Timeslice {
            self.decide(t);
        }
        self.assign(t);
        self.note_compute(t);
        // Kernels with nothing left end as soon as they run (zero-length kernels, a transfer whose
        // data is already there).
        let due = self.end_due(t, real_now);
        if due.ended > 0 {
            return due;
        }
        let next = self.next_event(t);
        if next == u64::MAX && limit == u64::MAX {
            return StepResult::default();
        }
        let next = next.min(limit);
        if next <= t {
            return StepResult::default();
        }
        let dt = (next - t) as f64;
        for e in self.entries.iter_mut() {
            if e.state == ACTIVE && e.rate > 0.0 {
                e.work -= e.rate * dt;
            }
        }
        self.clock_ns = next;
        StepResult {
            moved: true,
            ..self.end_due(next, real_now)
        }
    }

    /// Ends (at `t`) the running kernels whose work is done.
    fn end_due(&mut self, t: u64, real_now: u64) -> StepResult {
        let mut r = StepResult::default();
        let mut holds = [(0u64, 0u32); 8];
        let mut n_holds = 0;
        for i in 0..self.entries.len() {
            let e = &mut self.entries[i];
            if e.state == ACTIVE && e.rate > 0.0 && e.work <= EPS {
                e.state = DONE;
                e.end_ns = t;
                e.work = 0.0;
                r.ended += 1;
                if e.is(HOLD_AFTER) && n_holds < holds.len() {
                    holds[n_holds] = (e.stream_key, e.slot);
                    n_holds += 1;
                }
                self.release_after(i);
            }
        }
        for &(key, slot) in &holds[..n_holds] {
            self.set_hold(key, slot, t, real_now);
        }
        r
    }

    /// The next time anything changes if nothing new comes (u64::MAX: never).
    fn next_event(&self, t: u64) -> u64 {
        let mut next = u64::MAX;
        for e in self.entries.iter().filter(|e| e.state == ACTIVE) {
            if e.eligible_ns > t {
                next = next.min(e.eligible_ns);
            } else if e.rate > 0.0 {
                // Less a hair, so that a rate like 1/3 does not round a whole ns up.
                let dt = (e.work / e.rate - 1e-6).ceil().max(1.0);
                next = next.min(t.saturating_add(dt.min(u64::MAX as f64 / 2.0) as u64));
            } else if e.kind == COMM_XFER && e.transfer_start_ns > t {
                next = next.min(e.transfer_start_ns);
            }
        }
        if self.knobs.mode() == Mode::Timeslice {
            next = next.min(self.timeslice_next_event(t));
        }
        next
    }
}
