//! A process's handle on one simulated device: its slot in the shared state, admission of kernels,
//! memory, and reclaiming what dead processes held.
use crate::arbiter::{self, Mode};
use crate::futex;
use crate::lock::{self, STALE_CHECK_NS};
use crate::memory;
use crate::shm::{self, DeviceShm, ShmMap, MAX_SLOTS};
use std::collections::HashMap;
use std::fmt;
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
    mode: Mode,
    process_share: u32,
    /// This process's allocations: address -> size.
    allocs: Mutex<HashMap<u64, u64>>,
}

/// A kernel's admission: what it holds until [`Device::release`].
#[derive(Debug)]
pub struct Admission {
    /// Share of the device held (percent).
    pub share: u32,
    /// The earliest GPU time (logical, ns) at which the kernel may start: the logical end of the
    /// latest kernel released before this admission that held a share (0 when the kernel holds
    /// none, i.e. a communication kernel in `timeslice` mode). Never later than the admission's
    /// real time: a kernel is released only once its logical end has passed.
    pub not_before_ns: u64,
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
        let shm = shm::open_or_create(
            &dir.join(format!("gpu{id}")),
            crate::config::mode(),
            crate::config::mem_bytes(),
            memory::addr_base(id),
        )
        .map_err(os)?;
        let mode = Mode::from_u32(shm.mode.load(Relaxed));
        let slot =
            claim_slot(&shm).ok_or_else(|| SimError::Os("all process slots taken".into()))?;
        Ok(Device {
            id,
            shm,
            slot,
            mode,
            process_share: crate::config::mps_share(),
            allocs: Mutex::new(HashMap::new()),
        })
    }

    /// The device id.
    pub fn id(&self) -> i32 {
        self.id
    }

    /// The arbitration mode (fixed by the process that created the shared state).
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// This process's MPS share in percent.
    pub fn process_share(&self) -> u32 {
        self.process_share
    }

    /// Blocks (in real time) until a kernel may start (see [`crate::arbiter`]), then holds its
    /// share.
    pub fn admit(&self, comm: bool) -> Admission {
        let share = arbiter::share_needed(self.mode, comm, self.process_share);
        let shm = &*self.shm;
        let mut waiter: Option<(usize, u64)> = None;
        let mut last_reap = crate::abi::now_ns();
        let mut not_before_ns = 0;
        loop {
            let gen;
            let mut admitted = false;
            {
                let _g = lock::lock(&shm.lock);
                gen = shm.gen.load(Relaxed);
                if !comm && waiter.is_none() {
                    waiter = take_waiter(shm, self.slot, share);
                }
                let oldest = match waiter {
                    Some((_, t)) => oldest_ticket(shm) == Some(t),
                    None => false,
                };
                if arbiter::may_start(running_shares(shm), share, comm, oldest) {
                    shm.slots[self.slot].share_held.fetch_add(share, Relaxed);
                    if share > 0 {
                        not_before_ns = shm.last_release_ns.load(Relaxed);
                    }
                    if let Some((i, _)) = waiter {
                        shm.waiters[i].ticket.store(0, Relaxed);
                        bump(shm);
                    }
                    admitted = true;
                }
            }
            if admitted {
                if waiter.is_some() {
                    // The next compute kernel in line may fit too (mps).
                    futex::wake(&shm.gen, i32::MAX);
                }
                return Admission {
                    share,
                    not_before_ns,
                };
            }
            futex::wait(&shm.gen, gen, STALE_CHECK_NS);
            let now = crate::abi::now_ns();
            if now - last_reap >= STALE_CHECK_NS {
                last_reap = now;
                self.reap();
            }
        }
    }

    /// Gives back what an [`Admission`] held; `end_ns` is the kernel's logical end (GPU time),
    /// which must not be later than now. A kernel that held a share records it as the device's
    /// `last_release_ns` (see [`Admission::not_before_ns`]).
    pub fn release(&self, adm: Admission, end_ns: u64) {
        {
            let _g = lock::lock(&self.shm.lock);
            let held = &self.shm.slots[self.slot].share_held;
            held.store(held.load(Relaxed).saturating_sub(adm.share), Relaxed);
            if adm.share > 0 {
                self.shm.last_release_ns.fetch_max(end_ns, Relaxed);
            }
            bump(&self.shm);
        }
        futex::wake(&self.shm.gen, i32::MAX);
    }

    /// Reclaims the slots (shares, memory, waiting tickets) of processes that no longer exist.
    /// Returns whether anything was reclaimed.
    pub fn reap(&self) -> bool {
        let changed = {
            let _g = lock::lock(&self.shm.lock);
            reap_locked(&self.shm)
        };
        if changed {
            futex::wake(&self.shm.gen, i32::MAX);
        }
        changed
    }

    /// Allocates `size` bytes of device memory; returns its fake address.
    pub fn mem_alloc(&self, size: u64) -> Result<u64, SimError> {
        if size == 0 {
            return Err(SimError::InvalidValue);
        }
        for attempt in 0..2 {
            if attempt == 1 && !self.reap() {
                break;
            }
            let _g = lock::lock(&self.shm.lock);
            let total = self.shm.mem_total.load(Relaxed);
            if !memory::fits(used_memory(&self.shm), total, size) {
                continue;
            }
            self.shm.slots[self.slot].mem_used.fetch_add(size, Relaxed);
            let addr = self
                .shm
                .next_addr
                .fetch_add(memory::footprint(size), Relaxed);
            self.allocs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(addr, size);
            return Ok(addr);
        }
        Err(SimError::OutOfMemory)
    }

    /// Frees an allocation of this process.
    pub fn mem_free(&self, addr: u64) -> Result<(), SimError> {
        let size = self
            .allocs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&addr)
            .ok_or(SimError::InvalidValue)?;
        let _g = lock::lock(&self.shm.lock);
        let used = &self.shm.slots[self.slot].mem_used;
        used.store(used.load(Relaxed).saturating_sub(size), Relaxed);
        Ok(())
    }

    /// `(free, total)` device memory in bytes, across all (live) processes.
    pub fn mem_info(&self) -> (u64, u64) {
        self.reap();
        let _g = lock::lock(&self.shm.lock);
        let total = self.shm.mem_total.load(Relaxed);
        (total.saturating_sub(used_memory(&self.shm)), total)
    }

    /// Sleeps until `deadline_ns` on the test bed's clock. A sleeping thread wakes tens of
    /// microseconds late on a busy virtual machine, which would lengthen every simulated kernel: so
    /// it sleeps until [`SPIN_FINISH_NS`] before the deadline and spins the rest.
    pub fn sleep_until(deadline_ns: u64) {
        Self::sleep_until_late(deadline_ns.saturating_sub(SPIN_FINISH_NS));
        while crate::abi::now_ns() < deadline_ns {
            std::hint::spin_loop();
        }
    }

    /// Sleeps until `deadline_ns` on the test bed's clock, or later (no spin).
    pub fn sleep_until_late(deadline_ns: u64) {
        if crate::abi::now_ns() < deadline_ns {
            let ts = libc::timespec {
                tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
            };
            loop {
                // SAFETY: ts is a valid timespec; the remainder pointer may be NULL with
                // TIMER_ABSTIME.
                let r = unsafe {
                    libc::clock_nanosleep(
                        libc::CLOCK_MONOTONIC,
                        libc::TIMER_ABSTIME,
                        &ts,
                        std::ptr::null_mut(),
                    )
                };
                if r != libc::EINTR {
                    break;
                }
            }
        }
    }
}

