//! Running kernels in the device's model ([`crate::sched`]): a stream thread submits its kernel,
//! then sleeps (in real time) until the logical time the model predicts for it, wakes, moves the
//! model on to the real time and looks again. Nothing spins while a kernel waits for the device.
//!
//! Two futex words wake sleepers: `gen` when a prediction may have come earlier (a transfer was
//! reported, a dead process reaped), `hold_gen` when a hold went away (a sleeper whose kernel is
//! due but held back by another stream's hold waits on it).
use super::Device;
use crate::abi::now_ns;
use crate::config::Mode;
use crate::futex;
use crate::sched::{EntryId, Sched, Submit, Until, DONE, STARTED};
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::Relaxed;

/// How long before a kernel's end its thread stops sleeping and spins, when the host may be
/// waiting for it (a sleeping thread wakes tens of microseconds late on a busy machine).
pub const SPIN_FINISH_NS: u64 = 80_000;
/// How long a thread sleeps when the model cannot say when its kernel will run (it waits for a
/// peer's report or a new kernel).
const UNKNOWN_WAIT_NS: u64 = 10_000_000;
/// How soon a thread looks again when its kernel is due but the clock did not get there and no
/// hold explains it (not expected; never spin).
const HELD_BACK_RETRY_NS: u64 = 100_000;

/// A kernel as its stream hands it to the device.
#[derive(Clone, Copy, Debug)]
pub struct KernelRun {
    /// The stream (unique across processes: see `crate::stream`).
    pub stream_key: u64,
    pub comm: bool,
    /// A communication kernel with a body that will report its transfer.
    pub with_body: bool,
    /// Run time on the SMs it fills (or transfer time of a communication kernel without a body).
    pub duration_ns: u64,
    /// Percent of the device's SMs it fills.
    pub fill: u32,
    /// Its stream's logical time: it is eligible from then on.
    pub ready_ns: u64,
    /// Its stream has more queued: hold the timeline at its end.
    pub hold_after: bool,
}

/// When a kernel ran, on the logical timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    pub start_ns: u64,
    pub end_ns: u64,
    /// Communication kernels: when the transfer began (the start for others).
    pub transfer_start_ns: u64,
    /// Communication kernels: when the part they transferred before they waited ended.
    pub eager_end_ns: Option<u64>,
    /// Communication kernels: a busy span between that part and the transfer.
    pub mid: Option<(u64, u64)>,
}

impl Device {
    /// Puts a kernel in the device's model and clears its stream's hold.
    pub fn submit(&self, k: &KernelRun) -> EntryId {
        self.submit_entry(&self.submission(k))
    }

    fn submission(&self, k: &KernelRun) -> Submit {
        let demand = match self.knobs.mode() {
            Mode::Mps => k.fill.min(self.process_share),
            Mode::Timeslice => k.fill,
        };
        Submit {
            slot: self.slot as u32,
            stream_key: k.stream_key,
            comm: k.comm,
            with_body: k.with_body,
            mark: false,
            work_ns: k.duration_ns,
            fill: k.fill,
            demand,
            ready_ns: k.ready_ns,
            hold_after: k.hold_after,
        }
    }

    /// Puts kernel `k` in the device's model without waiting, behind entry `after` of its stream
    /// (see [`crate::sched::Sched::submit_after`]): None when the model's table is full (the
    /// stream's thread submits it when it gets there, as any other).
    pub fn submit_now(&self, k: &KernelRun, after: EntryId) -> Option<EntryId> {
        let s = self.submission(k);
        self.submit_clearing(s.stream_key, |m| m.submit_after(&s, after))
    }

    /// Runs `submit` on the model, and wakes the sleepers that stream `key`'s hold kept back if
    /// the submission let go of it.
    fn submit_clearing(
        &self,
        key: u64,
        submit: impl FnOnce(&mut Sched) -> Option<EntryId>,
    ) -> Option<EntryId> {
        let (id, cleared) = {
            let mut m = self.shm.model();
            let had = m.has_hold(key);
            let id = submit(&mut m);
            (id, had && id.is_some())
        };
        if cleared {
            self.bump(&self.shm.hold_gen);
        }
        id
    }

    /// Puts an event record of stream `key`, due at `ready_ns`, in the model: under
    /// time-slicing it executes at the first instant its process is resident (see
    /// `crate::sched::MARK`); its end is the record's timestamp. None under MPS (every process is
    /// resident: the record's time is `ready_ns`).
    pub fn submit_record(
        &self,
        stream_key: u64,
        ready_ns: u64,
        hold_after: bool,
    ) -> Option<EntryId> {
        if self.knobs.mode() == Mode::Mps {
            return None;
        }
        Some(self.submit_entry(&Submit {
            slot: self.slot as u32,
            stream_key,
            comm: false,
            with_body: false,
            mark: true,
            work_ns: 0,
            fill: 1,
            demand: 1,
            ready_ns,
            hold_after,
        }))
    }

