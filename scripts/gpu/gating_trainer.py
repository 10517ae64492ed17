#!/usr/bin/env python3
"""The trainer of part 3 (gating): one GPU, real compute, and a real GPU-side bubble per iteration
that freeride's agent can see.

Each iteration:
  1. compute phase: --n-matmul bf16 matmuls of --dim^3 on the default stream (about --compute-ms);
  2. the bubble: a world-size-1 NCCL group {send to self, recv from self} of --gap-bytes, run with
     NCCL_MAX_NCHANNELS=1 (one channel: one SM block copying, the rest of the GPU idle) and sized
     so that it lasts about --gap-ms on the GPU; the compute stream waits for the receive
     (`work.wait()`), as a pipeline stage waits for its peer's activations;
  3. the host waits for the iteration to finish (as `loss.item()` would) and starts the next.

Why this shape: the agent infers bubbles from NCCL operations only (a bubble opens when an op that
compute must wait for - a receive or a collective - begins on the GPU, i.e. the compute queued
before it has drained, and closes when the op ends). Two NCCL ranks cannot share one GPU, so a
real peer cannot be late; a long self-copy on one channel is the closest single-GPU stand-in for
"waiting for a peer": compute-idle, NCCL-owned, of a stable length, seen through the same hooks
(ncclGroupEnd + GPU events) as in a real pipeline. A pure host sleep would be invisible to the
current agent.

--standin-grant PATH: no agent; this process writes the grant block itself (the trainer knows its
gaps): it opens a grant when its compute has drained (host waits on an event recorded after the
compute phase; the exchange is already queued, so the GPU timeline is the same) until
now + gap estimate - guard, and closes it when the exchange has finished.

--stall-ms X: after each iteration the host sleeps X ms (a data loader's stall: the GPU idle, the
host outside CUDA), which the agent may fill with its long-pause grants; the bubble is then the
stall, not the exchange (a single-channel self-copy transfers: the agent counts it busy).

Output (--out): iteration/busy/gap times of the measured iterations and the measurement window
[t0_ns, t1_ns] in CLOCK_MONOTONIC ns.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import log, now_ns, write_json  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--filestore", required=True, help="path of the torch.distributed FileStore (must not exist)")
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--max-seconds", type=float, default=10.0, help="stop measuring after this long")
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--compute-ms", type=float, default=20.0)
    ap.add_argument("--gap-ms", type=float, default=15.0)
    ap.add_argument("--n-matmul", type=int, default=0, help="matmuls per compute phase (0: calibrate)")
    ap.add_argument("--gap-bytes", type=int, default=0, help="bytes of the self exchange (0: calibrate)")
    ap.add_argument("--gap-est-ns", type=int, default=0, help="GPU time of the exchange (0: measure)")
    ap.add_argument("--max-gap-gib", type=float, default=4.0)
    ap.add_argument("--standin-grant", default="", help="write this grant block (agent stand-in)")
    ap.add_argument("--stall-ms", type=float, default=0.0, help="host stall after each iteration (ms)")
    ap.add_argument("--guard-us", type=float, default=1000.0, help="stand-in grant closes this long before the gap's end")
    args = ap.parse_args()

    torch = common.torch_or_exit("gating_trainer.py")
    import torch.distributed as dist
    res = {"pid": os.getpid(), "args": vars(args), "status": "running",
           "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")},
           "mps": bool(os.environ.get("CUDA_MPS_PIPE_DIRECTORY"))}
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(0)
    if os.path.exists(args.filestore):
        os.remove(args.filestore)
    t = time.monotonic()
    try:
        dist.init_process_group("nccl", init_method="file://" + args.filestore, rank=0, world_size=1, device_id=dev)
    except TypeError:
        dist.init_process_group("nccl", init_method="file://" + args.filestore, rank=0, world_size=1)
    res["nccl_init_s"] = time.monotonic() - t

    a = torch.randn(args.dim, args.dim, device=dev, dtype=torch.bfloat16)
    b = torch.randn(args.dim, args.dim, device=dev, dtype=torch.bfloat16)
    c = torch.empty(args.dim, args.dim, device=dev, dtype=torch.bfloat16)

    def compute(n):
        for _ in range(n):
            torch.matmul(a, b, out=c)

    bufs = {}

    def buffers(nbytes):
        n = max(1, nbytes // 2)
        if bufs.get("n") != n:
            bufs.clear()
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            bufs["n"] = n
            bufs["send"] = torch.ones(n, device=dev, dtype=torch.bfloat16)
            bufs["recv"] = torch.empty(n, device=dev, dtype=torch.bfloat16)
        return bufs["send"], bufs["recv"]

    def exchange(nbytes):
        s, r = buffers(nbytes)
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, s, 0), dist.P2POp(dist.irecv, r, 0)])
        for w in works:
            w.wait()  # the current (compute) stream waits for the receive

    def gpu_ms(fn, reps=3):
        fn()
        torch.cuda.synchronize()
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        out = []
        for _ in range(reps):
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            out.append(e0.elapsed_time(e1))
        return sorted(out)[len(out) // 2]

    # -- calibration (only what was not given)
    n_mm = args.n_matmul
    if n_mm <= 0:
        per = gpu_ms(lambda: compute(20)) / 20.0
        n_mm = max(1, int(round(args.compute_ms / per)))
        res["matmul_ms"] = per
    nbytes = args.gap_bytes
    cap = int(args.max_gap_gib * (1 << 30))
    if nbytes <= 0:
        probe = 64 << 20
        ms = gpu_ms(lambda: exchange(probe))
        for _ in range(3):
            nbytes = int(min(cap, max(1 << 20, probe * args.gap_ms / max(ms, 1e-3))))
            nbytes -= nbytes % 4096
            if nbytes == probe:
                break
            probe = nbytes
            ms = gpu_ms(lambda: exchange(probe))
            if abs(ms - args.gap_ms) / args.gap_ms < 0.1 or nbytes >= cap:
                break
        res["exchange_gbps"] = nbytes / (ms * 1e-3) / 1e9
    gap_est_ns = args.gap_est_ns
    if gap_est_ns <= 0:
        gap_est_ns = int(gpu_ms(lambda: exchange(nbytes)) * 1e6)
    res.update({"n_matmul": n_mm, "gap_bytes": nbytes, "gap_est_ns": gap_est_ns})
    s, r = buffers(nbytes)
    r.zero_()
    log("trainer: %d matmuls of %d^3 per compute phase, exchange of %.1f MiB (~%.1f ms GPU)" % (
        n_mm, args.dim, nbytes / 2**20, gap_est_ns / 1e6))

    grant = None
    if args.standin_grant:
        grant = common.GrantWriter(args.standin_grant, device=common.gpu_of_ordinal(0), create=True)
        res["agent"] = "python stand-in in the trainer (grant opened in each exchange)"
    guard_ns = int(args.guard_us * 1000)

    n_ev = args.warmup + args.iters
    ev = [[torch.cuda.Event(enable_timing=True) for _ in range(3)] for _ in range(n_ev)]
    host_iter_ns = []
    grant_ns = []
    t_meas0 = None
    t_end = None
    done = 0
    for i in range(n_ev):
        if i == args.warmup:
            t_meas0 = now_ns()
            t_end = time.monotonic() + args.max_seconds
        h0 = now_ns()
        e0, e1, e2 = ev[i]
        e0.record()
        compute(n_mm)
        e1.record()
        exchange(nbytes)
        e2.record()
        if grant is not None:
            e1.synchronize()  # compute drained: the exchange (already queued) is running now
            g0 = now_ns()
            until = g0 + gap_est_ns - guard_ns
            if until > g0 + 300_000:
                grant.publish(True, until, until - g0)
            e2.synchronize()
            grant.publish(False)
            grant_ns.append(now_ns() - g0)
        else:
            e2.synchronize()
        if args.stall_ms > 0:
            time.sleep(args.stall_ms / 1000.0)
        h1 = now_ns()
        if i >= args.warmup:
            host_iter_ns.append(h1 - h0)
            done += 1
            if time.monotonic() > t_end:
                break
    t_meas1 = now_ns()
    torch.cuda.synchronize()
    busy = [ev[i][0].elapsed_time(ev[i][1]) for i in range(args.warmup, args.warmup + done)]
    gap = [ev[i][1].elapsed_time(ev[i][2]) for i in range(args.warmup, args.warmup + done)]
    res.update({
        "status": "ok",
        "iterations": done,
        "t0_ns": t_meas0,
        "t1_ns": t_meas1,
        "iter_ms": common.summary([x / 1e6 for x in host_iter_ns]),
        "busy_ms": common.summary(busy),
        "gap_ms": common.summary(gap),
        "iter_ms_all": [round(x / 1e6, 4) for x in host_iter_ns],
        "busy_ms_all": [round(x, 4) for x in busy],
        "data_ok": bool(torch.equal(s, r)),
    })
    if grant_ns:
        res["standin_grant_window_ms"] = common.summary([x / 1e6 for x in grant_ns])
    write_json(args.out, res)
    log("trainer: %d iterations, iteration p50 %.2f ms, busy p50 %.2f ms, gap p50 %.2f ms" % (
        done, res["iter_ms"]["p50"], res["busy_ms"]["p50"], res["gap_ms"]["p50"]))
    time.sleep(0.05)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
