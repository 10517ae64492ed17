//! The nodes of a simulated job under `freeride sim`: one session directory and one agent (the
//! daemon's [`freeride_agent::node::Node`] loop, in a thread of this process) per node, as a
//! cluster runs one `freeride agent` per machine. The job's processes and side tasks on node n use
//! node n's directory (`pipesim --node-session-dirs`, `pipesim::placement::gpu_env`); what the
//! agents saw is merged for scoring.
use crate::sim::{agent_loop, AgentRun};
use freeride_agent::grants::GrantPolicy;
use freeride_agent::report_lag::ReportLag;
use freeride_agent::scratch::ScratchDir;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// One session directory per node (removed on drop).
pub struct Nodes {
    sessions: Vec<ScratchDir>,
}

impl Nodes {
    pub fn new(n: u32) -> Result<Nodes, String> {
        let sessions = (0..n.max(1))
            .map(|i| {
                ScratchDir::new(&if n > 1 {
                    format!("session-node{i}")
                } else {
                    "session".into()
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Nodes { sessions })
    }

    /// The session directories, node by node.
    pub fn dirs(&self) -> Vec<PathBuf> {
        self.sessions.iter().map(|s| s.0.clone()).collect()
    }
}

/// The running agents.
pub struct Agents {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<AgentRun>>,
}

impl Agents {
    /// Starts one agent per directory.
    pub fn start(dirs: &[PathBuf], grants: Option<GrantPolicy>) -> Result<Agents, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut agents = Agents {
            stop: stop.clone(),
            threads: vec![],
        };
        for (i, d) in dirs.iter().enumerate() {
            let (dir, stop) = (d.clone(), stop.clone());
            let t = std::thread::Builder::new()
                .name(format!("freeride-agent-{i}"))
                .spawn(move || agent_loop(&dir, &stop, grants));
            match t {
                Ok(t) => agents.threads.push(t),
                Err(e) => {
                    let _ = agents.stop();
                    return Err(format!("cannot start the agent thread: {e}"));
                }
            }
        }
        Ok(agents)
    }

    /// Stops them and merges what they saw (events and CPU time summed, the longest run's
    /// length, the largest drop count); also each node's (events, bubbles).
    pub fn stop(self) -> Result<(AgentRun, Vec<(u64, usize)>), String> {
        self.stop.store(true, Ordering::Release);
        let mut all = AgentRun {
            bubbles: vec![],
            grant_logs: vec![],
            events: 0,
            dropped: 0,
            warnings: vec![],
            cpu_ns: 0,
            wall_ns: 0,
            report_lag: ReportLag::default(),
            steps: Default::default(),
            matched: Default::default(),
        };
        let mut panicked = false;
        let mut per_node = vec![];
        for t in self.threads {
            match t.join() {
                Ok(r) => {
                    per_node.push((r.events, r.bubbles.len()));
                    all.bubbles.extend(r.bubbles);
                    all.grant_logs.extend(r.grant_logs);
                    all.events += r.events;
                    all.dropped = all.dropped.max(r.dropped);
                    all.warnings.extend(r.warnings);
                    all.cpu_ns += r.cpu_ns;
                    all.wall_ns = all.wall_ns.max(r.wall_ns);
                    all.report_lag.merge(&r.report_lag);
                    all.steps.merge(&r.steps);
                    all.matched.add(r.matched);
                }
                Err(_) => panicked = true,
            }
        }
        if panicked {
            return Err("an agent thread panicked".into());
        }
        Ok((all, per_node))
    }
}
