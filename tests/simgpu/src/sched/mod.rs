//! How the simulated GPU shares a device among the kernels of all its processes: a fluid model on
//! a *logical* timeline, kept in the device's shared state and advanced, under the device lock, by
//! whichever stream thread needs to know where it stands.
//!
//! Every kernel that a stream thread has reached is an [`Entry`]: how much work it has left (ns
//! at full speed on the SMs it fills), when it became eligible to run (its stream's logical time),
//! and what it holds. Between two events (a kernel ends, becomes eligible, a time slice ends, a
//! switch completes) every kernel progresses at a constant rate, so the model jumps from event to
//! event ([`Sched::advance`]); a stream thread that waits for its kernel asks for the logical time
//! its kernel will end at if nothing new happens ([`Sched::predict`]) and sleeps until then.
//!
//! * Within a process (a context), kernels of different streams run side by side on the SMs they
//!   fill: the oldest eligible kernel gets what it fills, the next what is left, and so on; a
//!   kernel running on part of what it fills runs slower in proportion (`share`). Nothing takes
//!   SMs from a running kernel: a kernel gets more only as others end.
//! * `timeslice` (the default of a GPU without MPS, `timeslice`): one process at a time is
//!   resident. A lone process keeps the device and runs at full speed. While another process has
//!   work, the resident one keeps it for a time slice ([`Knobs::slice_ns`]), counted from when it
//!   got the device; then it starts no new kernel, lets its kernels shorter than a slice finish
//!   (a real GPU switches at kernel boundaries where it can) and loses the longer ones (compute
//!   preemption: they resume later), and the device switches, which costs
//!   [`Knobs::switch_ns`] during which nothing runs. The next process is taken round-robin.
//!   A process whose work has all ended gives the device up at once.
//! * `mps`: kernels of every process share the SMs the same way, each process's kernels capped at
//!   its share (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`); nothing is preempted; a kernel is further
//!   slowed by the other processes' SM load ([`Knobs::interference`]: memory bandwidth, caches).
//! * Communication kernels take no SM share; they first wait for their peers, then transfer for a
//!   known time ([`Sched::report_transfer`]). Their transfer progresses only while their process
//!   is resident, and (with [`Knobs::comm_spin`]) their waiting keeps their process runnable, as a
//!   spinning NCCL kernel does.
//! * An event record is an entry too ([`MARK`]): under time-slicing it takes its timestamp at the
//!   first instant its process is resident, so an event pair around a kernel times the kernel,
//!   not the wait for the device. A record its stream thread submits after the clock went past
//!   the time its stream reached it takes that time (or the first resident instant since, from
//!   the residency history): a GPU's front end passes a record as soon as the work before it is
//!   done, however late the host threads that simulate the GPU are.
//!
//! # Late stream threads: holds
//! A stream thread reaches its next operation some microseconds to milliseconds after the logical
//! time it is due at (it wakes late). The model must not run ahead of such a stream as if it had
//! nothing to do, so a stream that is about to submit work *holds* the timeline at the time that
//! work becomes eligible ([`Sched::set_hold`]; an entry may ask for a hold at its own end,
//! `hold_after`, when its stream has more queued). [`Sched::advance`] never moves the clock past a
//! hold; a hold older than [`Knobs::hold_ns`] of real time is ignored (a stopped or starved
//! process must not freeze the device), and then that stream's work starts later than it would
//! have (its records excepted: they need no SMs and take their time in the past, see above).
//! What the model has settled (everything before its clock) never changes again.
//!
//! A hold's age is real time as the model sees it pass, at most [`Sched::HOLD_TICK_NS`] between
//! two visits ([`Sched::hold_age_ns`]): when the whole machine stops for a while (a hypervisor
//! that deschedules the virtual machine, every thread of every process at once), the first thread
//! back must not find every hold expired and move the clock past work whose threads were stopped
//! with it: a GPU does not idle while its host is stopped. A starved holder is still let go after
//! [`Knobs::hold_ns`]: a thread that waits for the clock sleeps at most one tick at a time
//! ([`Sched::hold_expiry`]). (Before 2026-12-07 a hold aged by the real time since it was set.)
//!
//! A communication kernel's transfer is reported by its body, on its stream's thread, once its
//! peers' threads have said when they arrived: often after the clock has passed the transfer's
//! end (a median 0.25 ms, p90 1 ms in a run of the ZBV job with 8 ranks on 2 cores). It is settled
//! in the past ([`Sched::report_transfer`]), and its stream's next work, due at its end, is held
//! for at the clock from then on. Work that a stream's thread submits after the clock passed the
//! time its stream reached it (a kernel that waited, through an event, for such a transfer) starts
//! then where the model can tell what it did since (`late`: a communication kernel always, a
//! compute kernel if no compute ran on the device meanwhile).
//!
//! A GPU knows the work queued on a stream from the moment the host launches it, and runs it
//! back to back whatever the host does next. So a kernel queued behind another kernel of its
//! stream goes into the model at once, chained to it ([`Sched::submit_after`]): it becomes
//! eligible when that one ends, and no hold waits for its stream's thread (`crate::stream` says
//! which kernels). Until 2026-12-06 every kernel waited for its stream thread to submit it,
//! holding the clock meanwhile: a side task's thread starved of CPU (nice 19 on a loaded host)
//! froze its whole device between two queued kernels for up to [`Knobs::hold_ns`] of real time,
//! trainers included, which a GPU never does.
mod history;
mod late;
mod share;
mod step;
mod timeslice;

