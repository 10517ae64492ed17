#!/usr/bin/env python3
"""Part 3 of the GPU check: side-task gating on a real GPU (no torch needed here: it orchestrates).

Configurations (each a fresh session directory; all trainers run under `freeride run --role
trainer`, i.e. observed, so the comparison isolates the side task's effect):
  alone          trainer + `freeride agent`, no side task (calibrates the trainer's work, which
                 every later configuration reuses: same matmuls, same exchange size);
  side_alone     the PyTorch side task alone on the GPU, ungated (its full-GPU throughput);
  gated_agent    trainer + `freeride agent` (real bubble inference and grants) + the side task
                 under `freeride run --role sidetask`;
  gated_standin  trainer writing the grant block itself (Python stand-in for the agent, opening
                 grants exactly in its known gaps) + the gated side task: tests the interposer's
                 gate independently of the agent's inference;
  ungated        trainer + agent + the same side task without freeride (naive co-location);
  alone_stall,   the same trainer with a host stall of --stall-ms after each iteration (a data
  gated_agent_stall  loader's: the GPU idle, the host outside CUDA), alone, then with the gated side
                 task and the real agent: the agent's long-pause grants (a single-channel self-copy
                 transfers, so the agent rightly sees no bubble in it; a stall is the one idle time
                 one GPU can show it).
For each: trainer iteration/busy/gap times (p50/p90), side-task steps/s and TFLOP/s inside the
trainer's measurement window, grants seen (a sampler of GPU 0's grant block), the gate's own counters
(FREERIDE_GATE_VERBOSE=1 line), and the agent's status (bubbles found).

The SDK side task (target/release/examples/train_loop) is not part of this: its kernels are the
test bed's simulated ones (sidetask-sdk/src/gpu.rs loads a dummy module image and launches
kernels by name, which a real driver rejects); gpu-check.sh runs it once as a probe and records
the outcome.
"""
import argparse
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import log, now_ns, write_json, read_json  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
GATE_RE = re.compile(r"freeride gate: admitted=(\d+) held=(\d+) wait_ms=([\d.]+) inflight_max=(\d+) starved=(\d+)")
KINDS = ("alone", "side_alone", "gated_agent", "gated_standin", "ungated", "alone_stall", "gated_agent_stall")


def clean_env(extra=None):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    for k in list(env):
        if k.startswith("FREERIDE_"):
            env.pop(k)
    env.update(extra or {})
    return env


def count_steps(path, t0, t1):
    """Steps finished inside [t0, t1], all steps, and the first step's end (None without one)."""
    n = 0
    total = 0
    first = None
    try:
        with open(path) as f:
            for line in f:
                try:
                    t = int(line)
                except ValueError:
                    continue
                total += 1
                first = t if first is None else min(first, t)
                if t0 <= t <= t1:
                    n += 1
    except OSError:
        pass
    return n, total, first


def wait_files(paths, timeout, procs):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if all(os.path.exists(p) for p in paths):
            return True
        if any(p.poll() is not None for p in procs):
            return False
        time.sleep(0.05)
    return False


