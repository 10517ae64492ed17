//! Events: an event's latest record is a [`Record`] that completes (with a timestamp) when the
//! stream it was recorded on reaches it.
//!
//! The timestamp is the stream's *logical* GPU time at that point (see [`crate::stream`]): the
//! end of the stream's previous op, or the record's enqueue time if the stream was idle by then.
//! Completion itself (what [`Event::query`] and [`Event::synchronize`] see) happens in real time.
//! A stream that waits for a record is held by it: when the record completes at GPU time `ts`, it
//! holds the waiting stream's device model at `ts` first (see [`crate::stream`]).
use crate::abi::now_ns;
use crate::device::Device;
use crate::stream::{Op, Stream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// One recording of an event: completes when its stream executes it.
pub struct Record {
    /// When the host enqueued the record (real time).
    queued_ns: u64,
    state: Mutex<RecordState>,
    cv: Condvar,
}

#[derive(Default)]
struct RecordState {
    done_ns: Option<u64>,
    /// Streams (device, key) blocked on this record.
    waiters: Vec<(Arc<Device>, u64)>,
}

impl Default for Record {
    fn default() -> Record {
        Record::new()
    }
}

impl Record {
    /// A pending record, enqueued now.
    pub fn new() -> Record {
        Record {
            queued_ns: now_ns(),
            state: Mutex::new(RecordState::default()),
            cv: Condvar::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, RecordState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// When the host enqueued the record: its timestamp is never earlier.
    pub fn queued_ns(&self) -> u64 {
        self.queued_ns
    }

    /// Marks the record complete at (GPU time) `ts_ns`: holds the devices of the streams waiting
    /// for it at `ts_ns`, then wakes them and every other waiter.
    pub fn complete(&self, ts_ns: u64) {
        let mut st = self.state();
        st.done_ns = Some(ts_ns);
        for (device, key) in st.waiters.drain(..) {
            device.set_hold(key, ts_ns);
        }
        drop(st);
        self.cv.notify_all();
    }

    /// Completion timestamp, or None while pending.
    pub fn timestamp(&self) -> Option<u64> {
        self.state().done_ns
    }

    /// Blocks until complete; returns the timestamp.
    pub fn wait(&self) -> u64 {
        let mut g = self.state();
        loop {
            if let Some(t) = g.done_ns {
                return t;
            }
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// A stream waits for the record (`key` on `device`): if it must block, `on_block` runs
    /// first (the stream lets go of its own hold) and the record holds the stream when it
    /// completes. Returns the timestamp.
    pub fn wait_holding(&self, device: &Arc<Device>, key: u64, on_block: impl FnOnce()) -> u64 {
        let mut g = self.state();
        if let Some(t) = g.done_ns {
            return t;
        }
        // Under the record's lock: complete() cannot run between the stream letting go of its
        // hold and registering here.
        on_block();
        g.waiters.push((device.clone(), key));
        loop {
            if let Some(t) = g.done_ns {
                return t;
            }
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// A CUDA event (`CU_EVENT_*` flags kept as given).
pub struct Event {
    flags: u32,
    current: Mutex<Option<Arc<Record>>>,
}

/// `CU_EVENT_DISABLE_TIMING`.
pub const DISABLE_TIMING: u32 = 0x2;

/// Why two events have no elapsed time.
#[derive(Debug, PartialEq, Eq)]
pub enum ElapsedError {
    /// One of them was never recorded or has timing disabled.
    InvalidHandle,
    /// One of them has not completed yet.
    NotReady,
}

impl Event {
    /// A new, never recorded event.
    pub fn new(flags: u32) -> Event {
        Event {
            flags,
            current: Mutex::new(None),
        }
    }

    /// The flags given at creation.
    pub fn flags(&self) -> u32 {
        self.flags
    }

    /// Records the event on `stream`: it completes when the stream reaches this point.
    pub fn record(&self, stream: &Stream) {
        let rec = Arc::new(Record::new());
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        *cur = Some(rec.clone());
        stream.enqueue(vec![Op::Record(rec)]);
    }

    /// The latest record (None if never recorded).
    pub fn current(&self) -> Option<Arc<Record>> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether all work captured by the latest record is done (true if never recorded).
    pub fn query(&self) -> bool {
        match self.current() {
            Some(r) => r.timestamp().is_some(),
            None => true,
        }
    }

    /// Blocks until the latest record completes.
    pub fn synchronize(&self) {
        if let Some(r) = self.current() {
            r.wait();
        }
    }

    /// Nanoseconds from `start`'s record to `end`'s record (their logical GPU timestamps).
    pub fn elapsed_ns(start: &Event, end: &Event) -> Result<i64, ElapsedError> {
        if start.flags & DISABLE_TIMING != 0 || end.flags & DISABLE_TIMING != 0 {
            return Err(ElapsedError::InvalidHandle);
        }
        let (a, b) = match (start.current(), end.current()) {
            (Some(a), Some(b)) => (a, b),
            _ => return Err(ElapsedError::InvalidHandle),
        };
        match (a.timestamp(), b.timestamp()) {
            (Some(a), Some(b)) => Ok(b as i64 - a as i64),
            _ => Err(ElapsedError::NotReady),
        }
    }
}