#[cfg(test)]
mod tests;

use crate::config::Mode;

/// Kernels that can be in the model (running or waiting) on one device at a time.
pub const MAX_ENTRIES: usize = 128;
/// Holds at a time (one per stream at most).
pub const MAX_HOLDS: usize = 128;
/// Changes of the resident process remembered (for transfers whose start is in the past).
pub const HISTORY: usize = 128;

/// [`Entry::state`].
pub const FREE: u32 = 0;
pub const ACTIVE: u32 = 1;
pub const DONE: u32 = 2;
/// [`Entry::kind`].
pub const COMPUTE: u32 = 0;
/// A communication kernel waiting for its peers (or for its transfer start).
pub const COMM_WAIT: u32 = 1;
/// A communication kernel whose transfer start and length are known.
pub const COMM_XFER: u32 = 2;
/// An event record: no work, no SMs, but (under time-slicing) it is executed only while its
/// process is resident, as a real GPU's channel is only fed while its context is scheduled; its
/// end is the record's timestamp.
pub const MARK: u32 = 3;
/// [`Entry::flags`]: hold the timeline at this entry's end (its stream has more queued).
pub const HOLD_AFTER: u32 = 1;
pub const STARTED: u32 = 2;
/// Under time-slicing, may be preempted at the end of a slice (else it runs to its end).
pub const PREEMPTIBLE: u32 = 4;

/// Floating-point slack on work left, in ns.
pub(crate) const EPS: f64 = 1e-3;

/// The device's fixed parameters, set by the process that creates its state.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Knobs {
    /// [`Mode`] as u32.
    pub mode: u32,
    /// Non-zero: a waiting communication kernel keeps its process runnable.
    pub comm_spin: u32,
    /// Time-slicing: a slice.
    pub slice_ns: u64,
    /// Time-slicing: the cost of a switch.
    pub switch_ns: u64,
    /// MPS: slowdown per unit of the other processes' SM load.
    pub interference: f64,
    /// Real time a hold is honoured.
    pub hold_ns: u64,
}

impl Knobs {
    pub fn mode(&self) -> Mode {
        Mode::from_u32(self.mode)
    }
}

/// One kernel in the model.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Entry {
    pub state: u32,
    pub kind: u32,
    pub flags: u32,
    /// Bumped at every allocation of this entry (an [`EntryId`] names one allocation).
    pub gen: u32,
    /// The process slot on the device.
    pub slot: u32,
    /// Percent of the device's SMs the kernel fills.
    pub fill: u32,
    /// Percent of the SMs it may take (the fill, capped by its process's MPS share).
    pub demand: u32,
    /// Scratch of the current step: SMs (percent) it has.
    pub alloc: u32,
    /// A kernel queued behind another of its stream, both in the model ([`Sched::submit_after`]):
    /// that entry's index + 1 (0: none) and allocation. It becomes eligible when that one ends
    /// (at `floor_ns` if later); until then its `eligible_ns` is `u64::MAX`.
    pub after: u32,
    pub after_gen: u32,
    pub floor_ns: u64,
    pub stream_key: u64,
    pub seq: u64,
    pub eligible_ns: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Communication kernels: when the transfer begins (0: at the start).
    pub transfer_start_ns: u64,
    /// Communication kernels that transferred before they waited: when that part ended (0: none).
    pub eager_end_ns: u64,
    /// Communication kernels with a mid span: when it began and ended (0: none).
    pub mid_start_ns: u64,
    pub mid_end_ns: u64,
    /// Work left: ns at full speed.
    pub work: f64,
    /// Scratch of the current step: work done per ns.
    pub rate: f64,
}

