//! GPU-side timing of NCCL operations.
//!
//! Around each op (or, for a group, around `ncclGroupEnd`, once per stream the group used) the
//! hook records two driver events on the op's stream: `begin` before the op is queued, `end`
//! after; a timed stream wait ([`begin_wait`]) the same around `cuStreamWaitEvent`. Events come
//! from preallocated *timing pools*, one per CUDA context the process queues timed work in
//! (`pool`: created on the first timed op there, slow path). The hook only makes driver calls
//! (records events, queues the poller's wake-ups; the first op on a stream creates that stream's
//! lane): no system call of ours, no lock. Work that cannot be timed (a stream being captured, a
//! context without a pool, a full pool, timing off, a driver error) is recorded at once as
//! untimed ([`Kind::CommUntimed`], [`Kind::WaitUntimed`]), so that a reader never waits for its
//! begin or end.
//!
//! A poller thread, started lazily with the first pool, owns per pool a private non-blocking
//! stream and a few reference events in the pool's context. It anchors each context's GPU clock to the host clock: it records a reference event on
//! its idle stream, waits for it, and takes the host time window [before the record call, when
//! completion was seen] (the tightest of a few tries; `ref_host_ns` = the window's midpoint,
//! uncertainty = its half-width). When it sees a pool event complete, the event's host time is
//! `ref_host_ns + cuEventElapsedTime(ref, ev)`: exact up to the anchor's uncertainty and the
//! elapsed-time resolution, however late the poll. The anchor is renewed every 2 s while ops flow
//! (an f32 of milliseconds keeps ~0.25 µs resolution up to 2 s, and GPU/host clock drift stays
//! small); one whose window was wider than 100 µs (taken while the host was busy) is tried again
//! every 100 ms and replaced by a tighter one, so that a busy moment does not put its error on two
//! seconds of records (measured on the 16-GPU test-bed job: records whose anchor was that loose
//! went from 1 719 of 7 080 to 369; each try spins at most 1 ms, four tries). When the elapsed
//! time is unavailable (no anchor, another context, an error) or fails a causality check, the
//! record falls back to the midpoint of the poll interval that saw the event complete
//! (`uncertainty_ns` = half that interval) and a re-anchor is requested.
//!
//! Since the poll time no longer affects accuracy, only how soon a begin/end is reported, nothing
//! polls on a timer where the driver can wake a thread instead (`notify`): per user stream a
//! waiter thread blocks in `cuEventSynchronize` on the running op's end event (blocking-sync),
//! and learns of each op's begin from a host function (`cuLaunchHostFunc`) the hook queues on a
//! private stream behind a wait for the begin event. So the waiter wakes about twice per op,
//! however long the op, and sleeps between ops (a 50 ms safety net); the poller thread anchors the
//! clock and otherwise sleeps. Each wake-up costs a context switch (~10 µs of CPU on a small VM,
//! which is what observing used to cost at one every 100-250 µs). Pairs without a waiter (no
//! `cuLaunchHostFunc`, a driver error, `FREERIDE_COMM_NOTIFY=0`, more streams than lanes' waiters
//! could start) are polled by the poller at the old adaptive cadence: while some op's begin is
//! still pending, every `FREERIDE_POLL_US` (default 100 µs) right after a change (a new op armed,
//! a begin or an end seen), backing off to half the time since the last change, capped at 200 µs
//! (a begin opens a bubble in the agent's detector); while every such op has begun, every 250 µs;
//! with nothing in flight, every 1 ms. Threads sleep on futex words with a timeout and a 1 ns
//! timer slack; hooks never wake them themselves (no system call on the hook path).
//!
//! After a poll that pushed a begin or an end, the thread that polled rings the session doorbell
//! ([`freeride_abi::doorbell`], mapped by the poller's `Bell`), so that an agent sleeping
//! between bubbles learns of it at once (a system call only while the agent sleeps); hooks never
//! ring.
//!
//! Modules: [`driver`] (the real driver functions freeride calls), `pool` (the timing pools, one
//! per context), `anchor` (a GPU clock's anchor to the host clock), `notify` (lanes: the
//! driver wakes the threads per event), `poller` (the poller and waiter threads, one poll).

mod anchor;
mod driver;
mod notify;
mod poller;
mod pool;

use crate::rt;
pub use driver::{driver, Driver};
use freeride_abi::event::{op_key, Untimed};
use freeride_abi::{Api, Kind};
use poller::{locked_poll, Lock, POLLING};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

pub const GROUP_STREAMS: usize = 8;

static NEXT_OP: AtomicU32 = AtomicU32::new(1);
static NEXT_GROUP: AtomicU32 = AtomicU32::new(1);
static NEXT_WAIT: AtomicU32 = AtomicU32::new(1);

pub fn next_op() -> u32 {
    NEXT_OP.fetch_add(1, Ordering::Relaxed)
}

pub fn next_group() -> u32 {
    NEXT_GROUP.fetch_add(1, Ordering::Relaxed)
}

/// A new stream-wait id (never 0).
pub fn next_wait() -> u32 {
    loop {
        let w = NEXT_WAIT.fetch_add(1, Ordering::Relaxed);
        if w != 0 {
            return w;
        }
    }
}

/// Hook path: starts timing an op (or a group's work) on `stream`: a pair of the current
/// context's pool, its begin event recorded. Err: why it cannot be timed (the caller records
/// [`untimed_op`]).
pub fn begin(stream: u64) -> Result<usize, Untimed> {
    pool::begin(stream)
}

