//! Tests of the built libcudart.so over the built libcuda.so (target/<profile>/), in a child
//! process whose LD_LIBRARY_PATH finds `libcuda.so.1` (a symlink in a fresh folder).
use serde_json::Value;
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::PathBuf;
use std::process::Command;

type P = *mut c_void;

#[repr(C)]
#[derive(Clone, Copy)]
struct Dim3 {
    x: u32,
    y: u32,
    z: u32,
}
const ONE: Dim3 = Dim3 { x: 1, y: 1, z: 1 };

#[repr(C)]
struct LaunchConfig {
    grid: Dim3,
    block: Dim3,
    smem: usize,
    stream: P,
    attrs: P,
    num_attrs: u32,
}

#[repr(C)]
struct KernelNodeParams {
    func: P,
    grid: Dim3,
    block: Dim3,
    smem: u32,
    params: *mut P,
    extra: *mut P,
}

fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

fn built(name: &str, package: &str) -> PathBuf {
    let p = target_dir().join(name);
    if !p.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .args(["build", "--release", "-p", package])
            .status()
            .unwrap();
        assert!(st.success());
    }
    assert!(p.exists(), "{} missing", p.display());
    p
}

struct Sandbox {
    dir: PathBuf,
}

impl Sandbox {
    fn new(name: &str) -> Sandbox {
        let dir = PathBuf::from(format!(
            "/dev/shm/freeride-test-cudart-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        std::os::unix::fs::symlink(
            built("libcuda.so", "standin-cuda"),
            dir.join("lib/libcuda.so.1"),
        )
        .unwrap();
        Sandbox { dir }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

macro_rules! sym {
    ($h:expr, $name:literal, fn($($a:ty),*) -> $r:ty) => {{
        // SAFETY: live handle, constant name.
        let p = unsafe { libc::dlsym($h, concat!($name, "\0").as_ptr().cast()) };
        assert!(!p.is_null(), "{}", $name);
        // SAFETY: the symbol has this C signature (cuda_runtime_api.h).
        unsafe { std::mem::transmute::<P, unsafe extern "C" fn($($a),*) -> $r>(p) }
    }};
}

macro_rules! ok {
    ($e:expr) => {{
        // SAFETY: runtime calls with valid arguments.
        let r = unsafe { $e };
        assert_eq!(r, 0, "{}", stringify!($e));
    }};
}

static STUB_A: u8 = 0;
static STUB_B: u8 = 0;
static STUB_UNREGISTERED: u8 = 0;

fn scenario() {
    let path = CString::new(built("libcudart.so", "standin-cudart").to_str().unwrap()).unwrap();
    // SAFETY: dlopen of the stand-in runtime.
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null());
    let reg_fat = sym!(h, "__cudaRegisterFatBinary", fn(P) -> *mut P);
    let reg_end = sym!(h, "__cudaRegisterFatBinaryEnd", fn(*mut P) -> ());
    let reg_fn = sym!(
        h,
        "__cudaRegisterFunction",
        fn(*mut P, *const c_char, *mut c_char, *const c_char, i32, P, P, P, P, *mut i32) -> ()
    );
    let push = sym!(
        h,
        "__cudaPushCallConfiguration",
        fn(Dim3, Dim3, usize, P) -> u32
    );
    let pop = sym!(
        h,
        "__cudaPopCallConfiguration",
        fn(*mut Dim3, *mut Dim3, *mut usize, *mut P) -> i32
    );
    let launch = sym!(
        h,
        "cudaLaunchKernel",
        fn(*const c_void, Dim3, Dim3, *mut P, usize, P) -> i32
    );
    let launch_ex = sym!(
        h,
        "cudaLaunchKernelExC",
        fn(*const LaunchConfig, *const c_void, *mut P) -> i32
    );
    let set_device = sym!(h, "cudaSetDevice", fn(i32) -> i32);
    let get_device = sym!(h, "cudaGetDevice", fn(*mut i32) -> i32);
    let count = sym!(h, "cudaGetDeviceCount", fn(*mut i32) -> i32);
    let dev_sync = sym!(h, "cudaDeviceSynchronize", fn() -> i32);
    let stream_create = sym!(h, "cudaStreamCreate", fn(*mut P) -> i32);
    let stream_query = sym!(h, "cudaStreamQuery", fn(P) -> i32);
    let stream_sync = sym!(h, "cudaStreamSynchronize", fn(P) -> i32);
    let event_create = sym!(h, "cudaEventCreate", fn(*mut P) -> i32);
    let event_record = sym!(h, "cudaEventRecord", fn(P, P) -> i32);
    let event_sync = sym!(h, "cudaEventSynchronize", fn(P) -> i32);
    let elapsed = sym!(h, "cudaEventElapsedTime", fn(*mut f32, P, P) -> i32);
    let malloc = sym!(h, "cudaMalloc", fn(*mut P, usize) -> i32);
    let free = sym!(h, "cudaFree", fn(P) -> i32);
    let mem_info = sym!(h, "cudaMemGetInfo", fn(*mut usize, *mut usize) -> i32);
    let last_error = sym!(h, "cudaGetLastError", fn() -> i32);
    let err_name = sym!(h, "cudaGetErrorName", fn(i32) -> *const c_char);
    let graph_create = sym!(h, "cudaGraphCreate", fn(*mut P, u32) -> i32);
    let graph_add = sym!(
        h,
        "cudaGraphAddKernelNode",
        fn(*mut P, P, *const P, usize, *const KernelNodeParams) -> i32
    );
    let graph_inst = sym!(h, "cudaGraphInstantiate", fn(*mut P, P, u64) -> i32);
    let graph_launch = sym!(h, "cudaGraphLaunch", fn(P, P) -> i32);
    let entry = sym!(
        h,
        "cudaGetDriverEntryPoint",
        fn(*const c_char, *mut P, u64, *mut i32) -> i32
    );
    let rt_version = sym!(h, "cudaRuntimeGetVersion", fn(*mut i32) -> i32);
    let drv_version = sym!(h, "cudaDriverGetVersion", fn(*mut i32) -> i32);

    // nvcc-style registration.
    // SAFETY: registration calls with valid, process-lifetime arguments.
    let fat = unsafe { reg_fat(std::ptr::null_mut()) };
    let null = std::ptr::null_mut();
    // SAFETY: as above.
    unsafe {
        reg_fn(
            fat,
            (&STUB_A as *const u8).cast(),
            c"fwd_gemm".as_ptr() as *mut c_char,
            c"fwd_gemm".as_ptr(),
            -1,
            null,
            null,
            null,
            null,
            std::ptr::null_mut(),
        );
        reg_fn(
            fat,
            (&STUB_B as *const u8).cast(),
            c"bwd_gemm".as_ptr() as *mut c_char,
            c"bwd_gemm".as_ptr(),
            -1,
            null,
            null,
            null,
            null,
            std::ptr::null_mut(),
        );
        reg_end(fat);
    }
    let (mut v, mut n) = (0, 0);
    ok!(rt_version(&mut v));
    assert_eq!(v, 13000);
    ok!(drv_version(&mut v));
    assert_eq!(v, 13000);
    ok!(count(&mut n));
    assert_eq!(n, 2);

    // <<<...>>>: push, pop, launch.
    let mut s: P = null;
    ok!(stream_create(&mut s));
    // SAFETY: valid by-value arguments.
    assert_eq!(unsafe { push(Dim3 { x: 4, y: 1, z: 1 }, ONE, 0, s) }, 0);
    let (mut g, mut b, mut sm, mut st) = (ONE, ONE, 1usize, null);
    ok!(pop(&mut g, &mut b, &mut sm, &mut st));
    assert_eq!((g.x, sm, st), (4, 0, s));
    let mut ns = 100_000_000u64;
    let mut args: [P; 1] = [(&mut ns as *mut u64).cast()];
    let (mut e0, mut e1) = (null, null);
    ok!(event_create(&mut e0));
    ok!(event_create(&mut e1));
    ok!(event_record(e0, s));
    ok!(launch(
        (&STUB_A as *const u8).cast(),
        g,
        b,
        args.as_mut_ptr(),
        0,
        s
    ));
    ok!(event_record(e1, s));
    // SAFETY: valid stream.
    assert_eq!(unsafe { stream_query(s) }, 600);
    // SAFETY: no arguments.
    assert_eq!(unsafe { last_error() }, 0, "not-ready is no error");
    ok!(event_sync(e1));
    let mut ms = 0f32;
    ok!(elapsed(&mut ms, e0, e1));
    assert!((100.0..2000.0).contains(&ms), "{ms}");

    // ExC and an unregistered stub.
    let cfg = LaunchConfig {
        grid: ONE,
        block: ONE,
        smem: 0,
        stream: s,
        attrs: null,
        num_attrs: 0,
    };
    ok!(launch_ex(
        &cfg,
        (&STUB_B as *const u8).cast(),
        args.as_mut_ptr()
    ));
    let mut short = 1_000u64;
    let mut args: [P; 1] = [(&mut short as *mut u64).cast()];
    ok!(launch(
        (&STUB_UNREGISTERED as *const u8).cast(),
        ONE,
        ONE,
        args.as_mut_ptr(),
        0,
        s
    ));

    // A graph.
    let (mut graph, mut node, mut exec) = (null, null, null);
    ok!(graph_create(&mut graph, 0));
    let np = KernelNodeParams {
        func: (&STUB_A as *const u8) as P,
        grid: ONE,
        block: ONE,
        smem: 0,
        params: args.as_mut_ptr(),
        extra: std::ptr::null_mut(),
    };
    ok!(graph_add(&mut node, graph, std::ptr::null(), 0, &np));
    ok!(graph_inst(&mut exec, graph, 0));
    ok!(graph_launch(exec, s));
    ok!(stream_sync(s));

    // Device 1.
    ok!(set_device(1));
    let mut d = -1;
    ok!(get_device(&mut d));
    assert_eq!(d, 1);
    ok!(launch(
        (&STUB_B as *const u8).cast(),
        ONE,
        ONE,
        args.as_mut_ptr(),
        0,
        null
    ));
    ok!(dev_sync());
    // SAFETY: an invalid device is an error, recorded as the last error.
    assert_eq!(unsafe { set_device(7) }, 101);
    // SAFETY: no arguments / static string result.
    assert_eq!(unsafe { last_error() }, 101);
    // SAFETY: as above.
    assert_eq!(unsafe { last_error() }, 0);
    // SAFETY: static string result.
    assert_eq!(
        unsafe { CStr::from_ptr(err_name(600)) }.to_str().unwrap(),
        "cudaErrorNotReady"
    );

    // Memory.
    let (mut f0, mut t) = (0usize, 0usize);
    ok!(mem_info(&mut f0, &mut t));
    assert_eq!(t, 512 << 20);
    let mut p: P = null;
    ok!(malloc(&mut p, 100 << 20));
    let mut f1 = 0usize;
    ok!(mem_info(&mut f1, &mut t));
    assert_eq!(f0 - f1, 100 << 20);
    let mut q: P = null;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { malloc(&mut q, 500 << 20) }, 2);
    ok!(free(p));
    ok!(free(null));
    // The other allocation calls reach the driver's (pitched, managed, stream-ordered, pools).
    let used = || {
        let (mut f, mut t) = (0usize, 0usize);
        ok!(mem_info(&mut f, &mut t));
        (t - f) >> 20
    };
    let base = used();
    let malloc_pitch = sym!(
        h,
        "cudaMallocPitch",
        fn(*mut P, *mut usize, usize, usize) -> i32
    );
    let malloc_managed = sym!(h, "cudaMallocManaged", fn(*mut P, usize, u32) -> i32);
    let malloc_async = sym!(h, "cudaMallocAsync", fn(*mut P, usize, P) -> i32);
    let malloc_pool = sym!(h, "cudaMallocFromPoolAsync", fn(*mut P, usize, P, P) -> i32);
    let free_async = sym!(h, "cudaFreeAsync", fn(P, P) -> i32);
    let default_pool = sym!(h, "cudaDeviceGetDefaultMemPool", fn(*mut P, i32) -> i32);
    let mut pitch = 0usize;
    ok!(malloc_pitch(&mut p, &mut pitch, 1000, 2048));
    assert_eq!((pitch, used() - base), (1024, 2));
    ok!(free(p));
    ok!(malloc_managed(&mut p, 16 << 20, 1));
    assert_eq!(used() - base, 16);
    ok!(free(p));
    // On the current device (1): its default stream; `s` is a stream of device 0.
    ok!(malloc_async(&mut p, 32 << 20, null));
    assert_eq!(used() - base, 32);
    ok!(free_async(p, null));
    ok!(dev_sync());
    assert_eq!(used(), base);
    ok!(malloc_async(&mut p, 32 << 20, s));
    assert_eq!(used(), base, "from the pool of the stream's device");
    ok!(free_async(p, s));
    let mut pool: P = null;
    ok!(default_pool(&mut pool, 1));
    ok!(malloc_pool(&mut p, 8 << 20, pool, s));
    assert_eq!(
        used() - base,
        8,
        "a pool of device 1 on a stream of device 0"
    );
    ok!(free_async(p, s));
    ok!(stream_sync(s));
    assert_eq!(used(), base);

    // Driver entry points come from the driver's cuGetProcAddress_v2.
    let mut fp: P = null;
    let mut status = -1;
    ok!(entry(c"cuLaunchKernel".as_ptr(), &mut fp, 0, &mut status));
    assert!(!fp.is_null());
    assert_eq!(status, 0);
    ok!(entry(c"cuNoSuchThing".as_ptr(), &mut fp, 0, &mut status));
    assert_eq!(status, 1);
}

#[test]
fn child() {
    if std::env::var_os("SIMTEST_SCENARIO").is_some() {
        scenario();
    }
}

#[test]
fn runtime_launches_reach_the_driver() {
    let sb = Sandbox::new("rt");
    let trace = sb.dir.join("trace.jsonl");
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env("SIMTEST_SCENARIO", "1")
        .env("LD_LIBRARY_PATH", sb.dir.join("lib"))
        .env("FREERIDE_SIM_DIR", sb.dir.join("sim"))
        .env("FREERIDE_SIM_TRACE", &trace)
        .env("FREERIDE_SIM_DEVICES", "2")
        .env("FREERIDE_SIM_MEM_MIB", "512")
        .env_remove("FREERIDE_SIM_MODE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let got: Vec<(String, String, bool, i64)> = lines
        .iter()
        .map(|l| {
            (
                l["kernel"].as_str().unwrap().to_owned(),
                l["api"].as_str().unwrap().to_owned(),
                l["graph"].as_bool().unwrap(),
                l["device"].as_i64().unwrap(),
            )
        })
        .collect();
    let unreg = format!("kernel_0x{:x}", &STUB_UNREGISTERED as *const u8 as usize);
    // (The child's stub address differs under ASLR: only the name's form is checked.)
    assert_eq!(got.len(), 5, "{got:?}");
    assert_eq!(
        got[0],
        ("fwd_gemm".into(), "cuLaunchKernel".into(), false, 0)
    );
    assert_eq!(
        got[1],
        ("bwd_gemm".into(), "cuLaunchKernelEx".into(), false, 0)
    );
    assert!(
        got[2].0.starts_with("kernel_0x") && unreg.starts_with("kernel_0x"),
        "{got:?}"
    );
    assert_eq!(got[2].1, "cuLaunchKernel");
    assert_eq!(got[3], ("fwd_gemm".into(), "cuGraphLaunch".into(), true, 0));
    assert_eq!(
        got[4],
        ("bwd_gemm".into(), "cuLaunchKernel".into(), false, 1)
    );
}

#[test]
fn exports_are_versioned_and_driver_is_not_linked() {
    let lib = built("libcudart.so", "standin-cudart");
    let nm = |args: &[&str]| {
        let o = Command::new("nm")
            .args(args)
            .arg(&lib)
            .output()
            .expect("nm");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let defined = nm(&["-D", "--defined-only"]);
    let exports: Vec<&str> = defined
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|s| s.starts_with("cuda") || s.starts_with("__cuda"))
        .collect();
    for want in [
        "__cudaRegisterFatBinary",
        "__cudaRegisterFunction",
        "__cudaLaunchKernel",
        "__cudaLaunchKernel_ptsz",
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaGraphInstantiate",
        "cudaGetDriverEntryPointByVersion",
        "cudaStreamWaitEvent",
    ] {
        let v = format!("{want}@@libcudart.so.13");
        assert!(
            exports.contains(&v.as_str()),
            "{v} not exported: {exports:?}"
        );
    }
    assert!(exports.iter().all(|e| e.ends_with("@@libcudart.so.13")));
    let undefined = nm(&["-D", "--undefined-only"]);
    let cu: Vec<&str> = undefined
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|s| s.starts_with("cu"))
        .collect();
    assert!(cu.is_empty(), "libcudart imports {cu:?}");
    let o = Command::new("readelf")
        .arg("-d")
        .arg(&lib)
        .output()
        .expect("readelf");
    let dynamic = String::from_utf8_lossy(&o.stdout);
    let needed: Vec<&str> = dynamic.lines().filter(|l| l.contains("(NEEDED)")).collect();
    assert!(
        needed.iter().all(|l| !l.contains("libcuda.so")),
        "{needed:?}"
    );
    assert!(dynamic.contains("[libcudart.so.13]"));
}
