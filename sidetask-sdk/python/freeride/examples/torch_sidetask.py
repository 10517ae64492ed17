#!/usr/bin/env python3
"""A PyTorch side task: a small regression model trained with SGD, one training step per freeride
step (run only when the GPU's grant has room for it), a smaller minibatch where only part of a
step fits.

With PyTorch and a GPU it is plain PyTorch (`torch.cuda.synchronize()` ends each step). Without
torch (the test bed) a tiny torch-like API stands in: tensors of Python floats with the same calls
(nn.Linear, nn.MSELoss, optim.SGD, backward, zero_grad), whose matrix products are also queued on
the GPU as cuBLAS GEMMs of the same shapes through the SDK (`task.gemm`: real kernels on a GPU, timed
by their shape on the test bed's stand-in BLAS).

Run it directly (the SDK paces it; not under `freeride run --role sidetask`):

    python -m freeride.examples.torch_sidetask --device 0 --steps 40 --standalone
"""
import argparse
import json
import random

import freeride as fr

try:
    import torch  # noqa: F401

    HAVE_TORCH = torch.cuda.is_available()
except ImportError:
    HAVE_TORCH = False


class FakeTorch:
    """Just enough of torch's API for this example, each matrix product also a GEMM on the GPU."""

    FILL = 0x3C  # the operands' bytes: finite fp32 values (about 0.0115)

    def __init__(self, task, dim, batch):
        self.task = task
        # One set of fp32 operands on the device, as large as the largest product (dim x batch).
        nbytes = 4 * max(dim, 1) * max(batch, 1)
        self.ops = [task.alloc(nbytes) for _ in range(3)]
        for p in self.ops:
            task.fill(p, nbytes, self.FILL)
        ft = self

        class Tensor:
            def __init__(self, rows, grad_fn=None):
                self.rows = rows  # list of lists
                self.grad = None
                self.grad_fn = grad_fn

            def item(self):
                return self.rows[0][0]

            def backward(self):
                self.grad_fn()

        class Parameter(Tensor):
            pass

        class Linear:
            def __init__(self, n_in, n_out):
                rnd = random.Random(1)
                self.weight = Parameter([[rnd.uniform(-0.3, 0.3) for _ in range(n_in)] for _ in range(n_out)])
                self.bias = Parameter([[0.0] for _ in range(n_out)])
                self.n_in, self.n_out = n_in, n_out

            def parameters(self):
                return [self.weight, self.bias]

            def __call__(self, x):
                ft.gemm(self.n_out, len(x.rows), self.n_in)  # W . X
                out = [[sum(w * xi for w, xi in zip(self.weight.rows[o], row)) + self.bias.rows[o][0]
                        for o in range(self.n_out)] for row in x.rows]
                t = Tensor(out)
                t.inputs = (self, x)
                return t

        class MSELoss:
            def __call__(self, pred, target):
                n = len(pred.rows) * len(pred.rows[0])
                diff = [[p - t for p, t in zip(pr, tr)] for pr, tr in zip(pred.rows, target.rows)]
                loss = sum(d * d for row in diff for d in row) / n

                def grad_fn():
                    layer, x = pred.inputs
                    ft.gemm(layer.n_out, layer.n_in, len(x.rows))  # weight gradient: dY . X^T
                    ft.gemm(layer.n_in, len(x.rows), layer.n_out)  # input gradient: W^T . dY
                    gw = [[0.0] * layer.n_in for _ in range(layer.n_out)]
                    gb = [[0.0] for _ in range(layer.n_out)]
                    for row, drow in zip(x.rows, diff):
                        for o, d in enumerate(drow):
                            g = 2.0 * d / n
                            gb[o][0] += g
                            for i, xi in enumerate(row):
                                gw[o][i] += g * xi
                    layer.weight.grad, layer.bias.grad = gw, gb

                return Tensor([[loss]], grad_fn)

        class SGD:
            def __init__(self, params, lr):
                self.params, self.lr = list(params), lr

            def zero_grad(self):
                for p in self.params:
                    p.grad = None

            def step(self):
                for p in self.params:
                    if p.grad is not None:
                        p.rows = [[w - self.lr * g for w, g in zip(r, gr)] for r, gr in zip(p.rows, p.grad)]

        class nn:  # noqa: N801 (torch spelling)
            pass

        class optim:  # noqa: N801
            pass

        nn.Linear, nn.MSELoss, optim.SGD = Linear, MSELoss, SGD
        self.nn, self.optim, self.Tensor = nn, optim, Tensor

    def gemm(self, m, n, k):
        a, b, c = self.ops
        self.task.gemm(m, n, k, a, b, c)

    def tensor(self, rows):
        return self.Tensor(rows)

    def synchronize(self):
        self.task.sync()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--standalone", action="store_true")
    ap.add_argument("--session-dir")
    args = ap.parse_args()

    cfg = {"name": "torch_style", "device": args.device}
    if args.standalone:
        cfg["no_agent"] = "standalone"
    if args.session_dir:
        cfg["session_dir"] = args.session_dir
    task = fr.SideTask(cfg)

    if HAVE_TORCH:
        import torch as T

        dev = f"cuda:{args.device}"
        tensor = lambda rows: T.tensor(rows, device=dev)  # noqa: E731
        nn, optim, synchronize = T.nn, T.optim, T.cuda.synchronize
        model = nn.Linear(args.dim, 1).to(dev)
    else:
        # The GEMMs' operands on the device, within the task's memory budget.
        ft = FakeTorch(task, args.dim, args.batch)
        tensor, nn, optim, synchronize = ft.tensor, ft.nn, ft.optim, ft.synchronize
        model = nn.Linear(args.dim, 1)
    loss_fn = nn.MSELoss()
    opt = optim.SGD(model.parameters(), lr=0.1)
    rnd = random.Random(3)
    true_w = [rnd.uniform(-1, 1) for _ in range(args.dim)]
    task.created()

    def train_on(batch):
        xs = [[rnd.uniform(-1, 1) for _ in range(args.dim)] for _ in range(batch)]
        ys = [[sum(w * x for w, x in zip(true_w, row))] for row in xs]
        loss = loss_fn(model(tensor(xs)), tensor(ys))
        opt.zero_grad()
        loss.backward()
        opt.step()
        synchronize()
        return loss

    first_loss = last_loss = None
    done = 0
    while done < args.steps:
        # 1.0: a whole step fits the grant; less: only that share does (the grant's last step, or
        # a grant shorter than a step), and a smaller minibatch runs.
        f = task.wait_for_step(0.25)
        if f is None:
            break  # stop requested (SIGTERM): the task is now stopped
        if f >= 1.0:
            with task.step():
                loss = train_on(args.batch)
        else:
            with task.partial_step(f):
                loss = train_on(max(1, int(args.batch * f)))
        last_loss = loss.item()
        first_loss = last_loss if first_loss is None else first_loss
        done += 1
        if done % 10 == 0:
            print(f"torch_style: step {done} loss {last_loss:.5f}")
    if done >= args.steps:
        task.finish()
    print(json.dumps(task.summary(first_loss=first_loss, final_loss=last_loss, torch=HAVE_TORCH)))
    task.close()


if __name__ == "__main__":
    main()
