"""ktune.nn against torch.nn, ktune.patch, and torch.compile of a module
built from the ops (fullgraph: a graph break fails the test)."""
import pytest

import ktune

from test_ops import close, rand


def test_patch_swaps_in_place_and_keeps_state(torch):
    nn = torch.nn
    lin = nn.Linear(8, 8)

    class MyLinear(nn.Linear):  # its own forward: must be kept
        def forward(self, x):
            return super().forward(x) * 2

    model = nn.Sequential(nn.LayerNorm(8), lin, nn.GELU(approximate="tanh"), MyLinear(8, 4), nn.ReLU())
    model.tied = nn.Linear(8, 8, bias=False)
    model.tied.weight = lin.weight  # tied weights stay tied
    keys = list(model.state_dict())
    params = [id(p) for p in model.parameters()]
    rep = ktune.patch(model)
    assert sorted(c for _, c in rep.swapped) == ["GELU", "LayerNorm", "Linear", "Linear"]
    assert [(n, c) for n, c, _ in rep.kept] == [("3", "MyLinear")]
    assert type(model[1]) is ktune.nn.Linear and isinstance(model[1], nn.Linear)
    assert model.tied.weight is model[1].weight
    assert list(model.state_dict()) == keys and [id(p) for p in model.parameters()] == params
    assert model[2].approximate == "tanh"
    assert "4 modules swapped" in str(rep)
    assert ktune.patch(model).swapped == []  # a second patch finds nothing left


def test_modules_fall_back_to_torch_and_say_why(torch):
    lin = ktune.nn.Linear(4, 3).double()
    x = torch.randn(2, 4, dtype=torch.float64)
    assert torch.equal(lin(x), torch.nn.functional.linear(x, lin.weight, lin.bias))
    assert lin.ktune_served.startswith("torch: ")
    ln = ktune.nn.LayerNorm((2, 4))
    ln(torch.randn(3, 2, 4))
    assert "normalized_shape" in ln.ktune_served or "device" in ln.ktune_served
    assert ktune.nn.report(torch.nn.Sequential(lin, ln)) == {"0": lin.ktune_served, "1": ln.ktune_served}


def _pair(torch, ktune_cls, torch_cls, *args, **kw):
    torch.manual_seed(0)
    t = torch_cls(*args, **kw)
    k = ktune_cls(*args, **kw)
    k.load_state_dict(t.state_dict())
    return k, t


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_linear_matches_torch(torch, dev, dtype):
    dt = getattr(torch, dtype)
    k, t = _pair(torch, ktune.nn.Linear, torch.nn.Linear, 48, 40)
    k, t = k.to(dev, dt), t.to(dev, dt)
    x = rand(torch, dev, (2, 5, 48), dtype, 1, True, scale=1.0)
    xk = x.detach().clone().requires_grad_()
    yk, yt = k(xk), t(x)
    assert k.ktune_served == "ktune"
    close(torch, yk, yt, dtype, "Linear", 8)
    dy = rand(torch, dev, yk.shape, dtype, 2, scale=1.0)
    yk.backward(dy)
    yt.backward(dy)
    close(torch, xk.grad, x.grad, dtype, "dx", 8)
    close(torch, k.weight.grad / 8, t.weight.grad / 8, dtype, "dW", 8)
    close(torch, k.bias.grad / 8, t.bias.grad / 8, dtype, "db", 8)


def test_linear_under_autocast_runs_in_the_autocast_dtype(torch, dev):
    k, t = _pair(torch, ktune.nn.Linear, torch.nn.Linear, 32, 16)
    k, t = k.to(dev), t.to(dev)
    x = rand(torch, dev, (4, 32), "float32", 3, scale=1.0)
    with torch.autocast(dev, dtype=torch.bfloat16):
        yk, yt = k(x), t(x)
    assert k.ktune_served == "ktune" and yk.dtype == yt.dtype == torch.bfloat16
    close(torch, yk, yt, "bfloat16", "autocast Linear", 4)


@pytest.mark.parametrize("cls", ["LayerNorm", "RMSNorm", "GELU"])
def test_norms_and_gelu_match_torch(torch, dev, cls):
    if getattr(ktune.nn, cls) is None:
        pytest.skip(f"torch {torch.__version__} has no nn.{cls}")
    args = () if cls == "GELU" else (24,)
    kw = {"approximate": "tanh"} if cls == "GELU" else {}
    k, t = _pair(torch, getattr(ktune.nn, cls), getattr(torch.nn, cls), *args, **kw)
    k, t = k.to(dev), t.to(dev)
    x = rand(torch, dev, (3, 7, 24), "float32", 4, True)
    xk = x.detach().clone().requires_grad_()
    yk, yt = k(xk), t(x)
    assert k.ktune_served == "ktune"
    close(torch, yk, yt, "float32", cls, 4)
    dy = rand(torch, dev, yk.shape, "float32", 5)
    yk.backward(dy)
    yt.backward(dy)
    close(torch, xk.grad, x.grad, "float32", f"{cls} dx", 4)
    for (name, pk), pt in zip(k.named_parameters(), t.parameters()):
        s = max(1.0, pt.grad.abs().max().item())
        close(torch, pk.grad / s, pt.grad / s, "float32", f"{cls} d{name}", 4)


