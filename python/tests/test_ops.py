"""Every op against torch's own result and gradients on awkward shapes, and
torch.library.opcheck on each custom op.  On a GPU with the real library
(dev == "cuda"), or on CPU tensors with the host double (dev == "cpu", which
tests the Python layer, not the kernels); skipped otherwise."""
import math

import pytest

import ktune

TOL = {"float32": 2e-5, "float16": 4e-3, "bfloat16": 3e-2}  # of max(1, |ref|), per element
SHAPES = [(1,), (7,), (33,), (1, 1), (3, 5), (2, 3, 37), (17, 128), (4, 1000)]
DTYPES = ["float32", "float16", "bfloat16"]


def close(torch, got, ref, dtype, what="", factor=1.0):
    tol = TOL[str(dtype).replace("torch.", "")] * factor
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    assert got.dtype == ref.dtype, f"{what}: dtype {got.dtype} != {ref.dtype}"
    g, r = got.float(), ref.float()
    assert torch.isfinite(g).all(), f"{what}: non-finite values"
    err = ((g - r).abs() / r.abs().clamp(min=1)).max().item() if g.numel() else 0.0
    assert err <= tol, f"{what}: max error {err:.3g} > {tol:.3g}"


def rand(torch, dev, shape, dtype, seed=0, grad=False, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    t = (torch.randn(shape, generator=g) * scale).to(getattr(torch, dtype)).to(dev)
    return t.requires_grad_(grad)


def grads(torch, fn, inputs, dy):
    out = fn(*inputs)
    out = out[0] if isinstance(out, tuple) else out
    gs = torch.autograd.grad(out, [t for t in inputs if t.requires_grad], dy)
    return out, gs


def check_against_torch(torch, kfn, tfn, inputs, dtype, what, grad_factor=4.0, out_factor=1.0):
    """The forward and every input's gradient of kfn against tfn, torch's
    formula run in float32 on the same (rounded) inputs."""
    k_in = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    t_in = [t.detach().float().requires_grad_(t.requires_grad) for t in inputs]
    ky = kfn(*k_in)
    ky = ky[0] if isinstance(ky, tuple) else ky
    ty = tfn(*t_in)
    ty = ty[0] if isinstance(ty, tuple) else ty
    close(torch, ky, ty.to(ky.dtype), dtype, f"{what} forward", out_factor)
    if not any(t.requires_grad for t in inputs):
        return
    dy = rand(torch, ky.device, ky.shape, str(ky.dtype).replace("torch.", ""), seed=99)
    kg = torch.autograd.grad(ky, [t for t in k_in if t.requires_grad], dy)
    tg = torch.autograd.grad(ty, [t for t in t_in if t.requires_grad], dy.float())
    for i, (a, b) in enumerate(zip(kg, tg)):
        # gradients that sum over rows (a norm's dweight) grow with the rows: compare relative to their scale
        scale = max(1.0, b.abs().max().item()) if b.dim() == 1 and len(ky.shape) > 1 else 1.0
        close(torch, a / scale, (b / scale).to(a.dtype), dtype, f"{what} grad {i}", grad_factor)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_add(torch, dev, shape, dtype):
    x, y = rand(torch, dev, shape, dtype, 1, True), rand(torch, dev, shape, dtype, 2, True)
    check_against_torch(torch, ktune.add, lambda a, b: a + b, [x, y], dtype, "add")


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_gelu(torch, dev, shape, dtype, approximate):
    F = torch.nn.functional
    x = rand(torch, dev, shape, dtype, 3, True)
    check_against_torch(torch, lambda t: ktune.gelu(t, approximate), lambda t: F.gelu(t, approximate=approximate),
                        [x], dtype, "gelu")


@pytest.mark.parametrize("act", ["swiglu", "geglu", "geglu_tanh"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (2, 3, 37), (17, 128), (4, 1000)])
def test_glu_two_tensors_and_halves(torch, dev, shape, dtype, act):
    F = torch.nn.functional

    def ref(a, b):
        if act == "swiglu":
            return F.silu(a) * b
        return F.gelu(a, approximate="tanh" if act == "geglu_tanh" else "none") * b

    def kt(a, b=None):
        if act == "swiglu":
            return ktune.swiglu(a, b)
        return ktune.geglu(a, b, approximate="tanh" if act == "geglu_tanh" else "none")

    a, b = rand(torch, dev, shape, dtype, 4, True), rand(torch, dev, shape, dtype, 5, True)
    check_against_torch(torch, kt, ref, [a, b], dtype, f"{act} two tensors")
    h = rand(torch, dev, shape[:-1] + (2 * shape[-1],), dtype, 6, True)
    c = shape[-1]
    check_against_torch(torch, kt, lambda t: ref(t[..., :c], t[..., c:]), [h], dtype, f"{act} halves")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (2, 3, 37), (17, 128), (4, 1000)])
