//! The side-task watchdog: nothing a side task does may hold a trainer back for long.
//!
//! It follows the rings whose role is `sidetask` (their headers only; the collector reads the
//! records) and, every agent step:
//! * **died**: the process is gone without marking its ring exited (a crash, an OOM kill, a
//!   `kill -9`): it is dropped from scheduling at once (the grants forget its priority and step
//!   size, its `sidetask-<pid>.json` is removed), one log line, counted as lost. Its device memory
//!   needs nothing from the agent: the driver (and the test bed's simulated GPU) frees a dead
//!   process's memory, and the agent's accounting of it went with its ring.
//! * **hung**: its gate (libfreeride.so with `FREERIDE_ROLE=sidetask`) publishes in the ring header
//!   how many admitted launches it has not seen complete and when the oldest should have finished
//!   by its own estimate ([`freeride_abi::ring::GateStatus`]). The gate looks at completions on
//!   every launch and every synchronize call, so that time stays in the past only while the
//!   task's GPU work runs on and the task makes no progress past it: stuck inside a kernel (its
//!   synchronize never returns), or launching nothing more while a kernel runs for far longer
//!   than the gate admitted it for. Overdue by more than [`WatchdogPolicy::hang_ns`]: evicted.
//!   (A gated task that leaves work unsynchronized and then makes no CUDA call at all for longer
//!   than the deadline reads as hung too: the agent cannot see the GPU. Ungated side tasks,
//!   `FREERIDE_GATE=off` or without the interposer, publish nothing and are not watched for hangs.)
//! * **over its memory budget**: with `--gpu-mem-mib`, a side task holding more device memory
//!   (its allocations minus frees, from its ring) than its GPU's budget now (the GPU's memory minus
//!   what the trainer holds minus the reserve; the budget shrinks when the trainer grows) for longer
//!   than [`WatchdogPolicy::mem_grace_ns`]: evicted.
//!
//! Evicted = SIGKILL ([`crate::evict`]: same user, the ring's own process, never a process whose
//! ring says trainer), one log line, counted per reason.
use crate::collect::ProcessView;
use crate::evict;
use crate::inference::Ns;
use freeride_abi::reader::RingReader;
use freeride_abi::{session, Role};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// When side tasks are evicted.
#[derive(Clone, Copy, Debug)]
pub struct WatchdogPolicy {
    /// A side task whose oldest in-flight launch is overdue by more than this is hung (0: never).
    pub hang_ns: Ns,
    /// A side task over its GPU's memory budget for longer than this is evicted.
    pub mem_grace_ns: Ns,
}

impl Default for WatchdogPolicy {
    fn default() -> Self {
        WatchdogPolicy {
            hang_ns: 2_000_000_000,
            mem_grace_ns: 2_000_000_000,
        }
    }
}

/// Why a side task was evicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    Hung,
    OverMemory,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Hung => "hung",
            Reason::OverMemory => "over_memory",
        }
    }
}

/// How often the session directory is listed for new side-task rings.
const RESCAN_NS: Ns = 50_000_000;
/// How often the watched side tasks are looked at.
const CHECK_NS: Ns = 10_000_000;

struct Watched {
    reader: RingReader,
    pid: u32,
    start_ns: Ns,
    over_mem_since: Option<Ns>,
    /// Evicted: its death is not a crash.
    killed: bool,
    /// Due for eviction but not ours to kill: left alone.
    given_up: bool,
}

/// The watchdog of one session directory.
pub struct Watchdog {
    dir: PathBuf,
    policy: WatchdogPolicy,
    watched: HashMap<PathBuf, Watched>,
    /// Rings of other roles, or that did not open (the collector reports those).
    ignored: HashSet<PathBuf>,
    last_scan: Option<Ns>,
    last_check: Option<Ns>,
    /// Evictions so far, by reason.
    pub evicted: BTreeMap<Reason, u64>,
    /// Side tasks that died without a clean exit.
    pub lost: u64,
    /// Their pids (a task seen both by its ring and by its status file counts once).
    lost_pids: HashSet<u32>,
    /// Pids the watchdog killed (their deaths are evictions, not crashes).
    evicted_pids: HashSet<u32>,
    /// When the watchdog last evicted a side task of each GPU.
    gpu_evicted_ns: HashMap<i32, Ns>,
    /// Side tasks that ended (died or evicted) since the last [`Watchdog::take_ended`].
    ended: Vec<u32>,
    /// Log lines for the operator since the last [`Watchdog::take_log`].
    log: Vec<String>,
}

