use super::*;
use crate::config::Mode;
use crate::sched::Submit;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
/// A pid that cannot exist (pid_max is at most 2^22).
const DEAD_PID: i32 = 0x3FFF_FFF0;

/// A folder for one test's device state, removed when dropped (a failing test's too).
pub(crate) struct TempDir(pub(crate) std::path::PathBuf);

impl TempDir {
    pub(crate) fn new(name: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("simgpu-{name}-{}", my_pid()));
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn timeslice_device(dir: &TempDir) -> Device {
    let knobs = Knobs {
        mode: Mode::Timeslice as u32,
        comm_spin: 1,
        slice_ns: 2 * MS,
        switch_ns: 25 * US,
        interference: 0.0,
        // Long enough that a late test thread never loses its hold: kernels run back to back.
        hold_ns: 10_000 * MS,
    };
    Device::open_at(&dir.0.join("gpu0"), 0, knobs, 1 << 30, 100).unwrap()
}

/// A kernel of this process that fills the device and runs `ns`, eligible at `ready`; its end.
fn run_kernel(dev: &Device, ns: u64, ready: u64) -> Timing {
    let id = dev.submit(&KernelRun {
        stream_key: 1,
        comm: false,
        with_body: false,
        duration_ns: ns,
        fill: 100,
        ready_ns: ready,
        hold_after: true,
    });
    dev.wait_done(id, false)
}

/// A process that died with a kernel of an hour on the device (resident, in the middle of its
/// slice) must stop taking time slices once a process that keeps using the device has looked,
/// however short that process's kernels (and so its waits) are.
#[test]
fn a_dead_process_kernel_stops_taking_slices_under_short_waits() {
    let dir = TempDir::new("reap");
    let dev = timeslice_device(&dir);
    let ghost = {
        let mut m = dev.shm.model();
        let ghost = (0..MAX_SLOTS).find(|&i| i != dev.slot).unwrap();
        dev.shm.slots[ghost].pid.store(DEAD_PID, Relaxed);
        m.submit(&Submit {
            slot: ghost as u32,
            stream_key: 2,
            comm: false,
            with_body: false,
            mark: false,
            work_ns: 3_600_000 * MS,
            fill: 100,
            demand: 100,
            ready_ns: now_ns(),
            hold_after: false,
        })
        .unwrap();
        ghost
    };
    // Kernels of 1 ms, back to back, for a few times the dead-process check period: every wait
    // is a few ms (a slice of the other process at most), far shorter than that period.
    let t0 = now_ns();
    let mut ready = now_ns();
    while now_ns() - t0 < 4 * STALE_CHECK_NS {
        ready = run_kernel(&dev, MS, ready).end_ns;
    }
    assert_eq!(
        dev.shm.slots[ghost].pid.load(Relaxed),
        0,
        "the dead process's slot was never reclaimed"
    );
    // Alone on the device now: five kernels take five ms, no slice goes to the dead kernel.
    let first = ready;
    for _ in 0..5 {
        ready = run_kernel(&dev, MS, ready).end_ns;
    }
    assert_eq!(ready - first, 5 * MS);
}
