"""The eager fast path (torch_ops._Op): a plain call goes straight to the
implementation, with the custom op's own autograd formula, and gives what the
custom op gives, forward and gradients, bit for bit; torch.compile, tensor
subclasses and functorch transforms take the custom op.  On a GPU with the real
library, or on CPU tensors with the host double; skipped otherwise."""
import pytest

import ktune

from test_ops import rand


def _ops():
    from ktune import torch_ops
    return torch_ops


def _forward_and_grads(torch, fn, inputs):
    out = fn(*inputs)
    out = out[0] if isinstance(out, tuple) else out
    dy = torch.linspace(-1, 1, out.numel(), device=out.device).reshape(out.shape).to(out.dtype)
    leaves = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    return [out.detach()] + list(torch.autograd.grad(out, leaves, dy))


def _cases(torch, dev):
    ops = torch.ops.ktune
    x = rand(torch, dev, (6, 40), "bfloat16", 1, grad=True)
    w = rand(torch, dev, (40,), "bfloat16", 2, grad=True)
    b = rand(torch, dev, (40,), "bfloat16", 3, grad=True)
    a = rand(torch, dev, (5, 24), "bfloat16", 4, grad=True)
    bm = rand(torch, dev, (24, 16), "bfloat16", 5, grad=True)
    logits = rand(torch, dev, (5, 24), "float32", 6, grad=True)
    target = torch.tensor([3, 0, -100, 23, 7], device=dev)
    q = rand(torch, dev, (1, 4, 6, 64), "bfloat16", 7, grad=True)
    kv = rand(torch, dev, (1, 2, 9, 64), "bfloat16", 8, grad=True)
    T = _ops()
    return [
        ("gemm", T.gemm, ops.gemm, (a, bm, 0.5)),
        ("gelu", T.gelu, ops.gelu, (x, "tanh")),
        ("layer_norm", T.layer_norm, ops.layer_norm, (x, w, b, 1e-5)),
        ("rms_norm", T.rms_norm, ops.rms_norm, (x, w, 1e-6)),
        ("softmax", T.softmax, ops.softmax, (x,)),
        ("cross_entropy", T.cross_entropy, ops.cross_entropy, (logits, target, -100, "mean", 0.1, 0.0)),
        ("attention", T.attention, ops.attention, (q, kv, kv, True, 0.125)),
    ]


def test_eager_path_matches_the_custom_op(torch, dev):
    for name, eager, op, args in _cases(torch, dev):
        got = _forward_and_grads(torch, eager, args)
        want = _forward_and_grads(torch, op, args)
        assert len(got) == len(want), name
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.dtype == w.dtype and g.shape == w.shape, f"{name}: output {i}"
            assert torch.equal(g, w), f"{name}: output {i} differs between the eager path and the custom op"


def test_plain_calls_skip_the_dispatcher(torch, dev, monkeypatch):
    """With the custom op made to fail, plain calls (with and without
    gradients, defaults left out, keywords given) still run: they never reach it."""
    T = _ops()

    def refuse(*args, **kwargs):
        raise AssertionError("the custom op was called")
    monkeypatch.setattr(T.gemm, "op", refuse)
    monkeypatch.setattr(T.layer_norm, "op", refuse)
    a = rand(torch, dev, (5, 24), "bfloat16", 4, grad=True)
    b = rand(torch, dev, (24, 16), "bfloat16", 5)
    T.gemm(a, b).sum().backward()
    assert a.grad is not None and a.grad.shape == a.shape
    with torch.no_grad():
        assert T.gemm(a, b, alpha=2.0).shape == (5, 16)
    x = rand(torch, dev, (3, 40), "float32", 1, grad=True)
    y, mean, rstd = T.layer_norm(x, None, None, 1e-5)
    y.sum().backward()
    assert x.grad is not None
    with pytest.raises(TypeError, match="unexpected"):
        T.gemm(a, b, beta=1.0)


def test_traced_calls_take_the_custom_op(torch, dev):
    """Under a FakeTensorMode (as torch.compile traces) the custom op, with its
    fake implementation, serves the call: no real kernel runs on fake tensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    T = _ops()
    with FakeTensorMode() as mode:
        a = mode.from_tensor(rand(torch, dev, (5, 24), "bfloat16", 4))
        b = mode.from_tensor(rand(torch, dev, (24, 16), "bfloat16", 5))
        c = T.gemm(a, b)
    assert c.shape == (5, 16) and type(c).__name__ == "FakeTensor"
