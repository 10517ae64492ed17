//! Tests of the built libcuda.so (target/<profile>/libcuda.so), loaded with dlopen and used only
//! through cuGetProcAddress_v2 pointers, like the other stand-ins do. Scenarios that depend on the
//! environment (sim dir, mode, trace) run in a child process: this test binary re-run with
//! `SIMTEST_SCENARIO` set.
use serde_json::Value;
use std::ffi::{c_char, c_void, CString};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

type P = *mut c_void;
type GetProc = unsafe extern "C" fn(*const c_char, *mut P, i32, u64, *mut i32) -> i32;

fn target_dir() -> PathBuf {
    // target/<profile>/deps/driver-<hash>
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

fn lib_path() -> PathBuf {
    let p = target_dir().join("libcuda.so");
    assert!(
        p.exists(),
        "{} missing: cargo build --release -p standin-cuda",
        p.display()
    );
    p
}

struct Cu {
    handle: P,
    get: GetProc,
}

impl Cu {
    fn load() -> Cu {
        let path = CString::new(lib_path().to_str().unwrap()).unwrap();
        // SAFETY: dlopen of the stand-in driver; the handle is kept for the process.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null());
        // SAFETY: live handle, constant name.
        let sym = unsafe { libc::dlsym(handle, c"cuGetProcAddress_v2".as_ptr()) };
        assert!(!sym.is_null());
        // SAFETY: cuGetProcAddress_v2 has this signature (cuda.h).
        let get = unsafe { std::mem::transmute::<P, GetProc>(sym) };
        Cu { handle, get }
    }

    /// (pointer, status, result) of cuGetProcAddress_v2.
    fn proc(&self, name: &str, version: i32, flags: u64) -> (usize, i32, i32) {
        let c = CString::new(name).unwrap();
        let mut p: P = std::ptr::null_mut();
        let mut st = -1;
        // SAFETY: valid C string and out-pointers.
        let r = unsafe { (self.get)(c.as_ptr(), &mut p, version, flags, &mut st) };
        (p as usize, st, r)
    }

    fn dlsym(&self, name: &str) -> usize {
        let c = CString::new(name).unwrap();
        // SAFETY: live handle, valid C string.
        unsafe { libc::dlsym(self.handle, c.as_ptr()) as usize }
    }
}

/// Typed driver function through cuGetProcAddress_v2 (CUDA 13.0).
macro_rules! f {
    ($cu:expr, $name:literal, fn($($a:ty),*)) => {{
        let (p, st, r) = $cu.proc($name, 13000, 0);
        assert_eq!((st, r), (0, 0), "{}", $name);
        // SAFETY: the driver hands out $name with its CUDA 13.0 signature, declared here.
        unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($a),*) -> i32>(p) }
    }};
}

/// The driver functions the scenarios use.
struct Api {
    init: unsafe extern "C" fn(u32) -> i32,
    device_get_count: unsafe extern "C" fn(*mut i32) -> i32,
    ctx_synchronize: unsafe extern "C" fn(P) -> i32,
    module_load_data: unsafe extern "C" fn(*mut P, *const c_void) -> i32,
    module_get_function: unsafe extern "C" fn(*mut P, P, *const c_char) -> i32,
    stream_create: unsafe extern "C" fn(*mut P, u32) -> i32,
    stream_synchronize: unsafe extern "C" fn(P) -> i32,
    stream_query: unsafe extern "C" fn(P) -> i32,
    stream_wait_event: unsafe extern "C" fn(P, P, u32) -> i32,
    event_create: unsafe extern "C" fn(*mut P, u32) -> i32,
    event_record: unsafe extern "C" fn(P, P) -> i32,
    event_query: unsafe extern "C" fn(P) -> i32,
    event_synchronize: unsafe extern "C" fn(P) -> i32,
    event_elapsed: unsafe extern "C" fn(*mut f32, P, P) -> i32,
    launch: unsafe extern "C" fn(P, u32, u32, u32, u32, u32, u32, u32, P, *mut P, *mut P) -> i32,
    launch_ex: unsafe extern "C" fn(*const LaunchConfig, P, *mut P, *mut P) -> i32,
    launch_coop: unsafe extern "C" fn(P, u32, u32, u32, u32, u32, u32, u32, P, *mut P) -> i32,
    graph_create: unsafe extern "C" fn(*mut P, u32) -> i32,
    graph_add_kernel_node:
        unsafe extern "C" fn(*mut P, P, *const P, usize, *const NodeParams) -> i32,
    graph_instantiate: unsafe extern "C" fn(*mut P, P, u64) -> i32,
    graph_launch: unsafe extern "C" fn(P, P) -> i32,
    mem_alloc: unsafe extern "C" fn(*mut u64, usize) -> i32,
    mem_free: unsafe extern "C" fn(u64) -> i32,
    mem_get_info: unsafe extern "C" fn(*mut usize, *mut usize) -> i32,
    launch_host_func: unsafe extern "C" fn(P, Option<unsafe extern "C" fn(P)>, P) -> i32,
}

