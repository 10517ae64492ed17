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

/// The result of a driver call expected to fail.
macro_rules! rc {
    ($e:expr) => {{
        // SAFETY: driver calls with valid pointers; the arguments are wrong on purpose.
        unsafe { $e }
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
        "memory_paths" => scenario_memory_paths(),
        "kernel" => scenario_kernel(),
        "not_init" => scenario_not_init(),
        "late_wake" => scenario_late_wake(),
        "hop" => scenario_hop(),
        "burst" => scenario_burst(),
        "visible" => scenario_visible(),
        "lone" => scenario_lone(),
        "queue_depth" => scenario_queue_depth(),
        "held_off" => scenario_held_off(),
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

/// 20 kernels back to back on one stream, of 1 ms, 1.01 ms, ...
fn scenario_lone() {
    let d = Drv::new();
    let s = d.stream();
    for i in 0..20u64 {
        d.launch(&format!("lone{i}"), 1_000_000 + i * 10_000, s);
    }
    ok!((d.api.stream_synchronize)(s));
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

unsafe extern "C" fn comm_run(ctx: *mut c_void, k: *mut simgpu::abi::CommKernel) {
    // SAFETY: ctx is the Box<u64> leaked at launch; run is called exactly once.
    let ns = unsafe { Box::from_raw(ctx.cast::<u64>()) };
    // SAFETY: the simulated GPU passes a CommKernel it owns for the duration of the call.
    let k = unsafe { &mut *k };
    // Its transfer begins at once and takes `ns`.
    k.transfer_start_ns = k.start_ns;
    k.transfer_ns = *ns;
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

#[repr(C)]
struct Location {
    type_: i32,
    id: i32,
}

#[repr(C)]
struct AllocProp {
    type_: i32,
    handle_types: i32,
    location: Location,
    win32: P,
    flags: [u8; 8],
}

#[repr(C)]
struct PoolProps {
    alloc_type: i32,
    handle_types: i32,
    location: Location,
    win32: P,
    max_size: usize,
    usage: u16,
    reserved: [u8; 54],
}

#[repr(C)]
struct AccessDesc {
    location: Location,
    flags: i32,
}

/// Pitched, managed, pool and virtual-memory allocations, as the real driver behaves, counted on
/// the device (FREERIDE_SIM_MEM_MIB=1024).
fn scenario_memory_paths() {
    const MIB: usize = 1 << 20;
    let d = Drv::new();
    let cu = Cu::load();
    let used = || {
        let (mut free, mut total) = (0usize, 0usize);
        ok!((d.api.mem_get_info)(&mut free, &mut total));
        (total - free) / MIB
    };

    // Pitched: rows padded to 512 bytes, the widest access 4, 8 or 16 bytes.
    let pitch_alloc = f!(
        cu,
        "cuMemAllocPitch",
        fn(*mut u64, *mut usize, usize, usize, u32)
    );
    let (mut p, mut pitch) = (0u64, 0usize);
    assert_eq!(rc!(pitch_alloc(&mut p, &mut pitch, 1000, 1024, 3)), 1);
    ok!(pitch_alloc(&mut p, &mut pitch, 1000, 1024, 4));
    assert_eq!(pitch, 1024);
    assert_eq!(used(), 1);
    ok!((d.api.mem_free)(p));
    assert_eq!(used(), 0);

    // Managed: one of the two attach flags.
    let managed = f!(cu, "cuMemAllocManaged", fn(*mut u64, usize, u32));
    assert_eq!(rc!(managed(&mut p, 8 * MIB, 0)), 1);
    ok!(managed(&mut p, 8 * MIB, 1));
    assert_eq!(used(), 8);
    ok!((d.api.mem_free)(p));

    // Pools: the default pool is one handle; a free reaches the device when the stream does,
    // unless the release threshold keeps it in the pool (then a trim gives it back).
    let get_default = f!(cu, "cuDeviceGetDefaultMemPool", fn(*mut P, i32));
    let get_pool = f!(cu, "cuDeviceGetMemPool", fn(*mut P, i32));
    let pool_create = f!(cu, "cuMemPoolCreate", fn(*mut P, *const PoolProps));
    let pool_destroy = f!(cu, "cuMemPoolDestroy", fn(P));
    let set_attr = f!(cu, "cuMemPoolSetAttribute", fn(P, i32, *mut c_void));
    let get_attr = f!(cu, "cuMemPoolGetAttribute", fn(P, i32, *mut c_void));
    let trim = f!(cu, "cuMemPoolTrimTo", fn(P, usize));
    let alloc_async = f!(cu, "cuMemAllocAsync", fn(*mut u64, usize, P));
    let alloc_pool = f!(cu, "cuMemAllocFromPoolAsync", fn(*mut u64, usize, P, P));
    let free_async = f!(cu, "cuMemFreeAsync", fn(u64, P));
    let (mut def, mut def2, mut cur) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    ok!(get_default(&mut def, 0));
    ok!(get_default(&mut def2, 0));
    ok!(get_pool(&mut cur, 0));
    assert!(!def.is_null() && def == def2 && def == cur);
    assert_eq!(rc!(pool_destroy(def)), 1, "the default pool stays");
    let s = d.stream();
    ok!(alloc_async(&mut p, 64 * MIB, s));
    assert_eq!(used(), 64);
    ok!(free_async(p, s));
    ok!((d.api.stream_synchronize)(s));
    assert_eq!(used(), 0);
    let props = PoolProps {
        alloc_type: 1,
        handle_types: 0,
        location: Location { type_: 1, id: 0 },
        win32: std::ptr::null_mut(),
        max_size: 0,
        usage: 0,
        reserved: [0; 54],
    };
    let mut pool = std::ptr::null_mut();
    ok!(pool_create(&mut pool, &props));
    let mut keep: u64 = u64::MAX;
    ok!(set_attr(pool, 4, (&mut keep as *mut u64).cast()));
    ok!(alloc_pool(&mut p, 100 * MIB, pool, s));
    ok!(free_async(p, s));
    ok!((d.api.stream_synchronize)(s));
    let (mut reserved, mut in_use) = (0u64, 0u64);
    ok!(get_attr(pool, 5, (&mut reserved as *mut u64).cast()));
    ok!(get_attr(pool, 7, (&mut in_use as *mut u64).cast()));
    assert_eq!((reserved, in_use), (100 << 20, 0));
    assert_eq!(used(), 100, "the pool keeps what was freed into it");
    // Reused for a request of about its size.
    ok!(alloc_pool(&mut p, 80 * MIB, pool, s));
    assert_eq!(used(), 100);
    ok!((d.api.mem_free)(p));
    ok!(trim(pool, 0));
    assert_eq!(used(), 0);
    // What a pool keeps is given back before an allocation fails.
    ok!(alloc_pool(&mut p, 600 * MIB, pool, s));
    ok!(free_async(p, s));
    ok!((d.api.stream_synchronize)(s));
    assert_eq!(used(), 600);
    ok!(alloc_pool(&mut p, 900 * MIB, pool, s));
    assert_eq!(used(), 900);
    ok!(free_async(p, s));
    ok!((d.api.stream_synchronize)(s));
    ok!(pool_destroy(pool));
    assert_eq!(used(), 0);

    // Virtual memory: 2 MiB granularity, counted at creation, freed when neither a handle nor
    // a mapping refers to it any more.
    let gran = f!(
        cu,
        "cuMemGetAllocationGranularity",
        fn(*mut usize, *const AllocProp, i32)
    );
    let create = f!(
        cu,
        "cuMemCreate",
        fn(*mut u64, usize, *const AllocProp, u64)
    );
    let release = f!(cu, "cuMemRelease", fn(u64));
    let retain = f!(cu, "cuMemRetainAllocationHandle", fn(*mut u64, P));
    let reserve = f!(
        cu,
        "cuMemAddressReserve",
        fn(*mut u64, usize, usize, u64, u64)
    );
    let addr_free = f!(cu, "cuMemAddressFree", fn(u64, usize));
    let map = f!(cu, "cuMemMap", fn(u64, usize, usize, u64, u64));
    let unmap = f!(cu, "cuMemUnmap", fn(u64, usize));
    let set_access = f!(
        cu,
        "cuMemSetAccess",
        fn(u64, usize, *const AccessDesc, usize)
    );
    let prop = |type_| AllocProp {
        type_: 1,
        handle_types: 0,
        location: Location { type_, id: 0 },
        win32: std::ptr::null_mut(),
        flags: [0; 8],
    };
    let dev = prop(1);
    let mut g = 0usize;
    ok!(gran(&mut g, &dev, 0));
    assert_eq!(g, 2 * MIB);
    let mut h = 0u64;
    assert_eq!(
        rc!(create(&mut h, MIB, &dev, 0)),
        1,
        "not a multiple of the granularity"
    );
    assert_eq!(
        rc!(create(&mut h, 2048 * MIB, &dev, 0)),
        2,
        "more than the device has"
    );
    // No context is needed: a thread that never bound one creates and releases.
    let (c, r) = (create as usize, release as usize);
    let dev_addr = &dev as *const AllocProp as usize;
    std::thread::spawn(move || {
        type Create = unsafe extern "C" fn(*mut u64, usize, *const AllocProp, u64) -> i32;
        type Release = unsafe extern "C" fn(u64) -> i32;
        // SAFETY: the same two driver functions, transmuted back to their types.
        let (c, r) = unsafe {
            (
                std::mem::transmute::<usize, Create>(c),
                std::mem::transmute::<usize, Release>(r),
            )
        };
        let mut h = 0u64;
        ok!(c(&mut h, 2 * MIB, dev_addr as *const AllocProp, 0));
        ok!(r(h));
    })
    .join()
    .unwrap();
    let mut va = 0u64;
    ok!(reserve(&mut va, 64 * MIB, 0, 0, 0));
    assert_eq!(va % (2 * MIB) as u64, 0);
    let (mut h1, mut h2) = (0u64, 0u64);
    ok!(create(&mut h1, 20 * MIB, &dev, 0));
    ok!(create(&mut h2, 20 * MIB, &dev, 0));
    assert_eq!(used(), 40);
    ok!(map(va, 20 * MIB, 0, h1, 0));
    assert_eq!(
        rc!(map(va + 18 * MIB as u64, 20 * MIB, 0, h2, 0)),
        1,
        "overlap"
    );
    ok!(map(va + 20 * MIB as u64, 20 * MIB, 0, h2, 0));
    let access = AccessDesc {
        location: Location { type_: 1, id: 0 },
        flags: 3,
    };
    ok!(set_access(va, 40 * MIB, &access, 1));
    assert_eq!(
        rc!(set_access(va, 44 * MIB, &access, 1)),
        1,
        "not all mapped"
    );
    // Released while mapped: the memory lives until the mapping goes.
    ok!(release(h1));
    assert_eq!(used(), 40);
    // A retained handle is one more reference.
    let mut h1b = 0u64;
    ok!(retain(&mut h1b, (va + 4096) as P));
    assert_eq!(rc!(addr_free(va, 64 * MIB)), 1, "still mapped");
    assert_eq!(rc!(unmap(va, 10 * MIB)), 1, "part of a mapping");
    ok!(unmap(va, 40 * MIB));
    assert_eq!(used(), 40, "h1 retained, h2 not released");
    ok!(release(h1b));
    assert_eq!(used(), 20);
    ok!(release(h2));
    assert_eq!(used(), 0);
    assert_eq!(rc!(release(h2)), 1, "released twice");
    ok!(addr_free(va, 64 * MIB));
    // A host location makes host memory: nothing on the device.
    let host = prop(2);
    ok!(create(&mut h, 64 * MIB, &host, 0));
    assert_eq!(used(), 0);
    ok!(release(h));
    println!("memory paths ok");
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

/// Prints what the process sees under its CUDA_VISIBLE_DEVICES (one JSON line), after running a
/// kernel on ordinal 0 when there is one.
fn scenario_visible() {
    let cu = Cu::load();
    let init: unsafe extern "C" fn(u32) -> i32 = f!(cu, "cuInit", fn(u32));
    // SAFETY: plain call.
    let r = unsafe { init(0) };
    if r != 0 {
        println!("{}", serde_json::json!({ "init": r }));
        return;
    }
    let api = Api::load(&cu);
    let bus_id = f!(cu, "cuDeviceGetPCIBusId", fn(*mut c_char, i32, i32));
    let uuid = f!(cu, "cuDeviceGetUuid", fn(*mut [u8; 16], i32));
    let by_bus = f!(cu, "cuDeviceGetByPCIBusId", fn(*mut i32, *const c_char));
    let retain = f!(cu, "cuDevicePrimaryCtxRetain", fn(*mut P, i32));
    let set_current = f!(cu, "cuCtxSetCurrent", fn(P));
    let mut n = 0;
    ok!((api.device_get_count)(&mut n));
    let (mut buses, mut uuids) = (vec![], vec![]);
    for d in 0..n {
        let mut b = [0 as c_char; 32];
        ok!(bus_id(b.as_mut_ptr(), 32, d));
        // SAFETY: the driver wrote a NUL-terminated string into b.
        let b = unsafe { std::ffi::CStr::from_ptr(b.as_ptr()) };
        buses.push(b.to_string_lossy().into_owned());
        let mut u = [0u8; 16];
        ok!(uuid(&mut u, d));
        uuids.push(u.iter().map(|x| format!("{x:02x}")).collect::<String>());
    }
    let mut found = -1;
    // SAFETY: valid out-pointer and C string.
    let r_bus = unsafe { by_bus(&mut found, c"0000:11:00.0".as_ptr()) };
    if n > 0 {
        let mut ctx = std::ptr::null_mut();
        ok!(retain(&mut ctx, 0));
        ok!(set_current(ctx));
        let d = Drv {
            api,
            module: std::ptr::null_mut(),
        };
        let mut module = std::ptr::null_mut();
        ok!((d.api.module_load_data)(
            &mut module,
            c"image".as_ptr().cast()
        ));
        let d = Drv { module, ..d };
        d.launch("on_ordinal_0", 1000, std::ptr::null_mut());
        ok!((d.api.ctx_synchronize)(std::ptr::null_mut()));
    }
    println!(
        "{}",
        serde_json::json!({"init": 0, "count": n, "bus": buses, "uuid": uuids,
                           "by_bus_0000_11": [r_bus, found]})
    );
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

/// CUDA_VISIBLE_DEVICES as the real driver reads it: ordinals and UUIDs select and order the
/// devices, an invalid entry ends the list; every process reports the same bus id and UUID for a
/// physical device, and the ground truth names the physical device.
#[test]
fn visible_devices_select_physical_gpus() {
    let sb = Sandbox::new("visible");
    let see = |v: Option<&str>| -> Value {
        let mut c = sb.cmd("visible", &[("FREERIDE_SIM_DEVICES", "6")]);
        match v {
            Some(v) => c.env("CUDA_VISIBLE_DEVICES", v),
            None => c.env_remove("CUDA_VISIBLE_DEVICES"),
        };
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.contains("{\""))
            .expect("a JSON line");
        serde_json::from_str(&line[line.find('{').unwrap()..]).unwrap()
    };
    let all = see(None);
    assert_eq!(all["count"], 6);
    assert_eq!(all["bus"][3], "0000:13:00.0");
    assert_eq!(all["by_bus_0000_11"], serde_json::json!([0, 1]));
    let uuid = |v: &Value, i: usize| v["uuid"][i].as_str().unwrap().to_owned();
    let two = see(Some("4,1"));
    assert_eq!(two["count"], 2);
    assert_eq!(
        two["bus"],
        serde_json::json!(["0000:14:00.0", "0000:11:00.0"])
    );
    assert_eq!(
        (uuid(&two, 0), uuid(&two, 1)),
        (uuid(&all, 4), uuid(&all, 1))
    );
    assert_eq!(two["by_bus_0000_11"], serde_json::json!([0, 1]));
    // By UUID (a prefix of it, as nvidia-smi prints it), then an invalid entry ends the list.
    let u5 = uuid(&all, 5);
    let text = format!("GPU-{}-{},2,9,0", &u5[..8], &u5[8..10]);
    let by_uuid = see(Some(&text));
    assert_eq!(
        by_uuid["bus"],
        serde_json::json!(["0000:15:00.0", "0000:12:00.0"])
    );
    // Bus 0x11 is not visible: CUDA_ERROR_INVALID_VALUE.
    assert_eq!(by_uuid["by_bus_0000_11"][0], 1);
    assert_eq!(
        see(Some(""))["init"],
        100,
        "no device visible: CUDA_ERROR_NO_DEVICE"
    );
    let truth = trace_lines(&sb.trace());
    let devs: Vec<(u64, String)> = truth
        .iter()
        .filter(|l| l["kernel"] == "on_ordinal_0")
        .map(|l| {
            (
                l["device"].as_u64().unwrap(),
                l["bus_id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        devs,
        vec![
            (0, "0000:10:00.0".to_owned()),
            (4, "0000:14:00.0".to_owned()),
            (5, "0000:15:00.0".to_owned())
        ]
    );
}

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
fn pitched_managed_pool_and_virtual_memory_as_the_real_driver() {
    let sb = Sandbox::new("mempaths");
    sb.run("memory_paths", &[("FREERIDE_SIM_MEM_MIB", "1024")]);
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