impl Watchdog {
    pub fn new(dir: &Path, policy: WatchdogPolicy) -> Watchdog {
        Watchdog {
            dir: dir.to_path_buf(),
            policy,
            watched: HashMap::new(),
            ignored: HashSet::new(),
            last_scan: None,
            last_check: None,
            evicted: BTreeMap::new(),
            lost: 0,
            lost_pids: HashSet::new(),
            evicted_pids: HashSet::new(),
            gpu_evicted_ns: HashMap::new(),
            ended: vec![],
            log: vec![],
        }
    }

    /// A side task `pid` died without exiting: counted once, logged, its status file removed.
    fn lost(&mut self, pid: u32, device: i32) {
        if !self.evicted_pids.contains(&pid) && self.lost_pids.insert(pid) {
            self.lost += 1;
            self.log.push(format!(
                "side task pid {pid} (GPU {device}) died without exiting (crashed or killed); \
                 dropped from scheduling"
            ));
        }
        let _ = std::fs::remove_file(self.dir.join(format!("sidetask-{pid}.json")));
        self.ended.push(pid);
    }

    /// SDK side tasks (with or without the interposer) publish `sidetask-<pid>.json`: one whose
    /// process is gone while it says it is neither finished nor stopped crashed.
    fn scan_status_files(&mut self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut dead = vec![];
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix("sidetask-"))
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if pid == 0 || session::pid_running(pid) {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(e.path()) else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
                continue;
            };
            if v["pid"].as_u64() != Some(pid as u64)
                || matches!(v["state"].as_str(), Some("finished" | "stopped"))
            {
                continue;
            }
            dead.push((pid, v["device"].as_i64().unwrap_or(-1) as i32));
        }
        for (pid, device) in dead {
            self.lost(pid, device);
        }
    }

    fn scan(&mut self) {
        self.scan_status_files();
        let Ok(paths) = session::list_rings(&self.dir) else {
            return;
        };
        let live: HashSet<&PathBuf> = paths.iter().collect();
        // Forget refusals of files that are gone (a new ring may reuse nothing, but keep it small).
        self.ignored.retain(|p| live.contains(p));
        for path in paths {
            if self.watched.contains_key(&path) || self.ignored.contains(&path) {
                continue;
            }
            match RingReader::open(&path) {
                Ok(r) if r.info().role == Some(Role::Sidetask) => {
                    let info = r.info();
                    if info.exited {
                        self.ignored.insert(path);
                        continue;
                    }
                    self.watched.insert(
                        path,
                        Watched {
                            pid: info.pid,
                            start_ns: info.start_ns,
                            reader: r,
                            over_mem_since: None,
                            killed: false,
                            given_up: false,
                        },
                    );
                }
                // A ring still being created has no valid magic yet: look again next scan.
                Err(freeride_abi::reader::OpenError::BadMagic) => {}
                _ => {
                    self.ignored.insert(path);
                }
            }
        }
    }

    /// One look at every side task at `now`. `procs`: the collector's view (device, memory held);
    /// `mem_budget(device)`: the side tasks' memory budget on that GPU now (`None`: no budget).
    pub fn check(
        &mut self,
        now: Ns,
        procs: &[ProcessView],
        mem_budget: impl Fn(i32) -> Option<u64>,
    ) {
        if self
            .last_check
            .is_some_and(|t| now.saturating_sub(t) < CHECK_NS)
        {
            return;
        }
        self.last_check = Some(now);
        if self
            .last_scan
            .is_none_or(|t| now.saturating_sub(t) >= RESCAN_NS)
        {
            self.scan();
            self.last_scan = Some(now);
        }
        let mut done = vec![];
        let mut lost = vec![];
        // (path, device, reason, why, due) of the side tasks to evict.
        let mut doomed: Vec<(PathBuf, i32, Reason, String, Ns)> = vec![];
        // GPUs where an evicted side task is not gone yet.
        let mut dying: HashSet<i32> = HashSet::new();
        for (path, w) in self.watched.iter_mut() {
            let info = w.reader.info();
            let view = procs.iter().find(|p| p.pid == w.pid);
            let device = view.map_or(info.device, |p| p.device);
            if info.exited || !session::pid_running(w.pid) {
                if info.exited {
                    self.ended.push(w.pid);
                } else {
                    lost.push((w.pid, device));
                }
                done.push(path.clone());
                continue;
            }
            if w.killed {
                dying.insert(device);
                continue; // SIGKILL sent; waiting for it to be gone
            }
            if w.given_up {
                continue;
            }
            let gs = w.reader.gate_status();
            // Work queued behind another task's stuck kernel is overdue too: after an eviction on
            // a GPU, the others' clocks start again from it.
            let since = gs
                .due_ns
                .max(self.gpu_evicted_ns.get(&device).copied().unwrap_or(0));
            let overdue = now.saturating_sub(since);
            let hung = self.policy.hang_ns > 0
                && gs.inflight > 0
                && gs.due_ns > 0
                && since < now
                && overdue > self.policy.hang_ns;
            let held = view.map_or(0, |p| p.mem_held_bytes);
            let over = mem_budget(device).filter(|&b| b > 0 && held > b);
            if over.is_some() {
                w.over_mem_since.get_or_insert(now);
            } else {
                w.over_mem_since = None;
            }
            let over_for = w.over_mem_since.map_or(0, |t| now.saturating_sub(t));
            if hung {
                doomed.push((
                    path.clone(),
                    device,
                    Reason::Hung,
                    format!(
                        "hung: {} launch(es) in flight, the oldest due {} ms ago (deadline {} ms)",
                        gs.inflight,
                        now.saturating_sub(gs.due_ns) / 1_000_000,
                        self.policy.hang_ns / 1_000_000
                    ),
                    // Builds before `admitted_ns` publish 0 there: order those by due time.
                    if gs.admitted_ns > 0 {
                        gs.admitted_ns
                    } else {
                        gs.due_ns
                    },
                ));
            } else if over.is_some() && over_for >= self.policy.mem_grace_ns {
                doomed.push((
                    path.clone(),
                    device,
                    Reason::OverMemory,
                    format!(
                        "over its memory budget: holds {} MiB, the budget is {} MiB, for {} ms \
                         (grace {} ms)",
                        held >> 20,
                        over.unwrap_or(0) >> 20,
                        over_for / 1_000_000,
                        self.policy.mem_grace_ns / 1_000_000
                    ),
                    0,
                ));
            }
        }
        // Of the hung side tasks of one GPU only the one whose oldest work was admitted first (on a
        // GPU that runs work in the order it is queued, it blocks the others; its due time can be
        // later than theirs when its estimate was longer) goes, and none while an evicted one is
        // still dying (a zombie is gone: see `session::pid_running`).
        doomed.sort_by_key(|d| (d.2, d.4));
        let mut hung_gpus: HashSet<i32> = dying;
        for (path, device, reason, why, _) in doomed {
            if reason == Reason::Hung && !hung_gpus.insert(device) {
                continue;
            }
            let Some(w) = self.watched.get_mut(&path) else {
                continue;
            };
            match evict::kill_sidetask(w.pid, w.start_ns) {
                Ok(()) => {
                    w.killed = true;
                    self.evicted_pids.insert(w.pid);
                    self.gpu_evicted_ns.insert(device, now);
                    *self.evicted.entry(reason).or_default() += 1;
                    self.log.push(format!(
                        "evicted side task pid {} (GPU {device}): {why}; SIGKILL sent",
                        w.pid
                    ));
                }
                Err(evict::Refused::Gone) => {}
                Err(e) => {
                    // Not ours to kill: stop acting on it (one message).
                    self.log.push(format!(
                        "side task pid {} (GPU {device}) is {why}, but {e}",
                        w.pid
                    ));
                    w.given_up = true;
                    self.evicted_pids.insert(w.pid);
                }
            }
        }
        for p in done {
            self.watched.remove(&p);
            self.ignored.insert(p);
        }
        for (pid, device) in lost {
            self.lost(pid, device);
        }
    }

    /// Side tasks that ended since the last call (for the scheduler to forget).
    pub fn take_ended(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.ended)
    }

    /// Log lines since the last call.
    pub fn take_log(&mut self) -> Vec<String> {
        std::mem::take(&mut self.log)
    }

    /// Side tasks watched now.
    pub fn watching(&self) -> usize {
        self.watched.len()
    }
}
