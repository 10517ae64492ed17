//! A test bed for the side-task gate without an agent: a session directory whose grant blocks the
//! test writes as the agent would ([`GrantWriter`], kept fresh by a [`Heart`]), a simulated-GPU
//! folder, and the ground truth of every kernel that ran (`FREERIDE_SIM_TRACE`). Removed on drop.
use freeride_abi::grant_shm::GrantWriter;
use freeride_abi::now_ns;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub const MS: u64 = 1_000_000;

pub struct Bed {
    pub root: PathBuf,
    pub session: PathBuf,
    pub truth: PathBuf,
}

/// One kernel as the truth has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ran {
    pub start_ns: u64,
    pub end_ns: u64,
    pub queued_ns: u64,
    pub device: i32,
    pub comm: bool,
}

impl Bed {
    pub fn new(name: &str) -> Bed {
        static N: AtomicU32 = AtomicU32::new(0);
        let root = PathBuf::from(format!(
            "/dev/shm/freeride-gate-test-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        // Also removed when a failing test unwinds past the drop or the process exits early.
        freeride_abi::scratch::remove_at_exit(&root);
        let session = root.join("session");
        std::fs::create_dir_all(&session).unwrap();
        std::fs::create_dir_all(root.join("sim")).unwrap();
        std::fs::set_permissions(
            &session,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        let truth = root.join("truth.jsonl");
        Bed {
            root,
            session,
            truth,
        }
    }

    /// `bin` with `args` under libfreeride.so in `role` on this bed; stdout piped.
    pub fn cmd(&self, bin: &Path, role: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
        let standins = pipesim::standins::ensure_dir().unwrap();
        let mut c = Command::new(bin);
        c.args(args)
            .env("LD_PRELOAD", crate::release_dir().join("libfreeride.so"))
            .env("LD_LIBRARY_PATH", &standins)
            .env("FREERIDE_DIR", &self.session)
            .env("FREERIDE_SIM_DIR", self.root.join("sim"))
            .env("FREERIDE_SIM_TRACE", &self.truth)
            .env("FREERIDE_ROLE", role)
            .env("FREERIDE_GATE_VERBOSE", "1")
            .env(
                crate::SIDETASK_NICE_FOR_TESTS.0,
                crate::SIDETASK_NICE_FOR_TESTS.1,
            )
            .env_remove("FREERIDE_TRACE")
            .env_remove("FREERIDE_GATE")
            .env_remove("FREERIDE_MEM_BUDGET_MB")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }

    /// Every kernel `pid` ran, by start.
    pub fn ran(&self, pid: u32) -> Vec<Ran> {
        let text = std::fs::read_to_string(&self.truth).unwrap_or_default();
        let mut v: Vec<Ran> = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|j| j["pid"].as_u64() == Some(pid as u64))
            .map(|j| Ran {
                start_ns: j["start_ns"].as_u64().unwrap(),
                end_ns: j["end_ns"].as_u64().unwrap(),
                queued_ns: j["queued_ns"].as_u64().unwrap(),
                device: j["device"].as_i64().unwrap() as i32,
                comm: j["kind"] == "comm",
            })
            .collect();
        v.sort();
        v
    }

    /// (start_ns, end_ns, queued_ns) of every kernel `pid` ran, by start.
    pub fn kernels(&self, pid: u32) -> Vec<(u64, u64, u64)> {
        self.ran(pid)
            .iter()
            .map(|k| (k.start_ns, k.end_ns, k.queued_ns))
            .collect()
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Heartbeats a grant every 1 ms (the agent does every ~50 µs) until dropped.
pub struct Heart {
    stop: Arc<AtomicBool>,
    th: Option<std::thread::JoinHandle<()>>,
}

pub fn heart(w: &Arc<GrantWriter>) -> Heart {
    let stop = Arc::new(AtomicBool::new(false));
    let (s, w) = (stop.clone(), w.clone());
    let th = std::thread::spawn(move || {
        while !s.load(Ordering::Relaxed) {
            w.heartbeat();
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    Heart { stop, th: Some(th) }
}

impl Drop for Heart {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.th.take() {
            let _ = t.join();
        }
    }
}

/// Opens `w`'s grant `n` times, each for `open_ns` with a GPU-time budget of `budget_ns`, one every
/// `period_ns`, closed in between; (when it opened, its deadline) of each.
pub fn grant_cycles(
    w: &GrantWriter,
    n: usize,
    open_ns: u64,
    budget_ns: u64,
    period_ns: u64,
) -> Vec<(u64, u64)> {
    (0..n)
        .map(|_| {
            let t = now_ns();
            let until = w.open_for(open_ns, budget_ns, 0);
            sleep_until(until);
            w.close(0);
            sleep_until(t + period_ns);
            (t, until)
        })
        .collect()
}

pub fn sleep_until(t: u64) {
    let now = now_ns();
    if t > now {
        std::thread::sleep(Duration::from_nanos(t - now));
    }
}

/// SIGTERMs our child and waits for it (panics if it lives on for 2 s).
pub fn kill(mut child: Child) {
    // SAFETY: kill(2) of our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let t0 = now_ns();
    loop {
        if child.try_wait().unwrap().is_some() {
            return;
        }
        assert!(
            now_ns() - t0 < 2_000 * MS,
            "side task did not exit on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