impl Entry {
    fn is(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    /// Sort key of the SM assignment: oldest eligible first.
    fn key(&self) -> (u64, u64) {
        (self.eligible_ns, self.seq)
    }
}

/// A stream's hold on the timeline (`used == 0`: free).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Hold {
    pub key: u64,
    pub ns: u64,
    /// [`Sched::hold_age_ns`] when it was set.
    pub set_age_ns: u64,
    pub slot: u32,
    pub used: u32,
}

/// From `from_ns` on, process slot `slot1 - 1` is resident (`slot1 == 0`: none).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Residency {
    pub from_ns: u64,
    pub slot1: u32,
    pub _pad: u32,
}

/// [`Ts::phase`].
pub const RUN: u32 = 0;
/// The slice ended while another process waits: no new kernel starts, short ones finish.
pub const DRAIN: u32 = 1;
pub const SWITCH: u32 = 2;

/// Time-slicing state.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Ts {
    /// Resident process slot + 1 (0: none yet).
    pub holder: u32,
    pub phase: u32,
    /// While switching: the slot + 1 being switched in.
    pub switch_to: u32,
    pub _pad: u32,
    pub slice_start_ns: u64,
    pub switch_end_ns: u64,
}

/// The whole model of one device. All-zero bytes are its initial state.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Sched {
    pub knobs: Knobs,
    /// Everything before it is settled.
    pub clock_ns: u64,
    /// Since when no compute kernel has run (u64::MAX: one runs); see `Sched::start_in_past`.
    pub compute_quiet_since_ns: u64,
    /// Real time as holds age (see the module's doc).
    pub hold_age_ns: u64,
    /// The real time of the model's latest visit (0: none yet).
    pub visited_real_ns: u64,
    pub next_seq: u64,
    pub ts: Ts,
    pub hist_head: u32,
    pub hist_len: u32,
    pub hist: [Residency; HISTORY],
    pub holds: [Hold; MAX_HOLDS],
    pub entries: [Entry; MAX_ENTRIES],
}

/// Names one allocation of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryId {
    pub index: u32,
    pub gen: u32,
}

/// A kernel to put in the model.
#[derive(Clone, Copy, Debug)]
pub struct Submit {
    pub slot: u32,
    pub stream_key: u64,
    pub comm: bool,
    /// A communication kernel whose body will report its transfer (else it transfers its
    /// `work_ns` from its start).
    pub with_body: bool,
    /// An event record ([`MARK`]; `comm`, `work_ns` and the fill do not matter).
    pub mark: bool,
    pub work_ns: u64,
    pub fill: u32,
    pub demand: u32,
    /// Its stream's logical time (it becomes eligible then, or at the clock if that is later).
    pub ready_ns: u64,
    pub hold_after: bool,
}

/// A kernel that has ended, as its stream learns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    pub start_ns: u64,
    pub end_ns: u64,
    /// Communication kernels: when the transfer began.
    pub transfer_start_ns: u64,
    /// Communication kernels that transferred from their start before they waited: when that
    /// part ended (None: no such part).
    pub eager_end_ns: Option<u64>,
    /// Communication kernels busy between that part and the transfer: that span (None: none).
    pub mid: Option<(u64, u64)>,
}

/// What [`Sched::predict`] looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Until {
    Started,
    Done,
}

impl Sched {
    /// A fresh model (as the zeroed shared state is, with its knobs set).
    pub fn new(knobs: Knobs) -> Box<Sched> {
        // SAFETY: every field is an integer, a float or an array of them: all-zero bytes are a
        // valid value.
        let mut s: Box<Sched> = unsafe { Box::new(std::mem::zeroed()) };
        s.knobs = knobs;
        s
    }

    /// The entry `id` names, if it is still that allocation.
    pub fn entry(&self, id: EntryId) -> Option<&Entry> {
        let e = self.entries.get(id.index as usize)?;
        (e.state != FREE && e.gen == id.gen).then_some(e)
    }

    fn entry_mut(&mut self, id: EntryId) -> Option<&mut Entry> {
        let e = self.entries.get_mut(id.index as usize)?;
        (e.state != FREE && e.gen == id.gen).then_some(e)
    }

