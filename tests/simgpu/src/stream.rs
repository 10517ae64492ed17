//! Streams: an in-order queue of operations per stream, run by the stream's own executor thread.
//!
//! A kernel op is executed as: submission to the device's model ([`Device::submit`]), for a
//! communication kernel its [`DeviceWork`] body once it has started, the wait for its end
//! ([`Device::wait_done`]), then its ground-truth line. How the device is shared is the model's
//! business ([`crate::sched`]).
//!
//! # Logical GPU time
//! An executor thread wakes tens to hundreds of microseconds late on a busy machine (after an
//! enqueue, a cross-stream wait, the end of a kernel). A real GPU does not, so the simulated GPU
//! keeps a *logical* timeline that such latency does not show in, while kernels still take real
//! time:
//! * Each stream has `ready_ns`: the GPU time at which its previous op finished. A kernel is
//!   eligible at max(`ready_ns`, its enqueue time `queued_ns`); the model runs it from then on as
//!   the device allows, and the executor sleeps until the model says it has ended.
//! * Kernels queued behind a kernel (up to [`CHAIN`] of them, none with a body) go into the model
//!   at once, by whichever thread sees them first (the host's at its launch, or the executor),
//!   chained to the one before ([`Device::submit_now`]): a GPU runs queued work back to back
//!   whatever its host threads do, and so does the model, however late this stream's thread is.
//! * So that the model does not run ahead of a stream whose thread is late with anything else,
//!   the stream *holds* the model's clock while it has an op to submit: at its last entry's end
//!   when more is queued (`hold_after`), at the enqueue time when the host enqueues onto an idle
//!   stream, at a record's time when that record releases a stream that waited for it.
//!   Submitting (or going idle, or blocking on a record) lets go. A hold is honoured for a
//!   bounded real time only.
//! * An event record completes with timestamp max(`ready_ns`, the record's enqueue time), or
//!   under time-slicing the first instant after that at which its process is resident (a real
//!   GPU executes a record only while its context is scheduled); a cross-stream wait
//!   ([`Op::Wait`]) moves `ready_ns` up to the awaited record's timestamp; a host op
//!   ([`Op::Host`]) takes no GPU time; a user's host function ([`Op::HostFn`]) moves `ready_ns`
//!   up to when it returned.
//!
//! The truth lines carry these logical times. Completion (synchronize, query) is real time.
//!
//! # Launch queue
//! A stream holds at most [`crate::config::queue_depth`] ops that are not done; an enqueue beyond
//! it blocks the host until ops complete, as CUDA's launch queue does.
use crate::abi::{now_ns, CommKernel, DeviceWork};
use crate::device::{Device, KernelRun, Timing};
use crate::event::Record;
use crate::sched::EntryId;
use crate::trace::{self, TruthLine};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// The body of a communication kernel, owned by the op from launch on.
pub struct Work(pub DeviceWork);

// SAFETY: by the kernel ABI (abi.rs) `ctx` is owned by the kernel from launch on and `run` is
// called exactly once, on the executor thread; nothing else touches it.
unsafe impl Send for Work {}

/// One kernel execution to run.
pub struct KernelOp {
    pub name: Arc<str>,
    /// A communication kernel (name starting with `nccl`).
    pub comm: bool,
    /// Run time on the SMs it fills, in nanoseconds (for a comm kernel without `work`: its
    /// transfer time; ignored for one with `work`).
    pub duration_ns: u64,
    /// Percent of the device's SMs it fills (1..=100).
    pub fill: u32,
    pub work: Option<Work>,
    /// The driver entry point that queued it (for the ground truth).
    pub api: &'static str,
    /// Launched as part of a graph.
    pub graph: bool,
    /// The `CUstream` handle value as the launching process passed it.
    pub stream_handle: u64,
    pub queued_ns: u64,
}

