"""The bindings of cross-entropy, the quantized GEMM and attention, called
through ctypes on host memory with the host double (no torch, no GPU): each
argument reaches the C function in its place, checked against a reference
computed here in Python.  Skipped with the real library (its functions take
device memory: test_ops.py covers them on a GPU)."""
import ctypes
import math
import struct

import pytest

import ktune
from ktune import _lib


@pytest.fixture
def host():
    lib = ktune.library()
    if not lib.host:
        pytest.skip("host memory: the host double only")
    return lib


def f32(values):
    return (ctypes.c_float * len(values))(*values)


def f16(values):
    """A buffer of halves (ktune's f16) holding `values`."""
    return ctypes.create_string_buffer(struct.pack(f"{len(values)}e", *values), 2 * len(values))


def from_f16(buf, n):
    return list(struct.unpack(f"{n}e", buf.raw[:2 * n]))


def addr(buf):
    return ctypes.addressof(buf)


def test_cross_entropy_forward_and_backward(host):
    ctx = ktune.context(0)
    rows, vocab = 3, 5
    x = [0.5, -1.0, 2.0, 0.0, 1.5, 3.0, 0.25, -2.0, 1.0, 0.0, -0.5, 0.5, 1.0, 1.5, 2.0]
    targets = (ctypes.c_int64 * rows)(2, 0, -100)  # the last row ignored
    logits, loss, lse = f32(x), f32([0.0]), f32([0.0] * rows)
    mean = _lib.REDUCTIONS["mean"]
    host.check(host.cross_entropy(ctx, rows, vocab, addr(logits), vocab, addr(targets), -100, 0.0, 0.0, mean,
                                  addr(loss), addr(lse), _lib.DTYPES["f32"], None), ctx)
    want_lse = [math.log(sum(math.exp(v) for v in x[r * vocab:(r + 1) * vocab])) for r in range(rows)]
    want = ((want_lse[0] - x[2]) + (want_lse[1] - x[5])) / 2
    assert loss[0] == pytest.approx(want, rel=1e-6)
    assert list(lse)[:2] == pytest.approx(want_lse[:2], rel=1e-6)

    dloss, dlogits = f32([1.0]), f32([0.0] * rows * vocab)
    host.check(host.cross_entropy_backward(ctx, rows, vocab, addr(logits), vocab, addr(targets), -100, 0.0, 0.0,
                                           mean, addr(lse), addr(dloss), addr(dlogits), vocab,
                                           _lib.DTYPES["f32"], None), ctx)
    r0 = [math.exp(v - want_lse[0]) / 2 for v in x[:vocab]]
    r0[2] -= 0.5
    assert list(dlogits)[:vocab] == pytest.approx(r0, abs=1e-6)
    assert list(dlogits)[2 * vocab:] == [0.0] * vocab  # the ignored row

    fused_loss, g = f32([0.0]), f32([0.0] * rows * vocab)
    host.check(host.cross_entropy_fused(ctx, rows, vocab, addr(logits), vocab, addr(targets), -100, 0.0, 0.0, mean,
                                        1.0, addr(fused_loss), addr(g), vocab, _lib.DTYPES["f32"], None), ctx)
    assert fused_loss[0] == pytest.approx(loss[0], rel=1e-6)
    assert list(g) == pytest.approx(list(dlogits), abs=1e-7)


def test_cross_entropy_refuses_a_bad_reduction(host):
    ctx = ktune.context(0)
    logits, loss, lse, t = f32([0.0] * 4), f32([0.0]), f32([0.0] * 2), (ctypes.c_int64 * 2)(0, 1)
    status = host.cross_entropy(ctx, 2, 2, addr(logits), 2, addr(t), -100, 0.0, 0.0, 7, addr(loss), addr(lse),
                                _lib.DTYPES["f32"], None)
    assert host.name_of(status) == "ERR_INVALID"
    assert b"reduction" in host.errmsg(ctx)


def test_attention_one_query_two_keys(host):
    """softmax over two keys of one query, head_dim 64, f16, packed BSHD (NULL strides)."""
    ctx = ktune.context(0)
    d = 64
    q = [0.0] * d
    q[0] = 1.0
    k = [0.0] * (2 * d)
    k[0], k[d] = 1.0, -1.0  # scores +scale and -scale
    v = [1.0] * d + [-1.0] * d
    qb, kb, vb, ob, lse = f16(q), f16(k), f16(v), f16([0.0] * d), f32([0.0])
    scale = 0.5
    host.check(host.attention_fwd(ctx, 1, 1, 2, 1, 1, d, addr(qb), None, addr(kb), None, addr(vb), None, addr(ob),
                                  None, addr(lse), scale, 0, _lib.DTYPES["f16"], None), ctx)
    p0 = math.exp(scale) / (math.exp(scale) + math.exp(-scale))
    assert from_f16(ob, d) == pytest.approx([p0 - (1 - p0)] * d, abs=1e-3)
    assert lse[0] == pytest.approx(math.log(math.exp(scale) + math.exp(-scale)), rel=1e-6)
    # causal with sq = 1, sk = 2: bottom-right aligned, the query sees both keys
    host.check(host.attention_fwd(ctx, 1, 1, 2, 1, 1, d, addr(qb), None, addr(kb), None, addr(vb), None, addr(ob),
                                  None, addr(lse), scale, 1, _lib.DTYPES["f16"], None), ctx)
    assert from_f16(ob, 1)[0] == pytest.approx(2 * p0 - 1, abs=1e-3)
    status = host.attention_fwd(ctx, 1, 1, 2, 3, 2, d, addr(qb), None, addr(kb), None, addr(vb), None, addr(ob),
                                None, addr(lse), scale, 0, _lib.DTYPES["f16"], None)
    assert host.name_of(status) == "ERR_INVALID"  # hq = 3 is not a multiple of hkv = 2


def test_gemm_quant_of_a_packed_weight(host):
    """ktune_quant_pack then ktune_gemm_quant, 8-bit per channel, against the unpacked weight."""
    ctx = ktune.context(0)
    n, k = 2, 32
    w = [((i * 7) % 11 - 5) / 8 for i in range(n * k)]
    fmt = _lib.ktune_quant_format(bits=8, group_size=0, mode=_lib.QUANT_MODES["scale_shift"], zero_scalar=0)
    nw, ns, nz = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
    host.check(host.quant_sizes(ctypes.byref(fmt), n, k, addr(nw), addr(ns), addr(nz), None, 0), ctx)
    wq = (ctypes.c_uint32 * nw.value)()
    scales, zeros = f16([0.0] * ns.value), f16([0.0] * nz.value)
    wb = f16(w)
    host.check(host.quant_pack(ctypes.byref(fmt), n, k, addr(wb), k, _lib.DTYPES["f16"], addr(wq), addr(scales),
                               addr(zeros)), ctx)
    back = f16([0.0] * (n * k))
    host.check(host.quant_unpack(ctypes.byref(fmt), n, k, addr(wq), addr(scales), addr(zeros), _lib.DTYPES["f16"],
                                 addr(back), k), ctx)
    wd = from_f16(back, n * k)
    assert wd == pytest.approx(w, abs=0.01)  # 8 bits over a range of 1.25
    a = f16([1.0] * k)
    c = f16([0.0] * n)
    host.check(host.gemm_quant(ctx, ctypes.byref(fmt), 1, n, k, addr(a), k, addr(wq), addr(scales), addr(zeros),
                               None, addr(c), n, _lib.DTYPES["f16"], None), ctx)
    assert from_f16(c, n) == pytest.approx([sum(wd[j * k:(j + 1) * k]) for j in range(n)], abs=0.02)
