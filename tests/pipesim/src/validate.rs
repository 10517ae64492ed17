//! Every rank's programs through the model before anything starts: a job that cannot complete
//! (a CSV with a cycle of waits, a receive whose send is never reached) is refused with a message
//! naming where each rank stops, never run into a hang; a job that can gets its expected timing.
use crate::config::JobConfig;
use crate::lower;
use crate::model::{self, Cost, ModelResult};
use crate::noise::Noise;
use crate::program::{JobPlan, Program};

/// Every rank's program of iteration `it`.
pub fn programs(cfg: &JobConfig, plan: &JobPlan, it: u32) -> Result<Vec<Program>, String> {
    (0..cfg.topology().world())
        .map(|r| lower::program(cfg, plan, r, it))
        .collect()
}

/// The iterations whose programs differ in shape: the first, and the first after a change.
fn shapes(cfg: &JobConfig) -> Vec<u32> {
    let mut v = vec![0];
    if let Some(c) = cfg.change {
        v.push(c.at_iteration);
    }
    v
}

/// Checks that the job can complete; returns the model of its first iteration without noise,
/// with the simulated GPU's NCCL cost (`Cost::from_env`).
pub fn validate(cfg: &JobConfig) -> Result<ModelResult, String> {
    let plan = lower::plan_job(cfg)?;
    for it in shapes(cfg).into_iter().skip(1) {
        let progs = programs(cfg, &plan, it)?;
        model::run(&plan, &progs, Cost::from_env())?;
    }
    expected(cfg, Cost::from_env())
}

/// The model of iteration 0 without noise, at `cost`.
pub fn expected(cfg: &JobConfig, cost: Cost) -> Result<ModelResult, String> {
    let quiet = JobConfig {
        noise: Noise {
            seed: cfg.noise.seed,
            ..Noise::default()
        },
        ..cfg.clone()
    };
    let plan = lower::plan_job(&quiet)?;
    let progs = programs(&quiet, &plan, 0)?;
    model::run(&plan, &progs, cost)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::JobArgs;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        job: JobArgs,
    }

    fn job(args: &[&str]) -> JobConfig {
        let mut argv = vec!["pipesim"];
        argv.extend_from_slice(args);
        Cli::parse_from(argv).job.to_config().unwrap()
    }

    fn dir() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schedules/torch")
    }

    /// Every reference CSV reproduces its iteration and idle per rank exactly in the model
    /// (F = I = W = 1 unit, zero send latency).
    #[test]
    fn every_torch_schedule_matches_its_reference() {
        let index: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir().join("index.json")).unwrap())
                .unwrap();
        let unit = 1000.0;
        for s in index["schedules"].as_array().unwrap() {
            let file = dir().join(s["file"].as_str().unwrap());
            let ms = (unit / 1e6).to_string();
            let cfg = job(&[
                "--schedule-csv",
                file.to_str().unwrap(),
                "--f",
                &ms,
                "--b",
                &ms,
                "--w",
                &ms,
            ]);
            let r = expected(&cfg, Cost::FREE).unwrap();
            let it = s["reference"]["iteration"].as_f64().unwrap();
            let idle = s["reference"]["idle_per_rank"].as_f64().unwrap();
            assert_eq!(r.makespan_ns as f64, it * unit, "{}", file.display());
            for (k, rank) in r.ranks.iter().enumerate() {
                assert_eq!(
                    rank.idle_ns as f64,
                    idle * unit,
                    "{} rank {k}",
                    file.display()
                );
            }
        }
    }

    /// Every reference CSV with receives posted early completes when every send is larger than
    /// NCCL's buffer and waits for its receiver. (With deferred receives none does, on per-pair
    /// or shared streams: two ranks each send to the other before posting the other's receive on
    /// the same stream, a deadlock in NCCL too; TESTBED.md, "NCCL".)
    #[test]
    fn every_torch_schedule_completes_with_sends_beyond_the_buffer() {
        let index: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir().join("index.json")).unwrap())
                .unwrap();
        let cost = Cost {
            base_ns: 0,
            ps_per_byte: 100,
            buffer_bytes: 1 << 20,
        };
        let early = index["schedules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| !s["file"].as_str().unwrap().contains("deferred"));
        for s in early {
            let file = dir().join(s["file"].as_str().unwrap());
            let cfg = job(&["--schedule-csv", file.to_str().unwrap(), "--comm", "2"]);
            let plan = lower::plan_job(&cfg).unwrap();
            let progs = programs(&cfg, &plan, 0).unwrap();
            if let Err(e) = model::run(&plan, &progs, cost) {
                panic!("{}: {e}", file.display());
            }
        }
    }
}

