//! How the stand-in driver shares the device between streams and processes: time slices, MPS,
//! a lone process at full speed, a communication kernel held off by another process.
#[macro_use]
mod common;

use common::*;
use serde_json::Value;
use std::ffi::c_void;
use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

// ---------------------------------------------------------------- child scenarios

child_scenarios! {
    "two_streams" => scenario_two_streams,
    "mem_hold" => scenario_mem_hold,
    "kernel" => scenario_kernel,
    "burst" => scenario_burst,
    "lone" => scenario_lone,
    "held_off" => scenario_held_off,
}

/// Many short compute kernels over two streams, with comm kernels in between (for two processes
/// at once).
fn scenario_burst() {
    let d = Drv::new();
    let (a, b) = (d.stream(), d.stream());
    let tag = std::env::var("KERNEL").unwrap();
    println!("ready");
    let go = PathBuf::from(std::env::var("GO_FILE").unwrap());
    while !go.exists() {
        std::thread::sleep(Duration::from_millis(1));
    }
    for i in 0..10 {
        d.launch(&format!("{tag}_a{i}"), 1_000_000, a);
        d.launch(&format!("{tag}_b{i}"), 500_000, b);
        d.launch(&format!("nccl_{tag}_{i}"), 300_000, a);
        if i % 3 == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    ok!((d.api.ctx_synchronize)(std::ptr::null_mut()));
}

/// 20 kernels back to back on one stream, of 1 ms, 1.01 ms, ...
fn scenario_lone() {
    let d = Drv::new();
    let s = d.stream();
    for i in 0..20u64 {
        d.launch(&format!("lone{i}"), 1_000_000 + i * 10_000, s);
    }
    ok!((d.api.stream_synchronize)(s));
}

unsafe extern "C" fn arrives_150ms_in(ctx: *mut c_void, k: *mut simgpu::abi::CommKernel) {
    // SAFETY: ctx is the Box<u8> leaked at launch; run is called exactly once.
    drop(unsafe { Box::from_raw(ctx.cast::<u8>()) });
    // SAFETY: the simulated GPU passes a CommKernel it owns for the duration of the call.
    let k = unsafe { &mut *k };
    k.transfer_start_ns = k.start_ns + 150_000_000;
    k.transfer_ns = 0;
}

/// A receive whose peer's data arrives 150 ms after it starts (the body says so at once).
fn scenario_held_off() {
    let d = Drv::new();
    let s = d.stream();
    let go = PathBuf::from(std::env::var("GO_FILE").unwrap());
    let mut w = simgpu::abi::DeviceWork {
        magic: simgpu::abi::DEVICE_WORK_MAGIC,
        run: arrives_150ms_in,
        ctx: Box::into_raw(Box::new(0u8)).cast(),
    };
    let mut ns = 0u64;
    let mut params: [P; 2] = [
        (&mut ns as *mut u64).cast(),
        (&mut w as *mut simgpu::abi::DeviceWork).cast(),
    ];
    let null: *mut P = std::ptr::null_mut();
    ok!((d.api.launch)(
        d.func("ncclDevKernel_Recv"),
        1,
        1,
        1,
        1,
        1,
        1,
        0,
        s,
        params.as_mut_ptr(),
        null
    ));
    std::thread::sleep(Duration::from_millis(5));
    println!("ready");
    while !go.exists() {
        std::thread::sleep(Duration::from_millis(1));
    }
    ok!((d.api.stream_synchronize)(s));
}

fn scenario_two_streams() {
    let d = Drv::new();
    let (a, b) = (d.stream(), d.stream());
    d.launch("on_a", 100_000_000, a);
    d.launch("on_b", 100_000_000, b);
    ok!((d.api.ctx_synchronize)(std::ptr::null_mut()));
}

fn scenario_kernel() {
    let d = Drv::new();
    let name = std::env::var("KERNEL").unwrap();
    let ns: u64 = std::env::var("KERNEL_NS").unwrap().parse().unwrap();
    println!("ready");
    // Start together with the sibling: wait for the go file.
    let go = PathBuf::from(std::env::var("GO_FILE").unwrap());
    while !go.exists() {
        std::thread::sleep(Duration::from_millis(1));
    }
    d.launch(&name, ns, std::ptr::null_mut());
    ok!((d.api.ctx_synchronize)(std::ptr::null_mut()));
}

// ---------------------------------------------------------------- tests

#[test]
fn two_streams_overlap_only_in_mps() {
    let sb = Sandbox::new("ts");
    sb.run("two_streams", &[]);
    let t = trace_lines(&sb.trace());
    assert!(
        !overlap(find(&t, "on_a"), find(&t, "on_b")),
        "timeslice serializes"
    );

    let sb = Sandbox::new("mps");
    sb.run(
        "two_streams",
        &[
            ("FREERIDE_SIM_MODE", "mps"),
            ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "50"),
        ],
    );
    let t = trace_lines(&sb.trace());
    let (a, b) = (find(&t, "on_a"), find(&t, "on_b"));
    assert!(overlap(a, b), "mps runs them side by side");
    // On a 50% share a 100 ms kernel takes 200 ms.
    assert!(span(a).1 - span(a).0 >= 200_000_000);
}

