//! Streams: an in-order queue of operations per stream, run by the stream's own executor thread.
//!
//! A kernel op is executed as: admission by the device ([`Device::admit`]), then running for its
//! duration (real time, `clock_nanosleep` to an absolute deadline) or, for a communication kernel,
//! calling its [`DeviceWork`]'s `run`; then release, then its ground-truth line.
//!
//! # Logical GPU time
//! An executor thread wakes tens to hundreds of microseconds late on a busy machine (after an
//! enqueue, a cross-stream wait, an admission). A real GPU does not, so the simulated GPU keeps a
//! *logical* timeline that such latency does not show in, while kernels still take real time:
//! * Each stream has `ready_ns`: the GPU time at which its previous op finished.
//! * A kernel starts at max(`ready_ns`, its enqueue time `queued_ns`, the device's
//!   [`Admission::not_before_ns`]): the logical end of the latest kernel released before its
//!   admission that held a share of the device (`timeslice`: compute kernels only, so compute
//!   kernels never overlap; `mps`: every kernel, a conservative bound that keeps the shares of
//!   logically overlapping kernels within 100%). Each of these is at most the real time of the
//!   admission, so a kernel never starts in the future.
//! * A plain kernel ends at start + its run time: the executor sleeps until then (absolute
//!   deadline; if the thread woke so late that this has passed, it does not sleep and the kernel
//!   still ends at start + run time). A communication kernel with a [`DeviceWork`] ends at
//!   max(real time after `run` returns, start): its waiting (NCCL's) is real time.
//! * An event record completes with timestamp max(`ready_ns`, the record's enqueue time); a
//!   cross-stream wait ([`Op::Wait`]) moves `ready_ns` up to the awaited record's timestamp; a host
//!   op ([`Op::Host`]) moves it up to the real time after it ran.
//!
//! The truth lines carry these logical times. Completion (synchronize, query) is real time.
//!
//! [`Admission::not_before_ns`]: crate::device::Admission::not_before_ns
use crate::abi::{now_ns, DeviceWork};
use crate::arbiter;
use crate::device::Device;
use crate::event::Record;
use crate::trace::{self, TruthLine};
use std::collections::VecDeque;
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
    /// Run time on a full device, in nanoseconds (ignored for a comm kernel with `work`).
    pub duration_ns: u64,
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
    /// Runs a host function on the executor thread (stream-ordered bookkeeping).
    Host(Box<dyn FnOnce() + Send>),
}

struct State {
    queue: VecDeque<Op>,
    enqueued: u64,
    completed: u64,
    closing: bool,
}

struct Inner {
    device: Arc<Device>,
    state: Mutex<State>,
    cv: Condvar,
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An in-order stream of one process on one device. Cloning gives another handle on the same
/// stream.
#[derive(Clone)]
pub struct Stream {
    inner: Arc<Inner>,
}

impl Stream {
    /// A new stream on `device` with its executor thread.
    pub fn new(device: Arc<Device>) -> std::io::Result<Stream> {
        let inner = Arc::new(Inner {
            device,
            state: Mutex::new(State {
                queue: VecDeque::new(),
                enqueued: 0,
                completed: 0,
                closing: false,
            }),
            cv: Condvar::new(),
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

    /// Appends `ops` (contiguously, in order) to the stream. Returns the sequence number of the
    /// last op (see [`Stream::wait_for`]).
    pub fn enqueue(&self, ops: Vec<Op>) -> u64 {
        let mut st = self.inner.state();
        st.enqueued += ops.len() as u64;
        st.queue.extend(ops);
        self.inner.cv.notify_all();
        st.enqueued
    }

    /// Blocks until the ops up to sequence number `seq` are done.
    pub fn wait_for(&self, seq: u64) {
        let mut st = self.inner.state();
        while st.completed < seq {
            st = self.inner.cv.wait(st).unwrap_or_else(|e| e.into_inner());
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
        self.inner.cv.notify_all();
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
        let (op, next_is_kernel) = {
            let mut st = inner.state();
            loop {
                if let Some(op) = st.queue.pop_front() {
                    break (op, matches!(st.queue.front(), Some(Op::Kernel(_))));
                }
                if st.closing {
                    return;
                }
                st = inner.cv.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        };
        ready_ns = execute(&inner.device, op, ready_ns, next_is_kernel);
        inner.state().completed += 1;
        inner.cv.notify_all();
    }
}

/// Executes `op` on a stream whose logical time is `ready_ns`; returns the stream's logical time
/// after it (never earlier than `ready_ns`). `next_is_kernel`: see [`run_kernel`].
fn execute(device: &Device, op: Op, ready_ns: u64, next_is_kernel: bool) -> u64 {
    match op {
        Op::Kernel(k) => run_kernel(device, k, ready_ns, !next_is_kernel).1,
        Op::Record(r) => {
            let ts = ready_ns.max(r.queued_ns());
            r.complete(ts);
            ts
        }
        Op::Wait(r) => ready_ns.max(r.wait()),
        Op::Host(f) => {
            f();
            ready_ns.max(now_ns())
        }
    }
}

/// Runs one kernel on `device` (blocking the calling executor thread) on a stream whose logical
/// time is `ready_ns`, and writes its truth line. Returns the kernel's logical `(start, end)`
/// (see the module docs). `on_time`: end it on time in real time too (sleep, then spin the last
/// [`crate::device::SPIN_FINISH_NS`]), as when the host may be waiting for it; otherwise sleep
/// only (the executor may wake late: the next kernel of the stream still starts at this one's
/// logical end), which spares the CPU the test bed shares with everything else.
pub fn run_kernel(device: &Device, k: KernelOp, ready_ns: u64, on_time: bool) -> (u64, u64) {
    let adm = device.admit(k.comm);
    let start_ns = ready_ns.max(k.queued_ns).max(adm.not_before_ns);
    let end_ns = match k.work {
        Some(Work(w)) => {
            // SAFETY: by the kernel ABI `run` is a valid function taking ownership of `ctx`; it is
            // called exactly once (the Work is consumed here).
            unsafe { (w.run)(w.ctx) };
            now_ns().max(start_ns)
        }
        None => {
            let ns = if k.comm {
                k.duration_ns
            } else {
                arbiter::run_time_ns(device.mode(), k.duration_ns, adm.share)
            };
            let end_ns = start_ns.saturating_add(ns);
            if on_time {
                Device::sleep_until(end_ns);
            } else {
                Device::sleep_until_late(end_ns);
            }
            end_ns
        }
    };
    device.release(adm, end_ns);
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
        start_ns,
        end_ns,
    });
    (start_ns, end_ns)
}
