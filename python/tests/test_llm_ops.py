"""Cross-entropy, the fused LM head, flash attention and the weight-quantized
GEMM against torch (F.cross_entropy, F.scaled_dot_product_attention, a
matmul by the dequantised weight) and their gradients against torch's, on
awkward shapes, and torch.library.opcheck on each of their custom ops.  On a
GPU with the real library (dev == "cuda"), or on CPU tensors with the host
double (dev == "cpu", which tests the Python layer, not the kernels);
skipped otherwise."""
import math

import pytest

import ktune

from test_ops import close, rand

F_DTYPES = ["float32", "float16", "bfloat16"]
H_DTYPES = ["float16", "bfloat16"]


def ints(torch, dev, shape, high, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, high, shape, generator=g).to(dev)


def rel(torch, got, ref, scale=None):
    """The largest error of got against ref relative to max(1, |ref|), or to `scale`."""
    g, r = got.float(), ref.float()
    if not g.numel():
        return 0.0
    assert torch.isfinite(g).all(), "non-finite values"
    den = r.abs().clamp(min=1) if scale is None else max(scale, 1e-30)
    return ((g - r).abs() / den).max().item()


# --- cross-entropy -----------------------------------------------------------------------------

def ce_ref(torch, logits, target, ignore_index=-100, reduction="mean", label_smoothing=0.0, softcap=None):
    """torch's loss in float32 of the same (rounded) logits, capped first."""
    F = torch.nn.functional
    z = logits.float()
    if softcap:
        z = softcap * torch.tanh(z / softcap)
    return F.cross_entropy(z, target, ignore_index=ignore_index, reduction=reduction,
                           label_smoothing=label_smoothing)


CE_SHAPES = [(1, 1), (3, 5), (17, 1000), (4, 50257), (2, 70000)]


