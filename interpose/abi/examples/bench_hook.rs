//! `scripts/bench-hook`'s measuring program (run under `LD_PRELOAD=libfreeride.so`): the cost of
//! one hooked launch against the same call direct, with 1, 2 and 4 threads launching into the
//! process's ring (each thread into its lane while there are lanes), and the hook clock's cost,
//! all in one run. Prints one JSON object.
//!
//! * direct: `bench_real_launch` of the trivial driver (`tests/cprogs/bench_drv.c`, loaded as
//!   `libcuda.so.1`), a name freeride does not hook; hooked: `dlsym(handle, "cuLaunchKernel")`,
//!   which freeride's `dlsym` answers with its wrapper.
//! * Each thread times `n` direct calls, then (after a barrier) `n` hooked calls, by its own
//!   CPU-time clock (`CLOCK_THREAD_CPUTIME_ID`): with more threads than cores, the time a thread
//!   waits for a core is not its launches' cost. A round's figure is the mean over its threads;
//!   the best of `rounds` rounds is reported (the least disturbed by the rest of the machine).
//! * A consumer thread drains the ring with the agent's reader (`RingReader::poll`), sleeping
//!   50 µs when it finds it empty, as the agent polls; every round starts with the ring drained.
//!   `dropped` counts records the ring lost (full, or a producer that lost 256 claims in a row).
//! * The clock: `clock::ThreadClock::now` (the hook's clock: the same code, built from this tree,
//!   with this process's own calibration; `abi_clock` says whether it reached the TSC) and
//!   `clock_gettime(CLOCK_MONOTONIC)` (the hook's clock before), per read.
//!
//! * A phase of 4 threads fits in its lanes (`FREERIDE_RING_CAPACITY=2097152`: with the default 8
//!   lanes, 7 for launching threads, a lane of 262144 records each, more than a round's 200000;
//!   with `FREERIDE_RING_LANES=1` one of 2097152), so a consumer that falls behind while 4
//!   launching threads hold both cores never turns pushes into (cheaper) drops.
//!
//! Usage: bench_hook [launches per thread per round (default 200000)] [rounds (default 15)]
//!        bench_hook --count N   (N direct then N hooked calls on one thread, no consumer: for
//!                                callgrind's instruction counts)
use freeride_abi::clock::{self, ThreadClock};
use freeride_abi::reader::RingReader;
use freeride_abi::Kind;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

type Launch = unsafe extern "C" fn(
    *mut c_void,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    *mut c_void,
    *mut *mut c_void,
    *mut *mut c_void,
) -> c_int;

#[derive(Clone, Copy)]
struct Fns {
    direct: Launch,
    hooked: Launch,
}

fn load() -> Result<Fns, String> {
    // SAFETY: dlopen/dlsym with valid C strings; the library stays loaded for the process.
    unsafe {
        let h = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW);
        if h.is_null() {
            return Err("bench_hook: cannot load libcuda.so.1 (the bench driver)".into());
        }
        let d = libc::dlsym(h, c"bench_real_launch".as_ptr());
        let k = libc::dlsym(h, c"cuLaunchKernel".as_ptr());
        if d.is_null() || k.is_null() {
            return Err("bench_hook: bench_real_launch or cuLaunchKernel missing".into());
        }
        if d == k {
            return Err(
                "bench_hook: cuLaunchKernel is not freeride's wrapper (LD_PRELOAD=libfreeride.so?)"
                    .into(),
            );
        }
        // SAFETY: both are `int f(void*, 7 x unsigned, void*, void**, void**)` (bench_drv.c).
        Ok(Fns {
            direct: std::mem::transmute::<*mut c_void, Launch>(d),
            hooked: std::mem::transmute::<*mut c_void, Launch>(k),
        })
    }
}