/// What a stream executes, in order.
pub enum Op {
    Kernel(KernelOp),
    /// Completes the record with the time the stream reaches it.
    Record(Arc<Record>),
    /// Blocks the stream until the record completes.
    Wait(Arc<Record>),
    /// Runs a host function on the executor thread (stream-ordered bookkeeping of the stand-ins:
    /// it takes no GPU time).
    Host(Box<dyn FnOnce() + Send>),
    /// Runs a user's host function (`cuLaunchHostFunc`) on the executor thread: work queued after
    /// it waits until it returns (the stream's time moves on to then), as on a real GPU.
    HostFn(Box<dyn FnOnce() + Send>),
}

/// Kernels chained into the model ahead of the executor, per stream, at most.
pub const CHAIN: usize = 4;

/// What the executor is doing (decides who holds the model's clock for the stream).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Exec {
    /// Waiting for ops: nothing queued.
    Idle,
    /// Running a kernel (or a record) in the model: the stream's newest entry in the model (the
    /// last chained, if any), whether it holds the clock at its end, and whether it is a kernel
    /// (kernels may be chained behind it).
    Kernel(EntryId, bool, bool),
    /// Waiting for a record: whoever completes it holds the clock for this stream.
    Blocked,
    /// Between ops.
    Busy,
}

struct State {
    queue: VecDeque<Op>,
    /// The model's entries of the first ops of `queue` (kernels chained ahead of the executor).
    chained: VecDeque<EntryId>,
    enqueued: u64,
    completed: u64,
    /// The lowest `completed` some host thread waits for (synchronize, a full launch queue);
    /// `u64::MAX`: none. The executor wakes them only once it is reached: a real GPU does not
    /// wake a host thread at every op it completes, and on a small machine those wake-ups took
    /// the CPU from the simulated GPUs' own threads.
    wanted: u64,
    closing: bool,
    exec: Exec,
}

struct Inner {
    device: Arc<Device>,
    /// Names the stream in the device's model (unique across processes).
    key: u64,
    depth: usize,
    state: Mutex<State>,
    /// The executor waits here for ops (or for the stream's close).
    work: Condvar,
    /// Host threads wait here for completions (see [`State::wanted`]).
    done: Condvar,
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits (once) for the executor to report completions, asking to be woken when `seq` ops
    /// are done.
    fn await_completed<'a>(
        &self,
        mut st: MutexGuard<'a, State>,
        seq: u64,
    ) -> MutexGuard<'a, State> {
        st.wanted = st.wanted.min(seq);
        self.done.wait(st).unwrap_or_else(|e| e.into_inner())
    }
}

/// An in-order stream of one process on one device. Cloning gives another handle on the same
/// stream.
#[derive(Clone)]
pub struct Stream {
    inner: Arc<Inner>,
}

fn new_key() -> u64 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u64;
    (pid << 32) | u64::from(NEXT.fetch_add(1, Ordering::Relaxed))
}

impl Stream {
    /// A new stream on `device` with its executor thread.
    pub fn new(device: Arc<Device>) -> std::io::Result<Stream> {
        let inner = Arc::new(Inner {
            device,
            key: new_key(),
            depth: crate::config::queue_depth(),
            state: Mutex::new(State {
                queue: VecDeque::new(),
                chained: VecDeque::new(),
                enqueued: 0,
                completed: 0,
                wanted: u64::MAX,
                closing: false,
                exec: Exec::Idle,
            }),
            work: Condvar::new(),
            done: Condvar::new(),
        });
        let exec = inner.clone();
        std::thread::Builder::new()
            .name(format!("simgpu{}-stream", exec.device.id()))
            .spawn(move || {
                // SAFETY: PR_SET_TIMERSLACK only changes this thread's timer slack (1 ns: wake
                // kernels' executors on time).
                unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
                executor(exec)
            })?;
        Ok(Stream { inner })
    }

    /// The device the stream runs on.
    pub fn device(&self) -> &Arc<Device> {
        &self.inner.device
    }