/// Hook path: ends the timing begun as pair `i` (op `op` of group `group`, queued at `queued`);
/// if the end cannot be recorded the op is recorded untimed.
pub fn end(i: usize, stream: u64, api: Api, op: u32, group: u32, queued: u64) {
    let ids = op as u64 | (group as u64) << 32;
    if let Err(why) = pool::end(i, stream, pool::WHAT_OP, api, ids, queued) {
        untimed_op(api, -1, stream, op, group, why);
    }
}

/// Hook path: op `op` of group `group` (its GPU work on `stream`, on GPU `gpu`: a
/// [`freeride_abi::GpuId`] field, -1 the calling thread's) will never be timed.
pub fn untimed_op(api: Api, gpu: i32, stream: u64, op: u32, group: u32, why: Untimed) {
    let gpu = if gpu == -1 {
        rt::THREAD.try_with(rt::gpu).unwrap_or(-1)
    } else {
        gpu
    };
    rt::record_on_gpu(
        Kind::CommUntimed,
        api,
        rt::now_ns(),
        gpu,
        stream,
        why as u32,
        0,
        [0, 0, op as u64 | (group as u64) << 32],
    );
}

/// 0 not read, 1 on, 2 off (`FREERIDE_WAIT_TIMING=0`).
static WAIT_TIMING: AtomicU8 = AtomicU8::new(0);

/// Whether stream waits on communication are timed (read once per process: a slow path once).
pub fn wait_timing_on() -> bool {
    match WAIT_TIMING.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let off = std::env::var(freeride_abi::env::WAIT_TIMING).is_ok_and(|v| v == "0");
            WAIT_TIMING.store(if off { 2 } else { 1 }, Ordering::Relaxed);
            !off
        }
    }
}

/// Hook path: whether the comm op whose end event is `end_event` (as [`crate::waits`] noted it;
/// 0: not known) has ended on the GPU: a stream wait queued now on an event recorded after it
/// cannot hold its stream, and is not worth timing. One real `cuEventQuery`. A timing event is
/// recorded again only once its pair's op was reported ended, so a completed event never speaks
/// for an op still in flight.
pub fn ended(end_event: u64) -> bool {
    end_event != 0 && driver().is_some_and(|d| d.completed(end_event as usize))
}

/// Hook path, before a stream wait that is worth timing is queued: a pair whose begin event is
/// recorded on the waiting stream `stream` (it completes when the stream reaches the wait).
pub fn begin_wait(stream: u64) -> Result<usize, Untimed> {
    pool::begin(stream)
}

/// The shortest time between two drain marks of a process ([`drain_mark`]).
pub const MARK_EVERY_NS: u64 = 1_000_000;
/// When this process last queued one.
static LAST_MARK_NS: AtomicU64 = AtomicU64::new(0);

/// Hook path, before a host-blocking call (a synchronize): a *drain mark* on `stream`, the
/// stream of the thread's last launch: a [`Kind::StreamWait`] record with no event (event 0, key
/// 0) and a timed pair whose begin completes when the stream has run everything queued on it
/// before, released at once. The agent reads the pair's begin as the GPU time the stream drained:
/// while the host is blocked, nothing else it sees says when the compute it queued before ran
/// (the blocking style's gaps between a micro-batch's last kernel and the next op). Untimed
/// (timing off, the stream captured, the pool full): nothing is recorded. At most one mark every
/// [`MARK_EVERY_NS`] per process: a program that blocks far more often (a synchronize after every
/// launch) must not fill the timing pool, whose pairs its communication ops need (and while ends
/// are read lazily, a pair is held up to 50 ms).
pub fn drain_mark(api: Api, stream: u64) {
    if !wait_timing_on() {
        return;
    }
    let t = rt::now_ns();
    let last = LAST_MARK_NS.load(Ordering::Relaxed);
    if t.saturating_sub(last) < MARK_EVERY_NS
        || LAST_MARK_NS
            .compare_exchange(last, t, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    let Ok(i) = begin_wait(stream) else {
        return;
    };
    let wait = next_wait();
    rt::record(Kind::StreamWait, api, t, stream, 0, 0, [0, 0, wait as u64]);
    end_wait(i, stream, api, wait, t);
}

/// Hook path, after the wait was queued: its end event (completes when the wait releases the
/// stream); if it cannot be recorded, the wait is recorded untimed.
pub fn end_wait(i: usize, stream: u64, api: Api, wait: u32, queued: u64) {
    if let Err(why) = pool::end(i, stream, pool::WHAT_WAIT, api, wait as u64, queued) {
        untimed_wait(api, stream, wait, why);
    }
}

/// Hook path: gives back pair `i` whose begin was recorded but whose work was not queued (the
/// real call failed): nothing is reported for it.
pub fn abandon(i: usize) {
    pool::abandon(i);
}

/// A timed wait whose times will never come.
pub fn untimed_wait(api: Api, stream: u64, wait: u32, why: Untimed) {
    rt::record(
        Kind::WaitUntimed,
        api,
        rt::now_ns(),
        stream,
        why as u32,
        0,
        [0, 0, wait as u64],
    );
}

/// The op key ([`op_key`]) of op `op` in group `group`.
pub fn key(op: u32, group: u32) -> u64 {
    op_key(op, group)
}

/// At exit: one last poll so completed ops are reported.
pub fn flush_at_exit() {
    if pool::POOL.iter().any(|p| p.ready()) {
        if let Some(d) = driver() {
            let tid = rt::THREAD.try_with(rt::tid).unwrap_or(0);
            locked_poll(d, tid, Lock::Flush);
        }
    }
}

/// Fork child: the parent's events, contexts and poller are not ours.
pub fn reset_after_fork() {
    pool::reset_after_fork();
    // The parent's poller may have held the poll flag at fork: nobody will release it here.
    POLLING.store(false, Ordering::Relaxed);
    notify::reset_after_fork();
}
