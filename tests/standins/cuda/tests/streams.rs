//! Stream order, events, cross-stream waits, host functions and the launch queue of the stand-in
//! driver.
#[macro_use]
mod common;

use common::*;
use std::time::Duration;

// ---------------------------------------------------------------- child scenarios

child_scenarios! {
    "ordering" => scenario_ordering,
    "cross_wait" => scenario_cross_wait,
    "late_wake" => scenario_late_wake,
    "hop" => scenario_hop,
    "queue_depth" => scenario_queue_depth,
    "host_func" => scenario_host_func,
}

fn scenario_ordering() {
    let d = Drv::new();
    let s = d.stream();
    let (e0, e1, e2) = (d.event(), d.event(), d.event());
    ok!((d.api.event_record)(e0, s));
    d.launch("first", 200_000_000, s);
    ok!((d.api.event_record)(e1, s));
    d.launch("second", 20_000_000, s);
    ok!((d.api.event_record)(e2, s));
    // Pending while the 200 ms kernel runs.
    // SAFETY: valid handles.
    assert_eq!(unsafe { (d.api.event_query)(e1) }, 600);
    // SAFETY: valid handle.
    assert_eq!(unsafe { (d.api.stream_query)(s) }, 600);
    let mut ms = 0f32;
    // SAFETY: valid handles and out-pointer.
    assert_eq!(unsafe { (d.api.event_elapsed)(&mut ms, e0, e2) }, 600);
    ok!((d.api.event_synchronize)(e1));
    ok!((d.api.event_query)(e1));
    ok!((d.api.stream_synchronize)(s));
    ok!((d.api.stream_query)(s));
    ok!((d.api.event_elapsed)(&mut ms, e0, e1));
    assert!((200.0..2000.0).contains(&ms), "first took {ms} ms");
    ok!((d.api.event_elapsed)(&mut ms, e1, e2));
    assert!((20.0..1000.0).contains(&ms), "second took {ms} ms");
}

fn scenario_cross_wait() {
    let d = Drv::new();
    let (a, b) = (d.stream(), d.stream());
    let ev = d.event();
    d.launch("producer", 100_000_000, a);
    ok!((d.api.event_record)(ev, a));
    ok!((d.api.stream_wait_event)(b, ev, 0));
    d.launch("consumer", 10_000_000, b);
    // A later record of the event does not change what b waits for.
    // (A comm kernel: it does not compete with the consumer for the compute slot.)
    d.launch("nccl_later", 300_000_000, a);
    ok!((d.api.event_record)(ev, a));
    ok!((d.api.stream_synchronize)(b));
    ok!((d.api.ctx_synchronize)(std::ptr::null_mut()));
}

/// Kernels enqueued on a stream whose executor is blocked (idle), and back to back.
fn scenario_late_wake() {
    let d = Drv::new();
    let s = d.stream();
    let (e0, e1) = (d.event(), d.event());
    d.launch("warm", 1_000_000, s);
    ok!((d.api.stream_synchronize)(s));
    for i in 0..5 {
        // The executor is blocked waiting for work when the launch comes.
        std::thread::sleep(Duration::from_millis(20));
        d.launch(&format!("idle_start{i}"), 2_000_000, s);
        ok!((d.api.stream_synchronize)(s));
    }
    std::thread::sleep(Duration::from_millis(20));
    // The stream is kept busy while the events and k1, k2 are queued, so that e0 completes when
    // `pre` ends, on the GPU's clock, however late the host queues the rest (within `pre`'s 3 ms).
    d.launch("pre", 3_000_000, s);
    ok!((d.api.event_record)(e0, s));
    d.launch("k1", 5_000_000, s);
    d.launch("k2", 1_000_000, s);
    ok!((d.api.event_record)(e1, s));
    ok!((d.api.stream_synchronize)(s));
    let mut ms = 0f32;
    ok!((d.api.event_elapsed)(&mut ms, e0, e1));
    println!("elapsed_ms={ms}");
}