def test_softmax(torch, dev, shape, dtype):
    x = rand(torch, dev, shape, dtype, 7, True)
    check_against_torch(torch, ktune.softmax, lambda t: t.softmax(-1), [x], dtype, "softmax")


def test_softmax_of_a_strided_view(torch, dev):
    x = rand(torch, dev, (6, 40), "float32", 8)[:, 3:36]  # rows 40 apart, 33 long
    close(torch, ktune.softmax(x), x.softmax(-1), "float32", "softmax view")
    xt = rand(torch, dev, (33, 6), "float32", 9).t()  # not rows at all: copied first
    close(torch, ktune.softmax(xt), xt.softmax(-1), "float32", "softmax transposed")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (2, 3, 37), (17, 128), (4, 1000)])
def test_rms_norm(torch, dev, shape, dtype):
    x = rand(torch, dev, shape, dtype, 10, True)
    w = rand(torch, dev, shape[-1:], dtype, 11, True, scale=1.0)
    ref = (lambda t, ww: torch.nn.functional.rms_norm(t, t.shape[-1:], ww, 1e-6))
    check_against_torch(torch, lambda t, ww: ktune.rms_norm(t, ww, 1e-6), ref, [x, w], dtype, "rms_norm")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (2, 3, 37), (17, 128)])
def test_rms_norm_with_residual(torch, dev, shape, dtype):
    F = torch.nn.functional
    x, r = rand(torch, dev, shape, dtype, 12, True), rand(torch, dev, shape, dtype, 13, True)
    w = rand(torch, dev, shape[-1:], dtype, 14, True, scale=1.0)
    y, h = ktune.rms_norm(x, w, 1e-6, residual=r)
    hr = (x.float() + r.float()).to(x.dtype)
    close(torch, h, hr, dtype, "h")
    close(torch, y, F.rms_norm(hr.float(), shape[-1:], w.float(), 1e-6).to(y.dtype), dtype, "y")
    # both outputs used downstream: the residual's gradient is the norm's plus h's own
    dy, dh = rand(torch, dev, shape, dtype, 15), rand(torch, dev, shape, dtype, 16)
    gx, gr, gw = torch.autograd.grad([y, h], [x, r, w], [dy, dh])
    xf, rf, wf = (t.detach().float().requires_grad_() for t in (x, r, w))
    hf = xf + rf
    yf = F.rms_norm(hf, shape[-1:], wf, 1e-6)
    tx, tr, tw = torch.autograd.grad([yf, hf], [xf, rf, wf], [dy.float(), dh.float()])
    close(torch, gx, tx.to(gx.dtype), dtype, "dx", 4)
    close(torch, gr, tr.to(gr.dtype), dtype, "dresidual", 4)
    s = max(1.0, tw.abs().max().item())
    close(torch, gw / s, (tw / s).to(gw.dtype), dtype, "dweight", 4)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (2, 3, 37), (17, 128), (4, 1000)])
def test_layer_norm(torch, dev, shape, dtype):
    x = rand(torch, dev, shape, dtype, 17, True)
    w = rand(torch, dev, shape[-1:], dtype, 18, True, scale=1.0)
    b = rand(torch, dev, shape[-1:], dtype, 19, True, scale=1.0)
    ref = (lambda t, ww, bb: torch.nn.functional.layer_norm(t, t.shape[-1:], ww, bb, 1e-5))
    check_against_torch(torch, lambda t, ww, bb: ktune.layer_norm(t, ww, bb, 1e-5), ref, [x, w, b], dtype,
                        "layer_norm")


def _affine(torch, dev, shape, dtype, which, seed):
    """The weight and bias named in `which` ("weight", "bias", "none"), else None."""
    w = rand(torch, dev, shape[-1:], dtype, seed, True, scale=1.0) if "weight" in which else None
    b = rand(torch, dev, shape[-1:], dtype, seed + 1, True, scale=1.0) if "bias" in which else None
    return w, b