    /// Appends `ops` (contiguously, in order) to the stream, first waiting while the stream's
    /// launch queue is full. Returns the sequence number of the last op (see
    /// [`Stream::wait_for`]).
    pub fn enqueue(&self, ops: Vec<Op>) -> u64 {
        let inner = &self.inner;
        let mut st = inner.state();
        while (st.enqueued - st.completed) as usize >= inner.depth && !st.closing {
            let seq = st.enqueued + 1 - inner.depth as u64;
            st = inner.await_completed(st, seq);
        }
        let was_empty = st.queue.is_empty();
        st.enqueued += ops.len() as u64;
        st.queue.extend(ops);
        // Chain what can be chained; hold the model's clock until the executor has submitted
        // the rest.
        match st.exec {
            Exec::Kernel(..) => extend_chain(inner, &mut st),
            Exec::Idle | Exec::Busy if was_empty => {
                st.exec = Exec::Busy;
                inner.device.set_hold(inner.key, now_ns());
            }
            _ => {}
        }
        inner.work.notify_one();
        st.enqueued
    }

    /// Blocks until the ops up to sequence number `seq` are done.
    pub fn wait_for(&self, seq: u64) {
        let mut st = self.inner.state();
        while st.completed < seq {
            st = self.inner.await_completed(st, seq);
        }
    }

    /// Blocks until everything enqueued so far is done.
    pub fn synchronize(&self) {
        let seq = self.inner.state().enqueued;
        self.wait_for(seq);
    }

    /// Whether everything enqueued so far is done.
    pub fn query(&self) -> bool {
        let st = self.inner.state();
        st.completed >= st.enqueued
    }

    /// Lets the executor finish the queued work and then exit (`cuStreamDestroy`).
    pub fn close(&self) {
        self.inner.state().closing = true;
        self.inner.work.notify_all();
        self.inner.done.notify_all();
    }