#[test]
fn timeslice_bursts_of_two_processes_never_overlap() {
    let sb = Sandbox::new("burst");
    let go = sb.dir.join("go");
    let go_s = go.to_str().unwrap().to_owned();
    let mut kids: Vec<Child> = ["x", "y"]
        .iter()
        .map(|k| sb.spawn("burst", &[("KERNEL", k), ("GO_FILE", &go_s)]))
        .collect();
    for k in kids.iter_mut() {
        wait_line(k, "ready");
    }
    std::fs::write(&go, "").unwrap();
    for k in kids.iter_mut() {
        assert!(k.wait().unwrap().success());
    }
    let t = trace_lines(&sb.trace());
    assert_eq!(t.len(), 60, "{t:?}");
    check_streams_monotonic(&t);
    let compute: Vec<&Value> = t.iter().filter(|l| l["kind"] == "compute").collect();
    assert_eq!(compute.len(), 40);
    for (i, a) in compute.iter().enumerate() {
        for b in &compute[i + 1..] {
            assert!(!overlap(a, b), "compute kernels overlap: {a} {b}");
        }
    }
}

#[test]
fn two_processes_with_work_share_the_device_in_time_slices() {
    let sb = Sandbox::new("xproc");
    let go = sb.dir.join("go");
    let go_s = go.to_str().unwrap().to_owned();
    let mut kids: Vec<Child> = ["p1", "p2"]
        .iter()
        .map(|k| {
            sb.spawn(
                "kernel",
                &[
                    ("KERNEL", k),
                    ("KERNEL_NS", "100000000"),
                    ("GO_FILE", &go_s),
                ],
            )
        })
        .collect();
    for k in kids.iter_mut() {
        wait_line(k, "ready");
    }
    std::fs::write(&go, "").unwrap();
    for k in kids.iter_mut() {
        assert!(k.wait().unwrap().success());
    }
    let t = trace_lines(&sb.trace());
    let (a, b) = (span(find(&t, "p1")), span(find(&t, "p2")));
    let (first, last) = if a.1 <= b.1 { (a, b) } else { (b, a) };
    // Each needs 100 ms of the whole device; time-slicing interleaves them (2 ms slices), so
    // both take about twice that, and the device stays busy with one or the other throughout.
    assert!(
        first.0 < last.1 && last.0 < first.1,
        "they share: {a:?} {b:?}"
    );
    assert!(first.1 - first.0 > 150_000_000, "interrupted: {first:?}");
    assert!(
        last.1 - first.0.min(last.0) >= 200_000_000,
        "200 ms of work on one device: {a:?} {b:?}"
    );
    assert!(last.1 - last.0 > 150_000_000, "interrupted: {last:?}");
    // A process that dies holding the compute slot gives it back.
    let mut holder = sb.spawn("mem_hold", &[]);
    wait_line(&mut holder, "held");
    holder.kill().unwrap();
    holder.wait().unwrap();
    sb.run(
        "kernel",
        &[
            ("KERNEL", "after_death"),
            ("KERNEL_NS", "1000000"),
            ("GO_FILE", &go_s),
        ],
    );
    let after = span(find(&trace_lines(&sb.trace()), "after_death"));
    assert_eq!(after.1 - after.0, 1_000_000, "alone again: full speed");
}

