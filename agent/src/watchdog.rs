//! The side-task watchdog: nothing a side task does may hold a trainer back for long.
//!
//! Every 10 ms it reads the headers of the side tasks' rings, which the collector opens (every ring
//! is opened once, by the collector), and the SDK tasks' status files:
//! * **died**: the process is gone (or a zombie) without marking its ring exited (a crash, an OOM
//!   kill, a `kill -9`), or a ring the collector closed was never marked exited: it is dropped from
//!   scheduling at once (the grants forget its priority and step
//!   size, its `sidetask-<pid>.json` is removed), one log line, counted as lost. Its device memory
//!   needs nothing from the agent: the driver (and the test bed's simulated GPU) frees a dead
//!   process's memory, and the agent's accounting of it went with its ring.
//! * **hung**: its gate (libfreeride.so with `FREERIDE_ROLE=sidetask`) publishes in the ring header
//!   how many admitted launches it has not seen complete and when the oldest should have finished
//!   by its own estimate ([`freeride_abi::ring::GateStatus`]). The gate looks at completions on
//!   every launch and every synchronize call, and a looker thread of the gate every 100 ms while
//!   the task's own threads make no CUDA call (busy on the host); a launch whose call has not
//!   returned yet (a first launch loading its module) is due no earlier than its estimate from
//!   then. So that time stays in the past only while the task's GPU work runs on: stuck inside a
//!   kernel, or a kernel that runs for far longer than the gate admitted it for. Overdue by more
//!   than [`WatchdogPolicy::hang_ns`]: evicted. (Ungated side tasks, `FREERIDE_GATE=off` or
//!   without the interposer, publish nothing and are not watched for hangs.)
//! * **over its memory budget**: with `--gpu-mem-mib`, a side task holding more device memory
//!   (its allocations minus frees, from its ring) than its GPU's budget now (the GPU's memory minus
//!   what the trainer holds minus the reserve; the budget shrinks when the trainer grows) for longer
//!   than [`WatchdogPolicy::mem_grace_ns`]: evicted.
//!
//! Evicted = SIGKILL ([`crate::evict`]: same user, the ring's own process, never a process whose
//! ring says trainer), one log line, counted per reason.
use crate::collect::{ClosedRing, Collector};
use crate::evict;
use crate::inference::Ns;
use freeride_abi::session;
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

/// How often the session directory is listed for SDK tasks' status files.
const RESCAN_NS: Ns = 50_000_000;
/// How often the watched side tasks are looked at.
const CHECK_NS: Ns = 10_000_000;

/// A side task's ring is known by its pid and when it was made (a pid alone is not unique across
/// exec).
type RingKey = (u32, Ns);

#[derive(Default)]
struct Watched {
    over_mem_since: Option<Ns>,
    /// Evicted: its death is not a crash.
    killed: bool,
    /// Due for eviction but not ours to kill: left alone.
    given_up: bool,
    /// Found dead (or a zombie) and counted; its ring is closed later, once drained and reaped.
    dead: bool,
}