/// A 5 ms kernel on stream a, an event recorded after it; stream b waits for the event, then runs
/// its kernel.
fn scenario_hop() {
    let d = Drv::new();
    let (a, b) = (d.stream(), d.stream());
    let ev = d.event();
    for i in 0..5 {
        d.launch(&format!("hop_a{i}"), 5_000_000, a);
        ok!((d.api.event_record)(ev, a));
        ok!((d.api.stream_wait_event)(b, ev, 0));
        d.launch(&format!("hop_b{i}"), 1_000_000, b);
        ok!((d.api.ctx_synchronize)(std::ptr::null_mut()));
    }
}

/// 10 kernels of 20 ms launched back to back; prints how long the launches took (real time).
fn scenario_queue_depth() {
    let d = Drv::new();
    let s = d.stream();
    let t0 = std::time::Instant::now();
    for i in 0..10 {
        d.launch(&format!("deep{i}"), 20_000_000, s);
    }
    println!("launch_ms={}", t0.elapsed().as_millis());
    ok!((d.api.stream_synchronize)(s));
}

/// (entered, left) of `host_fn`, CLOCK_MONOTONIC ns.
static HOST_FN_TIMES: [std::sync::atomic::AtomicU64; 2] = [
    std::sync::atomic::AtomicU64::new(0),
    std::sync::atomic::AtomicU64::new(0),
];

unsafe extern "C" fn host_fn(data: P) {
    HOST_FN_TIMES[0].store(simgpu::abi::now_ns(), std::sync::atomic::Ordering::SeqCst);
    assert_eq!(data as usize, 0x5eed, "user data");
    std::thread::sleep(Duration::from_millis(30));
    HOST_FN_TIMES[1].store(simgpu::abi::now_ns(), std::sync::atomic::Ordering::SeqCst);
}

/// A 50 ms kernel, a host function that takes 30 ms, a 10 ms kernel, on one stream.
fn scenario_host_func() {
    let d = Drv::new();
    let s = d.stream();
    d.launch("before_host", 50_000_000, s);
    ok!((d.api.launch_host_func)(s, Some(host_fn), 0x5eed as P));
    d.launch("after_host", 10_000_000, s);
    // SAFETY: no callback for a null function.
    assert_eq!(
        unsafe { (d.api.launch_host_func)(s, None, std::ptr::null_mut()) },
        1,
        "CUDA_ERROR_INVALID_VALUE"
    );
    ok!((d.api.stream_synchronize)(s));
    let [a, b] = &HOST_FN_TIMES;
    let o = std::sync::atomic::Ordering::SeqCst;
    println!("host_fn={},{}", a.load(o), b.load(o));
}

// ---------------------------------------------------------------- tests

#[test]
fn stream_order_and_events() {
    let sb = Sandbox::new("order");
    sb.run("ordering", &[]);
    let t = trace_lines(&sb.trace());
    let (a, b) = (find(&t, "first"), find(&t, "second"));
    assert!(span(a).1 <= span(b).0, "in-order stream");
    assert!(span(a).1 - span(a).0 >= 200_000_000);
}