def _split(which, ts):
    """(x, weight or None, bias or None) from the inputs given to check_against_torch."""
    ts = list(ts)
    x = ts.pop(0)
    w = ts.pop(0) if "weight" in which else None
    b = ts.pop(0) if "bias" in which else None
    return x, w, b


@pytest.mark.parametrize("which", ["weight", "bias", "none"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (2, 3, 37), (17, 128)])
def test_layer_norm_without_weight_or_bias(torch, dev, shape, dtype, which):
    """NULL weight (ones) and NULL bias (zeros), and no gradient for them."""
    F = torch.nn.functional
    x = rand(torch, dev, shape, dtype, 40, True)
    w, b = _affine(torch, dev, shape, dtype, which, 41)
    inputs = [t for t in (x, w, b) if t is not None]

    def kt(*ts):
        x, w, b = _split(which, ts)
        return ktune.layer_norm(x, w, b, 1e-5)

    def ref(*ts):
        x, w, b = _split(which, ts)
        return F.layer_norm(x, x.shape[-1:], w, b, 1e-5)
    check_against_torch(torch, kt, ref, inputs, dtype, f"layer_norm ({which})")


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (2, 3, 37), (17, 128)])
def test_rms_norm_without_weight(torch, dev, shape, dtype, residual):
    F = torch.nn.functional
    x = rand(torch, dev, shape, dtype, 42, True)
    if not residual:
        check_against_torch(torch, lambda t: ktune.rms_norm(t, eps=1e-6),
                            lambda t: F.rms_norm(t, t.shape[-1:], eps=1e-6), [x], dtype, "rms_norm, no weight")
        return
    r = rand(torch, dev, shape, dtype, 43, True)
    y, h = ktune.rms_norm(x, None, 1e-6, residual=r)
    hr = (x.float() + r.float()).to(x.dtype)
    close(torch, h, hr, dtype, "h")
    close(torch, y, F.rms_norm(hr.float(), shape[-1:], eps=1e-6).to(y.dtype), dtype, "y")
    dy = rand(torch, dev, shape, dtype, 44)
    gx, gr = torch.autograd.grad(y, [x, r], dy)
    xf, rf = (t.detach().float().requires_grad_() for t in (x, r))
    tx, tr = torch.autograd.grad(F.rms_norm(xf + rf, shape[-1:], eps=1e-6), [xf, rf], dy.float())
    close(torch, gx, tx.to(gx.dtype), dtype, "dx", 4)
    close(torch, gr, tr.to(gr.dtype), dtype, "dresidual", 4)


def test_norm_gradients_not_needed_are_not_computed(torch, dev, monkeypatch):
    """The backward passes NULL for a weight's or bias's gradient that autograd
    does not need (a frozen parameter): libktune then skips its reduction."""
    from ktune import calls
    seen = []
    for name in ("layernorm_backward", "rmsnorm_backward"):
        real = getattr(calls, name)

        def spy(*args, real=real, name=name, **kw):
            seen.append((name, args))
            return real(*args, **kw)
        monkeypatch.setattr(calls, name, spy)
    x = rand(torch, dev, (6, 40), "float32", 45, True)
    w = rand(torch, dev, (40,), "float32", 46, scale=1.0)  # frozen
    b = rand(torch, dev, (40,), "float32", 47, True, scale=1.0)
    gx, gb = torch.autograd.grad(ktune.layer_norm(x, w, b).sum(), [x, b])
    (_, args), = seen
    assert args[6] is None and args[7] is not None  # dweight NULL, dbias computed
    xf, bf = x.detach().requires_grad_(), b.detach().requires_grad_()
    tx, tb = torch.autograd.grad(torch.nn.functional.layer_norm(xf, (40,), w, bf).sum(), [xf, bf])
    close(torch, gx, tx, "float32", "dx")
    close(torch, gb / 6, tb / 6, "float32", "dbias")
    seen.clear()
    wr = w.clone().requires_grad_()
    (gw,) = torch.autograd.grad(ktune.rms_norm(x.detach(), wr).sum(), [wr])  # x frozen: dx computed, not used
    (_, args), = seen
    assert args[5] is not None
    tw, = torch.autograd.grad(torch.nn.functional.rms_norm(x.detach(), (40,), wr, 1e-6).sum(), [wr])
    close(torch, gw / 6, tw / 6, "float32", "dweight")
    seen.clear()
    torch.autograd.grad(ktune.rms_norm(x, w).sum(), [x])
    (_, args), = seen
    assert args[5] is None  # a frozen weight: no dweight


