#!/usr/bin/env python3
"""Part 1 of the GPU check: launch-path coverage.

`coverage.py run`: a PyTorch program (run it under `freeride run --trace T`) with one phase per
launch path: PyTorch native ops, cuBLAS matmuls, a Triton kernel, CUDA graph replays, a
world-size-1 NCCL group (send to and receive from itself), and a small training step (autograd's
backward thread). Each phase runs inside its own torch.profiler session (CUDA activity) between
two device synchronizations; the phase's host window (CLOCK_MONOTONIC) and the profiler's kernel
count go to --raw.

`coverage.py analyze`: counts freeride's `launch` / `graph_launch` events of that process inside
each phase's window (a graph launch counts as the graph's kernel nodes, i.e. the launches freeride
recorded on the captured stream while the graph was being captured), compares with the profiler's
kernels, checks the NCCL ops' `comm`/`comm_group`/`comm_begin`/`comm_end` events, and writes the result JSON.
`analyze` needs no torch.
"""
import argparse
import collections
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import log, now_ns, write_json, read_json  # noqa: E402

RUNTIME_APIS = {"__cudaLaunchKernel", "__cudaLaunchKernel_ptsz", "cudaLaunchKernel", "cudaLaunchKernel_ptsz",
                "cudaLaunchKernelExC", "cudaLaunchKernelExC_ptsz"}
DRIVER_APIS = {"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
               "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz"}
GRAPH_APIS = {"cudaGraphLaunch", "cudaGraphLaunch_ptsz", "cuGraphLaunch", "cuGraphLaunch_ptsz"}
EXPECTED_PATH = {
    "native": "runtime",
    "cublas": "driver",
    "triton": "driver",
    "graph": "graph",
    "nccl": "driver",
    "train_step": "runtime+driver",
}


# ------------------------------------------------------------------------------------- run

def profiler_counts(path):
    """Kernels in a chrome trace exported by torch.profiler, and the CUDA API calls it saw."""
    with open(path) as f:
        tr = json.load(f)
    evs = tr.get("traceEvents", tr) if isinstance(tr, dict) else tr
    kernels = 0
    names = collections.Counter()
    graph_kernels = 0
    api = collections.Counter()
    other_gpu = collections.Counter()
    for e in evs:
        if not isinstance(e, dict):
            continue
        cat = str(e.get("cat", "")).lower()
        if cat == "kernel":
            kernels += 1
            names[str(e.get("name", ""))[:80]] += 1
            a = e.get("args") or {}
            if any(k.lower().startswith("graph") for k in a.keys()) and a.get("graph id", a.get("graph_id", 0)):
                graph_kernels += 1
        elif cat in ("cuda_runtime", "cuda_driver"):
            api[str(e.get("name", ""))] += 1
        elif cat.startswith("gpu_"):
            other_gpu[cat] += 1
    return {"kernels": kernels, "kernel_names_top": dict(names.most_common(12)),
            "graph_kernels": graph_kernels, "api_calls": dict(api), "other_gpu_activity": dict(other_gpu)}