@pytest.mark.parametrize("cls,kw", [("LayerNorm", {"elementwise_affine": False}), ("LayerNorm", {"bias": False}),
                                    ("RMSNorm", {"elementwise_affine": False})])
def test_norms_without_affine_match_torch_and_are_patched(torch, dev, cls, kw):
    """No weight (ones) or no bias (zeros): served by ktune with NULL vectors,
    gradients for what parameters there are; ktune.patch swaps them too."""
    if getattr(ktune.nn, cls) is None:
        pytest.skip(f"torch {torch.__version__} has no nn.{cls}")
    torch.manual_seed(0)
    t = getattr(torch.nn, cls)(24, **kw).to(dev)
    k = getattr(torch.nn, cls)(24, **kw).to(dev)
    k.load_state_dict(t.state_dict())
    with torch.no_grad():
        for p in k.parameters():
            p.uniform_(0.5, 1.5)  # not the init's ones: a weight that is used shows
        t.load_state_dict(k.state_dict())
    rep = ktune.patch(k)
    assert [c for _, c in rep.swapped] == [cls] and type(k) is getattr(ktune.nn, cls)
    x = rand(torch, dev, (3, 7, 24), "float32", 10, True)
    xk = x.detach().clone().requires_grad_()
    yk, yt = k(xk), t(x)
    assert k.ktune_served == "ktune"
    close(torch, yk, yt, "float32", f"{cls} {kw}", 4)
    dy = rand(torch, dev, yk.shape, "float32", 11)
    yk.backward(dy)
    yt.backward(dy)
    close(torch, xk.grad, x.grad, "float32", f"{cls} {kw} dx", 4)
    names = [n for n, _ in t.named_parameters()]
    assert names == ([] if kw.get("elementwise_affine") is False else ["weight"])
    for (name, pk), pt in zip(k.named_parameters(), t.parameters()):
        s = max(1.0, pt.grad.abs().max().item())
        close(torch, pk.grad / s, pt.grad / s, "float32", f"{cls} {kw} d{name}", 4)


@pytest.mark.parametrize("cls", ["SwiGLU", "GeGLU"])
def test_gated_mlps_match_their_formula(torch, dev, cls):
    F = torch.nn.functional
    torch.manual_seed(0)
    m = getattr(ktune.nn, cls)(16, 24).to(dev, torch.bfloat16)
    x = rand(torch, dev, (5, 16), "bfloat16", 6, scale=1.0)
    y = m(x)
    assert m.ktune_served == "ktune"
    h = (x.float() @ m.up_proj.weight.float().t()).to(torch.bfloat16).float()
    gate, up = h[:, :24], h[:, 24:]
    act = F.silu(gate) if cls == "SwiGLU" else F.gelu(gate)
    ref = act.to(torch.bfloat16).float() * up
    ref = (ref.to(torch.bfloat16).float() @ m.down_proj.weight.float().t()).to(torch.bfloat16)
    close(torch, y, ref, "bfloat16", cls, 8)