    /// Whether two handles name the same stream.
    pub fn same(&self, other: &Stream) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

fn executor(inner: Arc<Inner>) {
    // The stream's logical GPU time: when its previous op finished.
    let mut ready_ns = 0;
    loop {
        // A kernel followed by another kernel already queued need not end on time in real time:
        // the next one starts at its logical end anyway (see the module docs), and nothing on
        // the host waits for it.
        let (op, chained, next_is_kernel) = {
            let mut st = inner.state();
            loop {
                if let Some(op) = st.queue.pop_front() {
                    // A chained kernel is in the model already (and the stream's newest entry
                    // with it: the executor state stays).
                    let chained = st.chained.pop_front();
                    if chained.is_none() {
                        st.exec = Exec::Busy;
                    }
                    let next_is_kernel = matches!(st.queue.front(), Some(Op::Kernel(_)));
                    break (op, chained, next_is_kernel);
                }
                if st.exec != Exec::Idle {
                    st.exec = Exec::Idle;
                    inner.device.clear_hold(inner.key);
                }
                if st.closing {
                    return;
                }
                st = inner.work.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        };
        ready_ns = execute(&inner, op, chained, ready_ns, next_is_kernel);
        let mut st = inner.state();
        st.completed += 1;
        if st.completed >= st.wanted {
            // Every waiter wakes; those still short of their op say so again.
            st.wanted = u64::MAX;
            inner.done.notify_all();
        }
    }
}

/// Executes `op` on a stream whose logical time is `ready_ns` (`chained`: its entry, when it was
/// chained into the model ahead of the executor); returns the stream's logical time after it
/// (never earlier than `ready_ns`). `next_is_kernel`: see [`run_kernel`].
fn execute(
    inner: &Inner,
    op: Op,
    chained: Option<EntryId>,
    ready_ns: u64,
    next_is_kernel: bool,
) -> u64 {
    match op {
        Op::Kernel(k) => run_kernel(inner, k, chained, ready_ns, !next_is_kernel).end_ns,
        Op::Record(r) => {
            let due = ready_ns.max(r.queued_ns());
            // The record holds the clock at its time whatever follows it: streams waiting for it
            // are held there once it completes (see crate::event).
            let id = submit_as_current(inner, false, |_| {
                inner.device.submit_record(inner.key, due, true)
            });
            let ts = id.map_or(due, |id| inner.device.wait_done(id, true).end_ns);
            inner.state().exec = Exec::Busy;
            r.complete(ts);
            ts
        }
        Op::Wait(r) => {
            let ts = r.wait_holding(&inner.device, inner.key, || {
                inner.state().exec = Exec::Blocked;
                inner.device.clear_hold(inner.key);
            });
            inner.state().exec = Exec::Busy;
            ready_ns.max(ts)
        }
        Op::Host(f) => {
            f();
            ready_ns
        }
        Op::HostFn(f) => {
            f();
            ready_ns.max(now_ns())
        }
    }
}

/// Submits an entry with `submit(more)` (`more`: the stream has more queued) as the executor's
/// current one, under the stream's lock, so that a host enqueue meanwhile sees it (see
/// [`Stream::enqueue`]); behind a kernel (`kernel`), chains what may be chained.
fn submit_as_current(
    inner: &Inner,
    kernel: bool,
    submit: impl FnOnce(bool) -> Option<EntryId>,
) -> Option<EntryId> {
    let mut st = inner.state();
    let more = !st.queue.is_empty();
    let id = submit(more);
    if let Some(id) = id {
        st.exec = Exec::Kernel(id, more, kernel);
        extend_chain(inner, &mut st);
    }
    id
}

/// Chains the kernels queued right behind the stream's newest entry in the model, when that is
/// a kernel (up to [`CHAIN`] ahead of the executor, none with a body: a communication kernel's
/// body runs on the executor), and makes the newest entry hold the clock at its end while more
/// is queued that is not in the model.
fn extend_chain(inner: &Inner, st: &mut State) {
    let Exec::Kernel(newest, mut hold, kernel) = st.exec else {
        return;
    };
    let mut last = newest;
    while kernel && st.chained.len() < CHAIN {
        let Some(Op::Kernel(k)) = st.queue.get(st.chained.len()) else {
            break;
        };
        if k.work.is_some() {
            break;
        }
        let run = KernelRun {
            stream_key: inner.key,
            comm: k.comm,
            with_body: false,
            duration_ns: k.duration_ns,
            fill: k.fill,
            ready_ns: k.queued_ns,
            hold_after: false,
        };
        let Some(id) = inner.device.submit_now(&run, last) else {
            // The model's table is full: the executor submits the rest when it gets there.
            break;
        };
        st.chained.push_back(id);
        last = id;
        hold = false;
    }
    let more = st.queue.len() > st.chained.len();
    if more && !hold {
        inner.device.hold_after(last, inner.key);
        hold = true;
    }
    st.exec = Exec::Kernel(last, hold, kernel);
}

/// Runs one kernel (blocking the executor thread) on a stream whose logical time is `ready_ns`,
/// and writes its truth line. `on_time`: end it on time in real time too (spin the last
/// [`crate::device::SPIN_FINISH_NS`]), as when the host may be waiting for it; otherwise sleep
/// only (the executor may wake late: the next kernel of the stream still starts at this one's
/// logical end), which spares the CPU the test bed shares with everything else.
fn run_kernel(
    inner: &Inner,
    k: KernelOp,
    chained: Option<EntryId>,
    ready_ns: u64,
    on_time: bool,
) -> Timing {
    let device = &inner.device;
    let id = match chained {
        Some(id) => {
            // One more may be chained now that this one left the chain's count.
            extend_chain(inner, &mut inner.state());
            id
        }
        None => submit_as_current(inner, true, |more| {
            Some(device.submit(&KernelRun {
                stream_key: inner.key,
                comm: k.comm,
                with_body: k.work.is_some(),
                duration_ns: k.duration_ns,
                fill: k.fill,
                ready_ns: ready_ns.max(k.queued_ns),
                hold_after: more,
            }))
        })
        .expect("a kernel is always submitted"),
    };
    if let Some(Work(w)) = k.work {
        let mut ck = CommKernel {
            start_ns: device.wait_started(id),
            ..CommKernel::default()
        };
        // SAFETY: by the kernel ABI `run` is a valid function taking ownership of `ctx`; it is
        // called exactly once (the Work is consumed here) with a CommKernel we own.
        unsafe { (w.run)(w.ctx, &mut ck) };
        device.report_transfer(id, &ck);
    }
    let t = device.wait_done(id, on_time);
    let mut st = inner.state();
    // The stream's newest entry is still in the model while kernels are chained behind this one.
    if st.chained.is_empty() {
        st.exec = Exec::Busy;
    }
    drop(st);
    trace::write(&TruthLine {
        device: device.id(),
        // SAFETY: getpid has no preconditions.
        pid: unsafe { libc::getpid() },
        stream: k.stream_handle,
        kernel: &k.name,
        comm: k.comm,
        api: k.api,
        graph: k.graph,
        queued_ns: k.queued_ns,
        start_ns: t.start_ns,
        end_ns: t.end_ns,
        transfer_start_ns: k.comm.then_some(t.transfer_start_ns),
        eager_end_ns: t.eager_end_ns,
        mid: t.mid,
    });
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Mode;
    use crate::device::tests::TempDir;
    use crate::event::Record;
    use crate::sched::Knobs;

    const MS: u64 = 1_000_000;

    /// An MPS device whose holds expire at once: what a stream thread that is starved of the CPU
    /// past its hold looks like to the model.
    fn device_without_holds(dir: &std::path::Path) -> Arc<Device> {
        let knobs = Knobs {
            mode: Mode::Mps as u32,
            comm_spin: 1,
            slice_ns: 2 * MS,
            switch_ns: 25_000,
            interference: 0.0,
            hold_ns: 0,
        };
        Arc::new(Device::open_at(&dir.join("gpu0"), 0, knobs, 1 << 30, 100).unwrap())
    }

    fn kernel(ns: u64, queued_ns: u64) -> Op {
        Op::Kernel(KernelOp {
            name: "k".into(),
            comm: false,
            duration_ns: ns,
            fill: 100,
            work: None,
            api: "test",
            graph: false,
            stream_handle: 1,
            queued_ns,
        })
    }

    /// Holds the stream's thread up (as a thread starved of the CPU is) for `ns`, while another
    /// thread moves the model on.
    fn hold_up(stream: &Stream, ns: u64) {
        let _held = stream.inner.state();
        let t0 = now_ns();
        while now_ns() - t0 < ns {
            stream.inner.device.advance_now();
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }

    #[test]
    fn kernels_queued_together_run_back_to_back_while_the_stream_thread_is_held_up() {
        let dir = TempDir::new("chain");
        let device = device_without_holds(&dir.0);
        let stream = Stream::new(device.clone()).unwrap();
        let (start, end) = (Arc::new(Record::new()), Arc::new(Record::new()));
        let mut ops = vec![Op::Record(start.clone())];
        ops.extend((0..4).map(|_| kernel(MS, start.queued_ns())));
        ops.push(Op::Record(end.clone()));
        stream.enqueue(ops);
        // Once the stream's thread has put its first kernel in the model, it is held up for 3 ms
        // (unless this thread came too late for that: then it ran freely).
        while device.entries_of(stream.inner.key) == 0 && end.timestamp().is_none() {
            std::thread::yield_now();
        }
        hold_up(&stream, 3 * MS);
        stream.synchronize();
        // The GPU ran the four kernels back to back. Before kernels were chained into the model,
        // the second one went in only when the thread came back, 2 ms after the first ended.
        assert_eq!(
            end.timestamp().unwrap() - start.timestamp().unwrap(),
            4 * MS
        );
        stream.close();
    }
}
