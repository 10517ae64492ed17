//! The admission rules of the simulated GPU, as pure functions.
//!
//! Every running kernel holds a *share* of the device (percent of its SMs); a kernel may start
//! while the shares of the running kernels plus its own sum to at most [`FULL`].
//! * `timeslice`: a compute kernel needs the whole device (100), a communication kernel nothing
//!   (it does not take the compute slot).
//! * `mps`: a compute kernel needs its process's share, a communication kernel
//!   [`COMM_SM_PERCENT`]; a compute kernel on a share s < 100 runs `duration * 100 / s`.
//!
//! Admission is FIFO per device: compute kernels start in ticket order (the oldest waiting one
//! first, no overtaking). Communication kernels are small and may be waited on by their peers on
//! other devices, so they start as soon as they fit and never queue behind a compute kernel
//! (otherwise a pipeline could deadlock: a compute kernel waiting for a running receive whose
//! matching send queues behind it on the peer device).
use crate::abi::COMM_SM_PERCENT;

/// The whole device, in percent.
pub const FULL: u32 = 100;

/// How the device is shared between processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Mode {
    /// One compute kernel at a time (the default of a real GPU without MPS).
    Timeslice = 0,
    /// Kernels of different processes side by side on SM shares (NVIDIA MPS).
    Mps = 1,
}

impl Mode {
    /// From its value in the shared header (unknown values read as `Timeslice`).
    pub fn from_u32(v: u32) -> Mode {
        if v == Mode::Mps as u32 {
            Mode::Mps
        } else {
            Mode::Timeslice
        }
    }
}

/// The share a kernel needs while it runs.
pub fn share_needed(mode: Mode, comm: bool, process_share: u32) -> u32 {
    match (mode, comm) {
        (Mode::Timeslice, true) => 0,
        (Mode::Timeslice, false) => FULL,
        (Mode::Mps, true) => COMM_SM_PERCENT,
        (Mode::Mps, false) => process_share.clamp(1, FULL),
    }
}

/// How long a compute kernel of `duration_ns` runs on `share`.
pub fn run_time_ns(mode: Mode, duration_ns: u64, share: u32) -> u64 {
    match mode {
        Mode::Mps if share > 0 && share < FULL => {
            ((duration_ns as u128 * FULL as u128) / share as u128) as u64
        }
        _ => duration_ns,
    }
}

/// Whether a kernel needing `share` may start now.
/// `running`: the shares held by running kernels; `oldest_compute`: for a compute kernel, whether
/// it holds the oldest ticket among the waiting compute kernels.
pub fn may_start(running: u32, share: u32, comm: bool, oldest_compute: bool) -> bool {
    (comm || oldest_compute) && running + share <= FULL
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeslice_one_compute_at_a_time() {
        let s = share_needed(Mode::Timeslice, false, 30);
        assert_eq!(s, 100);
        assert!(may_start(0, s, false, true));
        assert!(!may_start(100, s, false, true));
        // Communication kernels never take the compute slot.
        let c = share_needed(Mode::Timeslice, true, 30);
        assert_eq!(c, 0);
        assert!(may_start(100, c, true, false));
    }

    #[test]
    fn mps_shares_sum_to_100() {
        let a = share_needed(Mode::Mps, false, 60);
        let b = share_needed(Mode::Mps, false, 40);
        assert!(may_start(a, b, false, true));
        assert!(!may_start(a, 41, false, true));
        let comm = share_needed(Mode::Mps, true, 60);
        assert_eq!(comm, 2);
        assert!(may_start(98, comm, true, false));
        assert!(!may_start(99, comm, true, false));
        assert_eq!(share_needed(Mode::Mps, false, 0), 1);
        assert_eq!(share_needed(Mode::Mps, false, 500), 100);
    }

    #[test]
    fn fifo_no_overtaking_of_compute() {
        assert!(!may_start(0, 10, false, false));
    }

    #[test]
    fn mps_slows_partial_shares() {
        assert_eq!(run_time_ns(Mode::Mps, 1_000, 50), 2_000);
        assert_eq!(run_time_ns(Mode::Mps, 1_000, 100), 1_000);
        assert_eq!(run_time_ns(Mode::Timeslice, 1_000, 50), 1_000);
        assert_eq!(run_time_ns(Mode::Mps, 999, 30), 3_330);
    }
}
