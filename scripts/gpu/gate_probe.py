#!/usr/bin/env python3
"""The side-task gate alone, on a real GPU (part 3a of the GPU check): the PyTorch side task of part 3
(`gating_sidetask.py`) under `freeride run --role sidetask`, with no trainer and no agent, while this
script holds its GPU's grant block open (re-published every 10 ms, 200 ms ahead, heartbeat fresh).
A gate that works lets it step at nearly its ungated rate; one that holds it anyway is a gate
defect, told apart from the agent's inference. Then the same with the grant closed: it must not
step. Writes --out (JSON): steps per second open and closed, the gate's counters, the trace's
GPU records, and where the side task's threads were if it made no step (/proc wchan, and a gdb
backtrace where gdb exists). Needs no torch itself.
"""
import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import log, now_ns, write_json  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def threads_of(pid):
    out = []
    for t in sorted(glob.glob("/proc/%d/task/*" % pid)):
        row = {"tid": os.path.basename(t)}
        for k in ("comm", "wchan"):
            try:
                with open(os.path.join(t, k)) as f:
                    row[k] = f.read().strip()
            except OSError:
                pass
        out.append(row)
    return out


def backtrace(pid):
    gdb = shutil.which("gdb")
    if not gdb:
        return "no gdb"
    try:
        p = subprocess.run([gdb, "-batch", "-p", str(pid), "-ex", "thread apply all bt 25"],
                           capture_output=True, text=True, timeout=40)
        return p.stdout[-12000:]
    except Exception as e:
        return "gdb failed: %r" % (e,)


def trace_summary(path):
    kinds, devices, infos = {}, {}, []
    try:
        with open(path) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                k = r.get("kind")
                kinds[k] = kinds.get(k, 0) + 1
                d = r.get("device", r.get("gpu"))
                devices[str(d)] = devices.get(str(d), 0) + 1
                if k == "device_info" and len(infos) < 4:
                    infos.append(r)
    except OSError as e:
        return {"error": repr(e)}
    return {"kinds": kinds, "devices": devices, "device_info": infos}


def run(args, grant_open):
    name = "open" if grant_open else "closed"
    wd = os.path.join(args.workdir, name)
    os.makedirs(wd, exist_ok=True)
    sess = common.make_session_dir(os.path.join(args.session_root, "gate-" + name))
    gpath = common.grant_path_of(sess, 0)
    writer = common.GrantWriter(gpath, device=common.gpu_of_ordinal(0))
    stop = threading.Event()

    def hold():
        while not stop.is_set():
            if grant_open:
                writer.open_for(200_000_000)
            else:
                writer.close()
            time.sleep(0.01)
    th = threading.Thread(target=hold, daemon=True)
    th.start()
    trace = os.path.join(wd, "side.trace.jsonl")
    env = dict(os.environ)
    env["FREERIDE_GATE_VERBOSE"] = "1"
    cmd = [os.path.join(args.bin, "freeride"), "run", "--role", "sidetask", "--dir", sess, "--trace", trace, "--",
           args.python, os.path.join(HERE, "gating_sidetask.py"), "--steps-file", os.path.join(wd, "steps"),
           "--ready-file", os.path.join(wd, "ready"), "--stop-file", os.path.join(wd, "stop"),
           "--out", os.path.join(wd, "side.json"), "--max-seconds", str(args.seconds + 20),
           "--seconds-after-first-step", str(args.seconds)]
    side = common.Child("side-" + name, cmd, os.path.join(wd, "side.log"), env=env)
    res = {"grant": name, "grant_file": os.path.basename(gpath)}
    # open: its start-up (torch, the CUDA context) and its steps; closed: long enough to see none
    # (the first step alone took 6.5 s on the H200 of 2026-12-04: its kernels' modules loading)
    t_end = time.monotonic() + args.seconds + (25 if grant_open else 2)
    while time.monotonic() < t_end and side.poll() is None:
        time.sleep(0.1)
    steps = []
    try:
        with open(os.path.join(wd, "steps")) as f:
            steps = [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        pass
    res["steps"] = len(steps)
    res["steps_per_s"] = ((len(steps) - 1) / ((steps[-1] - steps[0]) / 1e9)
                          if len(steps) > 2 and steps[-1] > steps[0] else 0.0)
    if side.poll() is None:
        res["stuck"] = True
        res["threads"] = threads_of(side.p.pid)
        # the python process is the child of nothing else: freeride run execs it
        res["backtrace"] = backtrace(side.p.pid)
    res["session_files"] = sorted(os.listdir(sess))
    with open(os.path.join(wd, "stop"), "w") as f:
        f.write("stop\n")
    # let it end its step and print the gate's counters
    stop.set()
    th.join(1)
    writer.open_for(2_000_000_000)
    side.wait(10)
    rc = side.stop(signal.SIGTERM, 3.0)
    res["rc"] = rc
    res["log_tail"] = side.output_tail(3000)
    res["trace"] = trace_summary(trace)
    log("gate probe (grant %s): %d steps, %.1f steps/s, rc=%s%s" % (
        name, res["steps"], res["steps_per_s"], rc, ", STUCK" if res.get("stuck") else ""))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--session-root", required=True)
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args()
    out = {"started_ns": now_ns(), "runs": []}
    for grant_open in (True, False):
        out["runs"].append(run(args, grant_open))
        write_json(args.out, out)
    ok = out["runs"][0]["steps"] > 5 and out["runs"][1]["steps"] <= 1
    out["pass"] = ok
    write_json(args.out, out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