/// How long before a kernel's end its executor stops sleeping and spins (see [`Device::sleep_until`]).
pub const SPIN_FINISH_NS: u64 = 80_000;

fn bump(shm: &DeviceShm) {
    shm.gen.fetch_add(1, Relaxed);
}

fn running_shares(shm: &DeviceShm) -> u32 {
    shm.slots
        .iter()
        .filter(|s| s.pid.load(Relaxed) != 0)
        .map(|s| s.share_held.load(Relaxed))
        .sum()
}

fn used_memory(shm: &DeviceShm) -> u64 {
    shm.slots
        .iter()
        .filter(|s| s.pid.load(Relaxed) != 0)
        .map(|s| s.mem_used.load(Relaxed))
        .sum()
}

fn oldest_ticket(shm: &DeviceShm) -> Option<u64> {
    shm.waiters
        .iter()
        .map(|w| w.ticket.load(Relaxed))
        .filter(|&t| t != 0)
        .min()
}

/// Under the lock: queues a compute kernel, returning (waiter index, ticket); None when full.
fn take_waiter(shm: &DeviceShm, slot: usize, share: u32) -> Option<(usize, u64)> {
    let i = shm
        .waiters
        .iter()
        .position(|w| w.ticket.load(Relaxed) == 0)?;
    let t = shm.next_ticket.fetch_add(1, Relaxed);
    let w = &shm.waiters[i];
    w.slot.store(slot as u32, Relaxed);
    w.share.store(share, Relaxed);
    w.ticket.store(t, Relaxed);
    Some((i, t))
}

/// Under the lock: frees the slots of dead processes.
fn reap_locked(shm: &DeviceShm) -> bool {
    let mut changed = false;
    for (i, s) in shm.slots.iter().enumerate() {
        let pid = s.pid.load(Relaxed);
        if pid != 0 && futex::process_dead(pid) {
            for w in shm.waiters.iter() {
                if w.ticket.load(Relaxed) != 0 && w.slot.load(Relaxed) as usize == i {
                    w.ticket.store(0, Relaxed);
                }
            }
            s.share_held.store(0, Relaxed);
            s.mem_used.store(0, Relaxed);
            s.pid.store(0, Relaxed);
            changed = true;
        }
    }
    if changed {
        bump(shm);
    }
    changed
}

fn claim_slot(shm: &DeviceShm) -> Option<usize> {
    let changed;
    let slot = {
        let _g = lock::lock(&shm.lock);
        changed = reap_locked(shm);
        let i = (0..MAX_SLOTS).find(|&i| shm.slots[i].pid.load(Relaxed) == 0);
        if let Some(i) = i {
            let s = &shm.slots[i];
            s.share_held.store(0, Relaxed);
            s.mem_used.store(0, Relaxed);
            s.pid.store(my_pid(), Relaxed);
        }
        i
    };
    if changed {
        futex::wake(&shm.gen, i32::MAX);
    }
    slot
}