class Block:
    """A transformer-ish block of the ops, built on demand (needs torch)."""

    @staticmethod
    def make(torch):
        class B(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.ln = ktune.nn.LayerNorm(32)
                self.up = ktune.nn.Linear(32, 128)
                self.act = ktune.nn.GELU(approximate="tanh")
                self.down = ktune.nn.Linear(64, 32)
                self.norm_w = torch.nn.Parameter(torch.ones(32))

            def forward(self, x, r):
                h = self.act(self.up(self.ln(x)))
                h = ktune.swiglu(h)
                y, res = ktune.rms_norm(self.down(h), self.norm_w.to(h.dtype), 1e-6, residual=r)
                return ktune.softmax(y) + res
        return B()


def test_torch_compile_traces_whole(torch, dev):
    torch._dynamo.reset()
    m = Block.make(torch).to(dev, torch.bfloat16)
    x = rand(torch, dev, (4, 6, 32), "bfloat16", 7, True, scale=1.0)
    r = rand(torch, dev, (4, 6, 32), "bfloat16", 8, scale=1.0)
    backend = "inductor" if dev == "cuda" else "aot_eager"  # no C++ compile of a CPU graph for a test
    cm = torch.compile(m, backend=backend, fullgraph=True)  # a graph break is an error
    xe = x.detach().clone().requires_grad_()
    ye, yc = m(xe, r), cm(x, r)
    close(torch, yc, ye, "bfloat16", "compiled forward")
    dy = rand(torch, dev, ye.shape, "bfloat16", 9)
    ye.backward(dy)
    yc.backward(dy)
    close(torch, x.grad, xe.grad, "bfloat16", "compiled backward")
    explain = torch._dynamo.explain(m)(x.detach(), r)
    assert explain.graph_break_count == 0 and explain.graph_count == 1


def test_patched_model_compiles_whole_under_autocast_in_a_fresh_process(torch, dev):
    """The first call a process makes is a compiled one (no eager call loaded
    libktune first), under autocast, as a training script's is."""
    import os
    import subprocess
    import sys
    code = f"""
import torch, ktune
m = torch.nn.Sequential(torch.nn.LayerNorm(16), torch.nn.Linear(16, 32), torch.nn.GELU(approximate="tanh"),
                        torch.nn.Linear(32, 16)).to("{dev}")
ktune.patch(m)
def f(x):
    with torch.autocast("{dev}", dtype=torch.bfloat16):
        return m(x)
e = torch._dynamo.explain(f)(torch.randn(4, 16, device="{dev}"))
print("breaks", e.graph_break_count, [r.reason[:200] for r in e.break_reasons])
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=os.environ)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "breaks 0 []" in p.stdout, p.stdout


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cross_entropy_loss_matches_torch_and_is_patched(torch, dev, dtype):
    kw = dict(ignore_index=3, label_smoothing=0.1)
    k, t = ktune.nn.CrossEntropyLoss(**kw), torch.nn.CrossEntropyLoss(**kw)
    x = rand(torch, dev, (7, 50), dtype, 20, True)
    y = torch.randint(0, 50, (7,), generator=torch.Generator().manual_seed(21)).to(dev)
    y[2] = 3
    xk = x.detach().clone().requires_grad_()
    lk, lt = k(xk, y), t(x.float(), y)
    assert k.ktune_served == "ktune" and lk.dtype == x.dtype
    close(torch, lk.float(), lt, dtype, "CrossEntropyLoss")
    lk.backward()
    lt.backward()
    close(torch, xk.grad, x.grad, dtype, "CrossEntropyLoss dx", 2)
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.CrossEntropyLoss())
    rep = ktune.patch(m)
    assert sorted(c for _, c in rep.swapped) == ["CrossEntropyLoss", "Linear"]
    k, t = ktune.nn.CrossEntropyLoss(), torch.nn.CrossEntropyLoss()
    probs = torch.softmax(torch.randn(7, 50), -1).to(dev)  # class probabilities: torch's own
    assert torch.equal(k(x.detach().float(), probs), t(x.detach().float(), probs))
    assert k.ktune_served.startswith("torch: target dtype")


def test_linear_cross_entropy_module_matches_torch_under_autocast(torch, dev):
    """The fused head under autocast (float32 hidden and weight, bfloat16 GEMMs) against
    torch's head and loss; float32 without autocast falls back to torch's."""
    F = torch.nn.functional
    m = ktune.nn.LinearCrossEntropy(label_smoothing=0.05)
    h = rand(torch, dev, (2, 9, 64), "float32", 22, True, scale=1.0)
    w = rand(torch, dev, (77, 64), "float32", 23, True, scale=0.125)
    y = torch.randint(0, 77, (2, 9), generator=torch.Generator().manual_seed(24)).to(dev)
    hk, wk = (a.detach().clone().requires_grad_() for a in (h, w))
    with torch.autocast(dev, dtype=torch.bfloat16):
        lk = m(hk, wk, y)
        lt = F.cross_entropy(F.linear(h, w).float().view(-1, 77), y.view(-1), label_smoothing=0.05)
    assert m.ktune_served == "ktune" and lk.dtype == torch.float32
    close(torch, lk, lt, "bfloat16", "LinearCrossEntropy", 0.25)
    lk.backward()
    lt.backward()
    for a, b, what in ((hk.grad, h.grad, "dhidden"), (wk.grad, w.grad, "dweight")):
        assert a.dtype == torch.float32
        s = b.abs().max().item()
        close(torch, a / s, b / s, "bfloat16", what)
    lf = m(h.detach(), w.detach(), y)  # float32, no autocast: torch's head, logits and all
    assert m.ktune_served.startswith("torch: dtype")
    close(torch, lf, F.cross_entropy(h.detach().view(-1, 64) @ w.detach().t(), y.view(-1), label_smoothing=0.05),
          "float32", "fallback")


def test_scaled_dot_product_attention_module(torch, dev):
    F = torch.nn.functional
    sdpa = ktune.nn.ScaledDotProductAttention()
    q = rand(torch, dev, (2, 4, 12, 64), "bfloat16", 25, True, scale=1.0)
    kv = rand(torch, dev, (2, 4, 12, 64), "bfloat16", 26, True, scale=1.0)
    qk, kvk = (a.detach().clone().requires_grad_() for a in (q, kv))
    yk = sdpa(qk, kvk, kvk, is_causal=True)
    yt = F.scaled_dot_product_attention(q.float(), kv.float(), kv.float(), is_causal=True)
    assert sdpa.ktune_served == "ktune"
    close(torch, yk, yt.to(yk.dtype), "bfloat16", "ScaledDotProductAttention", 2)
    dy = rand(torch, dev, yk.shape, "bfloat16", 27, scale=1.0)
    yk.backward(dy)
    yt.backward(dy.float())
    close(torch, qk.grad, q.grad, "bfloat16", "dq", 4)
    close(torch, kvk.grad, kv.grad, "bfloat16", "dkv", 4)
    # where ktune's would differ from torch's, torch's own, and the reason
    falls = [
        (dict(attn_mask=torch.ones(12, 12, dtype=torch.bool, device=dev)), "an attention mask"),
        (dict(dropout_p=0.1), "dropout_p"),
        (dict(q=q[:, :, :5], is_causal=True), "top-left"),
        (dict(q=q.float()), "dtype torch.float32"),
        (dict(q=q[..., :32], k=kv[..., :32], v=kv[..., :32]), "head_dim 32"),
    ]
    for kw, why in falls:
        args = dict(q=q.detach(), k=kv.detach(), v=kv.detach())
        args.update(kw)
        qq, kk, vv = args.pop("q").detach(), args.pop("k").detach(), args.pop("v").detach()
        if kk.dtype != qq.dtype:
            kk, vv = kk.to(qq.dtype), vv.to(qq.dtype)
        with torch.random.fork_rng():
            got = sdpa(qq, kk, vv, **args)
        assert why in sdpa.ktune_served, (why, sdpa.ktune_served)
        if "dropout_p" not in args:
            assert torch.equal(got, F.scaled_dot_product_attention(qq, kk, vv, **args))
    with pytest.raises(RuntimeError):  # torch's own error: GQA without enable_gqa
        sdpa(q.detach(), kv[:, :2].detach(), kv[:, :2].detach())
    assert "without enable_gqa" in sdpa.ktune_served
    got = sdpa(q.detach(), kv[:, :2].detach(), kv[:, :2].detach(), enable_gqa=True)  # GQA when asked
    assert sdpa.ktune_served == "ktune" and got.shape == q.shape


def test_torch_compile_traces_attention_and_the_losses_whole(torch, dev):
    """Attention, the fused LM head and cross-entropy under torch.compile (fullgraph),
    forward and backward, against the same eager; the quantized GEMM too (forward)."""
    torch._dynamo.reset()

    def step(x, w, t):
        b, s, d = x.shape
        q, k, v = (x.view(b, s, 2, 64).transpose(1, 2) for _ in range(3))
        y = ktune.attention(q, k, v, causal=True).transpose(1, 2).reshape(b, s, d)
        return ktune.linear_cross_entropy(y, w, t) + ktune.cross_entropy(ktune.gemm(y.reshape(b * s, d), w.t()),
                                                                         t.reshape(-1), label_smoothing=0.1)
    backend = "inductor" if dev == "cuda" else "aot_eager"
    x = rand(torch, dev, (2, 16, 128), "bfloat16", 30, True, scale=1.0)
    w = rand(torch, dev, (40, 128), "bfloat16", 31, True, scale=0.1)
    t = torch.randint(0, 40, (2, 16), generator=torch.Generator().manual_seed(32)).to(dev)
    xe, we = (a.detach().clone().requires_grad_() for a in (x, w))
    le, lc = step(xe, we, t), torch.compile(step, backend=backend, fullgraph=True)(x, w, t)
    close(torch, lc, le, "float32", "compiled loss")
    ge, gc = torch.autograd.grad(le, [xe, we]), torch.autograd.grad(lc, [x, w])
    for a, b in zip(gc, ge):
        close(torch, a, b, "bfloat16", "compiled gradients")
    assert torch._dynamo.explain(step)(x.detach(), w.detach(), t).graph_break_count == 0
    fmt = ktune.QuantFormat(4, 32)
    wq, scales, zeros = ktune.quant_pack(w.detach()[:, :128], fmt)
    f = torch.compile(lambda a: ktune.gemm_quant(a, wq, scales, zeros, fmt), backend=backend, fullgraph=True)
    a = x.detach()[0]
    assert torch.equal(f(a), ktune.gemm_quant(a, wq, scales, zeros, fmt))
