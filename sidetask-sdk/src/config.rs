//! The configuration of one side task (Rust struct, or JSON through the C ABI).
//!
//! Every field has a default, so `{}` is a valid JSON config. Environment overrides (read by
//! [`TaskConfig::from_env`], and applied on top of a JSON config by the C ABI):
//! * `FREERIDE_SIDETASK_DEVICE` — the device id;
//! * `FREERIDE_SIDETASK_STANDALONE=1` — `no_agent = standalone`;
//! * `FREERIDE_SIDETASK_NICE` — `cpu_nice`;
//! * `FREERIDE_DIR` — the session directory (as everywhere in freeride).
use crate::error::{Result, SdkError};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

pub const ENV_DEVICE: &str = "FREERIDE_SIDETASK_DEVICE";
pub const ENV_STANDALONE: &str = "FREERIDE_SIDETASK_STANDALONE";

/// What to do while there is no live agent (no valid `grant-<bus id>`, or its agent died).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum NoAgent {
    /// Wait (paused) until an agent publishes a grant: never touch the GPU ungoverned. Default.
    #[default]
    Wait,
    /// Run freely, as if the whole GPU were granted: for testing and development only.
    Standalone,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TaskConfig {
    /// Shown by `freeride status` and in summaries.
    pub name: String,
    /// The CUDA device (ordinal as this process sees it) and the grant block read (`grant-<bus id>`).
    pub device: u32,
    /// The session directory; `None`: `FREERIDE_DIR`, else `/dev/shm/freeride-<uid>`.
    pub session_dir: Option<PathBuf>,
    pub no_agent: NoAgent,
    /// Until a step's duration is learned, the first ("probe") step runs only in a grant with at
    /// least this much time (and budget) left.
    pub probe_min_grant_ns: u64,
    /// The learned estimate is `margin` x the `quantile` of the last `window` step durations
    /// (FreeRide: 1.2 x the median; we take a higher quantile to absorb jitter).
    pub margin: f64,
    pub quantile: f64,
    pub window: usize,
    /// An estimate that holds the task through this many grants in a row that a step would fit
    /// by `margin` x the median (the prior approach's rule) but does not by the estimate comes
    /// down by one sample: the largest is replaced by the median (a slow spell left the window's
    /// high quantile above every grant, and without steps it would never age out). Never below
    /// `margin` x the median, so a task slower than every grant stays held. 0: never.
    pub relax_after_grants: u32,
    /// A cap on the device memory this task may hold, on top of the grant's `mem_budget_bytes`.
    pub mem_cap_bytes: Option<u64>,
    /// Polling a grant that is open but whose heartbeat is stale (the agent's next heartbeat
    /// reopens it and wakes nobody), or a block mid-update: sleeps grow from `poll_min_us` to
    /// `poll_max_us`. A closed grant is not polled: the agent's next publish wakes the task.
    pub poll_min_us: u64,
    pub poll_max_us: u64,
    /// Polling for an agent that is not there (no grant file).
    pub no_agent_poll_ms: u64,
    /// A grant whose heartbeat is older than this is closed, as is an open grant whose heartbeat
    /// is older than the freshness limit it carries (the agent's: 1 ms) (0: ignore the heartbeat).
    pub heartbeat_stale_ms: u64,
    /// Priority among the side tasks of a GPU (higher first): the agent gives each bubble to the
    /// most important tasks whose next step fits; a task below a grant's `min_priority` waits.
    pub priority: u64,
    /// `sidetask-<pid>.json` in the session directory: written at most this often (and at every
    /// life-cycle transition).
    pub status_interval_ms: u64,
    pub write_status: bool,
    /// SIGTERM requests a clean stop (the task ends `stopped` after its current step).
    pub handle_sigterm: bool,
    /// Iterative runtime: start the next step while earlier ones still run on the GPU when all of
    /// them still fit in the grant, so the GPU is not idle between steps.
    pub overlap_steps: bool,
    /// With `overlap_steps`: the most steps on the GPU at once (the running one and those queued
    /// behind it), each started only while all of them still fit the grant. More ride out longer
    /// stalls of the task's host thread; all of them drain when a grant closes early. 2 is "one
    /// step ahead". Default 3.
    pub steps_in_flight: u32,
    /// The task's threads run at this nice value (0..=19; 0: as started), so the trainer's host
    /// threads get the CPU first (see `freeride_abi::cpu`). Default 19.
    pub cpu_nice: i32,
}