#[repr(C)]
struct LaunchConfig {
    grid: [u32; 3],
    block: [u32; 3],
    smem: u32,
    stream: P,
    attrs: P,
    num_attrs: u32,
}

#[repr(C)]
struct NodeParams {
    func: P,
    grid: [u32; 3],
    block: [u32; 3],
    smem: u32,
    params: *mut P,
    extra: *mut P,
    kern: P,
    ctx: P,
}

impl Api {
    fn load(cu: &Cu) -> Api {
        Api {
            init: f!(cu, "cuInit", fn(u32)),
            device_get_count: f!(cu, "cuDeviceGetCount", fn(*mut i32)),
            ctx_synchronize: f!(cu, "cuCtxSynchronize", fn(P)),
            module_load_data: f!(cu, "cuModuleLoadData", fn(*mut P, *const c_void)),
            module_get_function: f!(cu, "cuModuleGetFunction", fn(*mut P, P, *const c_char)),
            stream_create: f!(cu, "cuStreamCreate", fn(*mut P, u32)),
            stream_synchronize: f!(cu, "cuStreamSynchronize", fn(P)),
            stream_query: f!(cu, "cuStreamQuery", fn(P)),
            stream_wait_event: f!(cu, "cuStreamWaitEvent", fn(P, P, u32)),
            event_create: f!(cu, "cuEventCreate", fn(*mut P, u32)),
            event_record: f!(cu, "cuEventRecord", fn(P, P)),
            event_query: f!(cu, "cuEventQuery", fn(P)),
            event_synchronize: f!(cu, "cuEventSynchronize", fn(P)),
            event_elapsed: f!(cu, "cuEventElapsedTime", fn(*mut f32, P, P)),
            launch: f!(
                cu,
                "cuLaunchKernel",
                fn(P, u32, u32, u32, u32, u32, u32, u32, P, *mut P, *mut P)
            ),
            launch_ex: f!(
                cu,
                "cuLaunchKernelEx",
                fn(*const LaunchConfig, P, *mut P, *mut P)
            ),
            launch_coop: f!(
                cu,
                "cuLaunchCooperativeKernel",
                fn(P, u32, u32, u32, u32, u32, u32, u32, P, *mut P)
            ),
            graph_create: f!(cu, "cuGraphCreate", fn(*mut P, u32)),
            graph_add_kernel_node: f!(
                cu,
                "cuGraphAddKernelNode",
                fn(*mut P, P, *const P, usize, *const NodeParams)
            ),
            graph_instantiate: f!(cu, "cuGraphInstantiate", fn(*mut P, P, u64)),
            graph_launch: f!(cu, "cuGraphLaunch", fn(P, P)),
            mem_alloc: f!(cu, "cuMemAlloc", fn(*mut u64, usize)),
            mem_free: f!(cu, "cuMemFree", fn(u64)),
            mem_get_info: f!(cu, "cuMemGetInfo", fn(*mut usize, *mut usize)),
            launch_host_func: f!(
                cu,
                "cuLaunchHostFunc",
                fn(P, Option<unsafe extern "C" fn(P)>, P)
            ),
        }
    }
}

/// A loaded, initialized driver with helpers.
struct Drv {
    api: Api,
    module: P,
}

macro_rules! ok {
    ($e:expr) => {{
        // SAFETY: driver calls with valid arguments (checked by the scenario's logic).
        let r = unsafe { $e };
        assert_eq!(r, 0, "{}", stringify!($e));
    }};
}