#[cfg(test)]
mod builtin_tests {
    use super::*;
    use crate::cli::JobArgs;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        job: JobArgs,
    }

    pub(super) fn job(args: &[&str]) -> Result<JobConfig, String> {
        let mut argv = vec!["pipesim"];
        argv.extend_from_slice(args);
        Cli::parse_from(argv).job.to_config()
    }

    /// TP x PP x DP 1F1B in the model agrees with the closed form extended by the communication
    /// times (`sim::closed_form_3d`), with and without sequence parallelism and the distributed
    /// optimizer, communication shorter and longer than the kernels it overlaps.
    #[test]
    fn three_d_matches_the_closed_form() {
        // Every send eager, as the closed form assumes.
        let cost = Cost {
            base_ns: 0,
            ps_per_byte: 100,
            buffer_bytes: 0,
        };
        for sp in [false, true] {
            for distopt in [false, true] {
                for (tp_comm, dp_comm) in [(0.1, 2.0), (3.0, 1.0), (0.0, 0.0)] {
                    for (p, m, layers) in [(4u64, 8u64, 2u64), (2, 4, 1), (3, 6, 3)] {
                        let (ps, ms, ls) = (p.to_string(), m.to_string(), layers.to_string());
                        let (tc, dc) = (tp_comm.to_string(), dp_comm.to_string());
                        let mut args = vec![
                            "--stages",
                            &ps,
                            "--microbatches",
                            &ms,
                            "--layers",
                            &ls,
                            "--tp",
                            "2",
                            "--dp",
                            "2",
                            "--dp-buckets",
                            "2",
                            "--tp-comm",
                            &tc,
                            "--dp-comm",
                            &dc,
                            "--allreduce",
                            "1.5",
                            "--clip-grad",
                            "--f",
                            "12",
                            "--b",
                            "12",
                            "--w",
                            "12",
                        ];
                        if sp {
                            args.push("--sequence-parallel");
                        }
                        if distopt {
                            args.push("--distributed-optimizer");
                        }
                        let what = format!("{args:?}");
                        let cfg = job(&args).unwrap_or_else(|e| panic!("{what}: {e}"));
                        let r = expected(&cfg, cost).unwrap();
                        let want = crate::sim::closed_form_3d(&crate::sim::ThreeD {
                            p,
                            m,
                            f_ns: 12_000_000,
                            b_ns: 12_000_000,
                            w_ns: 12_000_000,
                            layers,
                            tp: true,
                            sequence_parallel: sp,
                            tp_comm_ns: (tp_comm * 1e6) as u64,
                            dp: true,
                            buckets: 2,
                            dp_comm_ns: (dp_comm * 1e6) as u64,
                            distributed_optimizer: distopt,
                            // The loss all-reduce runs over all 4p ranks: 2(n-1)/n of its bytes.
                            loss_ns: cost
                                .transfer_of_collective(cfg.allreduce_bytes(), 4 * p as usize),
                        });
                        assert_eq!(r.makespan_ns, want.iteration_ns, "{what}");
                        for (k, rank) in r.ranks.iter().enumerate() {
                            assert_eq!(rank.idle_ns, want.idle_ns, "{what} rank {k}");
                            assert_eq!(
                                rank.idle_without_transfers_ns, want.idle_without_transfers_ns,
                                "{what} rank {k}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// A built-in schedule's arguments.
    fn schedule_args<'a>(sched: &'a str, p: &'a str, m: &'a str, style: &'a str) -> Vec<&'a str> {
        vec![
            "--schedule",
            sched,
            "--stages",
            p,
            "--microbatches",
            m,
            "--style",
            style,
        ]
    }

    /// Every built-in schedule in every style completes when every send is larger than NCCL's
    /// buffer and so waits for its receiver (each side's sends meet the other's receives in the
    /// same order, as the frameworks arrange), and takes no less time than with eager sends:
    /// Megatron's batched groups, its interleaved schedule with and without `overlap_p2p_comm`
    /// (its own calls, `lower::interleaved`), DeepSpeed's blocking steps, torch's single-stage
    /// schedules.
    #[test]
    fn builtin_schedules_complete_with_sends_beyond_the_buffer() {
        let eager = Cost {
            base_ns: 0,
            ps_per_byte: 100,
            buffer_bytes: 0,
        };
        let rendezvous = Cost {
            buffer_bytes: 1 << 20,
            ..eager
        };
        let mut runs = 0;
        for style in ["batched", "blocking", "torch", "overlapped"] {
            for sched in ["gpipe", "1f1b", "zbh1", "interleaved"] {
                if style == "overlapped" && sched != "interleaved" {
                    continue;
                }
                for p in [2u32, 3, 4, 8] {
                    let shapes = if sched == "interleaved" {
                        [(p, 2), (2 * p, 2), (3 * p, 3)]
                    } else {
                        [(p, 1), (2 * p, 1), (8, 1)]
                    };
                    for (m, v) in shapes {
                        let (ps, ms, vs) = (p.to_string(), m.to_string(), v.to_string());
                        let mut args = schedule_args(sched, &ps, &ms, style);
                        args.extend(["--comm", "2"]);
                        if v > 1 {
                            args.extend(["--chunks", &vs]);
                        }
                        let what = format!("{args:?}");
                        let cfg = job(&args).unwrap_or_else(|e| panic!("{what}: {e}"));
                        let plan = lower::plan_job(&cfg).unwrap();
                        let progs = programs(&cfg, &plan, 0).unwrap();
                        let slow = model::run(&plan, &progs, rendezvous)
                            .unwrap_or_else(|e| panic!("{what}: {e}"));
                        let fast = model::run(&plan, &progs, eager).unwrap();
                        assert!(slow.makespan_ns >= fast.makespan_ns, "{what}");
                        runs += 1;
                    }
                }
            }
        }
        assert_eq!(runs, 3 * 3 * 4 * 3 + 4 * 4 * 3);
    }

    /// Every built-in schedule in every style has the op-level model's makespan and idle.
    #[test]
    fn builtin_schedules_in_every_style_match_the_op_model() {
        for style in ["batched", "blocking", "torch", "overlapped"] {
            for (sched, v) in [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zbh1", 1)] {
                for p in [1u32, 2, 3, 4] {
                    for m in [p, 2 * p, 8] {
                        if sched == "interleaved" && m % p != 0 {
                            continue;
                        }
                        let (ps, ms, vs) = (p.to_string(), m.to_string(), v.to_string());
                        let mut args = schedule_args(sched, &ps, &ms, style);
                        args.extend(["--f", "0.012", "--b", "0.012", "--w", "0.012"]);
                        if sched == "interleaved" {
                            args.extend(["--chunks", &vs]);
                        }
                        let what = format!("{args:?}");
                        let cfg = match job(&args) {
                            Ok(c) => c,
                            Err(e) if style == "overlapped" && sched != "interleaved" => {
                                assert!(e.contains("interleaved"), "{what}: {e}");
                                continue;
                            }
                            Err(e) => panic!("{what}: {e}"),
                        };
                        let r = expected(&cfg, Cost::FREE).unwrap();
                        let op = crate::sim::simulate(&cfg.shape.plan().unwrap(), 0).unwrap();
                        assert_eq!(r.makespan_ns, op.makespan_ns, "{what}");
                        let idle: Vec<u64> = r.ranks.iter().map(|x| x.idle_ns).collect();
                        assert_eq!(idle, op.idle_ns, "{what}");
                    }
                }
            }
        }
    }
}
