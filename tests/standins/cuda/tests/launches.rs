//! The launch APIs of the stand-in driver (cuLaunchKernel, its Ex and cooperative forms,
//! communication kernels, graphs) and the truth lines they write.
#[macro_use]
mod common;

use common::*;
use serde_json::Value;
use std::ffi::c_void;

// ---------------------------------------------------------------- child scenarios

child_scenarios! {
    "all_apis" => scenario_all_apis,
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

// ---------------------------------------------------------------- tests

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

fn out_pid(t: &[Value]) -> u32 {
    t[0]["pid"].as_u64().unwrap() as u32
}
