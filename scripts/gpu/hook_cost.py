#!/usr/bin/env python3
"""Part 2 of the GPU check: what observing a trainer costs.

`hook_cost.py orchestrate`: runs the same child program alternately without freeride (plain
python, no LD_PRELOAD) and with it (`freeride run --role trainer`, observe only, with a
`freeride agent` draining the rings as in production), --reps times each, and reports medians:
  * tiny launches: host time per `x.add_(1)` on a one-element tensor (CUDA-synchronized rounds);
  * a transformer block's training step: torch.nn.TransformerEncoderLayer(d_model 1024, 16 heads,
    FFN 4096, bf16), batch 8 x 512 tokens, forward + backward + AdamW step, CUDA-synchronized
    timing over --steps steps after warm-up.
`hook_cost.py child`: one such measurement (needs torch).
"""
import argparse
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import log, write_json, read_json, median  # noqa: E402


def child(args):
    torch = common.torch_or_exit("hook_cost.py child")
    res = {"pid": os.getpid(), "freeride_loaded": False}
    try:
        with open("/proc/self/maps") as f:
            res["freeride_loaded"] = "libfreeride" in f.read()
    except Exception:
        pass
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(0)

    # tiny launches
    x = torch.zeros(1, device=dev)
    for _ in range(2000):
        x.add_(1.0)
    torch.cuda.synchronize()
    per_launch = []
    for _ in range(args.tiny_rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        for _ in range(args.tiny_launches):
            x.add_(1.0)
        torch.cuda.synchronize()
        per_launch.append((time.perf_counter_ns() - t0) / args.tiny_launches)
    res["tiny_ns_per_launch_rounds"] = per_launch
    res["tiny_ns_per_launch"] = median(per_launch)
    if args.steps <= 0:
        write_json(args.out, res)
        log("hook_cost child (freeride %s): tiny %.0f ns/launch" % (
            "on" if res["freeride_loaded"] else "off", res["tiny_ns_per_launch"]))
        return 0

    # transformer block training step
    layer = torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096, dropout=0.0,
                                             batch_first=True, device=dev, dtype=torch.bfloat16)
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-4)
    src = torch.randn(8, 512, 1024, device=dev, dtype=torch.bfloat16)

    def step():
        out = layer(src)
        loss = out.float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    ms = []
    for _ in range(args.rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
        ms.append((time.perf_counter_ns() - t0) / 1e6 / args.steps)
    res["step_ms_rounds"] = ms
    res["step_ms"] = median(ms)
    write_json(args.out, res)
    log("hook_cost child (freeride %s): tiny %.0f ns/launch, step %.3f ms" % (
        "on" if res["freeride_loaded"] else "off", res["tiny_ns_per_launch"], res["step_ms"]))
    return 0


def aggregate(res):
    """Medians over the runs so far (called after every run: a kill leaves partial results)."""
    conds = ["off", "on"] + [c for c in res.get("conds", []) if c not in ("off", "on")]
    by = {c: [r for r in res["runs"] if r["cond"] == c] for c in conds}
    tiny = {c: median([r["tiny_ns_per_launch"] for r in v]) for c, v in by.items()}
    step = {c: median([r["step_ms"] for r in v if "step_ms" in r]) for c, v in by.items()}
    lb = {}
    for r in res.get("launch_bench_runs", []):
        for row in r["rows"]:
            lb.setdefault(r["cond"], {}).setdefault(row["threads"], []).append(row["ns_per_launch"])
    if lb:
        res["launch_bench_ns"] = {c: {"%d_threads" % k: median(v) for k, v in sorted(t.items())}
                                  for c, t in lb.items()}
    res["tiny_ns_per_launch"] = tiny
    res["step_ms"] = step
    if tiny["off"] and tiny["on"]:
        res["tiny_hook_ns"] = tiny["on"] - tiny["off"]
        res["tiny_overhead_pct"] = 100.0 * (tiny["on"] - tiny["off"]) / tiny["off"]
    if step["off"] and step["on"]:
        res["step_overhead_pct"] = 100.0 * (step["on"] - step["off"]) / step["off"]
        # run-to-run noise: spread of the per-process medians without freeride
        offs = [r["step_ms"] for r in by["off"]]
        res["step_noise_pct"] = 100.0 * (max(offs) - min(offs)) / median(offs) if len(offs) > 1 else None
        res["pass"] = res["step_overhead_pct"] < 0.5
        res["status"] = "partial" if res["errors"] or len(res["runs"]) < len(conds) * res["reps"] else "ok"
    elif tiny["off"] and tiny["on"] and not any("step_ms" in r for r in res["runs"]):
        res["status"] = "partial" if res["errors"] else "ok"  # tiny launches only (--steps 0)
        res["pass"] = None
    else:
        res["status"] = "failed"
        res["pass"] = False


# Conditions besides off (plain) and on (`freeride run --role trainer`), for telling apart where a
# cost comes from: the library loaded but recording off; the hook clock on clock_gettime; no GPU-side
# timing of communication (no comm threads).
COND_ENV = {
    "disabled": {"FREERIDE_DISABLE": "1"},
    "monotonic": {"FREERIDE_CLOCK": "monotonic"},
    "no_comm_timing": {"FREERIDE_COMM_TIMING": "0"},
}


def pinned(args):
    """`taskset -c CPUS` where asked for and available: every measured process on the same cores
    (on the GPU host, unpinned runs of the same program differed by up to 1 µs a launch)."""
    if args.cpus and shutil.which("taskset"):
        return ["taskset", "-c", args.cpus]
    return []


def run_launch_bench(args, res, rep, cond, freeride, sess, env_plain):
    """One run of launch_bench (host ns per cuLaunchKernel on the real driver, 1/2/4 threads)."""
    cmd = [args.launch_bench]
    if cond == "on":
        cmd = [freeride, "run", "--role", "trainer", "--dir", sess, "--"] + cmd
    cmd = pinned(args) + cmd
    log_path = os.path.join(args.workdir, "launch-bench-%d-%s.log" % (rep, cond))
    rc, secs, tl = common.run_child("launch-bench-%d-%s" % (rep, cond), cmd, log_path, 60, env=env_plain)
    rows = []
    for line in tl.splitlines():
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    if rc != 0 or not rows:
        res["errors"].append("launch_bench rep %d %s: rc=%s: %s" % (rep, cond, rc, tl[-600:]))
        return
    res.setdefault("launch_bench_runs", []).append({"rep": rep, "cond": cond, "rows": rows})
    log("launch_bench %s: %s" % (cond, ", ".join("%d threads %.0f ns" % (r["threads"], r["ns_per_launch"])
                                                   for r in rows)))


def orchestrate(args):
    here = os.path.abspath(__file__)
    os.makedirs(args.workdir, exist_ok=True)
    sess = common.make_session_dir(os.path.join(args.session_root, "hook"))
    freeride = os.path.join(args.bin, "freeride")
    res = {"status": "ok", "reps": args.reps, "runs": [], "errors": []}
    env_plain = dict(os.environ)
    env_plain.pop("LD_PRELOAD", None)
    for k in list(env_plain):
        if k.startswith("FREERIDE_"):
            env_plain.pop(k)
    agent = None
    try:
        agent = common.Child("agent", [freeride, "agent", "--dir", sess, "--metrics-port", "0"],
                             os.path.join(args.workdir, "hook-agent.log"), env=env_plain)
        time.sleep(0.5)
        if agent.poll() is not None:
            res["errors"].append("agent exited at once: " + agent.output_tail(800))
            agent = None
        child_args = ["child", "--tiny-launches", str(args.tiny_launches), "--tiny-rounds", str(args.tiny_rounds),
                      "--steps", str(args.steps), "--rounds", str(args.rounds), "--warmup", str(args.warmup)]
        conds = args.conds.split(",")
        res["conds"] = conds
        for rep in range(args.reps):
            order = conds if rep % 2 == 0 else conds[::-1]
            if args.launch_bench:
                for cond in ("off", "on") if rep % 2 == 0 else ("on", "off"):
                    run_launch_bench(args, res, rep, cond, freeride, sess, env_plain)
            for cond in order:
                left = args.deadline - time.time() if args.deadline else 1e9
                if left < 20:
                    res["errors"].append("out of time before rep %d %s" % (rep, cond))
                    break
                out = os.path.join(args.workdir, "hook-%d-%s.json" % (rep, cond))
                cmd = [args.python, here] + child_args + ["--out", out]
                env = dict(env_plain)
                if cond != "off":
                    cmd = [freeride, "run", "--role", "trainer", "--dir", sess, "--"] + cmd
                    env.update(COND_ENV.get(cond, {}))
                cmd = pinned(args) + cmd
                rc, secs, tl = common.run_child("hook-%d-%s" % (rep, cond), cmd,
                                                os.path.join(args.workdir, "hook-%d-%s.log" % (rep, cond)),
                                                min(args.child_timeout, left - 10), env=env)
                r = read_json(out) if rc == 0 else None
                if r is None:
                    res["errors"].append("rep %d %s: rc=%s after %.0f s: %s" % (rep, cond, rc, secs, tl[-800:]))
                    continue
                r.update({"rep": rep, "cond": cond, "seconds": secs})
                if r.get("freeride_loaded") != (cond != "off"):
                    res["errors"].append("rep %d %s: freeride_loaded=%s" % (rep, cond, r.get("freeride_loaded")))
                res["runs"].append(r)
                aggregate(res)
                write_json(args.out, res)
    finally:
        if agent is not None:
            import signal
            agent.stop(signal.SIGINT, 5.0)
    aggregate(res)
    write_json(args.out, res)
    log("hook_cost: tiny %s ns/launch, step %s ms, step overhead %s%%" % (
        res.get("tiny_ns_per_launch"), res.get("step_ms"),
        ("%.3f" % res["step_overhead_pct"]) if "step_overhead_pct" in res else "n/a"))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("child", help="one measurement (needs torch)")
    c.add_argument("--out", required=True)
    c.add_argument("--tiny-launches", type=int, default=20000)
    c.add_argument("--tiny-rounds", type=int, default=5)
    c.add_argument("--steps", type=int, default=50)
    c.add_argument("--rounds", type=int, default=3)
    c.add_argument("--warmup", type=int, default=10)
    o = sub.add_parser("orchestrate", help="alternate runs with and without freeride (no torch needed)")
    o.add_argument("--bin", required=True, help="folder with freeride and libfreeride.so")
    o.add_argument("--python", default=sys.executable)
    o.add_argument("--out", required=True)
    o.add_argument("--workdir", required=True)
    o.add_argument("--session-root", required=True, help="parent of the session directory (tmpfs)")
    o.add_argument("--reps", type=int, default=3)
    o.add_argument("--child-timeout", type=float, default=60)
    o.add_argument("--deadline", type=float, default=0, help="wall-clock (time.time()) deadline")
    o.add_argument("--tiny-launches", type=int, default=20000)
    o.add_argument("--tiny-rounds", type=int, default=5)
    o.add_argument("--steps", type=int, default=50)
    o.add_argument("--rounds", type=int, default=3)
    o.add_argument("--warmup", type=int, default=10)
    o.add_argument("--conds", default="off,on",
                   help="comma list from: off, on, " + ", ".join(sorted(COND_ENV)) + " (on and the others: under "
                        "`freeride run --role trainer`, with these environment variables)")
    o.add_argument("--cpus", default="", help="run every measured process under `taskset -c CPUS`")
    o.add_argument("--launch-bench", default="",
                   help="a built launch_bench.c: also run it without and with freeride in every repetition")
    args = ap.parse_args()
    return child(args) if args.cmd == "child" else orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
