//! The stage's iteration marks in the ground truth: at the end of each iteration (after the host
//! returned from the iteration's synchronize), one JSON line appended to `$FREERIDE_SIM_TRACE`
//! with one `write()` (the file is opened `O_APPEND`, like the simulated GPU's kernel lines):
//! `{"mark":"iteration","pid":..,"rank":..,"bus_id":"0000:12:00.0","iteration":k,"t_ns":..}`.
//! Every kernel the rank queued in iterations up to k was queued before `t_ns`, every kernel of
//! a later iteration after it (`pipesim::truth` cuts the run into iterations with this).
use crate::cuda::{self, check};
use std::ffi::{c_char, CStr};
use std::io::Write;

pub struct Marks {
    file: Option<std::fs::File>,
    rank: u32,
    bus_id: String,
}

/// CLOCK_MONOTONIC in ns: the test bed's one clock.
fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into a timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Marks {
    /// Opens the truth (if `$FREERIDE_SIM_TRACE` is set) and asks the runtime for the bus id of
    /// `device` (the ordinal in use).
    pub fn open(rank: u32, device: i32) -> Result<Marks, String> {
        let mut buf = [0 as c_char; 32];
        // SAFETY: a 32-byte buffer for the NUL-terminated bus id.
        check("cudaDeviceGetPCIBusId", unsafe {
            cuda::cudaDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, device)
        })?;
        // SAFETY: the runtime wrote a NUL-terminated string into buf.
        let bus_id = unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let file = match std::env::var_os("FREERIDE_SIM_TRACE") {
            Some(p) if !p.is_empty() => Some(
                std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(&p)
                    .map_err(|e| format!("opening the truth {}: {e}", p.to_string_lossy()))?,
            ),
            _ => None,
        };
        Ok(Marks { file, rank, bus_id })
    }

    pub fn bus_id(&self) -> &str {
        &self.bus_id
    }

    /// Writes iteration `it`'s mark.
    pub fn write(&mut self, it: u32) -> Result<(), String> {
        let Some(f) = self.file.as_mut() else {
            return Ok(());
        };
        let line = format!(
            "{{\"mark\":\"iteration\",\"pid\":{},\"rank\":{},\"bus_id\":\"{}\",\"iteration\":{it},\"t_ns\":{}}}\n",
            std::process::id(),
            self.rank,
            self.bus_id,
            now_ns()
        );
        f.write_all(line.as_bytes())
            .map_err(|e| format!("writing the truth's mark: {e}"))
    }
}