#[test]
fn a_lone_process_runs_at_full_speed() {
    let sb = Sandbox::new("lone");
    sb.run("lone", &[]);
    let t = trace_lines(&sb.trace());
    check_streams_monotonic(&t);
    let mut prev_end = None;
    for i in 0..20 {
        let (s, e) = span(find(&t, &format!("lone{i}")));
        assert_eq!(e - s, 1_000_000 + i * 10_000, "lone{i} runs its duration");
        if let Some(p) = prev_end {
            assert_eq!(s, p, "lone{i} follows its predecessor back to back");
        }
        prev_end = Some(e);
    }
}

#[test]
fn a_communication_kernel_held_off_by_a_side_kernel_completes_late() {
    let sb = Sandbox::new("heldoff");
    let go = sb.dir.join("go");
    let go_s = go.to_str().unwrap().to_owned();
    // Slices of 100 ms: the trainer's receive (spinning from its start) holds the device for its
    // first slice, then the side task's 400 ms kernel gets one; the receive's data arrives 150 ms
    // after its start, while the side task holds the device.
    let env = [
        ("FREERIDE_SIM_SLICE_US", "100000"),
        ("GO_FILE", go_s.as_str()),
    ];
    let mut trainer = sb.spawn("held_off", &env);
    wait_line(&mut trainer, "ready");
    let mut side = sb.spawn(
        "kernel",
        &[
            env[0],
            env[1],
            ("KERNEL", "side_kernel"),
            ("KERNEL_NS", "400000000"),
        ],
    );
    wait_line(&mut side, "ready");
    std::fs::write(&go, "").unwrap();
    assert!(side.wait().unwrap().success());
    assert!(trainer.wait().unwrap().success());
    let t = trace_lines(&sb.trace());
    let recv = find(&t, "ncclDevKernel_Recv");
    let (start, end) = span(recv);
    let arrived = recv["transfer_start_ns"].as_u64().unwrap();
    assert_eq!(arrived, start + 150_000_000, "{recv}");
    let side = span(find(&t, "side_kernel"));
    assert!(
        side.0 < arrived,
        "precondition: the side task had started: {side:?} {recv}"
    );
    // The receive notices its data only when its process is resident again: at the end of the
    // side task's 100 ms slice (and a switch).
    assert!(end >= arrived + 40_000_000, "completed late: {recv}");
    assert!(
        end <= side.0 + 100_000_000 + 100_000,
        "in its next slice: {recv} {side:?}"
    );
    assert!(
        side.1 - side.0 > 400_000_000,
        "the side kernel was preempted"
    );
}

#[test]
fn mps_across_processes() {
    let sb = Sandbox::new("mpsx");
    let go = sb.dir.join("go");
    let go_s = go.to_str().unwrap().to_owned();
    let mut kids: Vec<Child> = [("q1", "60"), ("q2", "40")]
        .iter()
        .map(|(k, share)| {
            sb.spawn(
                "kernel",
                &[
                    ("KERNEL", k),
                    ("KERNEL_NS", "100000000"),
                    ("GO_FILE", &go_s),
                    ("FREERIDE_SIM_MODE", "mps"),
                    ("FREERIDE_SIM_MPS_INTERFERENCE", "0"),
                    ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", share),
                ],
            )
        })
        .collect();
    for k in kids.iter_mut() {
        wait_line(k, "ready");
    }
    std::fs::write(&go, "").unwrap();
    for k in kids.iter_mut() {
        assert!(k.wait().unwrap().success());
    }
    let t = trace_lines(&sb.trace());
    let (a, b) = (find(&t, "q1"), find(&t, "q2"));
    assert!(overlap(a, b), "60% + 40% run side by side");
    // An MPS share caps a kernel's speed: on 40 % of the SMs, 100 ms of work takes 250 ms.
    assert_eq!(span(b).1 - span(b).0, 250_000_000, "40% share");
    assert_eq!(span(a).1 - span(a).0, 166_666_667, "60% share");
}
