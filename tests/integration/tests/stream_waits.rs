//! GPUs by identity and which stream waits for what, from a real program under the preload on the
//! stand-ins: one process on two GPUs it sees as ordinals 0 and 1 of `CUDA_VISIBLE_DEVICES=3,1`
//! (per-rank visible devices), all-reducing between them as PyTorch's ProcessGroupNCCL does (a
//! comm stream per GPU; the compute stream waits for an event recorded on it after the op).
//! `tests/cprogs/stream_waits.c`; the records are read from the `FREERIDE_TRACE` lines.
use freeride_tests::gatebed::Bed;
use freeride_tests::gpu;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::OnceLock;

const ROUNDS: usize = 4;

fn run() -> Vec<Value> {
    run_with(&[], &[])
}

/// The program's run (`args` after the round count), its records. Each all-reduce's transfer
/// takes about 25 ms, so that it is still in flight when the program queues the wait for it even
/// when the program is descheduled meanwhile (5 ms was not always enough with every test of the
/// workspace running on two cores).
fn run_with(args: &[&str], extra: &[(&str, &str)]) -> Vec<Value> {
    // Compiled once per test binary (its tests run in parallel).
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    let bin = BIN.get_or_init(|| freeride_tests::cprog("stream_waits", &["-lcudart", "-lnccl"]));
    let bed = Bed::new("stream-waits");
    let trace = bed.root.join("trace.jsonl");
    let mut env = vec![
        ("FREERIDE_SIM_DEVICES", "4"),
        ("CUDA_VISIBLE_DEVICES", "3,1"),
        ("FREERIDE_TRACE", trace.to_str().unwrap()),
        ("FREERIDE_SIM_NCCL_PS_PER_BYTE", "100000"),
    ];
    env.extend_from_slice(extra);
    let out = bed
        .cmd(
            bin,
            "trainer",
            &[&[ROUNDS.to_string().as_str()], args].concat(),
            &env,
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("OK"), "{stdout}");
    std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn kind<'a>(ev: &'a [Value], k: &'static str) -> impl Iterator<Item = (usize, &'a Value)> + 'a {
    ev.iter().enumerate().filter(move |(_, e)| e["kind"] == k)
}