@pytest.mark.parametrize("dtype", F_DTYPES)
@pytest.mark.parametrize("shape", CE_SHAPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy(torch, dev, shape, dtype, reduction):
    rows, vocab = shape
    x = rand(torch, dev, shape, dtype, 1, True)
    t = ints(torch, dev, (rows,), vocab, 2)
    if rows > 2:
        t[1] = -100  # an ignored row
    loss = ktune.cross_entropy(x, t, reduction=reduction)
    assert loss.dtype == torch.float32 and loss.shape == ((rows,) if reduction == "none" else ())
    xr = x.detach().float().requires_grad_()
    ref = ce_ref(torch, xr, t, reduction=reduction)
    close(torch, loss, ref, "float32", f"cross_entropy {reduction}", 4)
    dl = torch.rand(loss.shape, device=dev) + 0.5  # not 1: the backward scales by it
    g, = torch.autograd.grad(loss, x, dl)
    gr, = torch.autograd.grad(ref, xr, dl)
    close(torch, g, gr.to(g.dtype), dtype, f"cross_entropy {reduction} dlogits", 2)
    if rows > 2:
        assert (g[1] == 0).all()  # an ignored row's gradient is 0


@pytest.mark.parametrize("dtype", F_DTYPES)
@pytest.mark.parametrize("smoothing,softcap", [(0.1, None), (0.0, 3.0), (0.25, 30.0), (1.0, None)])
def test_cross_entropy_smoothing_and_softcap(torch, dev, dtype, smoothing, softcap):
    x = rand(torch, dev, (9, 300), dtype, 3, True, scale=4.0)
    t = ints(torch, dev, (9,), 300, 4)
    t[0] = 7
    for reduction in ("mean", "sum", "none"):
        loss = ktune.cross_entropy(x, t, ignore_index=7, reduction=reduction, label_smoothing=smoothing,
                                   softcap=softcap)
        xr = x.detach().float().requires_grad_()
        ref = ce_ref(torch, xr, t, 7, reduction, smoothing, softcap)
        close(torch, loss, ref, "float32", f"loss {reduction} {smoothing} {softcap}", 4)
        dl = torch.ones_like(loss)
        g, = torch.autograd.grad(loss, x, dl)
        gr, = torch.autograd.grad(ref, xr, dl)
        close(torch, g, gr.to(g.dtype), dtype, f"dlogits {reduction} {smoothing} {softcap}", 2)


def test_cross_entropy_edge_cases(torch, dev):
    x = rand(torch, dev, (4, 16), "float32", 5, True)
    none = torch.full((4,), -100, dtype=torch.int64, device=dev)
    loss = ktune.cross_entropy(x, none)  # every row ignored: 0 (torch: NaN), zero gradients
    assert loss.item() == 0
    g, = torch.autograd.grad(loss, x)
    assert (g == 0).all()
    bad = torch.tensor([0, 16, 3, -1], device=dev)  # 16 and -1: outside [0, vocab), not ignored
    rows = ktune.cross_entropy(x.detach(), bad, reduction="none")
    assert torch.isnan(rows[1]) and torch.isnan(rows[3]) and torch.isfinite(rows[[0, 2]]).all()
    assert torch.isnan(ktune.cross_entropy(x.detach(), bad))  # PyTorch raises; ktune's mean is NaN
    empty = ktune.cross_entropy(x.detach()[:0], none[:0])
    assert empty.shape == () and empty.item() == 0
    big = torch.tensor([[1e4, -1e4, 0.0], [-1e4, 1e4, 3.0]], device=dev)  # no overflow, no NaN
    close(torch, ktune.cross_entropy(big, torch.tensor([1, 1], device=dev), reduction="none"),
          torch.nn.functional.cross_entropy(big, torch.tensor([1, 1], device=dev), reduction="none"), "float32",
          "large logits")


def test_cross_entropy_of_a_strided_view(torch, dev, monkeypatch):
    """Logits with a row stride (a slice of wider rows) are read in place."""
    from ktune import calls
    big = rand(torch, dev, (6, 40), "bfloat16", 6)
    x = big[:, 3:36]
    t = ints(torch, dev, (6,), 33, 7)
    seen = []
    real = calls.cross_entropy

    def spy(logits, *args, **kw):
        seen.append(logits.strides)
        return real(logits, *args, **kw)
    monkeypatch.setattr(calls, "cross_entropy", spy)
    loss = ktune.cross_entropy(x, t, reduction="sum")
    assert seen == [(40, 1)]
    close(torch, loss, ce_ref(torch, x, t, reduction="sum"), "float32", "strided logits", 4)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_fused_matches_forward_and_backward(torch, dev, reduction):
    x = rand(torch, dev, (13, 257), "bfloat16", 8, True)
    t = ints(torch, dev, (13,), 257, 9)
    t[4] = -100
    loss, dlogits = ktune.cross_entropy_fused(x.detach(), t, reduction=reduction, label_smoothing=0.05, dloss=2.5)
    ref = ktune.cross_entropy(x, t, reduction=reduction, label_smoothing=0.05)
    close(torch, loss, ref.detach(), "float32", "fused loss", 2)
    g, = torch.autograd.grad(ref, x, torch.full_like(ref, 2.5))  # none: every row's loss gets dloss
    close(torch, dlogits, g, "bfloat16", "fused dlogits", 2)
    assert dlogits.shape == x.shape and dlogits.dtype == x.dtype


# --- the fused LM head --------------------------------------------------------------------------

def lce_ref(torch, h, w, t, ignore_index=-100, reduction="mean", label_smoothing=0.0, softcap=None):
    """torch's head in float32: logits rounded to the dtype, as ktune's GEMM stores them."""
    logits = (h.float() @ w.float().t()).to(h.dtype).float()
    return ce_ref(torch, logits.reshape(-1, w.shape[0]), t.reshape(-1), ignore_index, reduction, label_smoothing,
                  softcap)


LCE_SHAPES = [((1,), 64, 1), ((7,), 64, 33), ((33,), 128, 1000), ((3, 5), 64, 50), ((2, 40), 96, 4099)]


@pytest.mark.parametrize("dtype", H_DTYPES)
@pytest.mark.parametrize("lead,dim,vocab", LCE_SHAPES)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_linear_cross_entropy(torch, dev, lead, dim, vocab, dtype, reduction):
    h = rand(torch, dev, lead + (dim,), dtype, 10, True, scale=1.0)
    w = rand(torch, dev, (vocab, dim), dtype, 11, True, scale=1.0 / math.sqrt(dim))
    t = ints(torch, dev, lead, vocab, 12)
    if t.numel() > 2:
        t.view(-1)[1] = -100
    loss = ktune.linear_cross_entropy(h, w, t, reduction=reduction)
    assert loss.dtype == torch.float32 and loss.shape == ()
    hr, wr = (a.detach().float().requires_grad_() for a in (h, w))
    ref = lce_ref(torch, hr, wr, t, reduction=reduction)
    close(torch, loss, ref, dtype, "loss", 0.25)  # a logit may round the other way: 1 ulp of the dtype
    # the gradients, twice through one graph: the second of 3 times the loss
    gh, gw = torch.autograd.grad(loss, [h, w], retain_graph=True)
    gh3, gw3 = torch.autograd.grad(3 * loss, [h, w])
    th, tw = torch.autograd.grad(ref, [hr, wr])
    tol = {"float16": 1e-2, "bfloat16": 4e-2}[dtype]  # of the largest gradient: sums of rounded dlogits
    for got, want, what in ((gh, th, "dhidden"), (gw, tw, "dweight")):
        assert got.shape == want.shape and got.dtype == h.dtype
        assert rel(torch, got, want, want.abs().max().item()) <= tol, what
    for a, b, what in ((gh3, gh, "dhidden"), (gw3, gw, "dweight")):
        assert rel(torch, a / 3, b, b.abs().max().item()) <= tol / 4, f"{what} of 3 times the loss"


def test_linear_cross_entropy_smoothing_softcap_and_chunks(torch, dev, monkeypatch):
    """Several chunks of rows (a scratch of a few rows' logits) give the same loss
    and gradients as one; label smoothing and the soft cap as cross_entropy's."""
    from ktune import torch_ops
    h = rand(torch, dev, (70, 64), "bfloat16", 13, True, scale=1.0)
    w = rand(torch, dev, (300, 64), "bfloat16", 14, True, scale=0.2)
    t = ints(torch, dev, (70,), 300, 15)
    t[::9] = 5
    kw = dict(ignore_index=5, label_smoothing=0.1, softcap=2.0)
    one = ktune.linear_cross_entropy(h, w, t, **kw)
    g1 = torch.autograd.grad(one, [h, w])
    per_row = torch_ops.lce_chunk_rows(70, 300)[1]
    monkeypatch.setattr(torch_ops, "LCE_SCRATCH_BYTES", 3 * per_row)  # 3 rows a chunk: 24 chunks
    assert torch_ops.lce_chunk_rows(70, 300)[0] == 3
    many = ktune.linear_cross_entropy(h, w, t, **kw)
    g3 = torch.autograd.grad(many, [h, w])
    close(torch, many, one, "float32", "chunked loss", 4)
    for a, b, what in zip(g3, g1, ("dhidden", "dweight")):
        s = b.abs().max().item()
        assert rel(torch, a, b, s) <= 2e-2, what  # dweight is summed over the chunks in bfloat16
    hr, wr = (a.detach().float().requires_grad_() for a in (h, w))
    ref = lce_ref(torch, hr, wr, t, **kw)
    close(torch, one, ref, "float32", "smoothed, capped loss", 8)
    th, tw = torch.autograd.grad(ref, [hr, wr])
    assert rel(torch, g1[0], th, th.abs().max().item()) <= 3e-2
    assert rel(torch, g1[1], tw, tw.abs().max().item()) <= 3e-2


def test_linear_cross_entropy_edge_cases(torch, dev):
    h = rand(torch, dev, (4, 64), "float16", 16, True)
    w = rand(torch, dev, (10, 64), "float16", 17, True, scale=0.1)
    none = torch.full((4,), -100, dtype=torch.int64, device=dev)
    loss = ktune.linear_cross_entropy(h, w, none)  # every row ignored: 0, zero gradients
    gh, gw = torch.autograd.grad(loss, [h, w])
    assert loss.item() == 0 and (gh == 0).all() and (gw == 0).all()
    empty = ktune.linear_cross_entropy(h[:0], w, none[:0], reduction="sum")
    gh, gw = torch.autograd.grad(empty, [h, w])
    assert empty.item() == 0 and gh.shape == (4, 64) and (gw == 0).all()
    wf = w.detach().clone().requires_grad_()  # only the weight learns: no dhidden asked
    gw, = torch.autograd.grad(ktune.linear_cross_entropy(h.detach(), wf, none.clone().fill_(3)), [wf])
    assert gw.shape == w.shape and torch.isfinite(gw).all() and (gw[3] != 0).any()


# --- attention -------------------------------------------------------------------------------------

def attn_ref(torch, q, k, v, causal, scale):
    """Attention in float32 with GQA expanded and the causal mask aligned bottom-right; a
    row that sees no key gives zeros (torch's own gives NaN)."""
    hq, hkv = q.shape[1], k.shape[1]
    k, v = (t.float().repeat_interleave(hq // hkv, dim=1) for t in (k, v))
    s = (q.float() @ k.transpose(-1, -2)) * scale
    sq, sk = q.shape[2], k.shape[2]
    i = torch.arange(sq, device=q.device)[:, None]
    j = torch.arange(sk, device=q.device)[None, :]
    mask = (j <= i + sk - sq) if causal else torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    seen = mask.any(-1, keepdim=True)
    s = s.masked_fill(~mask, -math.inf).masked_fill(~seen, 0.0)
    p = s.softmax(-1) * seen
    lse = torch.logsumexp(s.masked_fill(~mask, -math.inf), -1)
    return p @ v, lse


# (batch, q heads, kv heads, seq_q, seq_k, head_dim)
ATTN = [(1, 1, 1, 1, 1, 64), (2, 4, 2, 33, 33, 64), (1, 2, 2, 17, 40, 128), (2, 8, 1, 5, 5, 64),
        (1, 2, 2, 40, 17, 64), (1, 3, 3, 130, 130, 128)]


@pytest.mark.parametrize("dtype", H_DTYPES)
@pytest.mark.parametrize("shape", ATTN)
@pytest.mark.parametrize("causal", [False, True])
def test_attention(torch, dev, shape, dtype, causal):
    b, hq, hkv, sq, sk, d = shape
    q = rand(torch, dev, (b, hq, sq, d), dtype, 20, True, scale=1.0)
    k = rand(torch, dev, (b, hkv, sk, d), dtype, 21, True, scale=1.0)
    v = rand(torch, dev, (b, hkv, sk, d), dtype, 22, True, scale=1.0)
    scale = 1 / math.sqrt(d)
    o, lse = ktune.attention(q, k, v, causal=causal, return_lse=True)
    assert o.shape == q.shape and o.dtype == q.dtype and o.transpose(1, 2).is_contiguous()
    qr, kr, vr = (t.detach().float().requires_grad_() for t in (q, k, v))
    ref, ref_lse = attn_ref(torch, qr, kr, vr, causal, scale)
    close(torch, o, ref.to(o.dtype), dtype, "attention", 2)
    seen = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), seen)  # -inf where a row sees no key
    close(torch, lse[seen], ref_lse[seen].detach(), "float32", "lse", 50)
    if hq == hkv and (sq == sk or not causal):  # torch's own (causal: top-left and bottom-right coincide)
        sdpa = torch.nn.functional.scaled_dot_product_attention(q.detach().float(), k.detach().float(),
                                                                v.detach().float(), is_causal=causal)
        close(torch, o, sdpa.to(o.dtype), dtype, "against F.scaled_dot_product_attention", 2)
    dout = rand(torch, dev, o.shape, dtype, 23, scale=1.0)
    grads = torch.autograd.grad(o, [q, k, v], dout)
    refs = torch.autograd.grad(ref, [qr, kr, vr], dout.float())
    for g, r, what in zip(grads, refs, ("dq", "dk", "dv")):
        assert g.shape == r.shape and g.dtype == q.dtype and g.transpose(1, 2).is_contiguous()
        close(torch, g, r.to(g.dtype), dtype, f"attention {what}", 2 * math.sqrt(max(sk, sq) / 32 + 1))


def test_attention_reads_bshd_views_in_place_and_copies_the_rest(torch, dev, monkeypatch):
    """q, k, v as views of a packed [B, S, 3, H, D] projection (BSHD strides) reach
    libktune as they are; a view whose strides it cannot take (rows 16-byte apart
    only by luck) is copied first."""
    from ktune import calls
    seen = []
    real = calls.attention_fwd

    def spy(q, k, v, *args, **kw):
        seen.append((q.ptr, q.strides))
        return real(q, k, v, *args, **kw)
    monkeypatch.setattr(calls, "attention_fwd", spy)
    b, s, h, d = 2, 24, 2, 64
    qkv = rand(torch, dev, (b, s, 3, h, d), "bfloat16", 24, scale=1.0)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    o = ktune.attention(q, k, v, causal=True)
    assert seen == [(q.data_ptr(), q.stride())]
    ref, _ = attn_ref(torch, q, k, v, True, 1 / math.sqrt(d))
    close(torch, o, ref.to(o.dtype), "bfloat16", "attention of BSHD views", 2)
    wide = rand(torch, dev, (1, 2, 9, 68), "bfloat16", 25, scale=1.0)[..., 2:66]  # seq stride 68, misaligned start
    seen.clear()
    o = ktune.attention(wide, wide, wide)
    assert seen[0][0] != wide.data_ptr()  # a copy
    ref, _ = attn_ref(torch, wide, wide, wide, False, 1 / 8)
    close(torch, o, ref.to(o.dtype), "bfloat16", "attention of a copied view", 2)


def test_attention_head_dim_256_forward_and_no_grad(torch, dev):
    q = rand(torch, dev, (1, 2, 7, 256), "float16", 26, scale=1.0)
    with torch.no_grad():
        o = ktune.attention(q, q, q, scale=0.05)
    ref, _ = attn_ref(torch, q, q, q, False, 0.05)
    close(torch, o, ref.to(o.dtype), "float16", "head_dim 256", 2)


def test_attention_deterministic_flag(torch, dev, monkeypatch):
    """torch.use_deterministic_algorithms(True) asks libktune's deterministic backward,
    which gives bit-identical gradients run to run."""
    from ktune import calls
    flags = []
    real = calls.attention_bwd

    def spy(*args, **kw):
        flags.append(args[11] if len(args) > 11 else kw.get("deterministic"))
        return real(*args, **kw)
    monkeypatch.setattr(calls, "attention_bwd", spy)
    q = rand(torch, dev, (2, 4, 40, 64), "bfloat16", 27, True, scale=1.0)
    kv = rand(torch, dev, (2, 2, 40, 64), "bfloat16", 28, True, scale=1.0)
    dout = rand(torch, dev, q.shape, "bfloat16", 29, scale=1.0)
    was = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)
        g1 = torch.autograd.grad(ktune.attention(q, kv, kv, causal=True), [q, kv], dout)
        g2 = torch.autograd.grad(ktune.attention(q, kv, kv, causal=True), [q, kv], dout)
    finally:
        torch.use_deterministic_algorithms(was)
    torch.autograd.grad(ktune.attention(q, kv, kv), [q], dout)
    assert flags == [True, True, was]
    assert all(torch.equal(a, b) for a, b in zip(g1, g2))


