//! Tiny argument parsing shared by the examples: `--device N`, `--name S`, `--session-dir P`,
//! `--standalone`, `--probe-min-us N`, `--mem-cap-mib N`, `--overlap 0|1` (`overlap_steps`),
//! `--in-flight N` (`steps_in_flight`), `--nice N` (`cpu_nice`), plus
//! task-specific `--key value` pairs.
use crate::config::{NoAgent, TaskConfig};
use std::collections::HashMap;

pub struct Args {
    pub config: TaskConfig,
    rest: HashMap<String, String>,
}

impl Args {
    /// Parses `std::env::args()`; exits with a message on a malformed argument.
    pub fn from_env(default_name: &str) -> Args {
        match Args::parse(default_name, std::env::args().skip(1)) {
            Ok(a) => a,
            Err(e) => {
                eprintln!("{default_name}: {e}");
                std::process::exit(2);
            }
        }
    }

    pub fn parse(
        default_name: &str,
        args: impl IntoIterator<Item = String>,
    ) -> Result<Args, String> {
        let mut config = TaskConfig::named(default_name);
        let mut rest = HashMap::new();
        let mut it = args.into_iter();
        while let Some(a) = it.next() {
            let Some(key) = a.strip_prefix("--") else {
                return Err(format!("unexpected argument {a:?}"));
            };
            if key == "standalone" {
                config.no_agent = NoAgent::Standalone;
                continue;
            }
            let val = it.next().ok_or_else(|| format!("--{key} needs a value"))?;
            let num = || {
                val.parse::<u64>()
                    .map_err(|_| format!("--{key}: not a number: {val}"))
            };
            match key {
                "device" => config.device = num()? as u32,
                "name" => config.name = val.clone(),
                "session-dir" => config.session_dir = Some(val.clone().into()),
                "probe-min-us" => config.probe_min_grant_ns = num()? * 1_000,
                "mem-cap-mib" => config.mem_cap_bytes = Some(num()? << 20),
                "priority" => config.priority = num()?,
                "overlap" => config.overlap_steps = num()? != 0,
                "in-flight" => {
                    config.steps_in_flight = u32::try_from(num()?)
                        .map_err(|_| format!("--in-flight: too large: {val}"))?
                }
                "nice" => {
                    config.cpu_nice = freeride_abi::cpu::parse_nice(&val)
                        .ok_or_else(|| format!("--nice: a nice value from 0 to 19, got {val}"))?
                }
                "margin" => {
                    config.margin = val
                        .parse::<f64>()
                        .ok()
                        .filter(|m| *m >= 1.0)
                        .ok_or_else(|| format!("--margin: a number >= 1, got {val}"))?
                }
                _ => {
                    rest.insert(key.to_string(), val);
                }
            }
        }
        Ok(Args { config, rest })
    }

    /// A task-specific numeric option.
    pub fn get_u64(&self, key: &str, default: u64) -> u64 {
        match self.rest.get(key) {
            None => default,
            Some(v) => v.parse().unwrap_or_else(|_| {
                eprintln!("--{key}: not a number: {v}");
                std::process::exit(2)
            }),
        }
    }

    pub fn get_f64(&self, key: &str, default: f64) -> f64 {
        match self.rest.get(key) {
            None => default,
            Some(v) => v.parse().unwrap_or_else(|_| {
                eprintln!("--{key}: not a number: {v}");
                std::process::exit(2)
            }),
        }
    }
}