    /// Puts a kernel in the model (and clears its stream's hold, in the same step). None when the
    /// table is full (the hold stays). One whose stream reached it before the clock starts then
    /// where it could have (`Sched::start_in_past`).
    pub fn submit(&mut self, s: &Submit) -> Option<EntryId> {
        self.submit_placed(s, true)
    }

    /// [`Sched::submit`]; `may_start_in_past`: `s.ready_ns` is when its stream reached it.
    fn submit_placed(&mut self, s: &Submit, may_start_in_past: bool) -> Option<EntryId> {
        let index = self.entries.iter().position(|e| e.state == FREE)?;
        self.clear_hold(s.stream_key);
        let seq = self.next_seq;
        self.next_seq += 1;
        let eligible = s.ready_ns.max(self.clock_ns);
        // A record whose stream reached it before the clock (its stream thread came late) took
        // its time then, at the first instant since that its process was resident: a GPU's front
        // end passes a record as soon as the work before it is done, whatever the host threads
        // that simulate it are doing.
        let past = if s.mark && s.ready_ns < self.clock_ns {
            self.first_resident(s.slot, s.ready_ns, self.clock_ns)
        } else {
            None
        };
        let preemptible = s.comm || s.mark || s.work_ns >= self.knobs.slice_ns;
        let e = &mut self.entries[index];
        let gen = e.gen.wrapping_add(1);
        *e = Entry {
            state: ACTIVE,
            kind: match (s.mark, s.comm, s.with_body) {
                (true, _, _) => MARK,
                (false, false, _) => COMPUTE,
                (false, true, true) => COMM_WAIT,
                (false, true, false) => COMM_XFER,
            },
            flags: if s.hold_after { HOLD_AFTER } else { 0 }
                | if preemptible { PREEMPTIBLE } else { 0 },
            gen,
            slot: s.slot,
            fill: s.fill.clamp(1, 100),
            demand: s.demand.clamp(1, 100),
            alloc: 0,
            after: 0,
            after_gen: 0,
            floor_ns: 0,
            stream_key: s.stream_key,
            seq,
            eligible_ns: eligible,
            start_ns: 0,
            end_ns: 0,
            transfer_start_ns: 0,
            eager_end_ns: 0,
            mid_start_ns: 0,
            mid_end_ns: 0,
            work: if s.mark || (s.comm && s.with_body) {
                0.0
            } else {
                s.work_ns as f64
            },
            rate: 0.0,
        };
        if let Some(t) = past {
            e.state = DONE;
            e.flags |= STARTED;
            e.start_ns = t;
            e.end_ns = t;
        } else if may_start_in_past && s.ready_ns < self.clock_ns {
            self.start_in_past(index, s.ready_ns);
        }
        Some(EntryId {
            index: index as u32,
            gen,
        })
    }

    /// Puts a kernel queued behind entry `after` of its stream in the model: it becomes eligible
    /// when `after` ends (or at its own `ready_ns`, if later), with no hold meanwhile, and
    /// `after` no longer asks for a hold at its end (its stream's next work is here). If `after`
    /// has ended or is gone, it is submitted as [`Sched::submit`] does. None when the table is
    /// full.
    pub fn submit_after(&mut self, s: &Submit, after: EntryId) -> Option<EntryId> {
        let pred = self.entry(after).copied();
        let ready = match pred {
            Some(p) if p.state == DONE => s.ready_ns.max(p.end_ns),
            _ => s.ready_ns,
        };
        // Its stream reached it when `after` ended, if that is known; not if `after` is gone.
        let known = pred.is_some_and(|p| p.state == DONE);
        let id = self.submit_placed(
            &Submit {
                ready_ns: ready,
                ..*s
            },
            known,
        )?;
        if pred.is_some_and(|p| p.state == ACTIVE) {
            let e = &mut self.entries[id.index as usize];
            e.after = after.index + 1;
            e.after_gen = after.gen;
            e.floor_ns = e.eligible_ns;
            e.eligible_ns = u64::MAX;
            self.entries[after.index as usize].flags &= !HOLD_AFTER;
        }
        Some(id)
    }

    /// Entry `index` has ended: the kernels chained behind it become eligible (at its end).
    pub(crate) fn release_after(&mut self, index: usize) {
        let (gen, end) = (self.entries[index].gen, self.entries[index].end_ns);
        for e in self.entries.iter_mut() {
            if e.state == ACTIVE && e.after == index as u32 + 1 && e.after_gen == gen {
                e.after = 0;
                e.eligible_ns = e.floor_ns.max(end);
            }
        }
    }