#[test]
fn host_function_runs_in_stream_order() {
    let sb = Sandbox::new("host-func");
    let out = sb.cmd("host_func", &[]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let times = text
        .lines()
        .find_map(|l| l.split("host_fn=").nth(1))
        .unwrap();
    let t: Vec<u64> = times
        .split(',')
        .map(|v| v.trim().parse().unwrap())
        .collect();
    let tr = trace_lines(&sb.trace());
    let (before, after) = (
        span(find(&tr, "before_host")),
        span(find(&tr, "after_host")),
    );
    assert!(
        t[0] >= before.1,
        "the host function ran before the kernel queued ahead ended"
    );
    assert!(
        after.0 >= t[1],
        "the kernel queued after the host function did not wait for it"
    );
}

#[test]
fn cross_stream_wait() {
    let sb = Sandbox::new("wait");
    sb.run("cross_wait", &[]);
    let t = trace_lines(&sb.trace());
    let (p, c, later) = (
        find(&t, "producer"),
        find(&t, "consumer"),
        find(&t, "nccl_later"),
    );
    assert!(span(p).1 <= span(c).0, "consumer waited for producer");
    assert!(
        span(c).1 <= span(later).1,
        "consumer waited only for the record as of the wait"
    );
}

#[test]
fn idle_stream_starts_at_enqueue_time() {
    let sb = Sandbox::new("late");
    let out = sb.cmd("late_wake", &[]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = trace_lines(&sb.trace());
    check_streams_monotonic(&t);
    for i in 0..5 {
        let l = find(&t, &format!("idle_start{i}"));
        let (q, (s, e)) = (l["queued_ns"].as_u64().unwrap(), span(l));
        eprintln!("idle_start{i}: start - queued = {} ns", s as i64 - q as i64);
        // The executor wakes tens of microseconds late, but the GPU started on time.
        assert!(s >= q && s - q < 20_000, "start - queued = {} ns", s - q);
        assert_eq!(e - s, 2_000_000, "a kernel runs exactly its duration");
    }
    let (k1, k2) = (find(&t, "k1"), find(&t, "k2"));
    assert_eq!(span(k1).1, span(k2).0, "back to back on one stream");
    let ms: f32 = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.split("elapsed_ms=").nth(1))
        .unwrap()
        .parse()
        .unwrap();
    // The events' timestamps are the GPU's: e0 completes when `pre` ends and e1 when k2 ends, so
    // the elapsed time is exactly k1 and k2, 6 ms, unless the host queued k1 only after `pre` had
    // ended (then e0 completed when it was queued, between the two).
    let pre_end = span(find(&t, "pre")).1;
    let k1_queued = k1["queued_ns"].as_u64().unwrap();
    let (k1_start, k2_end) = (span(k1).0, span(k2).1);
    if k1_queued <= pre_end {
        assert_eq!(k1_start, pre_end, "k1 follows pre back to back");
        assert!((ms - 6.0).abs() < 0.001, "elapsed {ms} ms");
    } else {
        let longest = (k2_end - pre_end) as f32 / 1e6;
        assert!(
            (6.0 - 0.001..longest + 0.001).contains(&ms),
            "elapsed {ms} ms"
        );
    }
}

#[test]
fn cross_stream_hop_adds_no_wakeup_latency() {
    let sb = Sandbox::new("hop");
    sb.run("hop", &[]);
    let t = trace_lines(&sb.trace());
    check_streams_monotonic(&t);
    for i in 0..5 {
        let (a, b) = (
            find(&t, &format!("hop_a{i}")),
            find(&t, &format!("hop_b{i}")),
        );
        let (a_end, b_start) = (span(a).1, span(b).0);
        eprintln!(
            "hop {i}: b.start - a.end = {} ns",
            b_start as i64 - a_end as i64
        );
        assert!(b_start >= a_end, "b waited for a");
        assert!(
            b_start - a_end < 20_000,
            "hop {i}: b started {} ns after a ended",
            b_start - a_end
        );
    }
}

#[test]
fn a_full_launch_queue_blocks_the_host() {
    let sb = Sandbox::new("depth");
    let out = sb
        .cmd("queue_depth", &[("FREERIDE_SIM_QUEUE_DEPTH", "4")])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ms: u64 = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.split("launch_ms=").nth(1))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // With 4 operations at most pending, the 10th launch waits for the 6th kernel's end: 120 ms.
    assert!(ms >= 115, "the launches returned after {ms} ms");
    let t = trace_lines(&sb.trace());
    check_streams_monotonic(&t);
    assert_eq!(t.len(), 10);
}