class Runner:
    def __init__(self, args):
        self.a = args
        self.freeride = os.path.join(args.bin, "freeride")
        self.calib = {}
        if args.calib:
            c = read_json(args.calib, {}) or {}
            self.calib = c.get("calib", {}) or {}
        self.mps = args.mode == "mps"
        self.trainer_env = {"NCCL_MAX_NCHANNELS": "1", "NCCL_MIN_NCHANNELS": "1", "NCCL_MAX_P2P_NCHANNELS": "1",
                            "NCCL_DEBUG": "WARN"}
        if self.mps:
            # NCCL's cuMem buffers are not needed for a self exchange; legacy allocations are the
            # safe choice under MPS.
            self.trainer_env["NCCL_CUMEM_ENABLE"] = "0"

    def left(self):
        return (self.a.deadline - time.time()) if self.a.deadline else 1e9

    def run_config(self, kind):
        a = self.a
        name = "%s-%s" % (a.mode, kind)
        wd = os.path.join(a.workdir, name)
        os.makedirs(wd, exist_ok=True)
        sess = common.make_session_dir(os.path.join(a.session_root, name))
        grant_path = common.grant_path_of(sess, 0)
        res = {"kind": kind, "errors": []}
        uses_agent = kind in ("alone", "gated_agent", "ungated", "alone_stall", "gated_agent_stall")
        has_trainer = kind != "side_alone"
        gated = kind in ("gated_agent", "gated_standin", "gated_agent_stall")
        n_side = 0 if kind in ("alone", "alone_stall") else a.sidetasks
        res["agent"] = ("freeride agent" if uses_agent else
                        "python stand-in (trainer writes GPU 0's grant block)" if kind == "gated_standin" else "none")
        agent = None
        sides = []
        monitor = None
        stop_file = os.path.join(wd, "stop")
        t0 = t1 = None
        try:
            if uses_agent:
                agent = common.Child("agent", [self.freeride, "agent", "--dir", sess, "--metrics-port", "0"],
                                     os.path.join(wd, "agent.log"), env=clean_env())
            if has_trainer:
                monitor = common.GrantMonitor(grant_path)
                monitor.start()
            for k in range(n_side):
                cmd = [a.python, os.path.join(HERE, "gating_sidetask.py"),
                       "--steps-file", os.path.join(wd, "side%d.steps" % k),
                       "--ready-file", os.path.join(wd, "side%d.ready" % k),
                       "--stop-file", stop_file, "--out", os.path.join(wd, "side%d.json" % k),
                       "--max-seconds", str(max(30.0, min(a.config_timeout, self.left())))]
                env = clean_env()
                if gated:
                    cmd = [self.freeride, "run", "--role", "sidetask", "--dir", sess, "--"] + cmd
                    env["FREERIDE_GATE_VERBOSE"] = "1"
                sides.append(common.Child("side%d" % k, cmd, os.path.join(wd, "side%d.log" % k), env=env))
            if sides and not wait_files([os.path.join(wd, "side%d.ready" % k) for k in range(n_side)],
                                        min(60.0, self.left() - 10), [s.p for s in sides]):
                raise RuntimeError("side task(s) not ready: " + " | ".join(s.output_tail(600) for s in sides))
            if agent is not None and agent.poll() is not None:
                raise RuntimeError("agent exited: " + agent.output_tail(800))
            if not has_trainer:
                # side task alone: skip its start-up, then a fixed window
                end = time.monotonic() + 30
                while time.monotonic() < end and count_steps(os.path.join(wd, "side0.steps"), 0, 1 << 63)[1] < 5:
                    if sides[0].poll() is not None:
                        raise RuntimeError("side task exited: " + sides[0].output_tail(800))
                    time.sleep(0.1)
                t0 = now_ns()
                time.sleep(a.side_window_s)
                t1 = now_ns()
            else:
                out = os.path.join(wd, "trainer.json")
                cmd = [self.freeride, "run", "--role", "trainer", "--dir", sess, "--",
                       a.python, os.path.join(HERE, "gating_trainer.py"), "--out", out,
                       "--filestore", os.path.join(wd, "filestore"),
                       "--warmup", str(a.warmup), "--iters", str(a.iters), "--max-seconds", str(a.max_seconds),
                       "--compute-ms", str(a.compute_ms), "--gap-ms", str(a.gap_ms)]
                for key, flag in (("n_matmul", "--n-matmul"), ("gap_bytes", "--gap-bytes"), ("gap_est_ns", "--gap-est-ns")):
                    if self.calib.get(key):
                        cmd += [flag, str(self.calib[key])]
                if kind == "gated_standin":
                    cmd += ["--standin-grant", grant_path]
                if kind.endswith("_stall"):
                    cmd += ["--stall-ms", str(a.stall_ms)]
                tmo = min(a.config_timeout, self.left() - 15)
                if tmo < 20:
                    raise RuntimeError("out of time")
                rc, secs, tl = common.run_child("trainer", cmd, os.path.join(wd, "trainer.log"), tmo,
                                                env=clean_env(self.trainer_env))
                tr = read_json(out)
                if rc != 0 or tr is None or tr.get("status") != "ok":
                    raise RuntimeError("trainer rc=%s after %.0f s: %s" % (rc, secs, tl[-1500:]))
                res["trainer"] = {k: tr.get(k) for k in ("iterations", "iter_ms", "busy_ms", "gap_ms", "n_matmul",
                                                         "gap_bytes", "gap_est_ns", "matmul_ms", "exchange_gbps",
                                                         "data_ok", "nccl_init_s", "standin_grant_window_ms",
                                                         "nccl_env", "mps")}
                t0, t1 = tr["t0_ns"], tr["t1_ns"]
                if kind == "alone":
                    self.calib = {k: tr.get(k) for k in ("n_matmul", "gap_bytes", "gap_est_ns")}
                st = read_json(os.path.join(sess, "agent-status.json"))
                if st:
                    res["agent_status"] = {"gpus": st.get("gpus"), "sidetasks": st.get("sidetasks"),
                                           "processes": [{k: p.get(k) for k in ("pid", "role", "events", "dropped", "invalid")}
                                                         for p in st.get("processes", [])]}
        except Exception as e:
            res["errors"].append(str(e)[-2500:])
            log("gating %s: ERROR %s" % (name, str(e)[-300:]))
        finally:
            self.stop_all(agent, sides, stop_file, grant_path, gated, res)
            if monitor is not None:
                monitor.stop()
            # The watchdog's evictions, as the agent logged them (a gated side task evicted as hung
            # on the first run of 2026-12-04; its likely cause is fixed since: this shows whether).
            try:
                with open(os.path.join(wd, "agent.log")) as f:
                    res["evictions"] = [l.strip() for l in f if "evicted side task" in l]
            except OSError:
                pass
        if t0 is not None and t1 is not None and t1 > t0:
            span = (t1 - t0) / 1e9
            res["window_s"] = span
            if monitor is not None:
                res["grants"] = monitor.stats(t0, t1)
            tot_steps = 0
            flops = 0.0
            for k in range(n_side):
                n, total, first = count_steps(os.path.join(wd, "side%d.steps" % k), t0, t1)
                sj = read_json(os.path.join(wd, "side%d.json" % k), {}) or {}
                fps = sj.get("flops_per_step") or 6.0 * 2048 * 4096 * 4096 * 4
                tot_steps += n
                flops += n * fps
                side = {"steps_in_window": n, "steps_total": total, "steps_per_s": n / span,
                        "losses_sampled": sj.get("losses_sampled")}
                # A side task's first step loads its kernels' modules (6.5 s on the H200 of
                # 2026-12-04, gated or not): its rate from its first step's end on is what the
                # grants let it do, the window's rate mixes in its start-up.
                if first is not None:
                    side["first_step_after_window_start_s"] = (first - t0) / 1e9
                    if t0 <= first < t1:
                        side["steps_per_s_after_first_step"] = (n - 1) / ((t1 - first) / 1e9)
                res.setdefault("side", []).append(side)
            if n_side:
                res["side_steps_per_s"] = tot_steps / span
                after = [x.get("steps_per_s_after_first_step") for x in res["side"]]
                if all(a is not None for a in after):
                    res["side_steps_per_s_after_first_step"] = sum(after)
                res["side_tflops"] = flops / span / 1e12
        res["status"] = "ok" if not res["errors"] else "failed"
        return res

    def stop_all(self, agent, sides, stop_file, grant_path, gated, res):
        with open(stop_file, "w") as f:
            f.write("stop\n")
        if agent is not None:
            agent.stop(signal.SIGINT, 5.0)
        drain = None
        if gated and sides and any(s.poll() is None for s in sides):
            # The measurement is over; let the gated side task finish its step and exit cleanly
            # (its gate counters are printed at exit): keep an open grant while it winds down.
            try:
                drain = common.GrantWriter(grant_path, device=common.gpu_of_ordinal(0),
                                           create=not os.path.exists(grant_path))
            except Exception as e:
                res["errors"].append("drain grant: %r" % (e,))
        end = time.monotonic() + 15
        while time.monotonic() < end and any(s.poll() is None for s in sides):
            if drain is not None:
                drain.open_for(200_000_000)
            time.sleep(0.02)
        if drain is not None:
            drain.close()
        gate = []
        for s in sides:
            rc = s.stop(signal.SIGTERM, 3.0)
            txt = s.output_tail(20000)
            m = GATE_RE.search(txt)
            if m:
                gate.append({"admitted": int(m.group(1)), "held": int(m.group(2)), "wait_ms": float(m.group(3)),
                             "inflight_max": int(m.group(4)), "starved": int(m.group(5))})
            if rc not in (0, None):
                res["errors"].append("%s exit status %s: %s" % (s.name, rc, txt[-800:]))
        if gate:
            res["gate"] = gate


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="folder with freeride and libfreeride.so")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--mode", choices=("default", "mps"), default="default",
                    help="label; for mps the caller has started the MPS daemon and exported its directories")
    ap.add_argument("--configs", default="alone,side_alone,gated_agent,gated_standin,ungated",
                    help="comma-separated, in order, from: " + ",".join(KINDS))
    ap.add_argument("--calib", default="", help="reuse the trainer's work from this gating JSON (its 'calib')")
    ap.add_argument("--out", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--session-root", required=True, help="parent of the session directories (tmpfs)")
    ap.add_argument("--deadline", type=float, default=0, help="wall-clock (time.time()) deadline")
    ap.add_argument("--config-timeout", type=float, default=50.0)
    ap.add_argument("--sidetasks", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--max-seconds", type=float, default=8.0)
    ap.add_argument("--compute-ms", type=float, default=20.0)
    ap.add_argument("--gap-ms", type=float, default=15.0)
    ap.add_argument("--stall-ms", type=float, default=50.0, help="host stall per iteration of the *_stall configs")
    ap.add_argument("--side-window-s", type=float, default=3.0)
    args = ap.parse_args()
    kinds = [k for k in args.configs.split(",") if k]
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        ap.error("unknown configuration(s): %s" % ",".join(bad))
    os.makedirs(args.workdir, exist_ok=True)
    r = Runner(args)
    out = {"mode": args.mode, "status": "ok", "configs": {}, "order": kinds,
           "sdk_task": "not run here: the SDK's kernels are simulated ones (see gpu-check.sh's sdk probe)"}
    if r.mps:
        out["mps_env"] = {k: os.environ.get(k) for k in ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")}
    for k in kinds:
        if r.left() < 35:
            out["configs"][k] = {"kind": k, "status": "skipped", "errors": ["out of time"]}
            continue
        log("gating %s: %s" % (args.mode, k))
        out["configs"][k] = r.run_config(k)
        out["calib"] = r.calib
        write_json(args.out, out)
    # comparisons
    c = out["configs"]
    side_alone = (c.get("side_alone") or {}).get("side_steps_per_s")
    cmp_ = {}
    for k in ("gated_agent", "gated_standin", "ungated", "gated_agent_stall"):
        x = c.get(k) or {}
        tr = x.get("trainer")
        alone = (c.get("alone_stall" if k.endswith("_stall") else "alone") or {}).get("trainer")
        row = {}
        if alone and tr:
            for m in ("iter_ms", "busy_ms"):
                for q in ("p50", "p90"):
                    a0, a1 = alone[m].get(q), tr[m].get(q)
                    if a0 and a1:
                        row["%s_%s_slowdown_pct" % (m, q)] = 100.0 * (a1 - a0) / a0
        if side_alone and x.get("side_steps_per_s") is not None:
            row["side_throughput_vs_alone"] = x["side_steps_per_s"] / side_alone
        if x.get("side_tflops") is not None:
            row["side_tflops"] = x["side_tflops"]
        if row:
            cmp_[k] = row
    out["comparison"] = cmp_
    alone = (c.get("alone") or {}).get("trainer")
    if alone and alone.get("iter_ms", {}).get("p50"):
        out["trainer_idle_share"] = (alone["gap_ms"]["p50"] or 0) / alone["iter_ms"]["p50"]
    failed = [k for k, v in c.items() if v.get("status") != "ok"]
    out["failed_configs"] = failed
    if failed:
        out["status"] = "partial" if len(failed) < len(c) else "failed"
    write_json(args.out, out)
    log("gating %s: done (%s)" % (args.mode, ", ".join("%s=%s" % (k, v.get("status")) for k, v in c.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