    /// Asks for a hold at the entry's end (its stream got more work). False when the entry has
    /// already ended in the model (or is gone).
    pub fn set_hold_after(&mut self, id: EntryId) -> bool {
        match self.entry_mut(id) {
            Some(e) if e.state == ACTIVE => {
                e.flags |= HOLD_AFTER;
                true
            }
            _ => false,
        }
    }

    /// Holds the timeline at `ns` for stream `key`, set at real time `real`. A stream has one
    /// hold: a second one keeps the earlier time (the stream's next work is eligible then).
    pub fn set_hold(&mut self, key: u64, slot: u32, ns: u64, real: u64) {
        self.tick(real);
        let age = self.hold_age_ns;
        if let Some(h) = self.holds.iter_mut().find(|h| h.used != 0 && h.key == key) {
            h.ns = h.ns.min(ns);
            h.set_age_ns = age;
            return;
        }
        if let Some(h) = self.holds.iter_mut().find(|h| h.used == 0) {
            *h = Hold {
                key,
                ns,
                set_age_ns: age,
                slot,
                used: 1,
            };
        }
    }

    /// Whether stream `key` holds the timeline.
    pub fn has_hold(&self, key: u64) -> bool {
        self.holds.iter().any(|h| h.used != 0 && h.key == key)
    }

    /// Drops stream `key`'s hold; whether it had one.
    pub fn clear_hold(&mut self, key: u64) -> bool {
        let mut had = false;
        for h in self
            .holds
            .iter_mut()
            .filter(|h| h.used != 0 && h.key == key)
        {
            h.used = 0;
            had = true;
        }
        had
    }

    /// How far the clock may move at real time `now`: to `now`, but not past a hold that is
    /// still honoured (one at or before the clock freezes it); and whether a hold sets that limit
    /// (then nothing is decided at the limit itself: the held stream's work may be due then).
    /// Forgets expired holds.
    pub fn horizon(&mut self, now: u64) -> (u64, bool) {
        self.tick(now);
        let (grace, age) = (self.knobs.hold_ns, self.hold_age_ns);
        let mut limit = now;
        let mut held = false;
        for h in self.holds.iter_mut().filter(|h| h.used != 0) {
            if age.saturating_sub(h.set_age_ns) > grace {
                h.used = 0;
            } else if h.ns <= limit {
                limit = h.ns;
                held = true;
            }
        }
        (limit.max(self.clock_ns), held)
    }

    /// The most a hold ages between two visits of the model, however much real time passed.
    pub const HOLD_TICK_NS: u64 = 500_000;

    /// A visit at real time `now`: holds age by the real time since the latest visit, at most
    /// [`Sched::HOLD_TICK_NS`] (see the module's doc: a machine that stopped as a whole).
    fn tick(&mut self, now: u64) {
        if self.visited_real_ns != 0 {
            let passed = now.saturating_sub(self.visited_real_ns);
            self.hold_age_ns += passed.min(Self::HOLD_TICK_NS);
        }
        self.visited_real_ns = self.visited_real_ns.max(now);
    }

    /// When (real time) to look at the model again for the earliest honoured hold to have expired
    /// (None: no hold): at most one tick after the latest visit, as a hold ages at most that much
    /// a visit.
    pub fn hold_expiry(&self) -> Option<u64> {
        let left = self
            .holds
            .iter()
            .filter(|h| h.used != 0)
            .map(|h| (h.set_age_ns + self.knobs.hold_ns + 1).saturating_sub(self.hold_age_ns))
            .min()?;
        Some(self.visited_real_ns + left.min(Self::HOLD_TICK_NS))
    }

    /// Moves the clock as far as [`Sched::horizon`] allows at real time `now`, and settles what
    /// happens at the instant it stops at (kernels that start, or end with no work left, then),
    /// unless a hold stops it there.
    pub fn advance(&mut self, now: u64) {
        for _ in 0..1_000_000 {
            let (target, held) = self.horizon(now);
            if held && target <= self.clock_ns {
                return;
            }
            let r = self.step(target, now);
            if r.ended == 0 && !r.moved {
                return;
            }
        }
        // Cannot happen (every step moves the clock or ends a kernel); never spin.
        self.clock_ns = self.clock_ns.max(self.horizon(now).0);
    }