    fn submit_entry(&self, s: &Submit) -> EntryId {
        self.reap_if_due();
        loop {
            let id = self.submit_clearing(s.stream_key, |m| {
                let id = m.submit(s);
                // A record that took its time in the past (its stream thread came late) is done
                // at once: hold the clock for the stream's next work as its end would have.
                if let Some(id) = id.filter(|_| s.mark && s.hold_after) {
                    if m.entry(id).is_some_and(|e| e.state == DONE) {
                        let clock = m.clock_ns;
                        m.set_hold(s.stream_key, s.slot, clock, now_ns());
                    }
                }
                id
            });
            match id {
                Some(id) => return id,
                // The table is full (a hundred kernels in flight on one device): wait for room,
                // keeping the stream's hold.
                None => {
                    self.reap();
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        }
    }

    /// Blocks until the kernel has started (a communication kernel's body runs then); its start.
    pub fn wait_started(&self, id: EntryId) -> u64 {
        match self.wait(id, Until::Started, false) {
            Reached::Started(t) => t,
            Reached::Done(t) => t.start_ns,
        }
    }

    /// Blocks until the kernel has ended and takes it out of the model. `on_time`: end on time
    /// in real time too (spin the last [`SPIN_FINISH_NS`]), as when the host may be waiting.
    pub fn wait_done(&self, id: EntryId, on_time: bool) -> Timing {
        match self.wait(id, Until::Done, on_time) {
            Reached::Done(t) => t,
            Reached::Started(t) => Timing {
                start_ns: t,
                end_ns: t,
                transfer_start_ns: t,
                eager_end_ns: None,
                mid: None,
            },
        }
    }

    /// A communication kernel's body reports its transfer (see `crate::abi::CommKernel`).
    pub fn report_transfer(&self, id: EntryId, k: &crate::abi::CommKernel) {
        self.shm.model().report_transfer(
            id,
            k.transfer_start_ns.max(k.start_ns),
            k.transfer_ns,
            k.eager_ns,
            Some((k.mid_start_ns, k.mid_ns)),
        );
        self.bump(&self.shm.gen);
    }

    /// Holds the timeline at `ns` for stream `key` (it is about to submit work eligible then).
    pub fn set_hold(&self, key: u64, ns: u64) {
        let real = now_ns();
        self.shm
            .model()
            .set_hold(key, self.slot as u32, ns.min(real), real);
    }

    /// Drops stream `key`'s hold.
    pub fn clear_hold(&self, key: u64) {
        if self.shm.model().clear_hold(key) {
            self.bump(&self.shm.hold_gen);
        }
    }

    /// Asks for a hold at the end of kernel `id`; if it has already ended in the model, holds at
    /// the current real time instead.
    pub fn hold_after(&self, id: EntryId, key: u64) {
        let real = now_ns();
        let mut m = self.shm.model();
        if !m.set_hold_after(id) {
            m.set_hold(key, self.slot as u32, real, real);
        }
    }

    fn bump(&self, word: &AtomicU32) {
        word.fetch_add(1, Relaxed);
        futex::wake(word, i32::MAX);
    }

    fn wait(&self, id: EntryId, until: Until, on_time: bool) -> Reached {
        loop {
            let now = now_ns();
            let (sleep, word, seen) = {
                let mut m = self.shm.model();
                m.advance(now);
                match until {
                    Until::Started => {
                        if let Some(e) = m.entry(id).filter(|e| e.flags & STARTED != 0) {
                            return Reached::Started(e.start_ns);
                        }
                    }
                    Until::Done => {
                        if let Some(d) = m.take_done(id) {
                            return Reached::Done(Timing {
                                start_ns: d.start_ns,
                                end_ns: d.end_ns,
                                transfer_start_ns: d.transfer_start_ns,
                                eager_end_ns: d.eager_end_ns,
                                mid: d.mid,
                            });
                        }
                    }
                }
                if m.entry(id).is_none() {
                    // Gone (this process's slot was reclaimed): nothing more will happen to it.
                    return Reached::Started(m.clock_ns);
                }
                let (sleep, word) = match m.predict(id, until) {
                    // Due by now but not reached: another stream's hold keeps the clock back.
                    Some(t) if t <= now => {
                        let expiry = m
                            .hold_expiry()
                            .unwrap_or(now + HELD_BACK_RETRY_NS)
                            .max(now + 1_000);
                        (
                            Sleep {
                                until: expiry,
                                spin: false,
                            },
                            &self.shm.hold_gen,
                        )
                    }
                    Some(t) => (
                        Sleep {
                            until: t,
                            spin: on_time,
                        },
                        &self.shm.gen,
                    ),
                    None => (
                        Sleep {
                            until: now + UNKNOWN_WAIT_NS,
                            spin: false,
                        },
                        &self.shm.gen,
                    ),
                };
                // Read under the model's lock, so that a wake-up after it is not lost.
                (sleep, word, word.load(Relaxed))
            };
            sleep_until(sleep, word, seen);
            self.reap_if_due();
        }
    }
}

enum Reached {
    Started(u64),
    Done(Timing),
}

/// Until when (real time) to sleep, and whether to spin the end.
#[derive(Clone, Copy)]
struct Sleep {
    until: u64,
    spin: bool,
}

/// Sleeps until the deadline or until `word` moves from `seen`; with `spin`, sleeps until
/// [`SPIN_FINISH_NS`] before the deadline and spins the rest.
fn sleep_until(sleep: Sleep, word: &AtomicU32, seen: u32) {
    let Sleep {
        until: deadline,
        spin,
    } = sleep;
    loop {
        let now = now_ns();
        if now >= deadline || word.load(Relaxed) != seen {
            return;
        }
        let left = deadline - now;
        if spin && left <= SPIN_FINISH_NS {
            while now_ns() < deadline {
                std::hint::spin_loop();
            }
            return;
        }
        let nap = if spin { left - SPIN_FINISH_NS } else { left };
        futex::wait(word, seen, nap);
    }
}
