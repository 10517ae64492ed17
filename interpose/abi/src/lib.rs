//! Shared-memory layout and event formats of freeride (versioned).
//!
//! This crate is the ONE place that defines:
//! * the session directory and the names of the files in it ([`session`]);
//! * the per-process event ring: header, slot and record layout, the lock-free multi-producer push
//!   used by the interposer and the single-consumer pop used by the agent ([`ring`]);
//! * event kinds, the hooked API ids and their C names, and the decoded [`event::Event`] ([`event`]);
//! * the physical GPU every record, grant and side task names, [`gpu::GpuId`] ([`gpu`]);
//! * the JSON-lines form of an event used by `FREERIDE_TRACE` ([`json`]);
//! * a safe reader for the agent that validates every byte it reads from shared memory ([`reader`]);
//! * the per-GPU grant control block of the side-task gate ([`grant`]);
//! * the hook path's clock: `CLOCK_MONOTONIC` ns from the calibrated TSC ([`clock`]);
//! * the CPU priority side tasks take ([`cpu`]);
//! * the session doorbell that wakes the agent ([`doorbell`]);
//! * folders that must not outlive their process, for tests and tools ([`scratch`]).
//!
//! Everything in shared memory is little-endian, fixed-size, and only ever accessed through atomics,
//! so a hostile or corrupt writer can make a reader see garbage values but never crash it.
pub mod clock;
pub mod cpu;
pub mod doorbell;
pub mod event;
pub mod futex;
pub mod gpu;
pub mod grant;
pub mod grant_shm;
pub mod json;
pub mod reader;
pub mod ring;
pub mod scratch;
pub mod session;
pub mod shm_file;

pub use event::{Api, Event, Kind, Record, Role};
pub use gpu::GpuId;

/// Layout version of the ring (header + slots + record words). Bumped on any incompatible change
/// (a reader refuses a ring of another version, naming both): 2 = the `device` of every record
/// and of the header is the physical GPU ([`gpu::GpuId`]), no longer the process's ordinal; 3 = the
/// slots are split into lanes (header word `lanes` at 52, lanes' cursors at 1024: [`ring`]).
/// Kinds are only ever appended within a version; a reader skips (counts as invalid) a kind it
/// does not know, and the agent ignores kinds it does not translate.
pub const RING_LAYOUT_VERSION: u32 = 3;

/// Environment variables read by the interposer and set by `freeride run`.
pub mod env {
    /// Session directory (default: [`crate::session::default_dir`]).
    pub const DIR: &str = "FREERIDE_DIR";
    /// `trainer` (default) or `sidetask`.
    pub const ROLE: &str = "FREERIDE_ROLE";
    /// If set: every event is also appended as a JSON line to this file.
    pub const TRACE: &str = "FREERIDE_TRACE";
    /// Ring capacity in records (power of two, clamped to [`crate::ring::MIN_CAPACITY`]..=
    /// [`crate::ring::MAX_CAPACITY`]; default [`crate::ring::DEFAULT_CAPACITY`]).
    pub const RING_CAPACITY: &str = "FREERIDE_RING_CAPACITY";
    /// Lanes the process ring is split into (power of two, 1 to [`crate::ring::MAX_LANES`];
    /// default [`crate::ring::DEFAULT_LANES`]): a launching thread's own queue each.
    pub const RING_LANES: &str = "FREERIDE_RING_LANES";
    /// `0` disables the GPU-side communication timing (driver events + poller thread).
    pub const COMM_TIMING: &str = "FREERIDE_COMM_TIMING";
    /// `0`: stream waits on communication are recorded but not timed on the GPU (no
    /// `wait_begin`/`wait_end`: two timing events and a wake-up fewer per such wait).
    pub const WAIT_TIMING: &str = "FREERIDE_WAIT_TIMING";
    /// `0`: the comm poller polls on a timer instead of being woken by the driver once per event
    /// (`cuLaunchHostFunc` on a private stream), for A/B measurements.
    pub const COMM_NOTIFY: &str = "FREERIDE_COMM_NOTIFY";
    /// How promptly the comm threads report ops' ends: `prompt` (always, as when the agent says
    /// someone harvests), `lazy` (always in batches: A/B measurements), unset or `auto`: as the
    /// agent says in the ring header ([`crate::ring::RingHeader::ends_lazy`]).
    pub const COMM_ENDS: &str = "FREERIDE_COMM_ENDS";
    /// Fastest poll interval of the comm-timing poller, µs (default 100), where the driver does
    /// not wake it ([`COMM_NOTIFY`]).
    pub const POLL_US: &str = "FREERIDE_POLL_US";
    /// Read by the agent: `0` keeps it polling at its fixed interval between bubbles too, instead
    /// of sleeping on the session doorbell ([`crate::doorbell`]) there (A/B measurements).
    pub const DOORBELL: &str = "FREERIDE_DOORBELL";
    /// `monotonic`: the hooks read `clock_gettime` instead of the calibrated TSC
    /// ([`crate::clock`]), for A/B measurements or a TSC not to be trusted.
    pub const CLOCK: &str = "FREERIDE_CLOCK";
    /// `1` disables all recording (pure pass-through), for A/B measurements.
    pub const DISABLE: &str = "FREERIDE_DISABLE";
    /// Set by `freeride run` to the session directory it already reported as unusable: the
    /// interposer does not say it again (see `interpose/src/session_check.rs`).
    pub const DIR_REPORTED: &str = "FREERIDE_DIR_REPORTED";
}

/// CLOCK_MONOTONIC in nanoseconds: the one clock of freeride and of the test bed.
#[inline(always)]
pub fn now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Clock `clock` in nanoseconds (0 for a clock this system does not have). CLOCK_MONOTONIC is
/// served by the vDSO, no system call.
#[inline(always)]
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec we own (left zero on an error).
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// `ns` nanoseconds as a timespec (a duration, or a CLOCK_MONOTONIC time from [`now_ns`]).
#[inline(always)]
pub fn timespec(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}
