#!/usr/bin/env python3
"""The PyTorch side task of part 3 (gating): an unmodified-style training loop (an MLP of --layers
Linear(--dim, --dim) + ReLU in bf16, batch --batch, MSE loss, SGD), run under
`freeride run --role sidetask` (gated) or plain (ungated). It knows nothing about freeride.

It appends the CLOCK_MONOTONIC ns at which each step finished (after a stream synchronization)
to --steps-file, one per line, so the orchestrator can count the steps inside the trainer's
measurement window. It writes --ready-file after importing torch and creating its CUDA context,
before its first kernel (a gated task's first kernel waits for a grant), and stops at the first
step boundary after --stop-file exists (or after --max-seconds, or --seconds-after-first-step after
its first step: on the H200 of 2026-12-04 the first step took 6.5 s, its kernels' modules loading).
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
    ap.add_argument("--steps-file", required=True)
    ap.add_argument("--ready-file", required=True)
    ap.add_argument("--stop-file", required=True)
    ap.add_argument("--out", required=True, help="summary JSON at exit")
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--max-seconds", type=float, default=120.0)
    ap.add_argument("--seconds-after-first-step", type=float, default=None,
                    help="also stop this long after the first step (whose kernel loading can take seconds)")
    args = ap.parse_args()

    torch = common.torch_or_exit("gating_sidetask.py")
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(0)
    torch.cuda.init()
    torch.empty(1, device=dev)  # context + allocator, no kernel
    with open(args.ready_file, "w") as f:
        f.write("%d\n" % os.getpid())
    t_start = time.monotonic()
    log("sidetask %d: ready (gated=%s)" % (os.getpid(), os.environ.get("FREERIDE_ROLE") == "sidetask"))

    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.dim, args.dim, device=dev, dtype=torch.bfloat16), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(args.batch, args.dim, device=dev, dtype=torch.bfloat16)
    y = torch.randn(args.batch, args.dim, device=dev, dtype=torch.bfloat16)
    flops_per_step = 6.0 * args.batch * args.dim * args.dim * args.layers
    steps = 0
    first_step_ns = None
    losses = []
    with open(args.steps_file, "w", buffering=1) as sf:
        while True:
            out = model(x)
            loss = torch.nn.functional.mse_loss(out.float(), y.float())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.current_stream().synchronize()
            t = now_ns()
            if first_step_ns is None:
                first_step_ns = t
            sf.write("%d\n" % t)
            steps += 1
            if steps % 50 == 1:
                losses.append(float(loss))
            if os.path.exists(args.stop_file) or time.monotonic() - t_start > args.max_seconds:
                break
            if args.seconds_after_first_step is not None and (t - first_step_ns) / 1e9 > args.seconds_after_first_step:
                break
    write_json(args.out, {"pid": os.getpid(), "steps": steps, "flops_per_step": flops_per_step,
                          "first_step_ns": first_step_ns, "losses_sampled": losses,
                          "gated": os.environ.get("FREERIDE_ROLE") == "sidetask"})
    log("sidetask %d: %d steps" % (os.getpid(), steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
