//! The product reads a ground truth's kernels from the documented format (agent/src/
//! truth_kernels.rs, for `freeride report --truth`) without linking pipesim: it reads what
//! pipesim writes and reads, line for line.
use freeride_agent::truth_kernels;
use pipesim::truth::{KernelRecord, MarkRecord, Trace};

#[test]
fn the_product_reads_the_kernels_pipesim_reads() {
    let kernel = |pid, kind: &str, api: &str, transfer| KernelRecord {
        device: 3,
        bus_id: "0000:13:00.0".into(),
        pid,
        stream: 7,
        kernel: format!("{kind}_kernel"),
        kind: kind.into(),
        api: api.into(),
        graph: false,
        queued_ns: 90,
        start_ns: 100 + pid as u64,
        end_ns: 200 + pid as u64,
        transfer_start_ns: transfer,
        eager_end_ns: None,
        mid_start_ns: None,
        mid_end_ns: None,
    };
    let kernels = [
        kernel(11, "compute", "cuLaunchKernel", None),
        kernel(12, "comm", "cuLaunchKernelEx", Some(150)),
        kernel(13, "compute", "", None),
    ];
    let mark = MarkRecord {
        mark: "iteration".into(),
        pid: 11,
        rank: 0,
        bus_id: "0000:13:00.0".into(),
        iteration: 0,
        t_ns: 300,
    };
    let mut text = String::new();
    for k in &kernels {
        text += &serde_json::to_string(k).unwrap();
        text += "\n";
    }
    text += &serde_json::to_string(&mark).unwrap();
    text += "\nnot a line of the truth\n";
    let theirs = Trace::parse(&text);
    let (ours, bad) = truth_kernels::parse(&text);
    assert_eq!((theirs.kernels.len(), theirs.marks.len()), (3, 1));
    assert_eq!(bad, theirs.bad);
    assert_eq!(ours.len(), theirs.kernels.len());
    for (o, t) in ours.iter().zip(&theirs.kernels) {
        assert_eq!(
            (o.device, o.pid, &o.kernel, &o.kind, &o.api, o.start_ns, o.end_ns),
            (t.device, t.pid, &t.kernel, &t.kind, &t.api, t.start_ns, t.end_ns)
        );
        assert_eq!(o.is_compute(), t.is_compute());
    }
}