#[test]
fn records_name_the_physical_gpu_and_waits_follow_their_records() {
    let ev = run();
    // Ordinal 0 is physical GPU 3, ordinal 1 physical GPU 1: by bus id, whatever the ordinals.
    let (g0, g1) = (gpu(3).to_string(), gpu(1).to_string());
    let infos: HashMap<i64, String> = kind(&ev, "device_info")
        .map(|(_, e)| {
            assert!(
                !e["uuid"].as_str().unwrap().starts_with("GPU-00000000-0000"),
                "{e}"
            );
            (
                e["ordinal"].as_i64().unwrap(),
                e["device"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        infos,
        HashMap::from([(0, g0.clone()), (1, g1.clone())]),
        "one device_info per GPU"
    );
    assert_eq!(kind(&ev, "device_info").count(), 2);
    let named: HashSet<&str> = ev.iter().filter_map(|e| e["device"].as_str()).collect();
    assert_eq!(named, HashSet::from([g0.as_str(), g1.as_str()]));
    // A GPU is introduced before any other record names it.
    for g in [&g0, &g1] {
        let first = ev.iter().position(|e| e["device"] == g.as_str()).unwrap();
        assert_eq!(ev[first]["kind"], "device_info", "{}", ev[first]);
    }

    // The comm stream of each GPU: where its all-reduces go (the record names the
    // communicator's GPU, though one thread queues both).
    let mut comm_stream: HashMap<String, u64> = HashMap::new();
    let mut groups = vec![];
    for (_, e) in kind(&ev, "comm") {
        let dev = e["device"].as_str().unwrap().to_string();
        let s = e["stream"].as_u64().unwrap();
        assert_eq!(*comm_stream.entry(dev).or_insert(s), s);
        groups.push(e["group"].as_u64().unwrap());
    }
    assert_eq!(comm_stream.len(), 2, "{comm_stream:?}");
    assert_eq!(groups.len(), 2 * ROUNDS);
    // Each group's work on each GPU's stream is timed in that GPU's context (a pool per context),
    // never left pending.
    assert_eq!(kind(&ev, "comm_untimed").count(), 0);
    for k in ["comm_begin", "comm_end"] {
        let mut per: HashMap<(String, u64), usize> = HashMap::new();
        for (_, e) in kind(&ev, k) {
            let dev = e["device"].as_str().unwrap().to_string();
            assert_eq!(
                e["stream"].as_u64(),
                comm_stream.get(&dev).copied(),
                "{k} on the other GPU's stream: {e}"
            );
            *per.entry((dev, e["group"].as_u64().unwrap())).or_default() += 1;
        }
        assert_eq!(per.len(), 2 * ROUNDS, "{k}: {per:?}");
        assert!(per.values().all(|&n| n == 1));
    }

    // Per GPU and round: the comm stream's event recorded after the round's group, then the
    // compute stream made to wait for it (timed), then the compute stream's event recorded and
    // the comm stream made to wait for it (no communication before: untimed).
    // (NCCL's own records and waits, inside its calls, are not the program's.)
    let ours = |e: &&(usize, &Value)| e.1["in_comm"] == false;
    let records: Vec<(usize, &Value)> = kind(&ev, "event_record").filter(|e| ours(&e)).collect();
    let waits: Vec<(usize, &Value)> = kind(&ev, "stream_wait").filter(|e| ours(&e)).collect();
    assert_eq!(records.len(), 4 * ROUNDS);
    assert_eq!(waits.len(), 4 * ROUNDS);
    let mut timed = vec![];
    for (i, w) in &waits {
        let (j, r) = records
            .iter()
            .rev()
            .find(|(j, r)| j < i && r["event"] == w["event"])
            .unwrap_or_else(|| panic!("a wait before any record of its event: {w}"));
        assert_eq!(r["device"], w["device"]);
        assert!(j < i);
        let dev = w["device"].as_str().unwrap();
        let comm = comm_stream[dev];
        if r["stream"].as_u64() == Some(comm) {
            // After the group: its op key is the group's.
            let key = r["op_key"].as_u64().unwrap();
            assert!(key != 0 && groups.contains(&(key >> 32)), "{r}");
            assert_eq!(w["op_key"], r["op_key"], "{w}");
            assert_ne!(w["stream"].as_u64(), Some(comm));
            let id = w["wait"].as_u64().unwrap();
            assert_ne!(id, 0, "a wait on communication is timed: {w}");
            timed.push((*i, id, dev.to_string()));
        } else {
            assert_eq!(r["op_key"], 0, "{r}");
            assert_eq!(w["stream"].as_u64(), Some(comm));
            assert_eq!(
                (w["op_key"].as_u64(), w["wait"].as_u64()),
                (Some(0), Some(0))
            );
        }
    }
    assert_eq!(timed.len(), 2 * ROUNDS);
    // Every timed wait reached, then released, on its GPU, after it was queued.
    for (i, id, dev) in timed {
        let find = |k: &'static str| {
            kind(&ev, k)
                .find(|(_, e)| e["wait"].as_u64() == Some(id))
                .unwrap_or_else(|| panic!("no {k} for wait {id}"))
        };
        assert!(kind(&ev, "wait_untimed").all(|(_, e)| e["wait"].as_u64() != Some(id)));
        let ((bi, b), (ei, e)) = (find("wait_begin"), find("wait_end"));
        assert!(i < bi && bi < ei, "wait {id}: record order");
        assert_eq!(
            (b["device"].as_str(), e["device"].as_str()),
            (Some(dev.as_str()), Some(dev.as_str()))
        );
        let (tb, te) = (b["t_ns"].as_u64().unwrap(), e["t_ns"].as_u64().unwrap());
        assert!(tb <= te, "wait {id}: released before reached");
        assert!(b["queued_ns"].as_u64().unwrap() <= te);
    }
}

/// Checks that the program's waits were all recorded, those on communication with the op they
/// follow, and none timed (`why`: what the message says of them), while its comm ops were timed.
fn none_timed(ev: &[Value], why: &str) {
    let waits: Vec<&Value> = ev
        .iter()
        .filter(|e| e["kind"] == "stream_wait" && e["in_comm"] == false)
        .collect();
    assert_eq!(waits.len(), 4 * ROUNDS);
    assert_eq!(
        waits.iter().filter(|w| w["op_key"] != 0).count(),
        2 * ROUNDS,
        "{waits:?}"
    );
    assert!(waits.iter().all(|w| w["wait"] == 0), "{waits:?}");
    for k in ["wait_begin", "wait_end", "wait_untimed"] {
        assert!(ev.iter().all(|e| e["kind"] != k), "a {k} {why}");
    }
    assert_eq!(
        ev.iter().filter(|e| e["kind"] == "comm_end").count(),
        2 * ROUNDS
    );
}

/// `FREERIDE_WAIT_TIMING=0`: the waits are recorded (with the op they follow), none is timed.
#[test]
fn waits_are_untimed_when_wait_timing_is_off() {
    none_timed(
        &run_with(&[], &[("FREERIDE_WAIT_TIMING", "0")]),
        "without wait timing",
    );
}

/// A wait queued after the communication it waits for has ended (the program synchronized each
/// GPU first) cannot hold its stream: it is recorded with the op it follows, and not timed.
#[test]
fn a_wait_on_communication_that_has_ended_is_not_timed() {
    none_timed(
        &run_with(&["synced"], &[]),
        "for a wait on ended communication",
    );
}

/// A drain mark: the host blocking on one stream while it has just launched on another gets a
/// timed point on the stream it launched on ([`Kind::StreamWait`] with no event), reached when
/// that stream's kernel has run; blocking on that stream itself, or on the whole device, gets none
/// (the call's own return says when it drained). A process marks at most once a millisecond.
#[test]
fn a_host_blocking_on_another_stream_marks_where_its_compute_drains() {
    let ev = run_with(&["marks"], &[]);
    let launches: Vec<(usize, &Value)> = kind(&ev, "launch")
        .filter(|(_, e)| e["in_comm"] == false)
        .collect();
    assert_eq!(launches.len(), 13, "the program's kernels");
    let compute = launches[0].1["stream"].as_u64().unwrap();
    let marks: Vec<(usize, &Value)> = kind(&ev, "stream_wait")
        .filter(|(_, e)| e["event"] == 0)
        .collect();
    // The burst of ten blocks after ten kernels, each within a millisecond of the last: a mark
    // at most every millisecond (every one of them would take ten).
    let burst = marks.iter().filter(|(i, _)| *i > launches[3].0).count();
    assert!(
        (1..10).contains(&burst),
        "{burst} marks in a burst of ten blocks"
    );
    let marks = &marks[..marks.len() - burst];
    assert_eq!(
        marks.len(),
        1,
        "one mark, for the block on the comm stream: {marks:?}"
    );
    let (mi, m) = marks[0];
    assert_eq!(m["stream"].as_u64(), Some(compute), "{m}");
    assert_eq!(m["api"], "cudaStreamSynchronize", "{m}");
    let wait = m["wait"].as_u64().unwrap();
    assert_ne!(wait, 0, "a mark is timed: {m}");
    assert!(
        launches[0].0 < mi && mi < launches[1].0,
        "the mark follows its launch: {m}"
    );
    // Reached once the 2 ms kernel before it had run, released at once.
    let find = |k: &'static str| {
        kind(&ev, k)
            .find(|(_, e)| e["wait"].as_u64() == Some(wait))
            .unwrap_or_else(|| panic!("no {k} for the mark"))
            .1
    };
    let (b, e) = (find("wait_begin"), find("wait_end"));
    let launched = launches[0].1["t_ns"].as_u64().unwrap();
    let (tb, te) = (b["t_ns"].as_u64().unwrap(), e["t_ns"].as_u64().unwrap());
    assert!(
        tb >= launched + 1_900_000,
        "reached {} ns after its launch",
        tb - launched
    );
    assert!(tb <= te);
}
