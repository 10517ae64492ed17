//! Each NCCL communicator's identity (`comm_init` records), from real programs under the preload on
//! the stand-ins (`tests/cprogs/comm_init.c`): two rank processes joining two communicators
//! (`ncclCommInitRank`, `ncclCommInitRankConfig`) and splitting one of them (`ncclCommSplit`), and
//! one process making its communicators with `ncclCommInitAll`. The records are read from the
//! `FREERIDE_TRACE` lines; every file is under the test bed's folder, removed at the end.
use freeride_abi::event::{comm_ident_local, comm_ident_of_id, comm_ident_of_split};
use freeride_tests::gatebed::Bed;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;

fn bin() -> &'static PathBuf {
    // Compiled once per test binary (its tests run in parallel).
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| freeride_tests::cprog("comm_init", &["-lcudart", "-lnccl"]))
}

fn cmd(bed: &Bed, args: &[&str], trace: Option<&std::path::Path>) -> Command {
    let mut env = vec![("FREERIDE_SIM_DEVICES", "2")];
    let t;
    if let Some(p) = trace {
        t = p.to_str().unwrap().to_string();
        env.push(("FREERIDE_TRACE", t.as_str()));
    }
    bed.cmd(bin(), "trainer", args, &env)
}

/// The handles a run printed after "OK".
fn handles(out: &Output) -> Vec<u64> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let line = stdout.lines().find(|l| l.starts_with("OK")).expect("OK");
    line.split_whitespace()
        .skip(1)
        .map(|h| h.parse().unwrap())
        .collect()
}

