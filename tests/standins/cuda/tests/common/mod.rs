//! Shared by the stand-in driver's integration tests: the built libcuda.so
//! (target/<profile>/libcuda.so), loaded with dlopen and used only through cuGetProcAddress_v2
//! pointers, like the other stand-ins do. Scenarios that depend on the environment (sim dir, mode,
//! trace) run in a child process: the test binary re-run with `SIMTEST_SCENARIO` set, whose
//! `child` test runs the scenarios of that test file.
#![allow(dead_code)]
use serde_json::Value;
use std::ffi::{c_char, c_void, CString};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub type P = *mut c_void;
type GetProc = unsafe extern "C" fn(*const c_char, *mut P, i32, u64, *mut i32) -> i32;

fn target_dir() -> PathBuf {
    // target/<profile>/deps/<test>-<hash>
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

pub fn lib_path() -> PathBuf {
    let p = target_dir().join("libcuda.so");
    assert!(
        p.exists(),
        "{} missing: cargo build --release -p standin-cuda",
        p.display()
    );
    p
}

pub struct Cu {
    handle: P,
    get: GetProc,
}

impl Cu {
    pub fn load() -> Cu {
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
    pub fn proc(&self, name: &str, version: i32, flags: u64) -> (usize, i32, i32) {
        let c = CString::new(name).unwrap();
        let mut p: P = std::ptr::null_mut();
        let mut st = -1;
        // SAFETY: valid C string and out-pointers.
        let r = unsafe { (self.get)(c.as_ptr(), &mut p, version, flags, &mut st) };
        (p as usize, st, r)
    }

    pub fn dlsym(&self, name: &str) -> usize {
        let c = CString::new(name).unwrap();
        // SAFETY: live handle, valid C string.
        unsafe { libc::dlsym(self.handle, c.as_ptr()) as usize }
    }
}

/// The test each file's child processes run (`SIMTEST_SCENARIO` names the scenario; without it
/// the test does nothing): `child_scenarios! { "name" => scenario_fn, ... }`.
macro_rules! child_scenarios {
    ($($name:literal => $f:ident),* $(,)?) => {
        #[test]
        fn child() {
            let Ok(s) = std::env::var("SIMTEST_SCENARIO") else {
                return;
            };
            match s.as_str() {
                $($name => $f(),)*
                other => panic!("unknown scenario {other}"),
            }
        }
    };
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
pub struct Api {
    pub init: unsafe extern "C" fn(u32) -> i32,
    pub device_get_count: unsafe extern "C" fn(*mut i32) -> i32,
    pub ctx_synchronize: unsafe extern "C" fn(P) -> i32,
    pub module_load_data: unsafe extern "C" fn(*mut P, *const c_void) -> i32,
    pub module_get_function: unsafe extern "C" fn(*mut P, P, *const c_char) -> i32,
    pub stream_create: unsafe extern "C" fn(*mut P, u32) -> i32,
    pub stream_synchronize: unsafe extern "C" fn(P) -> i32,
    pub stream_query: unsafe extern "C" fn(P) -> i32,
    pub stream_wait_event: unsafe extern "C" fn(P, P, u32) -> i32,
    pub event_create: unsafe extern "C" fn(*mut P, u32) -> i32,
    pub event_record: unsafe extern "C" fn(P, P) -> i32,
    pub event_query: unsafe extern "C" fn(P) -> i32,
    pub event_synchronize: unsafe extern "C" fn(P) -> i32,
    pub event_elapsed: unsafe extern "C" fn(*mut f32, P, P) -> i32,
    pub launch:
        unsafe extern "C" fn(P, u32, u32, u32, u32, u32, u32, u32, P, *mut P, *mut P) -> i32,
    pub launch_ex: unsafe extern "C" fn(*const LaunchConfig, P, *mut P, *mut P) -> i32,
    pub launch_coop: unsafe extern "C" fn(P, u32, u32, u32, u32, u32, u32, u32, P, *mut P) -> i32,
    pub graph_create: unsafe extern "C" fn(*mut P, u32) -> i32,
    pub graph_add_kernel_node:
        unsafe extern "C" fn(*mut P, P, *const P, usize, *const NodeParams) -> i32,
    pub graph_instantiate: unsafe extern "C" fn(*mut P, P, u64) -> i32,
    pub graph_launch: unsafe extern "C" fn(P, P) -> i32,
    pub mem_alloc: unsafe extern "C" fn(*mut u64, usize) -> i32,
    pub mem_free: unsafe extern "C" fn(u64) -> i32,
    pub mem_get_info: unsafe extern "C" fn(*mut usize, *mut usize) -> i32,
    pub launch_host_func: unsafe extern "C" fn(P, Option<unsafe extern "C" fn(P)>, P) -> i32,
}

#[repr(C)]
pub struct LaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub smem: u32,
    pub stream: P,
    pub attrs: P,
    pub num_attrs: u32,
}

#[repr(C)]
pub struct NodeParams {
    pub func: P,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub smem: u32,
    pub params: *mut P,
    pub extra: *mut P,
    pub kern: P,
    pub ctx: P,
}

impl Api {
    pub fn load(cu: &Cu) -> Api {
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
pub struct Drv {
    pub api: Api,
    pub module: P,
}

macro_rules! ok {
    ($e:expr) => {{
        // SAFETY: driver calls with valid arguments (checked by the scenario's logic).
        let r = unsafe { $e };
        assert_eq!(r, 0, "{}", stringify!($e));
    }};
}

impl Drv {
    pub fn new() -> Drv {
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

    pub fn func(&self, name: &str) -> P {
        let c = CString::new(name).unwrap();
        let mut f = std::ptr::null_mut();
        ok!((self.api.module_get_function)(
            &mut f,
            self.module,
            c.as_ptr()
        ));
        f
    }

    pub fn stream(&self) -> P {
        let mut s = std::ptr::null_mut();
        ok!((self.api.stream_create)(&mut s, 0));
        s
    }

    pub fn event(&self) -> P {
        let mut e = std::ptr::null_mut();
        ok!((self.api.event_create)(&mut e, 0));
        e
    }

    /// Launches kernel `name` for `ns` on `stream` (cuLaunchKernel); a comm kernel gets no
    /// `DeviceWork` (it runs for `ns`).
    pub fn launch(&self, name: &str, ns: u64, stream: P) {
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

pub fn trace_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("trace line is JSON"))
        .collect()
}

pub fn find<'a>(lines: &'a [Value], kernel: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["kernel"] == kernel)
        .unwrap_or_else(|| panic!("no {kernel} in trace: {lines:?}"))
}

pub fn span(l: &Value) -> (u64, u64) {
    (
        l["start_ns"].as_u64().unwrap(),
        l["end_ns"].as_u64().unwrap(),
    )
}

pub fn overlap(a: &Value, b: &Value) -> bool {
    let ((a0, a1), (b0, b1)) = (span(a), span(b));
    a0 < b1 && b0 < a1
}

/// A fresh simulation folder and trace file, removed on drop.
pub struct Sandbox {
    pub dir: PathBuf,
}

impl Sandbox {
    pub fn new(name: &str) -> Sandbox {
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
    pub fn sim(&self) -> String {
        self.dir.join("sim").to_str().unwrap().to_owned()
    }
    pub fn trace(&self) -> PathBuf {
        self.dir.join("trace.jsonl")
    }
    pub fn cmd(&self, scenario: &str, env: &[(&str, &str)]) -> Command {
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
    pub fn run(&self, scenario: &str, env: &[(&str, &str)]) {
        let out = self.cmd(scenario, env).output().unwrap();
        assert!(
            out.status.success(),
            "scenario {scenario} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    pub fn spawn(&self, scenario: &str, env: &[(&str, &str)]) -> Child {
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
pub fn wait_line(child: &mut Child, line: &str) {
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

/// Per (pid, stream): the truth lines in order never go back in time and never start before
/// they were queued.
pub fn check_streams_monotonic(t: &[Value]) {
    let mut last: std::collections::HashMap<(u64, u64), u64> = Default::default();
    for l in t {
        let (q, (s, e)) = (l["queued_ns"].as_u64().unwrap(), span(l));
        assert!(q <= s && s <= e, "{l}");
        let key = (l["pid"].as_u64().unwrap(), l["stream"].as_u64().unwrap());
        let prev = last.insert(key, e).unwrap_or(0);
        assert!(prev <= s, "stream went back in time at {l}");
    }
}

/// Holds 800 MiB and the compute slot, then sleeps for a minute (until the test kills it).
pub fn scenario_mem_hold() {
    let d = Drv::new();
    let mut a = 0u64;
    ok!((d.api.mem_alloc)(&mut a, 800 << 20));
    // Also hold the compute slot for a long time.
    d.launch("hog", 60_000_000_000, std::ptr::null_mut());
    std::thread::sleep(Duration::from_millis(50));
    println!("held");
    std::thread::sleep(Duration::from_secs(60));
}