/// The watchdog of one session directory.
pub struct Watchdog {
    dir: PathBuf,
    policy: WatchdogPolicy,
    /// Side tasks with an open ring (an entry goes when the collector closes the ring).
    watched: HashMap<RingKey, Watched>,
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
                "side task pid {pid} (GPU {}) died without exiting (crashed or killed); \
                 dropped from scheduling",
                freeride_abi::GpuId::from_field(device)
            ));
        }
        let _ = std::fs::remove_file(self.dir.join(format!("sidetask-{pid}.json")));
        self.ended.push(pid);
    }

    /// SDK side tasks (with or without the interposer) publish `sidetask-<pid>.json`: one whose
    /// process is gone while it says it is neither finished nor stopped crashed. The files of
    /// gone processes are removed either way (a finished task's stays while it runs).
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
            if v["pid"].as_u64() != Some(pid as u64) {
                continue;
            }
            if matches!(v["state"].as_str(), Some("finished" | "stopped")) {
                // A clean end: its last state has been there to read; the file goes with it.
                let _ = std::fs::remove_file(e.path());
                continue;
            }
            dead.push((pid, v["device"].as_i64().unwrap_or(-1) as i32));
        }
        for (pid, device) in dead {
            self.lost(pid, device);
        }
    }

    /// A side task's ring the collector closed: a clean exit, or a death not counted yet.
    fn ring_closed(&mut self, c: &ClosedRing) {
        let w = self.watched.remove(&(c.pid, c.start_ns));
        if w.is_some_and(|w| w.dead) {
            return;
        }
        if c.exited {
            self.ended.push(c.pid);
        } else {
            self.lost(c.pid, c.device);
        }
    }

    /// One look at every side task at `now`: the side-task rings `collector` has open, the ones
    /// it closed since the last call (`closed`: every one of them, whenever the watchdog last
    /// looked), and the SDK tasks' status files. `mem_budget(device)`: the side tasks' memory
    /// budget on that GPU now (`None`: no budget).
    pub fn check(
        &mut self,
        now: Ns,
        collector: &Collector,
        closed: &[ClosedRing],
        mem_budget: impl Fn(i32) -> Option<u64>,
    ) {
        for c in closed {
            self.ring_closed(c);
        }
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
            self.scan_status_files();
            self.last_scan = Some(now);
        }
        let rings = collector.sidetask_rings();
        let mut lost = vec![];
        // (ring, device, reason, why, due) of the side tasks to evict.
        let mut doomed: Vec<(RingKey, i32, Reason, String, Ns)> = vec![];
        // GPUs where an evicted side task is not gone yet.
        let mut dying: HashSet<i32> = HashSet::new();
        for r in &rings {
            if r.exited {
                continue; // a clean exit: the collector closes the ring once it is drained
            }
            let key = (r.pid, r.start_ns);
            let w = self.watched.entry(key).or_default();
            let device = r.device;
            if w.dead {
                continue;
            }
            if !session::pid_running(r.pid) {
                w.dead = true;
                lost.push((r.pid, device));
                continue;
            }
            if w.killed {
                dying.insert(device);
                continue; // SIGKILL sent; waiting for it to be gone
            }
            if w.given_up {
                continue;
            }
            let gs = r.gate;
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
            // Over the budget of any GPU it holds memory on: (that GPU, held there, its budget).
            let over = r.mem_by_device.iter().find_map(|&(d, held)| {
                mem_budget(d)
                    .filter(|&b| b > 0 && held > b)
                    .map(|b| (d, held, b))
            });
            if over.is_some() {
                w.over_mem_since.get_or_insert(now);
            } else {
                w.over_mem_since = None;
            }
            let over_for = w.over_mem_since.map_or(0, |t| now.saturating_sub(t));
            if hung {
                doomed.push((
                    key,
                    device,
                    Reason::Hung,
                    format!(
                        "hung: {} launch(es) in flight, the oldest due {} ms ago (deadline {} ms); \
                         its gate last looked {} ms ago",
                        gs.inflight,
                        now.saturating_sub(gs.due_ns) / 1_000_000,
                        self.policy.hang_ns / 1_000_000,
                        now.saturating_sub(gs.checked_ns) / 1_000_000
                    ),
                    // Builds before `admitted_ns` publish 0 there: order those by due time.
                    if gs.admitted_ns > 0 {
                        gs.admitted_ns
                    } else {
                        gs.due_ns
                    },
                ));
            } else if let Some((d, held, budget)) =
                over.filter(|_| over_for >= self.policy.mem_grace_ns)
            {
                let on = if d == device {
                    String::new()
                } else {
                    format!(" on GPU {}", freeride_abi::GpuId::from_field(d))
                };
                doomed.push((
                    key,
                    device,
                    Reason::OverMemory,
                    format!(
                        "over its memory budget{on}: holds {} MiB, the budget is {} MiB, for {} \
                         ms (grace {} ms)",
                        held >> 20,
                        budget >> 20,
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
        for ((pid, start_ns), device, reason, why, _) in doomed {
            if reason == Reason::Hung && !hung_gpus.insert(device) {
                continue;
            }
            let Some(w) = self.watched.get_mut(&(pid, start_ns)) else {
                continue;
            };
            match evict::kill_sidetask(pid, start_ns) {
                Ok(()) => {
                    w.killed = true;
                    self.evicted_pids.insert(pid);
                    self.gpu_evicted_ns.insert(device, now);
                    *self.evicted.entry(reason).or_default() += 1;
                    self.log.push(format!(
                        "evicted side task pid {pid} (GPU {}): {why}; SIGKILL sent",
                        freeride_abi::GpuId::from_field(device)
                    ));
                }
                Err(evict::Refused::Gone) => {}
                Err(e) => {
                    // Not ours to kill: stop acting on it (one message).
                    self.log.push(format!(
                        "side task pid {pid} (GPU {}) is {why}, but {e}",
                        freeride_abi::GpuId::from_field(device)
                    ));
                    w.given_up = true;
                    self.evicted_pids.insert(pid);
                }
            }
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

    /// Side tasks watched now (alive, with an open ring).
    pub fn watching(&self) -> usize {
        self.watched.values().filter(|w| !w.dead).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use freeride_abi::ring::STATE_EXITED;
    use freeride_abi::Role;
    use std::os::unix::fs::FileExt;

    /// A side task's ring for `pid`, as the interposer makes it.
    fn sidetask_ring(dir: &Path, pid: u32, start_ns: u64) -> PathBuf {
        crate::collect::test_rings::ring_file(dir, pid, start_ns, Role::Sidetask)
    }

    /// Two side tasks that end before the watchdog's first look: the one that marked its ring
    /// exited ended, the other one (killed) is lost; both are handed back for the scheduler to
    /// forget, each once.
    #[test]
    fn a_sidetask_that_dies_before_the_first_look_is_lost_one_that_exits_is_not() {
        let dir = std::env::temp_dir().join(format!("frwd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        session::ensure_dir(&dir).unwrap();
        let mut crashing = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut exiting = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        sidetask_ring(&dir, crashing.id(), 1);
        let clean = sidetask_ring(&dir, exiting.id(), 2);
        let mut col = Collector::new(&dir);
        let mut wd = Watchdog::new(&dir, WatchdogPolicy::default());
        let mut obs = vec![];
        col.poll(1_000_000, &mut obs);
        assert_eq!(col.sidetask_rings().len(), 2);
        // The clean exit: the interposer's exit handler marks the ring.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&clean)
            .and_then(|f| f.write_all_at(&STATE_EXITED.to_le_bytes(), 44))
            .unwrap();
        for c in [&mut crashing, &mut exiting] {
            c.kill().unwrap();
            c.wait().unwrap();
        }
        col.poll(1_000_000 + 2 * crate::collect::LIVENESS_CHECK_NS, &mut obs);
        let closed = col.take_closed_sidetasks();
        assert_eq!(closed.len(), 2, "{closed:?}");
        assert!(col.sidetask_rings().is_empty());
        wd.check(5_000_000, &col, &closed, |_| None);
        assert_eq!(wd.lost, 1);
        let log = wd.take_log();
        assert_eq!(log.len(), 1, "{log:?}");
        assert!(
            log[0].contains(&format!("pid {} ", crashing.id())),
            "{log:?}"
        );
        let mut ended = wd.take_ended();
        ended.sort();
        let mut want = vec![crashing.id(), exiting.id()];
        want.sort();
        assert_eq!(ended, want);
        assert_eq!(wd.watching(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The status files of SDK tasks that are gone do not pile up: a finished (or stopped) one is
    /// removed once its process is gone, a crashed one counted lost and removed; the file of a
    /// live task stays, whatever its state.
    #[test]
    fn status_files_of_gone_side_tasks_are_removed() {
        let dir = crate::scratch::ScratchDir::new("wd-status").unwrap();
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        gone.wait().unwrap();
        let me = std::process::id();
        let write = |pid: u32, state: &str| {
            let p = dir.0.join(format!("sidetask-{pid}.json"));
            std::fs::write(
                &p,
                format!(r#"{{"pid":{pid},"device":0,"state":"{state}"}}"#),
            )
            .unwrap();
            p
        };
        let finished = write(gone.id(), "finished");
        let live_finished = write(me, "finished");
        let mut wd = Watchdog::new(&dir.0, WatchdogPolicy::default());
        wd.check(1, &Collector::new(&dir.0), &[], |_| None);
        assert!(!finished.exists(), "a gone task's final status file stayed");
        assert!(
            live_finished.exists(),
            "a live task's status file was removed"
        );
        assert_eq!(wd.lost, 0);
        let crashed = write(gone.id(), "running");
        wd.check(1 + RESCAN_NS, &Collector::new(&dir.0), &[], |_| None);
        assert!(!crashed.exists());
        assert_eq!(wd.lost, 1);
    }
}
