//! Tiny argument parsing shared by the examples: the common options (`--device N`, `--name S`,
//! `--session-dir P`, `--standalone`, `--probe-min-us N`, `--mem-cap-mib N`, `--priority N`,
//! `--overlap 0|1` (`overlap_steps`), `--in-flight N` (`steps_in_flight`), `--nice N`
//! (`cpu_nice`), `--margin X`), plus the `--key value` options each task declares
//! ([`TaskOption`]). Anything else is refused (exit status 2, as for every usage error);
//! `--help` prints them all and exits 0.
use crate::config::{NoAgent, TaskConfig};
use std::collections::HashMap;

/// An option of one task: `--key VALUE`, and what it means (for `--help`).
#[derive(Clone, Copy, Debug)]
pub struct TaskOption {
    pub key: &'static str,
    pub help: &'static str,
}

/// Shorthand for a [`TaskOption`].
pub const fn opt(key: &'static str, help: &'static str) -> TaskOption {
    TaskOption { key, help }
}

/// The options every task takes, with their help (`--standalone` takes no value).
const COMMON: [(&str, &str); 11] = [
    ("device N", "the GPU to run on (default 0)"),
    ("name S", "the task's name in its status file"),
    (
        "session-dir P",
        "the agent's session directory (default $FREERIDE_DIR, else /dev/shm/freeride-<uid>)",
    ),
    (
        "standalone",
        "run freely when no agent serves the session (default: wait for one)",
    ),
    (
        "probe-min-us N",
        "the shortest grant worth a probe step, µs",
    ),
    (
        "mem-cap-mib N",
        "device memory the task may hold at most, MiB",
    ),
    (
        "priority N",
        "grants reserved for more important tasks hold it (default 0)",
    ),
    (
        "overlap 0|1",
        "queue the next step while one runs (default 1)",
    ),
    ("in-flight N", "steps queued on the GPU at most"),
    (
        "nice N",
        "CPU priority of the task's threads, 0..=19 (default 19)",
    ),
    (
        "margin X",
        "a step starts when X times its estimate fits (>= 1)",
    ),
];

pub struct Args {
    pub config: TaskConfig,
    rest: HashMap<String, String>,
    known: Vec<&'static str>,
}

/// The usage text of a task named `name` with the options `options`.
pub fn usage(name: &str, about: &str, options: &[TaskOption]) -> String {
    let mut s = format!("{name}: {about}\n\nUsage: {name} [OPTIONS]\n\nOptions of this task:\n");
    let width = options
        .iter()
        .map(|o| o.key.len() + 6)
        .chain(COMMON.iter().map(|(k, _)| k.len()))
        .max()
        .unwrap_or(0);
    for o in options {
        s.push_str(&format!(
            "  --{:width$}  {}\n",
            format!("{} VALUE", o.key),
            o.help
        ));
    }
    s.push_str("\nOptions of every side task:\n");
    for (k, h) in COMMON {
        s.push_str(&format!("  --{k:width$}  {h}\n"));
    }
    s.push_str(&format!("  --{:width$}  print this help\n", "help"));
    s
}

impl Args {
    /// Parses `std::env::args()`: prints the usage and exits 0 on `--help`; exits 2 with a
    /// message on anything else it does not take.
    pub fn from_env(name: &str, about: &str, options: &[TaskOption]) -> Args {
        match Args::parse(name, options, std::env::args().skip(1)) {
            Ok(Some(a)) => a,
            Ok(None) => {
                print!("{}", usage(name, about, options));
                std::process::exit(0);
            }
            Err(e) => {
                eprintln!("{name}: {e} (see {name} --help)");
                std::process::exit(2);
            }
        }
    }

    /// The arguments, or `None` for `--help` / `-h` (print [`usage`]).
    pub fn parse(
        default_name: &str,
        options: &[TaskOption],
        args: impl IntoIterator<Item = String>,
    ) -> Result<Option<Args>, String> {
        let mut config = TaskConfig::named(default_name);
        let mut rest = HashMap::new();
        let mut it = args.into_iter();
        while let Some(a) = it.next() {
            if a == "--help" || a == "-h" {
                return Ok(None);
            }
            let Some(key) = a.strip_prefix("--") else {
                return Err(format!("unexpected argument {a:?}"));
            };
            if key == "standalone" {
                config.no_agent = NoAgent::Standalone;
                continue;
            }
            // `--key=value` as well as `--key value`.
            let (key, inline) = match key.split_once('=') {
                Some((k, v)) => (k, Some(v.to_string())),
                None => (key, None),
            };
            let common = COMMON.iter().any(|(k, _)| k.split(' ').next() == Some(key));
            if !common && !options.iter().any(|o| o.key == key) {
                return Err(format!("unknown option --{key}"));
            }
            let val = match inline {
                Some(v) => v,
                None => it.next().ok_or_else(|| format!("--{key} needs a value"))?,
            };
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
        Ok(Some(Args {
            config,
            rest,
            known: options.iter().map(|o| o.key).collect(),
        }))
    }

    fn value(&self, key: &str) -> Option<&String> {
        debug_assert!(
            self.known.contains(&key),
            "--{key} is not among the task's declared options"
        );
        self.rest.get(key)
    }

    /// A task-specific numeric option.
    pub fn get_u64(&self, key: &str, default: u64) -> u64 {
        match self.value(key) {
            None => default,
            Some(v) => v.parse().unwrap_or_else(|_| {
                eprintln!("--{key}: not a number: {v}");
                std::process::exit(2)
            }),
        }
    }

    pub fn get_f64(&self, key: &str, default: f64) -> f64 {
        match self.value(key) {
            None => default,
            Some(v) => v.parse().unwrap_or_else(|_| {
                eprintln!("--{key}: not a number: {v}");
                std::process::exit(2)
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPTS: [TaskOption; 2] = [opt("nodes", "graph nodes"), opt("tol", "tolerance")];

    fn parse(args: &[&str]) -> Result<Option<Args>, String> {
        Args::parse("t", &OPTS, args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn unknown_options_are_refused_and_declared_ones_read() {
        let e = parse(&["--bogus", "1"]).err().unwrap();
        assert!(e.contains("unknown option --bogus"), "{e}");
        let Ok(Some(a)) = parse(&["--nodes", "7", "--tol=0.5", "--device", "3"]) else {
            panic!("declared options refused");
        };
        assert_eq!(a.get_u64("nodes", 1), 7);
        assert_eq!(a.get_f64("tol", 1.0), 0.5);
        assert_eq!(a.config.device, 3);
        assert!(parse(&["--nodes"]).err().unwrap().contains("needs a value"));
    }

    #[test]
    fn help_is_not_a_value_hungry_option() {
        for h in ["--help", "-h"] {
            let Ok(None) = parse(&["--device", "0", h]) else {
                panic!("{h} not taken as help");
            };
        }
        let u = usage("t", "a test task", &OPTS);
        for k in [
            "--nodes VALUE",
            "graph nodes",
            "--device N",
            "--standalone",
            "--help",
        ] {
            assert!(u.contains(k), "usage lacks {k}:\n{u}");
        }
    }
}