# --- the weight-quantized GEMM -------------------------------------------------------------------

FORMATS = [
    ktune.QuantFormat(4, 128, "scale_shift"), ktune.QuantFormat(4, 128, "scale"), ktune.QuantFormat(4, 128, "shift"),
    ktune.QuantFormat(4, 128, "fma"), ktune.QuantFormat(8, 32, "scale_shift"), ktune.QuantFormat(2, 64, "fma"),
    ktune.QuantFormat(1, 32, "scale_shift"), ktune.QuantFormat(8, 0, "scale_shift"),
    ktune.QuantFormat(4, 0, "scale_shift", zero_scalar=True), ktune.QuantFormat(4, 64, "fma", zero_scalar=True),
    ktune.QuantFormat(4, 32, "shift", zero_scalar=True),
]


def dequant_ref(torch, wq, scales, zeros, fmt, k):
    """The dequantised weight in float32, unpacked in Python from the documented layout
    (include/ktune.h): element (r, c) in word r * RW + c / (32 / b) at bit (c % (32 / b)) * b."""
    per = 32 // fmt.bits
    words = wq.cpu().to(torch.int64) & 0xFFFFFFFF
    c = torch.arange(k)
    q = (words[:, c // per] >> ((c % per) * fmt.bits)) & ((1 << fmt.bits) - 1)
    group = fmt.group_size or k
    g = c // group
    s = scales.cpu().float()[:, g] if scales is not None else 1.0
    if zeros is None:
        z = 0.0
    else:
        z = zeros.cpu().float().reshape(-1)[0] if fmt.zero_scalar else zeros.cpu().float()[:, g]
    qf = q.float()
    w = {"scale_shift": (qf - z) * s, "scale": qf * s, "shift": qf - z, "fma": qf * s + z}[fmt.mode]
    return w.to(wq.device)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f"{f.bits}b-g{f.group_size}-{f.mode}"
                         + ("-z1" if f.zero_scalar else ""))
def test_quant_pack_and_unpack(torch, dev, fmt):
    n, k = 24, 256
    w = rand(torch, dev, (n, k), "bfloat16", 30, scale=0.5)
    if fmt.mode == "shift":
        w = torch.randint(-3, 4, (n, k), generator=torch.Generator().manual_seed(31)).to(torch.bfloat16).to(dev)
    wq, scales, zeros = ktune.quant_pack(w, fmt)
    wshape, sshape, zshape = fmt.shapes(n, k)
    assert wq.dtype == torch.int32 and tuple(wq.shape) == wshape and wq.device == w.device
    assert (scales is None) == (sshape is None) and (zeros is None) == (zshape is None)
    deq = ktune.quant_unpack(wq, scales, zeros, fmt, k)
    assert deq.shape == (n, k) and deq.dtype == w.dtype
    close(torch, deq, dequant_ref(torch, wq, scales, zeros, fmt, k).to(deq.dtype), "bfloat16", "unpack vs layout")
    if fmt.mode == "shift" and fmt.bits >= 3:  # integer weights spanning fewer than 2^b values: exact
        assert torch.equal(deq, w)
    elif fmt.mode in ("scale_shift", "fma") and not fmt.zero_scalar:
        # round to nearest: within half a step (the group's range over 2^b - 1) of each weight
        group = fmt.group_size or k
        wg = w.float().reshape(n, k // group, group)
        step = (wg.amax(-1) - wg.amin(-1)) / ((1 << fmt.bits) - 1)
        err = (deq.float() - w.float()).abs().reshape(n, k // group, group).amax(-1)
        assert (err <= 0.5 * step * 1.05 + 0.02 * wg.abs().amax(-1)).all()


@pytest.mark.parametrize("dtype", H_DTYPES)
@pytest.mark.parametrize("fmt", FORMATS[:4] + FORMATS[6:9], ids=lambda f: f"{f.bits}b-g{f.group_size}-{f.mode}"
                         + ("-z1" if f.zero_scalar else ""))
@pytest.mark.parametrize("m", [1, 3, 17, 64])
def test_gemm_quant(torch, dev, m, fmt, dtype):
    n, k = 40, 256
    w = rand(torch, dev, (n, k), dtype, 32, scale=0.5)
    wq, scales, zeros = ktune.quant_pack(w, fmt)
    deq = dequant_ref(torch, wq, scales, zeros, fmt, k)  # float32, not rounded to the dtype
    a = rand(torch, dev, (m, k), dtype, 33, scale=1.0)
    bias = rand(torch, dev, (n,), dtype, 34, scale=1.0)
    y = ktune.gemm_quant(a, wq, scales, zeros, fmt, bias=bias)
    assert y.shape == (m, n) and y.dtype == a.dtype
    ref = a.float() @ deq.t() + bias.float()
    # of max(1, |ref|): the output's rounding, and a kernel that rounds each dequantised weight to the
    # dtype for its mma (k of them summed: about sqrt(k) / 2^9 in bfloat16)
    close(torch, y, ref.to(y.dtype), dtype, "gemm_quant", 4)
    y0 = ktune.gemm_quant(a, wq, scales, zeros, fmt)
    close(torch, y0, (a.float() @ deq.t()).to(y.dtype), dtype, "gemm_quant, no bias", 4)


def test_gemm_quant_of_awkward_inputs(torch, dev):
    """a of three dimensions, a slice whose rows are not 16-byte aligned (copied),
    n not a multiple of 8 (C's rows padded, as gemm's)."""
    fmt = ktune.QuantFormat(4, 32, "scale_shift")
    n, k = 13, 96
    w = rand(torch, dev, (n, k), "bfloat16", 35, scale=0.5)
    wq, scales, zeros = ktune.quant_pack(w, fmt)
    deq = dequant_ref(torch, wq, scales, zeros, fmt, k)
    a = rand(torch, dev, (2, 5, k), "bfloat16", 36, scale=1.0)
    y = ktune.gemm_quant(a, wq, scales, zeros, fmt)
    assert y.shape == (2, 5, n)
    close(torch, y, (a.float() @ deq.t()).to(y.dtype), "bfloat16", "3-D a", 5)
    wide = rand(torch, dev, (6, k + 3), "bfloat16", 37, scale=1.0)[:, 1:k + 1]  # ld 99, misaligned start
    y = ktune.gemm_quant(wide, wq, scales, zeros, fmt)
    assert y.stride() == (16, 1)  # n = 13 padded to 16
    close(torch, y, (wide.float() @ deq.t()).to(y.dtype), "bfloat16", "strided a", 5)
    assert ktune.gemm_quant(wide[:0], wq, scales, zeros, fmt).shape == (0, n)


# --- what libktune itself refuses, through the calls layer ---------------------------------------------

def test_library_checks_behind_the_python_ones(torch, dev):
    """The C checks behind the Python layer's: views it would have copied, passed as
    they are, get libktune's ERR_INVALID and its reason."""
    from ktune import calls
    from ktune.arrays import of_torch, of_torch_index
    wide = torch.zeros(1, 2, 9, 68, dtype=torch.bfloat16, device=dev)[..., :64]  # seq stride 68
    lse = torch.zeros(1, 2, 9, device=dev)
    o = torch.zeros(1, 2, 9, 64, dtype=torch.bfloat16, device=dev)
    v = [of_torch(t, "x") for t in (wide, wide, wide, o, lse)]
    with pytest.raises(ktune.Error) as e:
        calls.attention_fwd(*v, 0.125, False)
    assert e.value.name == "ERR_INVALID" and "16-byte aligned" in e.value.message
    x = torch.zeros(4, 16, dtype=torch.bfloat16, device=dev)
    t = torch.zeros(4, dtype=torch.int64, device=dev)
    w = torch.zeros(16, 16, dtype=torch.bfloat16, device=dev)
    lr = torch.zeros(4, device=dev)
    with pytest.raises(ktune.Error) as e:  # a scratch too small for one row of logits
        calls.linear_cross_entropy(of_torch(x, "h"), of_torch(w, "w"), of_torch_index(t, "t"), of_torch(lr, "l"),
                                   of_torch(x.clone(), "dh"), of_torch(w.clone(), "dw"), x.data_ptr(), 8, 0, -100,
                                   0.0, 0.0, "sum")
    assert e.value.name == "ERR_INVALID" and "scratch" in e.value.message
    fmt = ktune.QuantFormat(4, 32)
    wq, scales, zeros = ktune.quant_pack(torch.ones(8, 64, dtype=torch.bfloat16, device=dev), fmt)
    a = torch.zeros(3, 72, dtype=torch.bfloat16, device=dev)[:, 4:68]  # ld 72: rows 16-byte aligned; start not
    c = torch.zeros(3, 8, dtype=torch.bfloat16, device=dev)
    with pytest.raises(ktune.Error) as e:
        calls.gemm_quant(fmt.c_format(), of_torch(a, "a"), of_torch_index(wq, "wq"), of_torch(scales, "s"),
                         of_torch(zeros, "z"), None, of_torch(c, "c"))
    assert e.value.name == "ERR_INVALID" and "16-byte aligned" in e.value.message
    # the same calls from the public functions: copied, and served
    assert ktune.gemm_quant(a, wq, scales, zeros, fmt).shape == (3, 8)
    assert ktune.attention(wide, wide, wide).shape == wide.shape


# --- opcheck ---------------------------------------------------------------------------------------

def _opcheck_cases(torch, dev):
    def r(*shape, dtype="float32", seed=0, grad=True):
        return rand(torch, dev, shape, dtype, seed, grad, scale=1.0)
    ops = torch.ops.ktune
    t = ints(torch, dev, (5,), 24, 40)
    t[2] = -100
    lse = torch.logsumexp(r(5, 24, grad=False), -1)
    fmt = ktune.QuantFormat(4, 32, "scale_shift")
    wq, scales, zeros = ktune.quant_pack(r(8, 64, dtype="bfloat16", grad=False), fmt)
    wq2, scales2, _ = ktune.quant_pack(r(8, 64, dtype="bfloat16", grad=False), ktune.QuantFormat(8, 0, "scale"))
    q, kv = r(1, 4, 6, 64, dtype="bfloat16", seed=1), r(1, 2, 9, 64, dtype="bfloat16", seed=2)
    o, olse = ktune.attention(q.detach(), kv.detach(), kv.detach(), return_lse=True)
    return [
        (ops.cross_entropy.default, (r(5, 24), t, -100, "mean", 0.0, 0.0)),
        (ops.cross_entropy.default, (r(5, 24, dtype="bfloat16"), t, -100, "none", 0.1, 5.0)),
        (ops.cross_entropy_backward.default, (r(5, 24, grad=False), t, lse, r(grad=False), -100, "sum", 0.0, 0.0)),
        (ops.cross_entropy_fused.default, (r(5, 24, grad=False), t, -100, "mean", 0.0, 0.0, 1.0)),
        (ops.linear_cross_entropy.default, (r(5, 64, dtype="bfloat16"), r(24, 64, dtype="bfloat16", seed=3), t,
                                            -100, "mean", 0.0, 0.0)),
        (ops.attention.default, (q, kv, kv, False, 0.125)),
        (ops.attention.default, (q, kv, kv, True, 0.125)),
        (ops.attention_backward.default, (q.detach(), kv.detach(), kv.detach(), o, olse,
                                          r(1, 4, 6, 64, dtype="bfloat16", seed=4, grad=False), False, 0.125, True)),
        (ops.gemm_quant.default, (r(3, 64, dtype="bfloat16", grad=False), wq, scales, zeros,
                                  r(8, dtype="bfloat16", grad=False), 4, 32, "scale_shift", False)),
        (ops.gemm_quant.default, (r(5, 64, dtype="bfloat16", grad=False), wq2, scales2, None, None, 8, 0, "scale",
                                  False)),
    ]


def test_opcheck(torch, dev):
    import ktune.torch_ops  # noqa: F401  (registers torch.ops.ktune)
    for op, args in _opcheck_cases(torch, dev):
        res = torch.library.opcheck(op, args)
        bad = {k: v for k, v in res.items() if v != "SUCCESS"}
        assert not bad, f"{op}: {bad}"