def run(args):
    torch = common.torch_or_exit("coverage.py run")
    from torch.profiler import profile, ProfilerActivity
    os.makedirs(args.workdir, exist_ok=True)
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    raw = {
        "pid": os.getpid(),
        "ld_preload": os.environ.get("LD_PRELOAD", ""),
        "freeride_trace": os.environ.get("FREERIDE_TRACE", ""),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "phases": [],
        "errors": {},
        "windows": {},
    }
    try:
        raw["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
    except Exception as e:
        raw["nccl"] = "unknown: %r" % (e,)

    def save():
        write_json(args.raw, raw)

    def measure(name, fn, note):
        """Runs fn() under the profiler between two synchronizations; records window and counts."""
        log("coverage: phase %s" % name)
        torch.cuda.synchronize()
        t0 = now_ns()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        t1 = now_ns()
        path = os.path.join(args.workdir, "prof-%s.json" % name)
        prof.export_chrome_trace(path)
        ph = {"name": name, "t0_ns": t0, "t1_ns": t1, "note": note}
        ph.update({"profiler": profiler_counts(path)})
        raw["phases"].append(ph)
        log("coverage: phase %s: profiler saw %d kernels" % (name, ph["profiler"]["kernels"]))
        save()

    def guarded(name, f):
        try:
            f()
        except Exception as e:
            import traceback
            raw["errors"][name] = "%r\n%s" % (e, traceback.format_exc()[-1500:])
            log("coverage: %s FAILED: %r" % (name, e))
            save()
            try:
                torch.cuda.synchronize()
            except Exception:
                pass

    # One profiler session first (CUPTI initialization), outside every counted phase.
    def warm_profiler():
        x = torch.ones(16, device=dev)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            x.add_(1)
            torch.cuda.synchronize()
    guarded("profiler_warmup", warm_profiler)

    # -- native ops (__cudaLaunchKernel)
    def native():
        x = torch.randn(1024, 1024, device=dev)
        idx = torch.arange(0, 1024, 2, device=dev)

        def body(n):
            for _ in range(n):
                y = x + 1.0
                y.mul_(2.0)
                torch.relu_(y)
                s = torch.softmax(y, dim=-1)
                m = s.sum(dim=0)
                z = torch.cat([x, y])
                w = torch.where(y > 0, y, x)
                g = y.index_select(0, idx)
                y.clamp_(0.0, 1.0)
                del s, m, z, w, g
        body(3)
        measure("native", lambda: body(args.native_iters), "%d iterations of 9 elementwise/reduction ops" % args.native_iters)
    guarded("native", native)

    # -- cuBLAS / cuBLASLt (cuLaunchKernelEx through the driver choke point)
    def cublas():
        a = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16)
        b = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16)
        af = torch.randn(512, 512, device=dev)
        bf = torch.randn(512, 512, device=dev)
        wl = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16)
        bl = torch.randn(1024, device=dev, dtype=torch.bfloat16)
        ba = torch.randn(8, 256, 256, device=dev, dtype=torch.bfloat16)
        bb = torch.randn(8, 256, 256, device=dev, dtype=torch.bfloat16)
        out = torch.empty(1024, 1024, device=dev, dtype=torch.bfloat16)

        def body(n):
            for _ in range(n):
                torch.matmul(a, b, out=out)
                torch.mm(af, bf)
                torch.nn.functional.linear(a, wl, bl)
                torch.bmm(ba, bb)
        body(2)
        measure("cublas", lambda: body(args.cublas_iters), "%d x (bf16 mm, fp32 mm, linear+bias, bmm)" % args.cublas_iters)
    guarded("cublas", cublas)

    # -- Triton
    def triton_phase():
        import triton
        import triton.language as tl
        raw["triton"] = triton.__version__

        @triton.jit
        def add_kernel(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
            pid = tl.program_id(0)
            offs = pid * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

        n = 1 << 20
        x = torch.randn(n, device=dev)
        y = torch.randn(n, device=dev)
        o = torch.empty_like(x)
        grid = (triton.cdiv(n, 1024),)
        t = time.monotonic()
        add_kernel[grid](x, y, o, n, BLOCK=1024)  # compiles
        torch.cuda.synchronize()
        raw["triton_compile_s"] = time.monotonic() - t
        if not torch.allclose(o, x + y):
            raise RuntimeError("triton kernel computed a wrong result")

        def body(k):
            for _ in range(k):
                add_kernel[grid](x, y, o, n, BLOCK=1024)
        measure("triton", lambda: body(args.triton_iters), "%d launches of a Triton vector add" % args.triton_iters)
    guarded("triton", triton_phase)

    # -- CUDA graph (captured once, replayed)
    def graph_phase():
        x = torch.randn(512, 512, device=dev, dtype=torch.bfloat16)
        w = torch.randn(512, 512, device=dev, dtype=torch.bfloat16)

        def f():
            return torch.softmax(torch.relu(x @ w) + 1.0, dim=-1)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                f()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            # The window is the body of the capture only: entering `torch.cuda.graph` launches two
            # kernels of its own on the capture stream before the capture begins (run 3 of
            # 2026-12-04: two launches of one function ahead of the graph's four; PyTorch's
            # generators filling their seed and offset for the graph), which are not nodes.
            c0 = now_ns()
            # The stream being captured (no launch of its own): only launches on it become nodes.
            raw["graph_capture_stream"] = torch.cuda.current_stream().cuda_stream
            y = f()
            c1 = now_ns()
        torch.cuda.synchronize()
        raw["windows"]["graph_capture"] = [c0, c1]
        g.replay()
        torch.cuda.synchronize()
        ref = f()
        if not torch.allclose(y.float(), ref.float(), atol=1e-2):
            raise RuntimeError("graph replay computed a wrong result")

        def body(k):
            for _ in range(k):
                g.replay()
        raw["graph_replays"] = args.graph_replays
        measure("graph", lambda: body(args.graph_replays), "%d replays of a captured graph (mm, relu, add, softmax)" % args.graph_replays)
    guarded("graph", graph_phase)

    # -- NCCL world size 1: a group with a send to and a receive from itself
    def nccl_phase():
        import torch.distributed as dist
        store = os.path.join(args.workdir, "filestore-%d" % os.getpid())
        if os.path.exists(store):
            os.remove(store)
        t = time.monotonic()
        try:
            dist.init_process_group("nccl", init_method="file://" + store, rank=0, world_size=1, device_id=dev)
        except TypeError:
            dist.init_process_group("nccl", init_method="file://" + store, rank=0, world_size=1)
        raw["nccl_init_s"] = time.monotonic() - t
        send = torch.arange(1 << 18, device=dev, dtype=torch.float32)
        recv = torch.zeros_like(send)

        def exchange(k):
            for i in range(k):
                ops = [dist.P2POp(dist.isend, send, 0), dist.P2POp(dist.irecv, recv, 0)]
                for r in dist.batch_isend_irecv(ops):
                    r.wait()
        exchange(2)  # communicator set-up outside the counted window
        torch.cuda.synchronize()
        if not torch.equal(send, recv):
            raise RuntimeError("self send/recv returned wrong data")
        recv.zero_()
        torch.cuda.synchronize()
        raw["nccl_groups_total"] = 2 + args.nccl_iters
        measure("nccl", lambda: exchange(args.nccl_iters), "%d groups {send to self, recv from self} of 1 MiB" % args.nccl_iters)
        raw["nccl_data_ok"] = bool(torch.equal(send, recv))
        time.sleep(0.05)  # let the interposer's poller see the last ops complete
        dist.destroy_process_group()
    guarded("nccl", nccl_phase)

    # -- a small training step (autograd backward thread, fused/foreach optimizer kernels)
    def train_phase():
        m = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.LayerNorm(1024),
                                torch.nn.Linear(1024, 512)).to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        x = torch.randn(256, 512, device=dev)

        def body(k):
            for _ in range(k):
                loss = m(x).square().mean()
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        body(2)
        measure("train_step", lambda: body(args.train_iters), "%d MLP fwd+bwd+AdamW steps" % args.train_iters)
    guarded("train_step", train_phase)

    raw["done"] = True
    save()
    log("coverage: run finished")
    return 0