    /// The logical time at which entry `id` will have started or ended if nothing new is
    /// submitted or reported (holds and real time ignored). None when it never does as far as the
    /// model can see (it waits for a report, or a peer that spins for ever).
    pub fn predict(&self, id: EntryId, until: Until) -> Option<u64> {
        let reached = |s: &Sched| {
            s.entry(id).map(|e| match until {
                Until::Started => e.is(STARTED).then_some(e.start_ns),
                Until::Done => (e.state == DONE).then_some(e.end_ns),
            })
        };
        let mut copy = Box::new(*self);
        for h in copy.holds.iter_mut() {
            h.used = 0;
        }
        for _ in 0..20_000 {
            if let Some(t) = reached(&copy)? {
                return Some(t);
            }
            let r = copy.step(u64::MAX, u64::MAX);
            if !r.moved && r.ended == 0 {
                // Nothing more happens by itself (a start at this instant is seen now).
                return reached(&copy).flatten();
            }
        }
        None
    }

    /// A communication kernel's body reports when its transfer begins and how long it takes,
    /// and how much it transferred from its start before it waited (`eager_ns`, 0: nothing),
    /// and a span between the two (`mid`: its start and work, `None`: none). Starts in the past
    /// are settled from the residency history. A part that has not had its time by now (its
    /// process was not resident enough) runs from the clock on, before the parts after it.
    pub fn report_transfer(
        &mut self,
        id: EntryId,
        start_ns: u64,
        transfer_ns: u64,
        eager_ns: u64,
        mid: Option<(u64, u64)>,
    ) {
        let clock = self.clock_ns;
        let Some(e) = self.entry(id).copied() else {
            return;
        };
        if e.state != ACTIVE || e.kind != COMM_WAIT {
            return;
        }
        // The eager part ran from the kernel's start: settled from the residency history up
        // to the clock; what is left of it (the clock has not gone that far yet, or the process
        // was not resident) runs from the clock on, as if the process stays resident.
        let eager_end = match eager_ns {
            0 => 0,
            n => match self.settle_past(e.slot, e.start_ns, clock, n as f64) {
                Ok(end) => end,
                Err(left) => clock.max(e.start_ns) + left.max(0.0).ceil() as u64,
            },
        };
        let mid = mid.filter(|&(_, ns)| ns > 0).map(|(at, ns)| {
            let m0 = at.max(e.start_ns).max(eager_end);
            let end = match self.settle_past(e.slot, m0, clock, ns as f64) {
                Ok(end) => end,
                Err(left) => clock.max(m0) + left.max(0.0).ceil() as u64,
            };
            (m0, end)
        });
        let p = start_ns
            .max(e.start_ns)
            .max(eager_end)
            .max(mid.map_or(0, |m| m.1));
        let work = transfer_ns as f64;
        let settled = if p < clock {
            self.settle_past(e.slot, p, clock, work)
        } else {
            Err(work)
        };
        let e = self.entry_mut(id).expect("checked above");
        e.kind = COMM_XFER;
        e.transfer_start_ns = p;
        e.eager_end_ns = eager_end;
        (e.mid_start_ns, e.mid_end_ns) = mid.unwrap_or((0, 0));
        match settled {
            Ok(end) => self.ended_in_past(id.index as usize, end),
            Err(left) => e.work = left,
        }
    }

    /// Takes an ended entry out of the model.
    pub fn take_done(&mut self, id: EntryId) -> Option<Done> {
        let e = self.entry_mut(id)?;
        if e.state != DONE {
            return None;
        }
        let d = Done {
            start_ns: e.start_ns,
            end_ns: e.end_ns,
            transfer_start_ns: if e.transfer_start_ns == 0 {
                e.start_ns
            } else {
                e.transfer_start_ns
            },
            eager_end_ns: (e.eager_end_ns > e.start_ns).then_some(e.eager_end_ns),
            mid: (e.mid_end_ns > e.mid_start_ns).then_some((e.mid_start_ns, e.mid_end_ns)),
        };
        e.state = FREE;
        Some(d)
    }

    /// Forgets everything of process slot `slot` (it died).
    pub fn reap_slot(&mut self, slot: u32) {
        for e in self.entries.iter_mut().filter(|e| e.slot == slot) {
            e.state = FREE;
        }
        for h in self.holds.iter_mut().filter(|h| h.slot == slot) {
            h.used = 0;
        }
    }
}