fn events(trace: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(trace)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn bytes_of_hex(h: &str) -> Vec<u8> {
    (0..h.len() / 2)
        .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

fn num(e: &Value, k: &str) -> u64 {
    e[k].as_u64().unwrap_or_else(|| panic!("{k} of {e}"))
}

/// A process's comm_init records, by communicator handle: (api, ident, nranks, rank, device).
type Inits = HashMap<u64, (String, u64, u64, u64, Value)>;

/// Per pid: its comm_init records (one per handle), each before any comm op naming its handle,
/// and every comm op on a communicator recorded there, on its GPU.
fn inits_by_pid(ev: &[Value]) -> HashMap<u64, Inits> {
    let mut by: HashMap<u64, Inits> = HashMap::new();
    for e in ev {
        let pid = num(e, "pid");
        match e["kind"].as_str().unwrap() {
            "comm_init" => {
                let prev = by.entry(pid).or_default().insert(
                    num(e, "comm"),
                    (
                        e["api"].as_str().unwrap().to_string(),
                        num(e, "ident"),
                        num(e, "nranks"),
                        num(e, "rank"),
                        e["device"].clone(),
                    ),
                );
                assert!(prev.is_none(), "two comm_init of one handle: {e}");
            }
            "comm" => {
                let init = by
                    .get(&pid)
                    .and_then(|m| m.get(&num(e, "comm")))
                    .unwrap_or_else(|| {
                        panic!("a comm op before its communicator's comm_init: {e}")
                    });
                assert_eq!(init.4, e["device"], "{e}");
                assert!(e["device"].is_string(), "{e}");
            }
            _ => {}
        }
    }
    by
}

#[test]
fn ranks_of_a_communicator_record_one_identity_and_their_ranks() {
    let bed = Bed::new("comm-init-ranks");
    let ids = cmd(&bed, &["ids"], None).output().unwrap();
    assert!(ids.status.success());
    let ids = String::from_utf8(ids.stdout).unwrap();
    let ids: Vec<&str> = ids.lines().collect();
    assert_eq!(ids.len(), 2);
    let trace = bed.root.join("trace.jsonl");
    let kids: Vec<_> = (0..2)
        .map(|r| {
            cmd(
                &bed,
                &["rank", &r.to_string(), ids[0], ids[1]],
                Some(&trace),
            )
            .spawn()
            .unwrap()
        })
        .collect();
    let outs: Vec<Output> = kids
        .into_iter()
        .map(|k| k.wait_with_output().unwrap())
        .collect();
    let printed: Vec<Vec<u64>> = outs.iter().map(handles).collect();
    let ev = events(&trace);
    let by = inits_by_pid(&ev);
    assert_eq!(by.len(), 2, "{by:?}");
    // Which pid is which rank: the rank of its communicator A (its first handle printed).
    let mut ranks: Vec<(u64, &Inits)> = by.iter().map(|(p, m)| (*p, m)).collect();
    ranks.sort_by_key(|(_, m)| {
        m.values()
            .find(|i| i.0 == "ncclCommInitRank")
            .expect("ncclCommInitRank recorded")
            .3
    });
    let ident_a = comm_ident_of_id(&bytes_of_hex(ids[0]));
    let ident_b = comm_ident_of_id(&bytes_of_hex(ids[1]));
    assert_ne!(ident_a, ident_b);
    let mut all_idents: HashMap<u64, HashSet<u64>> = HashMap::new();
    for (r, (pid, inits)) in ranks.iter().enumerate() {
        let h = &printed[r];
        let (a, b, s1, s2, s3) = (h[0], h[1], h[2], h[3], h[4]);
        let get = |c: u64| {
            inits
                .get(&c)
                .unwrap_or_else(|| panic!("rank {r}: no comm_init of {c}: {inits:?}"))
        };
        let want =
            |api: &str, ident: u64, nranks: u64, rank: u64| (api.to_string(), ident, nranks, rank);
        let got = |c: u64| {
            let i = get(c);
            (i.0.clone(), i.1, i.2, i.3)
        };
        let r = r as u64;
        assert_eq!(got(a), want("ncclCommInitRank", ident_a, 2, r));
        assert_eq!(got(b), want("ncclCommInitRankConfig", ident_b, 2, r));
        // Split 0 of A, colour 0 for both, keys reversing the ranks.
        let i1 = comm_ident_of_split(ident_a, 0, 0);
        assert_eq!(got(s1), want("ncclCommSplit", i1, 2, 1 - r));
        // Split 1, colour = rank: alone.
        assert_eq!(
            got(s2),
            want(
                "ncclCommSplit",
                comm_ident_of_split(ident_a, 1, r as i32),
                1,
                0
            )
        );
        // Split 2: colour 7 on rank 0; rank 1 passed NCCL_SPLIT_NOCOLOR and got nothing.
        if r == 0 {
            assert_eq!(
                got(s3),
                want("ncclCommSplit", comm_ident_of_split(ident_a, 2, 7), 1, 0)
            );
            assert_eq!(inits.len(), 5, "{inits:?}");
        } else {
            assert_eq!(s3, 0);
            assert_eq!(inits.len(), 4, "{inits:?}");
        }
        for i in inits.values() {
            assert!(i.4.is_string(), "a comm_init on an unknown GPU: {i:?}");
            all_idents.entry(i.1).or_default().insert(*pid);
        }
        // Each rank's communicators are all on its GPU.
        let devs: HashSet<String> = inits.values().map(|i| i.4.to_string()).collect();
        assert_eq!(devs.len(), 1, "{devs:?}");
    }
    // The communicators both ranks are in share an identity; the others' are their own.
    let shared: HashSet<u64> = all_idents
        .iter()
        .filter(|(_, pids)| pids.len() == 2)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(
        shared,
        HashSet::from([ident_a, ident_b, comm_ident_of_split(ident_a, 0, 0)])
    );
    assert_eq!(all_idents.len(), 3 + 3, "{all_idents:?}");
    // Comm ops were recorded on A, B and S1 of both ranks (checked against the inits above).
    let ops = ev.iter().filter(|e| e["kind"] == "comm").count();
    assert_eq!(ops, 6);
}

#[test]
fn comm_init_all_records_each_communicator_with_one_local_identity() {
    let bed = Bed::new("comm-init-all");
    let trace = bed.root.join("trace.jsonl");
    let out = cmd(&bed, &["all"], Some(&trace)).output().unwrap();
    let h = handles(&out);
    assert_eq!(h.len(), 4);
    let ev = events(&trace);
    let by = inits_by_pid(&ev);
    assert_eq!(by.len(), 1);
    let (pid, inits) = by.iter().next().unwrap();
    assert_eq!(inits.len(), 4, "{inits:?}");
    for (k, pair) in h.chunks(2).enumerate() {
        let ident = comm_ident_local(*pid as u32, k as u32);
        for (rank, c) in pair.iter().enumerate() {
            let i = &inits[c];
            assert_eq!(
                (i.0.as_str(), i.1, i.2, i.3),
                ("ncclCommInitAll", ident, 2, rank as u64),
                "{i:?}"
            );
        }
        // Rank i is on device devlist[i]: two GPUs.
        assert_ne!(inits[&pair[0]].4, inits[&pair[1]].4);
    }
    assert_ne!(inits[&h[0]].1, inits[&h[2]].1);
    // Every communicator carried an all-reduce, each named by the handle its comm_init gave.
    let named: HashSet<u64> = ev
        .iter()
        .filter(|e| e["kind"] == "comm")
        .map(|e| num(e, "comm"))
        .collect();
    assert_eq!(named, h.iter().copied().collect());
}

/// Every NCCL function libfreeride.so hooks is in the stand-in as the real library has it: a
/// strong `pncclX` and a weak `ncclX` at the same address (so the hook's tests reach it).
#[test]
fn the_standin_nccl_has_every_hooked_nccl_function() {
    let ours = freeride_tests::nm(&["-D", "--defined-only"], "libfreeride.so");
    let hooked: Vec<&str> = ours
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[1] == "T" && f[2].starts_with("nccl")).then_some(f[2])
        })
        .collect();
    for want in [
        "ncclCommInitRank",
        "ncclCommInitRankConfig",
        "ncclCommInitAll",
        "ncclCommSplit",
    ] {
        assert!(
            hooked.contains(&want),
            "libfreeride.so does not hook {want}"
        );
    }
    let theirs = freeride_tests::nm(&["-D", "--defined-only"], "libnccl.so");
    let find = |kind: &str, name: &str| {
        theirs.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[1] == kind && f[2] == name).then(|| f[0].to_string())
        })
    };
    for n in hooked {
        let weak = find("W", n).unwrap_or_else(|| panic!("no weak {n}"));
        let strong = find("T", &format!("p{n}")).unwrap_or_else(|| panic!("no strong p{n}"));
        assert_eq!(weak, strong, "{n}");
    }
}
