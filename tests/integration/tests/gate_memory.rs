//! A side task's device memory on every allocation path of the driver, on the test bed (stand-in
//! CUDA, simulated GPU): tests/cprogs/mem_paths.c under libfreeride.so, with budgets set as the
//! agent sets them (a grant block written here) or by `FREERIDE_MEM_BUDGET_MB`. The simulated
//! device's own accounting (`cudaMemGetInfo`) is the ground truth of what was really taken.
use freeride_abi::grant_shm::{GrantFields, GrantWriter};
use freeride_tests::gatebed::{heart, Bed};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// One test at a time (the machine is small).
static SERIAL: Mutex<()> = Mutex::new(());

fn bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| freeride_tests::cprog("mem_paths", &["-lcudart"]))
}

/// Runs mem_paths `args` as `role`; its output lines.
fn run(bed: &Bed, role: &str, args: &[&str], env: &[(&str, &str)]) -> Vec<String> {
    let o = bed.cmd(bin(), role, args, env).output().unwrap();
    assert!(o.status.success(), "mem_paths {args:?} ({role}) failed");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

const PATHS: [&str; 6] = ["malloc", "pitch", "managed", "async", "pool", "vmm"];

#[test]
fn a_sidetask_over_its_budget_gets_out_of_memory_on_every_path() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::new("mem-paths");
    let env = [
        ("FREERIDE_MEM_BUDGET_MB", "64"),
        ("FREERIDE_SIM_MEM_MIB", "4096"),
    ];
    for path in PATHS {
        // 48 ok; 48 more -> out of memory (2, cudaErrorMemoryAllocation through the runtime,
        // CUDA_ERROR_OUT_OF_MEMORY from the driver); free ok; 48 ok; 16 ok (64 held); 1 -> 2.
        let got = run(
            &bed,
            "sidetask",
            &[path, "48", "48", "free", "48", "16", "1"],
            &env,
        );
        assert_eq!(got, ["0", "2", "0", "0", "0", "2"], "side task on {path}");
        // The trainer is never refused by freeride: only the device's own limit holds it.
        let got = run(
            &bed,
            "trainer",
            &[path, "1024", "1024", "2048", "1024"],
            &env,
        );
        assert_eq!(got, ["0", "0", "0", "2"], "trainer on {path}");
    }
}

#[test]
fn the_budget_is_per_gpu_and_host_memory_is_no_gpus() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::new("mem-gpus");
    let env = [
        ("FREERIDE_MEM_BUDGET_MB", "64"),
        ("FREERIDE_SIM_MEM_MIB", "4096"),
    ];
    // 48 on GPU 0, then on GPU 1 48 fit and 48 more do not.
    assert_eq!(
        run(
            &bed,
            "sidetask",
            &["malloc", "48", "dev=1", "48", "48"],
            &env
        ),
        ["0", "0", "0", "2"]
    );
    // The virtual memory API names the device in the call: what the current device is does not
    // matter (and no context is asked for). Host memory is charged to no GPU.
    assert_eq!(
        run(
            &bed,
            "sidetask",
            &["vmm", "48", "loc=1", "48", "host256", "16", "2", "loc=0", "16", "2"],
            &env
        ),
        ["0", "0", "0", "0", "0", "2", "0", "0", "2"]
    );
}

/// PyTorch with `expandable_segments:True` grows a reserved virtual range segment by segment
/// (cuMemCreate + cuMemMap + cuMemSetAccess) until cuMemCreate fails, and gives it all back on
/// `empty_cache` (cuMemUnmap + cuMemRelease): under a grant's budget of 200 MiB it gets exactly
/// 10 segments of 20 MiB each round, the device never holds more than the budget, and releasing
/// a handle while it is mapped (CUDA's samples do) sheds nothing early.
#[test]
fn a_pytorch_shaped_sidetask_with_expandable_segments_stays_within_its_budget() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::new("mem-expandable");
    let w = Arc::new(GrantWriter::create(&bed.session, freeride_tests::gpu(0)).unwrap());
    let _hb = heart(&w);
    w.publish(GrantFields {
        mem_budget_bytes: 200 << 20,
        ..GrantFields::default()
    });
    let env = [("FREERIDE_SIM_MEM_MIB", "1024")];
    let rounds = |role: &str| -> Vec<(u64, i64, u64)> {
        run(&bed, role, &["expandable", "20", "4"], &env)
            .iter()
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                assert_eq!(f.len(), 8, "{l}");
                (
                    f[3].parse().unwrap(),
                    f[5].parse().unwrap(),
                    f[7].parse().unwrap(),
                )
            })
            .collect()
    };
    let side = rounds("sidetask");
    eprintln!("expandable segments, side task (segments, rc, peak MiB): {side:?}");
    assert_eq!(side.len(), 4);
    for (segments, rc, peak) in side {
        assert_eq!(
            (segments, rc),
            (10, 2),
            "segments and cuMemCreate's last result"
        );
        assert!(peak <= 200, "the device held {peak} MiB for the side task");
    }
    // A trainer grows until the device itself is full (1024 MiB: 51 segments of 20 MiB).
    let trainer = rounds("trainer");
    eprintln!("expandable segments, trainer: {trainer:?}");
    for (segments, rc, peak) in trainer {
        assert_eq!((segments, rc, peak), (51, 2, 1020));
    }
}