impl Drv {
    fn new() -> Drv {
        let cu = Cu::load();
        let api = Api::load(&cu);
        ok!((api.init)(0));
        let mut module = std::ptr::null_mut();
        ok!((api.module_load_data)(
            &mut module,
            c"image".as_ptr().cast()
        ));
        Drv { api, module }
    }

    fn func(&self, name: &str) -> P {
        let c = CString::new(name).unwrap();
        let mut f = std::ptr::null_mut();
        ok!((self.api.module_get_function)(
            &mut f,
            self.module,
            c.as_ptr()
        ));
        f
    }

    fn stream(&self) -> P {
        let mut s = std::ptr::null_mut();
        ok!((self.api.stream_create)(&mut s, 0));
        s
    }

    fn event(&self) -> P {
        let mut e = std::ptr::null_mut();
        ok!((self.api.event_create)(&mut e, 0));
        e
    }

    /// Launches kernel `name` for `ns` on `stream` (cuLaunchKernel); a comm kernel gets no
    /// `DeviceWork` (it runs for `ns`).
    fn launch(&self, name: &str, ns: u64, stream: P) {
        let f = self.func(name);
        let mut d = ns;
        let mut params: [P; 2] = [(&mut d as *mut u64).cast(), std::ptr::null_mut()];
        let null = std::ptr::null_mut();
        ok!((self.api.launch)(
            f,
            1,
            1,
            1,
            32,
            1,
            1,
            0,
            stream,
            params.as_mut_ptr(),
            null
        ));
    }
}

fn trace_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("trace line is JSON"))
        .collect()
}

fn find<'a>(lines: &'a [Value], kernel: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["kernel"] == kernel)
        .unwrap_or_else(|| panic!("no {kernel} in trace: {lines:?}"))
}

fn span(l: &Value) -> (u64, u64) {
    (
        l["start_ns"].as_u64().unwrap(),
        l["end_ns"].as_u64().unwrap(),
    )
}

fn overlap(a: &Value, b: &Value) -> bool {
    let ((a0, a1), (b0, b1)) = (span(a), span(b));
    a0 < b1 && b0 < a1
}

/// A fresh simulation folder and trace file, removed on drop.
struct Sandbox {
    dir: PathBuf,
}

