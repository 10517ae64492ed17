//! A process's handle on one simulated device: its slot in the shared state, its kernels in the
//! device's model (`run`), device memory (`mem`), and reclaiming what dead processes held.
mod mem;
mod run;
#[cfg(test)]
pub(crate) mod tests;

pub use run::{KernelRun, Timing, SPIN_FINISH_NS};

use crate::abi::now_ns;
use crate::futex;
use crate::lock::STALE_CHECK_NS;
use crate::sched::Knobs;
use crate::shm::{self, DeviceShm, ShmMap, MAX_SLOTS};
use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

/// Errors of the simulated GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimError {
    /// No such device id.
    NoDevice,
    /// The allocation does not fit in the device memory left.
    OutOfMemory,
    /// A bad argument (unknown address, zero size).
    InvalidValue,
    /// The shared state could not be set up.
    Os(String),
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::NoDevice => write!(f, "no such simulated device"),
            SimError::OutOfMemory => write!(f, "simulated device out of memory"),
            SimError::InvalidValue => write!(f, "invalid value"),
            SimError::Os(s) => write!(f, "simulated device state: {s}"),
        }
    }
}

/// One simulated device as this process sees it. Obtain with [`Device::get`]; lives as long as the
/// process.
pub struct Device {
    id: i32,
    shm: ShmMap,
    slot: usize,
    knobs: Knobs,
    process_share: u32,
    /// This process's allocations: address -> size.
    allocs: Mutex<HashMap<u64, u64>>,
    /// When this process last looked for dead processes on the device ([`Device::reap_if_due`]).
    last_reap_ns: AtomicU64,
}

static DEVICES: Mutex<Vec<Arc<Device>>> = Mutex::new(Vec::new());

fn my_pid() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

impl Device {
    /// This process's handle on device `id` (opened, and the shared state created, on first use).
    pub fn get(id: i32) -> Result<Arc<Device>, SimError> {
        if id < 0 || id >= crate::config::device_count() {
            return Err(SimError::NoDevice);
        }
        let mut devs = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = devs.iter().find(|d| d.id == id) {
            return Ok(d.clone());
        }
        let d = Arc::new(Device::open(id)?);
        devs.push(d.clone());
        Ok(d)
    }

    fn open(id: i32) -> Result<Device, SimError> {
        let dir = crate::config::sim_dir();
        let os = |e: std::io::Error| SimError::Os(format!("{}: {e}", dir.display()));
        shm::ensure_dir(&dir).map_err(os)?;
        Device::open_at(
            &dir.join(format!("gpu{id}")),
            id,
            crate::config::knobs(),
            crate::config::mem_bytes(),
            crate::config::mps_share(),
        )
    }

    /// Opens (or creates, with `knobs` and `mem_total`) the shared state at `path` as device `id`
    /// and claims a process slot in it.
    pub(crate) fn open_at(
        path: &Path,
        id: i32,
        knobs: Knobs,
        mem_total: u64,
        process_share: u32,
    ) -> Result<Device, SimError> {
        let shm = shm::open_or_create(path, knobs, mem_total, crate::memory::addr_base(id))
            .map_err(|e| SimError::Os(format!("{}: {e}", path.display())))?;
        let knobs = shm.model().knobs;
        let slot =
            claim_slot(&shm).ok_or_else(|| SimError::Os("all process slots taken".into()))?;
        Ok(Device {
            id,
            shm,
            slot,
            knobs,
            process_share,
            allocs: Mutex::new(HashMap::new()),
            last_reap_ns: AtomicU64::new(now_ns()),
        })
    }

    /// Moves the model on to the real time now, as any thread that looks at it does (tests).
    #[cfg(test)]
    pub(crate) fn advance_now(&self) {
        self.shm.model().advance(now_ns());
    }

    /// Entries of stream `key` in the model (tests).
    #[cfg(test)]
    pub(crate) fn entries_of(&self, key: u64) -> usize {
        let m = self.shm.model();
        m.entries
            .iter()
            .filter(|e| e.state != crate::sched::FREE && e.stream_key == key)
            .count()
    }

    /// The device id.
    pub fn id(&self) -> i32 {
        self.id
    }

    /// The arbitration mode (fixed by the process that created the shared state).
    pub fn mode(&self) -> crate::Mode {
        self.knobs.mode()
    }

    /// The device's knobs (fixed by the process that created the shared state).
    pub fn knobs(&self) -> Knobs {
        self.knobs
    }

    /// This process's MPS share in percent.
    pub fn process_share(&self) -> u32 {
        self.process_share
    }

    /// Reclaims the slots (memory, kernels, holds) of processes that no longer exist. Returns
    /// whether anything was reclaimed.
    pub fn reap(&self) -> bool {
        let changed = {
            let mut m = self.shm.model();
            reap_locked(&self.shm, &mut m)
        };
        if changed {
            self.wake_all();
        }
        changed
    }

    /// [`Device::reap`] if this process has not looked for [`STALE_CHECK_NS`]. Called on every
    /// submission and wake-up, so that a process that keeps using the device frees a dead one's
    /// slot within that time, however short each of its kernels is: a dead process's kernel
    /// must not go on taking time slices because every survivor's waits are short.
    fn reap_if_due(&self) {
        let now = now_ns();
        let last = self.last_reap_ns.load(Relaxed);
        if now.saturating_sub(last) >= STALE_CHECK_NS
            && self
                .last_reap_ns
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_ok()
        {
            self.reap();
        }
    }

    fn wake_all(&self) {
        self.shm.gen.fetch_add(1, Relaxed);
        futex::wake(&self.shm.gen, i32::MAX);
    }
}

/// Under the model's lock: frees the slots of dead processes.
fn reap_locked(shm: &DeviceShm, m: &mut crate::sched::Sched) -> bool {
    let mut changed = false;
    for (i, s) in shm.slots.iter().enumerate() {
        let pid = s.pid.load(Relaxed);
        if pid != 0 && futex::process_dead(pid) {
            m.reap_slot(i as u32);
            s.mem_used.store(0, Relaxed);
            s.pid.store(0, Relaxed);
            changed = true;
        }
    }
    changed
}

fn claim_slot(shm: &DeviceShm) -> Option<usize> {
    let changed;
    let slot = {
        let mut m = shm.model();
        changed = reap_locked(shm, &mut m);
        let i = (0..MAX_SLOTS).find(|&i| shm.slots[i].pid.load(Relaxed) == 0);
        if let Some(i) = i {
            let s = &shm.slots[i];
            s.mem_used.store(0, Relaxed);
            s.pid.store(my_pid(), Relaxed);
            // A slot that is reused starts clean (its last owner's kernels are gone).
            m.reap_slot(i as u32);
        }
        i
    };
    if changed {
        shm.gen.fetch_add(1, Relaxed);
        futex::wake(&shm.gen, i32::MAX);
    }
    slot
}
