//! Devices, initialization and exports of the stand-in driver: CUDA_VISIBLE_DEVICES, cuInit
//! and what cuGetProcAddress_v2 hands out.
#[macro_use]
mod common;

use common::*;
use serde_json::Value;
use std::ffi::c_char;
use std::process::Command;

// ---------------------------------------------------------------- child scenarios

child_scenarios! {
    "not_init" => scenario_not_init,
    "visible" => scenario_visible,
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
