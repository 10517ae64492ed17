//! Streams: an in-order queue of operations per stream, run by the stream's own executor thread.
//!
//! A kernel op is executed as: admission by the device ([`Device::admit`]), then running for its
//! duration (real time, `clock_nanosleep` to an absolute deadline) or, for a communication kernel,
//! calling its [`DeviceWork`]'s `run`; then release, then its ground-truth line.
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
    loop {
        let op = {
            let mut st = inner.state();
            loop {
                if let Some(op) = st.queue.pop_front() {
                    break op;
                }
                if st.closing {
                    return;
                }
                st = inner.cv.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        };
        execute(&inner.device, op);
        inner.state().completed += 1;
        inner.cv.notify_all();
    }
}

fn execute(device: &Device, op: Op) {
    match op {
        Op::Kernel(k) => run_kernel(device, k),
        Op::Record(r) => r.complete(now_ns()),
        Op::Wait(r) => {
            r.wait();
        }
        Op::Host(f) => f(),
    }
}

/// Runs one kernel on `device` (blocking the calling executor thread) and writes its truth line.
pub fn run_kernel(device: &Device, k: KernelOp) {
    let adm = device.admit(k.comm);
    let start_ns = now_ns();
    match k.work {
        Some(Work(w)) => {
            // SAFETY: by the kernel ABI `run` is a valid function taking ownership of `ctx`; it is
            // called exactly once (the Work is consumed here).
            unsafe { (w.run)(w.ctx) }
        }
        None => {
            let ns = if k.comm {
                k.duration_ns
            } else {
                arbiter::run_time_ns(device.mode(), k.duration_ns, adm.share)
            };
            Device::sleep_until(start_ns + ns);
        }
    }
    let end_ns = now_ns();
    device.release(adm);
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
}