impl Default for TaskConfig {
    fn default() -> Self {
        TaskConfig {
            name: "sidetask".into(),
            device: 0,
            session_dir: None,
            no_agent: NoAgent::Wait,
            probe_min_grant_ns: 2_000_000,
            margin: 1.2,
            quantile: 0.9,
            window: 64,
            relax_after_grants: 64,
            mem_cap_bytes: None,
            poll_min_us: 50,
            poll_max_us: 200,
            no_agent_poll_ms: 10,
            heartbeat_stale_ms: 1_000,
            priority: 0,
            status_interval_ms: 100,
            write_status: true,
            handle_sigterm: true,
            overlap_steps: true,
            steps_in_flight: 3,
            cpu_nice: freeride_abi::cpu::DEFAULT_SIDETASK_NICE,
        }
    }
}

impl TaskConfig {
    pub fn named(name: &str) -> Self {
        TaskConfig {
            name: name.into(),
            ..Default::default()
        }
        .with_env()
    }

    /// The defaults with the environment overrides applied.
    pub fn from_env() -> Self {
        TaskConfig::default().with_env()
    }

    /// Parses a JSON object (unknown keys are an error), then applies the environment overrides.
    pub fn from_json(json: &str) -> Result<Self> {
        let json = if json.trim().is_empty() { "{}" } else { json };
        let c: TaskConfig =
            serde_json::from_str(json).map_err(|e| SdkError::Config(e.to_string()))?;
        let c = c.with_env();
        c.validate()?;
        Ok(c)
    }

    pub fn with_env(mut self) -> Self {
        if let Some(d) = std::env::var(ENV_DEVICE)
            .ok()
            .and_then(|v| v.trim().parse().ok())
        {
            self.device = d;
        }
        if std::env::var(ENV_STANDALONE).is_ok_and(|v| v == "1" || v == "true") {
            self.no_agent = NoAgent::Standalone;
        }
        if let Ok(v) = std::env::var(freeride_abi::cpu::ENV_SIDETASK_NICE) {
            // Out of range: refused by `validate`, which names the variable.
            self.cpu_nice = freeride_abi::cpu::parse_nice(&v).unwrap_or(-1);
        }
        self
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(SdkError::Config(m.into()));
        if !(self.margin >= 1.0 && self.margin.is_finite()) {
            return bad("margin must be >= 1");
        }
        if !(0.0..=1.0).contains(&self.quantile) {
            return bad("quantile must be within 0..=1");
        }
        if self.window == 0 {
            return bad("window must be > 0");
        }
        if self.poll_min_us == 0 || self.poll_max_us < self.poll_min_us {
            return bad("need 0 < poll_min_us <= poll_max_us");
        }
        if !(1..=8).contains(&self.steps_in_flight) {
            return bad("steps_in_flight must be within 1..=8");
        }
        if !(0..=19).contains(&self.cpu_nice) {
            return bad(&format!(
                "cpu_nice must be within 0..=19 ({} too)",
                freeride_abi::cpu::ENV_SIDETASK_NICE
            ));
        }
        Ok(())
    }

    /// The session directory this task uses.
    pub fn session_dir(&self) -> PathBuf {
        self.session_dir
            .clone()
            .unwrap_or_else(freeride_abi::session::resolve_dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_defaults_and_errors() {
        let c =
            TaskConfig::from_json(r#"{"name":"x","device":3,"no_agent":"standalone"}"#).unwrap();
        assert_eq!(c.name, "x");
        assert_eq!(c.no_agent, NoAgent::Standalone);
        assert_eq!(c.window, 64);
        assert!(TaskConfig::from_json("{}").is_ok());
        assert!(TaskConfig::from_json(r#"{"nonsense":1}"#).is_err());
        assert!(TaskConfig::from_json(r#"{"margin":0.5}"#).is_err());
        assert_eq!(c.cpu_nice, 19);
        assert_eq!(c.steps_in_flight, 3);
        assert!(TaskConfig::from_json(r#"{"steps_in_flight":0}"#).is_err());
        assert!(TaskConfig::from_json(r#"{"steps_in_flight":9}"#).is_err());
        assert!(TaskConfig::from_json(r#"{"cpu_nice":20}"#).is_err());
        assert_eq!(
            TaskConfig::from_json(r#"{"cpu_nice":0}"#).unwrap().cpu_nice,
            0
        );
        assert!(TaskConfig::from_json("not json").is_err());
    }
}
