#!/usr/bin/env python3
"""bench/ops/python_overhead.py - what one call of the Python package costs the
host: CPU microseconds per call of ktune's ops on tiny tensors, beside
torch's own op and the package's layers peeled one by one (the C call
alone, the implementation, the custom op through torch's dispatcher (what
torch.compile traces), the public function (eager: the implementation
without the dispatcher), with autograd, the ktune.nn module).

    python3 bench/ops/python_overhead.py                       # on the GPU: KTUNE_LIBRARY, PYTHONPATH=python
    KTUNE_LIBRARY=build/python-host/libktune_host.so python3 bench/ops/python_overhead.py --device cpu

CPU time of this thread (time.thread_time), the best of --rounds rounds of
--calls calls: a shared or loaded machine perturbs it less than wall time.
On a GPU the kernels are tiny and asynchronous, so what is timed is the
host's work to launch them; the queue is drained between rounds.  On the
host double (--device cpu) the C call includes the double's float64 work
for 1x1 operands: small, but not a kernel launch.  docs/python.md ("What a
call costs") quotes these figures.
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "python"))
import ktune  # noqa: E402
from ktune import torch_ops  # noqa: E402
from ktune.arrays import of_torch  # noqa: E402


def per_call(fn, calls, rounds, device):
    for _ in range(max(10, calls // 10)):
        fn()
    best = float("inf")
    for _ in range(rounds):
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.thread_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.thread_time() - t) / calls)
    return best * 1e6


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    dev = args.device
    bf = dict(dtype=torch.bfloat16, device=dev)
    a, b = torch.randn(8, 8, **bf), torch.randn(8, 8, **bf)
    c = torch.empty(8, 8, **bf)
    ag = a.clone().requires_grad_()
    x, w = torch.randn(8, 64, device=dev), torch.ones(64, device=dev)
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    lin = ktune.nn.Linear(8, 8).to(dev, torch.bfloat16)
    tlin = torch.nn.Linear(8, 8).to(dev, torch.bfloat16)
    xb = torch.randn(8, 8, **bf)
    qg, kg = torch.randn(1, 2, 16, 64, **bf).requires_grad_(), torch.randn(1, 2, 16, 64, **bf).requires_grad_()
    lib, ctx = ktune.library(), ktune.context(0)
    va, vb, vc = of_torch(a, "a"), of_torch(b, "b"), of_torch(c, "c")
    stream = torch_ops._stream(a)
    cases = [
        ("gemm: the C call alone (ctypes)", lambda: lib.gemm(ctx, b"n", b"n", 8, 8, 8, 1.0, va.ptr, 8, vb.ptr, 8, 0.0,
                                                             vc.ptr, 8, 1, stream), None),
        ("gemm: the implementation", lambda: torch_ops.gemm.impl(a, b, 1.0), None),
        ("gemm: the custom op (dispatcher)", lambda: torch_ops.gemm.op(a, b, 1.0), None),
        ("gemm: ktune.gemm", lambda: ktune.gemm(a, b), lambda: a @ b),
        ("gemm: the custom op, autograd", lambda: torch_ops.gemm.op(ag, b, 1.0), None),
        ("gemm: ktune.gemm, autograd", lambda: ktune.gemm(ag, b), lambda: ag @ b),
        ("Linear: ktune.nn.Linear", lambda: lin(xb), lambda: tlin(xb)),
        ("gelu: ktune.gelu", lambda: ktune.gelu(x), lambda: torch.nn.functional.gelu(x)),
        ("layer_norm: the implementation", lambda: torch_ops.layer_norm.impl(x, w, w, 1e-5), None),
        ("layer_norm: ktune.layer_norm", lambda: ktune.layer_norm(x, w, w),
         lambda: torch.nn.functional.layer_norm(x, (64,), w, w)),
        ("layer_norm: forward and backward", lambda: ktune.layer_norm(xg, wg, wg).sum().backward(),
         lambda: torch.nn.functional.layer_norm(xg, (64,), wg, wg).sum().backward()),
        ("layer_norm: the same, custom op", lambda: torch_ops.layer_norm.op(xg, wg, wg, 1e-5)[0].sum().backward(),
         None),
        ("attention: forward and backward", lambda: ktune.attention(qg, kg, kg, causal=True).sum().backward(),
         lambda: torch.nn.functional.scaled_dot_product_attention(qg, kg, kg, is_causal=True).sum().backward()),
    ]
    print(f"{ktune.library().path} on {dev}, torch {torch.__version__}: CPU microseconds per call")
    print(f"  {'call':36s} {'ktune':>8s} {'torch':>8s}")
    for name, k, t in cases:
        kt = per_call(k, args.calls, args.rounds, dev)
        tt = per_call(t, args.calls, args.rounds, dev) if t else None
        print(f"  {name:36s} {kt:8.1f} {'' if tt is None else f'{tt:8.1f}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