#[inline(always)]
fn call(f: Launch, i: u64) {
    // SAFETY: the trivial driver's launch reads nothing through its pointer arguments.
    unsafe {
        f(
            i as *mut c_void,
            1,
            1,
            1,
            32,
            1,
            1,
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
    }
}

fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes the timespec we own.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Nanoseconds per call of `f`, by this thread's CPU time.
fn time_calls(f: Launch, n: u64) -> f64 {
    let t0 = thread_cpu_ns();
    for i in 0..n {
        call(f, i);
    }
    (thread_cpu_ns() - t0) as f64 / n as f64
}

/// The consumer: the agent's reader on the process's ring.
struct Consumer {
    stop: Arc<AtomicBool>,
    consumed: Arc<AtomicU64>,
    dropped: Arc<AtomicU64>,
    handle: std::thread::JoinHandle<()>,
}

fn start_consumer(dir: &std::path::Path) -> Result<Consumer, String> {
    let rings = freeride_abi::session::list_rings(dir).map_err(|e| format!("{dir:?}: {e}"))?;
    let [path] = rings.as_slice() else {
        return Err(format!(
            "bench_hook: expected one ring in {dir:?}, found {rings:?}"
        ));
    };
    let mut reader = RingReader::open(path).map_err(|e| format!("{path:?}: {e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let consumed = Arc::new(AtomicU64::new(0));
    let dropped = Arc::new(AtomicU64::new(0));
    let (s, c, d) = (stop.clone(), consumed.clone(), dropped.clone());
    let handle = std::thread::spawn(move || {
        let mut buf = Vec::with_capacity(4096);
        while !s.load(Ordering::Relaxed) {
            buf.clear();
            reader.poll(4096, &mut buf);
            // Launches only: the process start and the drop reports are not the benchmark's.
            let launches = buf.iter().filter(|e| e.kind == Kind::Launch).count();
            c.fetch_add(launches as u64, Ordering::Relaxed);
            d.store(reader.info().dropped, Ordering::Relaxed);
            if buf.is_empty() {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
    });
    Ok(Consumer {
        stop,
        consumed,
        dropped,
        handle,
    })
}

impl Consumer {
    /// Waits until `pushed` records are consumed or dropped (at most 5 s).
    fn drain(&self, pushed: u64) {
        let t0 = clock_ns(libc::CLOCK_MONOTONIC);
        while self.consumed.load(Ordering::Relaxed) + self.dropped.load(Ordering::Relaxed) < pushed
            && clock_ns(libc::CLOCK_MONOTONIC) - t0 < 5_000_000_000
        {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
}

/// One configuration: `threads` threads, best of `rounds` rounds. (direct, hooked) ns per call.
fn run_threads(
    fns: Fns,
    threads: usize,
    n: u64,
    rounds: usize,
    cons: &Consumer,
    pushed: &mut u64,
) -> (f64, f64) {
    let mut best: Option<(f64, f64)> = None;
    for _ in 0..rounds {
        cons.drain(*pushed);
        let barrier = Arc::new(Barrier::new(threads));
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                let b = barrier.clone();
                std::thread::spawn(move || {
                    // One hooked call first: the thread's first (tid, device, clock anchor).
                    call(fns.hooked, 0);
                    b.wait();
                    let d = time_calls(fns.direct, n);
                    b.wait();
                    let h = time_calls(fns.hooked, n);
                    (d, h)
                })
            })
            .collect();
        let r: Vec<(f64, f64)> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        *pushed += threads as u64 * (n + 1);
        let d = r.iter().map(|x| x.0).sum::<f64>() / threads as f64;
        let h = r.iter().map(|x| x.1).sum::<f64>() / threads as f64;
        if best.is_none_or(|(bd, bh)| h - d < bh - bd) {
            best = Some((d, h));
        }
    }
    best.unwrap_or((0.0, 0.0))
}

/// ns per read of the hook clock (calibrated) and of clock_gettime, best of 5.
fn clock_cost(n: u64) -> (f64, f64, &'static str) {
    clock::start();
    let c = ThreadClock::new();
    let t0 = clock_ns(libc::CLOCK_MONOTONIC);
    while clock::mode() == clock::Mode::Calibrating
        && clock_ns(libc::CLOCK_MONOTONIC) - t0 < 200_000_000
    {
        std::hint::black_box(c.now());
    }
    let mode = match clock::mode() {
        clock::Mode::Tsc => "tsc",
        _ => "clock_gettime",
    };
    let (mut tsc, mut mono) = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        let t0 = thread_cpu_ns();
        for _ in 0..n {
            std::hint::black_box(c.now());
        }
        let t1 = thread_cpu_ns();
        for _ in 0..n {
            std::hint::black_box(freeride_abi::now_ns());
        }
        let t2 = thread_cpu_ns();
        tsc = tsc.min((t1 - t0) as f64 / n as f64);
        mono = mono.min((t2 - t1) as f64 / n as f64);
    }
    (tsc, mono, mode)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("{e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let fns = load()?;
    if args.first().map(String::as_str) == Some("--count") {
        let n: u64 = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(100_000);
        call(fns.hooked, 0);
        for i in 0..n {
            call(fns.direct, i);
        }
        for i in 0..n {
            call(fns.hooked, i);
        }
        return Ok(());
    }
    let n: u64 = args.first().and_then(|v| v.parse().ok()).unwrap_or(200_000);
    let rounds: usize = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(15);
    let dir = std::env::var_os("FREERIDE_DIR").ok_or("bench_hook: FREERIDE_DIR not set")?;
    call(fns.hooked, 0); // the process's lazy initialization (ring creation) outside the timing
    let cons = start_consumer(std::path::Path::new(&dir))?;
    let mut pushed = 1u64; // the first launch
    let mut rows = Vec::new();
    for threads in [1usize, 2, 4] {
        let dropped_before = cons.dropped.load(Ordering::Relaxed);
        let (d, h) = run_threads(fns, threads, n, rounds, &cons, &mut pushed);
        cons.drain(pushed);
        let dropped = cons.dropped.load(Ordering::Relaxed) - dropped_before;
        rows.push(format!(
            "{{\"threads\": {threads}, \"direct_ns\": {d:.1}, \"hooked_ns\": {h:.1}, \"overhead_ns\": {:.1}, \"dropped\": {dropped}}}",
            h - d
        ));
    }
    cons.drain(pushed);
    let (tsc, mono, mode) = clock_cost(n);
    cons.stop.store(true, Ordering::Relaxed);
    cons.handle.join().map_err(|_| "consumer panicked")?;
    println!(
        "{{\"by_threads\": [{}], \"clock\": {{\"abi_clock\": \"{mode}\", \"tsc_clock_ns\": {tsc:.1}, \"clock_gettime_ns\": {mono:.1}}}, \"launches_per_thread_per_round\": {n}, \"rounds\": {rounds}, \"pushed\": {pushed}, \"consumed\": {}, \"dropped\": {}}}",
        rows.join(", "),
        cons.consumed.load(Ordering::Relaxed),
        cons.dropped.load(Ordering::Relaxed)
    );
    Ok(())
}