GEMM = [(1, 1, 1), (1, 33, 7), (7, 1, 33), (16, 64, 64), (33, 17, 65), (64, 96, 80), (3, 200, 1)]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("mnk", GEMM)
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_gemm(torch, dev, mnk, dtype, layout):
    m, n, k = mnk
    a = rand(torch, dev, (m, k) if layout[0] == "n" else (k, m), dtype, 21, scale=1.0)
    b = rand(torch, dev, (k, n) if layout[1] == "n" else (n, k), dtype, 22, scale=1.0)
    a = (a if layout[0] == "n" else a.t()).requires_grad_()
    b = (b if layout[1] == "n" else b.t()).requires_grad_()
    # an inner product of k terms each rounded: the tolerance grows as sqrt(k)
    check_against_torch(torch, ktune.gemm, lambda x, y: x @ y, [a, b], dtype, f"gemm {layout}",
                        grad_factor=4 * math.sqrt(max(m, n, k)), out_factor=max(1.0, math.sqrt(k) / 2))


def test_gemm_of_sliced_operands_and_alpha(torch, dev):
    big = rand(torch, dev, (40, 70), "bfloat16", 23, scale=1.0)
    a, b = big[3:20, 5:38], big[:33, 40:61]  # leading dimensions 70, not the row lengths
    close(torch, ktune.gemm(a, b, 0.5), (0.5 * (a.float() @ b.float())).to(a.dtype), "bfloat16", "sliced", 3)


def test_gemm_keeps_its_operands_aligned(torch, dev, monkeypatch):
    """C's rows are padded to 8 elements (a view of the padded buffer), and in a
    big GEMM an operand with an odd leading dimension is copied into a padded
    one, the gradient once for both backward GEMMs: every call stays in the
    aligned class (GPT-2's vocabulary of 50257 would otherwise send its LM head
    to element loads)."""
    from ktune import calls, torch_ops
    seen = []
    real = calls.gemm

    def spy(a, b, c, *args, **kw):
        seen.append(tuple(v.strides[0] if v.strides[1] == 1 else v.strides[1] for v in (a, b, c)))
        return real(a, b, c, *args, **kw)
    monkeypatch.setattr(calls, "gemm", spy)
    x = rand(torch, dev, (12, 16), "bfloat16", 50, True, scale=1.0)
    w = rand(torch, dev, (33, 16), "bfloat16", 51, True, scale=1.0)  # an odd vocabulary
    y = ktune.gemm(x, w.t())
    assert y.shape == (12, 33) and y.stride() == (40, 1)  # padded rows
    assert ktune.gemm(x, w[:32].t()).is_contiguous()  # nothing to pad
    seen.clear()
    monkeypatch.setattr(torch_ops, "PAD_MIN_FLOPS", 0)  # this small GEMM counts as big
    monkeypatch.setattr(torch_ops, "PAD_MIN_REUSE", 0)
    dy = rand(torch, dev, (12, 33), "bfloat16", 52, scale=1.0)  # contiguous: ld 33
    gx, gw = torch.autograd.grad(ktune.gemm(x, w.t()), [x, w], dy)
    assert all(ld % 8 == 0 for lds in seen for ld in lds), seen
    assert len(seen) == 3
    xf, wf = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    tx, tw = torch.autograd.grad(xf @ wf.t(), [xf, wf], dy.float())
    close(torch, gx, tx.to(gx.dtype), "bfloat16", "dx", 4)
    close(torch, gw, tw.to(gw.dtype), "bfloat16", "dw", 4)
    seen.clear()
    a = rand(torch, dev, (9, 21), "bfloat16", 53, scale=1.0)[:, 1:]  # a misaligned start, ld 21
    b = rand(torch, dev, (20, 24), "bfloat16", 54, scale=1.0)
    close(torch, ktune.gemm(a, b), (a.float() @ b.float()).to(a.dtype), "bfloat16", "copied operand", 3)
    assert seen[0][0] == 24 and a.stride() == (21, 1), seen  # a was copied (ld 20 -> 24), not changed