# ------------------------------------------------------------------------------------- analyze

def load_trace(path, pid):
    evs = []
    bad = 0
    with open(path, "rb") as f:
        for line in f:
            try:
                e = json.loads(line)
            except Exception:
                bad += 1
                continue
            if e.get("pid") == pid:
                evs.append(e)
    return evs, bad


def analyze(args):
    raw = read_json(args.raw)
    if raw is None:
        write_json(args.out, {"status": "failed", "error": "no raw results from the run (%s)" % args.raw})
        return 1
    res = {"status": "ok", "errors": dict(raw.get("errors", {})), "torch": raw.get("torch"),
           "nccl": raw.get("nccl"), "triton": raw.get("triton"), "phases": {}}
    if "libfreeride" not in raw.get("ld_preload", ""):
        res["errors"]["preload"] = "libfreeride.so was not in LD_PRELOAD of the program: %r" % raw.get("ld_preload")
    if not os.path.exists(args.trace):
        res["status"] = "failed"
        res["error"] = "no trace file %s" % args.trace
        write_json(args.out, res)
        return 1
    evs, bad = load_trace(args.trace, raw["pid"])
    kinds = collections.Counter(e.get("kind") for e in evs)
    res["trace"] = {"events": len(evs), "unparsable_lines": bad, "kinds": dict(kinds),
                    "dropped_records": sum(int(e.get("count", 0)) for e in evs if e.get("kind") == "dropped"),
                    "invalid_records": kinds.get("invalid", 0),
                    "process_exit_dropped": [e.get("dropped") for e in evs if e.get("kind") == "process_exit"]}
    launches = [e for e in evs if e.get("kind") == "launch"]
    graphs = [e for e in evs if e.get("kind") == "graph_launch"]

    nodes = None
    cap = raw.get("windows", {}).get("graph_capture")
    if cap:
        window = [e for e in launches if cap[0] <= e["t_ns"] <= cap[1]]
        cap_stream = raw.get("graph_capture_stream")
        # What the capture window held, for the record: each launch's api, whether it was on the
        # captured stream, and its function (2026-12-04: 6 launches in the window, 4 nodes).
        res["graph_capture_window"] = [
            {"api": e.get("api"), "on_capture_stream": e.get("stream") == cap_stream,
             "stream": e.get("stream"), "func": e.get("func"), "in_comm": e.get("in_comm")}
            for e in window]
        if cap_stream is not None:
            nodes = sum(1 for e in window if e.get("stream") == cap_stream)
        else:
            nodes = len(window)
    res["graph_nodes_by_freeride_capture"] = nodes
    gph = [p for p in raw.get("phases", []) if p["name"] == "graph"]
    if gph and raw.get("graph_replays"):
        res["graph_nodes_by_profiler"] = gph[0]["profiler"]["kernels"] / float(raw["graph_replays"])

    tot_prof = tot_fr = tot_seen = tot_extra = 0
    all_ok = True
    for ph in raw.get("phases", []):
        t0, t1 = ph["t0_ns"], ph["t1_ns"]
        l_in = [e for e in launches if t0 <= e["t_ns"] <= t1]
        g_in = [e for e in graphs if t0 <= e["t_ns"] <= t1]
        by_api = collections.Counter(e.get("api") for e in l_in)
        g_by_api = collections.Counter(e.get("api") for e in g_in)
        prof = ph["profiler"]["kernels"]
        paths = collections.Counter()
        for api, n in by_api.items():
            paths["runtime" if api in RUNTIME_APIS else "driver" if api in DRIVER_APIS else "other:" + str(api)] += n
        fr = len(l_in)
        graph_kernels = 0
        nodes_source = None
        if g_in:
            per_graph = nodes
            nodes_source = "launches freeride recorded on the captured stream during capture"
            if not per_graph:
                # capture launches not recorded: fall back to the profiler's kernels per replay
                per_graph = (prof / float(raw["graph_replays"])) if raw.get("graph_replays") else 0
                nodes_source = "profiler (kernels per replay): capture launches were not in the trace"
            graph_kernels = int(round(len(g_in) * per_graph))
            paths["graph"] += graph_kernels
            fr += graph_kernels
        seen = min(fr, prof)
        extra = max(0, fr - prof)
        share = (seen / prof) if prof else (1.0 if fr == 0 else 0.0)
        ok = share >= 0.99 and extra == 0
        all_ok = all_ok and ok
        tot_prof += prof
        tot_fr += fr
        tot_seen += seen
        tot_extra += extra
        res["phases"][ph["name"]] = {
            "note": ph.get("note"),
            "expected_path": EXPECTED_PATH.get(ph["name"]),
            "profiler_kernels": prof,
            "freeride_kernels": fr,
            "freeride_launch_events_by_api": dict(by_api),
            "freeride_graph_launches_by_api": dict(g_by_api),
            "graph_kernels_counted": graph_kernels,
            "graph_nodes_source": nodes_source,
            "by_path": dict(paths),
            "seen_share": share,
            "extra_launches": extra,
            "pass": ok,
            "profiler_api_calls": ph["profiler"].get("api_calls"),
            "profiler_top_kernels": ph["profiler"].get("kernel_names_top"),
            "profiler_other_gpu_activity": ph["profiler"].get("other_gpu_activity"),
        }
    for name in EXPECTED_PATH:
        if name not in res["phases"]:
            all_ok = False
            res["phases"][name] = {"pass": False, "error": res["errors"].get(name, "phase did not run")}

    # NCCL events
    comm = [e for e in evs if e.get("kind") == "comm"]
    groups = [e for e in evs if e.get("kind") == "comm_group"]
    begins = [e for e in evs if e.get("kind") == "comm_begin"]
    ends = [e for e in evs if e.get("kind") == "comm_end"]
    group_ends_outer = [e for e in groups if e.get("api") == "ncclGroupEnd" and int(e.get("depth", 0)) == 0]
    by_group_b = {e.get("group"): e["t_ns"] for e in begins if e.get("api") == "ncclGroupEnd"}
    durs = [e["t_ns"] - by_group_b[e.get("group")] for e in ends
            if e.get("api") == "ncclGroupEnd" and e.get("group") in by_group_b]
    expected_groups = raw.get("nccl_groups_total")
    nccl = {
        "comm_ops_by_api": dict(collections.Counter(e.get("api") for e in comm)),
        "self_peer_ops": sum(1 for e in comm if e.get("peer") == 0),
        "comm_group_events_by_api": dict(collections.Counter(e.get("api") for e in groups)),
        "outer_groups_ended": len(group_ends_outer),
        "groups_expected": expected_groups,
        "comm_begin": len(begins),
        "comm_end": len(ends),
        "comm_begin_end_by_api": dict(collections.Counter((e.get("kind") + ":" + str(e.get("api"))) for e in begins + ends)),
        "group_gpu_duration_us": common.summary([d / 1000.0 for d in durs]),
        "negative_durations": sum(1 for d in durs if d < 0),
        "data_ok": raw.get("nccl_data_ok"),
    }
    sends = nccl["comm_ops_by_api"].get("ncclSend", 0)
    recvs = nccl["comm_ops_by_api"].get("ncclRecv", 0)
    nccl["pass"] = bool(expected_groups and sends >= expected_groups and recvs >= expected_groups
                        and len(begins) >= expected_groups and len(ends) >= expected_groups
                        and nccl["negative_durations"] == 0 and raw.get("nccl_data_ok"))
    res["nccl_events"] = nccl
    res["total"] = {"profiler_kernels": tot_prof, "freeride_kernels": tot_fr, "seen": tot_seen,
                    "seen_share": (tot_seen / tot_prof) if tot_prof else None, "extra_launches": tot_extra}
    res["pass"] = bool(all_ok and nccl["pass"] and not res["trace"]["dropped_records"] and tot_prof > 0)
    res["targets"] = {"seen_ge_99pct_every_path": all_ok, "none_twice": tot_extra == 0,
                      "nccl_comm_events": nccl["pass"]}
    if not raw.get("done"):
        res["status"] = "partial"
        res["errors"]["run"] = "the program did not finish (crash or timeout): see coverage.log"
    if res["errors"] and res["status"] == "ok":
        res["status"] = "partial"
    write_json(args.out, res)
    log("coverage: total profiler %d, freeride %d, seen %.4f, extra %d, pass=%s" % (
        tot_prof, tot_fr, res["total"]["seen_share"] or 0.0, tot_extra, res["pass"]))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="the PyTorch program (run it under freeride run --trace)")
    r.add_argument("--raw", required=True, help="write phase windows and profiler counts here (JSON)")
    r.add_argument("--workdir", required=True, help="profiler traces and the NCCL file store go here")
    r.add_argument("--native-iters", type=int, default=200)
    r.add_argument("--cublas-iters", type=int, default=40)
    r.add_argument("--triton-iters", type=int, default=50)
    r.add_argument("--graph-replays", type=int, default=20)
    r.add_argument("--nccl-iters", type=int, default=10)
    r.add_argument("--train-iters", type=int, default=5)
    a = sub.add_parser("analyze", help="compare the trace with the profiler (no torch needed)")
    a.add_argument("--raw", required=True)
    a.add_argument("--trace", required=True, help="the FREERIDE_TRACE JSON-lines file")
    a.add_argument("--out", required=True)
    args = ap.parse_args()
    return run(args) if args.cmd == "run" else analyze(args)


if __name__ == "__main__":
    sys.exit(main())