impl Sandbox {
    fn new(name: &str) -> Sandbox {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = PathBuf::from(format!(
            "/dev/shm/freeride-test-cuda-{}-{name}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Sandbox { dir }
    }
    fn sim(&self) -> String {
        self.dir.join("sim").to_str().unwrap().to_owned()
    }
    fn trace(&self) -> PathBuf {
        self.dir.join("trace.jsonl")
    }
    fn cmd(&self, scenario: &str, env: &[(&str, &str)]) -> Command {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env("SIMTEST_SCENARIO", scenario)
            .env("FREERIDE_SIM_DIR", self.sim())
            .env("FREERIDE_SIM_TRACE", self.trace())
            .env_remove("FREERIDE_SIM_MODE")
            .env_remove("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
            .envs(env.iter().copied());
        c
    }
    /// Runs a scenario to completion; panics if it fails.
    fn run(&self, scenario: &str, env: &[(&str, &str)]) {
        let out = self.cmd(scenario, env).output().unwrap();
        assert!(
            out.status.success(),
            "scenario {scenario} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    fn spawn(&self, scenario: &str, env: &[(&str, &str)]) -> Child {
        self.cmd(scenario, env)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits until the child prints `line` on stdout.
fn wait_line(child: &mut Child, line: &str) {
    use std::io::BufRead;
    let out = child.stdout.as_mut().unwrap();
    let mut r = std::io::BufReader::new(out);
    let mut s = String::new();
    loop {
        s.clear();
        assert!(
            r.read_line(&mut s).unwrap() > 0,
            "child ended before {line}"
        );
        if s.trim_end().ends_with(line) {
            return;
        }
    }
}

// ---------------------------------------------------------------- child scenarios

#[test]
fn child() {
    let Ok(s) = std::env::var("SIMTEST_SCENARIO") else {
        return;
    };
    match s.as_str() {
        "ordering" => scenario_ordering(),
        "cross_wait" => scenario_cross_wait(),
        "two_streams" => scenario_two_streams(),
        "all_apis" => scenario_all_apis(),
        "memory" => scenario_memory(),
        "mem_hold" => scenario_mem_hold(),
        "kernel" => scenario_kernel(),
        "not_init" => scenario_not_init(),
        "late_wake" => scenario_late_wake(),
        "hop" => scenario_hop(),
        "burst" => scenario_burst(),
        "host_func" => scenario_host_func(),
        other => panic!("unknown scenario {other}"),
    }
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

fn scenario_two_streams() {
    let d = Drv::new();
    let (a, b) = (d.stream(), d.stream());
    d.launch("on_a", 100_000_000, a);
    d.launch("on_b", 100_000_000, b);
    ok!((d.api.ctx_synchronize)(std::ptr::null_mut()));
}

unsafe extern "C" fn comm_run(ctx: *mut c_void) {
    // SAFETY: ctx is the Box<u64> leaked at launch; run is called exactly once.
    let ns = unsafe { Box::from_raw(ctx.cast::<u64>()) };
    std::thread::sleep(Duration::from_nanos(*ns));
    println!("comm ran");
}

fn scenario_all_apis() {
    let d = Drv::new();
    let s = d.stream();
    let null: P = std::ptr::null_mut();
    let nullp: *mut P = std::ptr::null_mut();
    // cuLaunchKernelEx on s.
    let mut ns = 5_000_000u64;
    let mut params: [P; 1] = [(&mut ns as *mut u64).cast()];
    let cfg = LaunchConfig {
        grid: [1; 3],
        block: [1; 3],
        smem: 0,
        stream: s,
        attrs: null,
        num_attrs: 0,
    };
    ok!((d.api.launch_ex)(
        &cfg,
        d.func("ex_kernel"),
        params.as_mut_ptr(),
        nullp
    ));
    // cuLaunchCooperativeKernel on the legacy default stream.
    ok!((d.api.launch_coop)(
        d.func("coop_kernel"),
        1,
        1,
        1,
        1,
        1,
        1,
        0,
        null,
        params.as_mut_ptr()
    ));
    // A NULL kernelParams runs the default duration.
    ok!((d.api.launch)(
        d.func("no_params"),
        1,
        1,
        1,
        1,
        1,
        1,
        0,
        s,
        nullp,
        nullp
    ));
    // A communication kernel with its DeviceWork.
    let work = simgpu::abi::DeviceWork {
        magic: simgpu::abi::DEVICE_WORK_MAGIC,
        run: comm_run,
        ctx: Box::into_raw(Box::new(30_000_000u64)).cast(),
    };
    let mut w = work;
    let mut cparams: [P; 2] = [
        (&mut ns as *mut u64).cast(),
        (&mut w as *mut simgpu::abi::DeviceWork).cast(),
    ];
    ok!((d.api.launch)(
        d.func("ncclDevKernel_SendRecv"),
        1,
        1,
        1,
        1,
        1,
        1,
        0,
        s,
        cparams.as_mut_ptr(),
        nullp
    ));
    // A graph of two kernel nodes, launched twice.
    let mut g = null;
    ok!((d.api.graph_create)(&mut g, 0));
    for (name, dur) in [("graph_a", 3_000_000u64), ("graph_b", 4_000_000)] {
        let mut dur = dur;
        let mut p: [P; 1] = [(&mut dur as *mut u64).cast()];
        let np = NodeParams {
            func: d.func(name),
            grid: [1; 3],
            block: [1; 3],
            smem: 0,
            params: p.as_mut_ptr(),
            extra: nullp,
            kern: null,
            ctx: null,
        };
        let mut node = null;
        ok!((d.api.graph_add_kernel_node)(
            &mut node,
            g,
            std::ptr::null(),
            0,
            &np
        ));
        assert!(!node.is_null());
    }
    let mut exec = null;
    ok!((d.api.graph_instantiate)(&mut exec, g, 0));
    ok!((d.api.graph_launch)(exec, s));
    ok!((d.api.graph_launch)(exec, s));
    ok!((d.api.ctx_synchronize)(null));
    println!("stream={}", s as usize);
}

fn scenario_memory() {
    let d = Drv::new();
    let (mut free, mut total) = (0usize, 0usize);
    ok!((d.api.mem_get_info)(&mut free, &mut total));
    let expect_free: usize = std::env::var("EXPECT_FREE_MIB")
        .unwrap()
        .parse::<usize>()
        .unwrap()
        << 20;
    assert_eq!(total, 1024 << 20);
    assert_eq!(free, expect_free);
    // 60% of what is free fits once, not twice.
    let size = ((expect_free >> 20) * 6 / 10) << 20;
    let mut a = 0u64;
    ok!((d.api.mem_alloc)(&mut a, size));
    let mut b = 0u64;
    // SAFETY: valid out-pointer.
    let r = unsafe { (d.api.mem_alloc)(&mut b, size) };
    assert_eq!(r, 2, "over-allocation must be CUDA_ERROR_OUT_OF_MEMORY");
    ok!((d.api.mem_get_info)(&mut free, &mut total));
    assert_eq!(free, expect_free - size);
    ok!((d.api.mem_free)(a));
    // SAFETY: a was just freed: freeing it again is an error, not a crash.
    assert_eq!(unsafe { (d.api.mem_free)(a) }, 1);
    ok!((d.api.mem_get_info)(&mut free, &mut total));
    assert_eq!(free, expect_free);
    let (mut x, mut y) = (0u64, 0u64);
    ok!((d.api.mem_alloc)(&mut x, 1));
    ok!((d.api.mem_alloc)(&mut y, 1));
    assert_ne!(x, y);
}

fn scenario_mem_hold() {
    let d = Drv::new();
    let mut a = 0u64;
    ok!((d.api.mem_alloc)(&mut a, 800 << 20));
    // Also hold the compute slot for a long time.
    d.launch("hog", 60_000_000_000, std::ptr::null_mut());
    std::thread::sleep(Duration::from_millis(50));
    println!("held");
    std::thread::sleep(Duration::from_secs(60));
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

fn scenario_not_init() {
    let cu = Cu::load();
    let count: unsafe extern "C" fn(*mut i32) -> i32 = f!(cu, "cuDeviceGetCount", fn(*mut i32));
    let mut n = 0;
    // SAFETY: valid out-pointer.
    assert_eq!(
        unsafe { count(&mut n) },
        3,
        "CUDA_ERROR_NOT_INITIALIZED before cuInit"
    );
    let api = Api::load(&cu);
    ok!((api.init)(0));
    ok!((api.device_get_count)(&mut n));
    assert_eq!(n, 3);
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
fn truth_lines_name_the_api() {
    let sb = Sandbox::new("apis");
    let out = sb.cmd("all_apis", &[]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("comm ran"));
    let stream: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("stream="))
        .unwrap()
        .parse()
        .unwrap();
    let t = trace_lines(&sb.trace());
    assert_eq!(t.len(), 8, "{t:?}");
    let ex = find(&t, "ex_kernel");
    assert_eq!(ex["api"], "cuLaunchKernelEx");
    assert_eq!(ex["stream"].as_u64(), Some(stream));
    assert_eq!(ex["kind"], "compute");
    assert_eq!(ex["graph"], false);
    assert_eq!(ex["device"], 0);
    assert_eq!(ex["pid"].as_u64(), Some(u64::from(out_pid(&t))));
    let coop = find(&t, "coop_kernel");
    assert_eq!(coop["api"], "cuLaunchCooperativeKernel");
    assert_eq!(coop["stream"], 0);
    assert_eq!(find(&t, "no_params")["api"], "cuLaunchKernel");
    let comm = find(&t, "ncclDevKernel_SendRecv");
    assert_eq!(comm["kind"], "comm");
    assert!(
        span(comm).1 - span(comm).0 >= 30_000_000,
        "comm kernel lasts as long as its work"
    );
    let graph: Vec<&Value> = t.iter().filter(|l| l["graph"] == true).collect();
    assert_eq!(graph.len(), 4);
    let names: Vec<&str> = graph
        .iter()
        .map(|l| l["kernel"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["graph_a", "graph_b", "graph_a", "graph_b"]);
    for l in &t {
        let (q, s, e) = (
            l["queued_ns"].as_u64().unwrap(),
            l["start_ns"].as_u64().unwrap(),
            l["end_ns"].as_u64().unwrap(),
        );
        assert!(q <= s && s <= e, "{l}");
    }
    for g in &graph {
        assert_eq!(g["api"], "cuGraphLaunch");
    }
}

/// Per (pid, stream): the truth lines in order never go back in time and never start before
/// they were queued.
fn check_streams_monotonic(t: &[Value]) {
    let mut last: std::collections::HashMap<(u64, u64), u64> = Default::default();
    for l in t {
        let (q, (s, e)) = (l["queued_ns"].as_u64().unwrap(), span(l));
        assert!(q <= s && s <= e, "{l}");
        let key = (l["pid"].as_u64().unwrap(), l["stream"].as_u64().unwrap());
        let prev = last.insert(key, e).unwrap_or(0);
        assert!(prev <= s, "stream went back in time at {l}");
    }
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

fn out_pid(t: &[Value]) -> u32 {
    t[0]["pid"].as_u64().unwrap() as u32
}

#[test]
fn memory_accounting_across_processes() {
    let sb = Sandbox::new("mem");
    let env = [("FREERIDE_SIM_MEM_MIB", "1024")];
    sb.run("memory", &[env[0], ("EXPECT_FREE_MIB", "1024")]);
    let mut holder = sb.spawn("mem_hold", &env);
    wait_line(&mut holder, "held");
    sb.run("memory", &[env[0], ("EXPECT_FREE_MIB", "224")]);
    // Fails: only 224 MiB left while the holder lives; after it dies its memory is reclaimed.
    holder.kill().unwrap();
    holder.wait().unwrap();
    sb.run("memory", &[env[0], ("EXPECT_FREE_MIB", "1024")]);
}

#[test]
fn timeslice_across_processes_and_dead_holder() {
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
    assert!(
        !overlap(find(&t, "p1"), find(&t, "p2")),
        "one compute kernel at a time"
    );

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
    assert!(find(&trace_lines(&sb.trace()), "after_death")["end_ns"]
        .as_u64()
        .is_some());
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
    assert!(
        span(b).1 - span(b).0 >= 250_000_000,
        "40% share: 100 ms takes 250 ms"
    );
}

#[test]
fn not_initialized_before_cu_init() {
    let sb = Sandbox::new("init");
    sb.run("not_init", &[("FREERIDE_SIM_DEVICES", "3")]);
}

#[test]
fn proc_address_hands_out_every_export() {
    let cu = Cu::load();
    let nm = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib_path())
        .output()
        .expect("nm");
    let exports: Vec<String> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[1] == "T" && f[2].starts_with("cu")).then(|| f[2].to_owned())
        })
        .collect();
    assert!(exports.len() > 80, "{exports:?}");
    let versions = [
        2000, 3020, 4000, 7000, 9020, 10000, 11000, 11030, 11040, 12000, 12050, 12080, 13000,
    ];
    for e in &exports {
        // The base name: without _ptsz/_ptds and a _vN suffix.
        let mut base = e
            .trim_end_matches("_ptsz")
            .trim_end_matches("_ptds")
            .to_owned();
        if let Some(i) = base.rfind("_v") {
            if base[i + 2..].chars().all(|c| c.is_ascii_digit()) {
                base.truncate(i);
            }
        }
        let want = cu.dlsym(e);
        let found = versions
            .iter()
            .any(|&v| [0u64, 2].iter().any(|&fl| cu.proc(&base, v, fl).0 == want));
        assert!(
            found,
            "{e} (base {base}) is not handed out by cuGetProcAddress_v2"
        );
        // At 13.0 every base name resolves.
        assert_eq!(cu.proc(&base, 13000, 0).1, 0, "{base}");
    }
    // Versioned picks and the per-thread flag.
    assert_eq!(cu.proc("cuMemAlloc", 13000, 0).0, cu.dlsym("cuMemAlloc_v2"));
    assert_eq!(
        cu.proc("cuLaunchKernel", 13000, 2).0,
        cu.dlsym("cuLaunchKernel_ptsz")
    );
    assert_eq!(
        cu.proc("cuLaunchKernel", 13000, 0).0,
        cu.dlsym("cuLaunchKernel")
    );
    assert_eq!(
        cu.proc("cuStreamDestroy", 13000, 0).0,
        cu.dlsym("cuStreamDestroy_v2")
    );
    let (p, st, r) = cu.proc("cuNoSuchFunction", 13000, 0);
    assert_eq!((p, st, r), (0, 1, 500));
}