def test_gemm_zero_sizes(torch, dev):
    a = torch.zeros(0, 5, dtype=torch.float16, device=dev)
    assert ktune.gemm(a, torch.ones(5, 3, dtype=torch.float16, device=dev)).shape == (0, 3)
    z = ktune.gemm(torch.ones(4, 0, dtype=torch.float16, device=dev), torch.ones(0, 3, dtype=torch.float16,
                                                                                device=dev))
    assert z.shape == (4, 3) and (z == 0).all()


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5])
def test_dropout(torch, dev, p):
    n = 1 << 16
    x = rand(torch, dev, (n,), "float32", 24).abs() + 0.5  # no zeros of its own
    y = ktune.dropout(x, p, seed=1234, offset=0)
    kept = y != 0
    frac = kept.float().mean().item()
    assert abs(frac - (1 - p)) <= 4 * math.sqrt(p * (1 - p) / n) + 1e-9
    close(torch, y[kept], x[kept] / (1 - p), "float32", "kept values")
    assert torch.equal(ktune.dropout(x, p, seed=1234, offset=0), y)  # the same mask again
    if p:
        assert not torch.equal(ktune.dropout(x, p, seed=1234, offset=n // 4), y)
        assert not torch.equal(ktune.dropout(x, p, seed=1235, offset=0), y)
    xg = x.clone().requires_grad_()
    (g,) = torch.autograd.grad(ktune.dropout(xg, p, 1234, 0), xg, torch.ones_like(x))
    assert torch.equal(g != 0, kept)  # the backward keeps exactly the forward's elements
    close(torch, g[kept], torch.full_like(g[kept], 1 / (1 - p)), "float32", "backward scale")


def test_seeds_over_2_63_are_accepted(torch, dev):
    x = rand(torch, dev, (64,), "float32", 25)
    assert torch.equal(ktune.dropout(x, 0.5, (1 << 64) - 1), ktune.dropout(x, 0.5, -1))


def test_backward_functions_match_the_autograd_path(torch, dev):
    x = rand(torch, dev, (6, 40), "float32", 26)
    dy = rand(torch, dev, (6, 40), "float32", 27)
    y = ktune.softmax(x)
    close(torch, ktune.softmax_backward(y, dy), y * (dy - (y * dy).sum(-1, keepdim=True)), "float32", "softmax bwd")
    xg = x.clone().requires_grad_()
    (g,) = torch.autograd.grad(torch.nn.functional.gelu(xg), xg, dy)
    close(torch, ktune.gelu_backward(dy, x), g, "float32", "gelu bwd")


def test_errors_on_torch_tensors(torch, dev):
    x = torch.ones(4, 8, device=dev)
    with pytest.raises(TypeError):
        ktune.add(x, x.double())
    with pytest.raises(TypeError):
        ktune.gemm(x, x.t())  # float32: no gemm
    with pytest.raises(ValueError):
        ktune.add(x, torch.ones(4, 9, device=dev))
    with pytest.raises(ValueError):
        ktune.softmax(x, dim=0)
    with pytest.raises(ValueError):
        ktune.rms_norm(x, torch.ones(7, device=dev))
    with pytest.raises(TypeError):
        ktune.gelu(x.to(torch.int32))


def test_current_stream_is_used(torch, dev):
    if dev != "cuda":
        pytest.skip("streams are CUDA's")
    x = rand(torch, dev, (1 << 20,), "bfloat16", 28)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = ktune.gelu(x)
        z = ktune.add(y, y)  # ordered after gelu on s, not on the default stream
    s.synchronize()
    close(torch, z, 2 * torch.nn.functional.gelu(x.float()).to(x.dtype), "bfloat16", "on a side stream", 2)


def _opcheck_cases(torch, dev):
    def r(*shape, dtype="float32", seed=0):
        return rand(torch, dev, shape, dtype, seed, True)

    def c(*shape, seed=0):  # the backward ops have no formula of their own (no double backward)
        return rand(torch, dev, shape, "float32", seed)
    ops = torch.ops.ktune
    rstd = torch.rand(3, device=dev) + 0.5
    return [
        (ops.gelu_backward.default, (c(3, 4), c(3, 4, seed=1), "tanh")),
        (ops.glu_backward.default, (c(3, 4), c(3, 4, seed=1), c(3, 4, seed=2), "geglu")),
        (ops.glu_fused_backward.default, (c(3, 8), c(3, 4, seed=1), "swiglu")),
        (ops.dropout_backward.default, (c(3, 8), 0.25, 7, 0)),
        (ops.softmax_backward.default, (c(3, 8).softmax(-1), c(3, 8, seed=1))),
        (ops.rms_norm_backward.default, (c(3, 8), c(8, seed=1), rstd, c(3, 8, seed=2))),
        (ops.rms_norm_backward.default, (c(3, 8), None, rstd, c(3, 8, seed=2), False)),
        (ops.layer_norm_backward.default, (c(3, 8), c(8, seed=1), c(3, seed=3), rstd, c(3, 8, seed=2))),
        (ops.layer_norm_backward.default, (c(3, 8), None, c(3, seed=3), rstd, c(3, 8, seed=2), False, True)),
        (ops.layer_norm_backward.default, (c(3, 8), c(8, seed=1), c(3, seed=3), rstd, c(3, 8, seed=2), True,
                                           False)),
        (ops.gemm.default, (r(7, 5, dtype="bfloat16"), r(5, 3, dtype="bfloat16"), 1.0)),
        (ops.add.default, (r(3, 4), r(3, 4, seed=1))),
        (ops.gelu.default, (r(3, 4), "tanh")),
        (ops.glu.default, (r(3, 4), r(3, 4, seed=1), "swiglu")),
        (ops.glu_fused.default, (r(3, 8), "geglu")),
        (ops.dropout.default, (r(3, 8), 0.25, 7, 0)),
        (ops.softmax.default, (r(3, 8),)),
        (ops.rms_norm.default, (r(3, 8), r(8, seed=1), 1e-6)),
        (ops.rms_norm_residual.default, (r(3, 8), r(3, 8, seed=1), r(8, seed=2), 1e-6)),
        (ops.layer_norm.default, (r(3, 8), r(8, seed=1), r(8, seed=2), 1e-5)),
        (ops.rms_norm.default, (r(3, 8), None, 1e-6)),
        (ops.rms_norm_residual.default, (r(3, 8), r(3, 8, seed=1), None, 1e-6)),
        (ops.layer_norm.default, (r(3, 8), None, None, 1e-5)),
        (ops.layer_norm.default, (r(3, 8), r(8, seed=1), None, 1e-5)),
        (ops.layer_norm.default, (r(3, 8), None, r(8, seed=2), 1e-5)),
    ]


def test_opcheck(torch, dev):
    import ktune.torch_ops  # noqa: F401  (registers torch.ops.ktune)
    for op, args in _opcheck_cases(torch, dev):
        res = torch.library.opcheck(op, args)
        bad = {k: v for k, v in res.items() if v != "SUCCESS"}
        assert not bad, f"{op}: {bad}"


class _CAI:
    """Only __cuda_array_interface__, from a torch tensor it keeps alive (as CuPy or Numba arrays look)."""

    def __init__(self, t):
        self.t = t
        self.__cuda_array_interface__ = t.__cuda_array_interface__


class _DLPack:
    """Only DLPack, from a torch tensor."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, **kw):
        return self.t.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def test_cuda_array_interface_and_dlpack(torch, dev):
    if dev != "cuda":
        pytest.skip("__cuda_array_interface__ arrays live on CUDA")
    F = torch.nn.functional
    x = rand(torch, dev, (5, 64), "float16", 30)
    torch.cuda.synchronize()  # the interface's consumer runs on stream 0 here
    y = torch.empty_like(x)
    assert ktune.gelu(_CAI(x), out=_CAI(y)) is not None
    torch.cuda.synchronize()
    close(torch, y, F.gelu(x.float()).to(x.dtype), "float16", "gelu on __cuda_array_interface__")
    z = ktune.softmax(_CAI(x))  # allocated by torch: a torch tensor
    torch.cuda.synchronize()
    close(torch, z, x.float().softmax(-1).to(x.dtype), "float16", "softmax on __cuda_array_interface__")
    n = ktune.layer_norm(_CAI(x))  # no weight, no bias: NULL, ones and zeros
    torch.cuda.synchronize()
    close(torch, n, F.layer_norm(x.float(), (64,)).to(x.dtype), "float16", "layer_norm on __cuda_array_interface__")
    w = ktune.swiglu(_DLPack(x))
    close(torch, w, (F.silu(x[:, :32].float()) * x[:, 32:].float()).to(x.dtype), "float16", "swiglu on DLPack")
    a, b = rand(torch, dev, (16, 32), "float16", 31), rand(torch, dev, (32, 8), "float16", 32)
    torch.cuda.synchronize()
    c = ktune.gemm(_CAI(a), _CAI(b.t().contiguous().t()))
    torch.cuda.synchronize()
    close(torch, c, (a.float() @ b.float()).to(a.dtype), "float16", "gemm on __cuda_array_interface__", 3)
