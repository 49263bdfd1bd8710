"""The C calls on Views (arrays.py): each checks its arguments, then calls
libktune on the device's context and stream.  The torch ops and the
__cuda_array_interface__ path both come through here; arguments are checked
before the library is loaded or a context opened, so a bad call raises the
same ValueError or TypeError on a machine without a GPU.

`stream` is a CUstream handle as an int (0: the legacy default stream)."""
import ctypes
import threading

from . import _lib, contexts
from .arrays import is_contiguous, matrix_of, rows_of, same, shape_is, writable
from .errors import Error

GELU = {"none": 0, "tanh": 1}
GLU = {"swiglu": 0, "geglu": 1, "geglu_tanh": 2}
_MASK64 = (1 << 64) - 1


def _device(views, names):
    """The device of the call: every array must be on the same one (its kind
    is checked last, in _call, so that every other check comes first)."""
    same(views, names)
    return views[0].device


_DTYPES = _lib.DTYPES
counting = ()  # the Counters of runtime.count_dispatch's active blocks
count_lock = threading.Lock()


def _dt(v):
    return _DTYPES[v.dtype]


def _call(device, fn, *args):
    """libktune's `fn` on the context of `device`, ("cuda", ordinal): CUDA
    arrays only (host ones for the test double of tests/host/).  Every op
    call comes through here: it is kept to a dictionary look-up or two
    besides the C call."""
    lib = _lib._lib
    if lib is None:
        try:
            lib = _lib.library()
        except ImportError:
            lib = None  # the device is checked first; the load's error comes after
    kind, index = device
    want = "cpu" if lib is not None and lib.host else "cuda"
    if kind != want:
        raise ValueError(f"the arrays are on device '{kind}'; ktune runs on '{want}' ones")
    if lib is None:
        lib = _lib.library()
    index = index or 0
    ctx = contexts._contexts.get(index) or contexts.context(index)
    status = getattr(lib, fn)(ctx, *args)
    if status:
        lib.check(status, ctx)
    if counting:
        key = (fn, lib.last_dispatch(ctx).decode())
        with count_lock:
            for c in counting:
                c[key] += 1


def _f32(v, n, name):
    """The data pointer of a float32 vector of n (float * is bound as void *, _lib.py)."""
    if v.dtype != "f32":
        raise TypeError(f"{name}: must be float32, not {v.dtype}")
    shape_is(v, (n,), name)
    if n > 1 and v.strides[0] != 1:
        raise ValueError(f"{name}: must be contiguous")
    return v.ptr


def _flat(views, names):
    for v, n in zip(views, names):
        if not is_contiguous(v):
            raise ValueError(f"{n}: must be contiguous (shape {v.shape}, strides {v.strides})")
        shape_is(v, views[0].shape, n)


def _vector(v, cols, name):
    shape_is(v, (cols,), name)
    if cols > 1 and v.strides[0] != 1:
        raise ValueError(f"{name}: must be contiguous")


def gemm(a, b, c, alpha=1.0, beta=0.0, stream=0):
    """c = alpha a @ b + beta c: a [m, k], b [k, n], c [m, n] row-major; a and
    b row- or column-major (a transposed view), f16 or bf16."""
    names = ("a", "b", "c")
    dev = _device((a, b, c), names)
    if a.dtype == "f32":
        raise TypeError("gemm: float32 is not supported (float16, bfloat16)")
    ta, lda = matrix_of(a, "a")
    tb, ldb = matrix_of(b, "b")
    tc, ldc = matrix_of(c, "c")
    m, k = a.shape
    if b.shape[0] != k:
        raise ValueError(f"gemm: a is {a.shape} and b is {b.shape}: inner sizes differ")
    n = b.shape[1]
    shape_is(c, (m, n), "c")
    if tc != "n" and m > 1 and n > 1:
        raise ValueError("c: must be row-major")
    writable(c, "c")
    _call(dev, "gemm", ta.encode(), tb.encode(), m, n, k, alpha, a.ptr, lda, b.ptr, ldb, beta, c.ptr, ldc,
          _dt(a), stream)


def add(x, y, z, stream=0):
    dev = _device((x, y, z), ("x", "y", "z"))
    _flat((x, y, z), ("x", "y", "z"))
    writable(z, "z")
    _call(dev, "add", x.numel, x.ptr, y.ptr, z.ptr, _dt(x), stream)


def _approx(approximate):
    if approximate not in GELU:
        raise ValueError(f"approximate must be 'none' or 'tanh', not {approximate!r}")
    return GELU[approximate]


def gelu(x, y, approximate="none", stream=0):
    dev = _device((x, y), ("x", "y"))
    _flat((x, y), ("x", "y"))
    writable(y, "y")
    _call(dev, "gelu", x.numel, x.ptr, y.ptr, _approx(approximate), _dt(x), stream)


def gelu_backward(x, dy, dx, approximate="none", stream=0):
    dev = _device((x, dy, dx), ("x", "dy", "dx"))
    _flat((x, dy, dx), ("x", "dy", "dx"))
    writable(dx, "dx")
    _call(dev, "gelu_backward", x.numel, x.ptr, dy.ptr, dx.ptr, _approx(approximate), _dt(x), stream)


def _act(act):
    if act not in GLU:
        raise ValueError(f"act must be one of {', '.join(GLU)}, not {act!r}")
    return GLU[act]


def _mats(views, names, rows, cols):
    lds = []
    for v, n in zip(views, names):
        r, c, ld = rows_of(v, n)
        if (r, c) != (rows, cols):
            raise ValueError(f"{n}: {r} rows of {c} where {rows} rows of {cols} are needed")
        lds.append(ld)
    return lds


def glu(a, b, out, act, stream=0):
    """out = act(a) * b over rows of the last dimension (a and b may be the two
    halves of one tensor: views with a row stride of 2 cols)."""
    names = ("a", "b", "out")
    dev = _device((a, b, out), names)
    rows, cols, _ = rows_of(a, "a")
    lda, ldb, ldo = _mats((a, b, out), names, rows, cols)
    writable(out, "out")
    _call(dev, "glu", _act(act), rows, cols, a.ptr, lda, b.ptr, ldb, out.ptr, ldo, _dt(a), stream)


def glu_backward(a, b, dout, da, db, act, stream=0):
    names = ("a", "b", "dout", "da", "db")
    dev = _device((a, b, dout, da, db), names)
    rows, cols, _ = rows_of(a, "a")
    lda, ldb, ldd, ldda, lddb = _mats((a, b, dout, da, db), names, rows, cols)
    writable(da, "da")
    writable(db, "db")
    _call(dev, "glu_backward", _act(act), rows, cols, a.ptr, lda, b.ptr, ldb, dout.ptr, ldd, da.ptr, ldda,
          db.ptr, lddb, _dt(a), stream)


def _p(p):
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout: p must be in [0, 1), not {p}")
    return p


def dropout(x, y, p, seed, offset=0, stream=0):
    dev = _device((x, y), ("x", "y"))
    _flat((x, y), ("x", "y"))
    writable(y, "y")
    _call(dev, "dropout", x.numel, _p(p), seed & _MASK64, offset & _MASK64, x.ptr, y.ptr, _dt(x), stream)


def dropout_backward(dy, dx, p, seed, offset=0, stream=0):
    dev = _device((dy, dx), ("dy", "dx"))
    _flat((dy, dx), ("dy", "dx"))
    writable(dx, "dx")
    _call(dev, "dropout_backward", dy.numel, _p(p), seed & _MASK64, offset & _MASK64, dy.ptr, dx.ptr,
          _dt(dy), stream)


def softmax(x, y, stream=0):
    dev = _device((x, y), ("x", "y"))
    rows, cols, _ = rows_of(x, "x")
    ldx, ldy = _mats((x, y), ("x", "y"), rows, cols)
    writable(y, "y")
    _call(dev, "softmax", rows, cols, x.ptr, ldx, y.ptr, ldy, _dt(x), stream)


def softmax_backward(y, dy, dx, stream=0):
    names = ("y", "dy", "dx")
    dev = _device((y, dy, dx), names)
    rows, cols, _ = rows_of(y, "y")
    ldy, lddy, lddx = _mats((y, dy, dx), names, rows, cols)
    writable(dx, "dx")
    _call(dev, "softmax_backward", rows, cols, y.ptr, ldy, dy.ptr, lddy, dx.ptr, lddx, _dt(y), stream)


def _eps(eps):
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, not {eps}")
    return eps


def _vectors(pairs, cols):
    """The data pointers of a norm's vectors over the columns, each of cols
    elements or None (NULL: ones, zeros, or not computed: include/ktune.h)."""
    ptrs = []
    for v, name in pairs:
        if v is None:
            ptrs.append(None)
        else:
            _vector(v, cols, name)
            ptrs.append(v.ptr)
    return ptrs


def _present(views, names):
    keep = [(v, n) for v, n in zip(views, names) if v is not None]
    return tuple(v for v, _ in keep), tuple(n for _, n in keep)


def rmsnorm(x, weight, y, rstd, eps, residual=None, h=None, stream=0):
    """y = rmsnorm(x (+ residual)) * weight, rstd per row; with residual, the
    sum is written to h.  weight None: ones."""
    mats = (x, y) + ((residual, h) if residual is not None else ())
    names = ("x", "y") + (("residual", "h") if residual is not None else ())
    if (residual is None) != (h is None):
        raise ValueError("rmsnorm: residual and h go together")
    dev = _device(*_present(mats + (weight,), names + ("weight",)))
    rows, cols, _ = rows_of(x, "x")
    lds = _mats(mats, names, rows, cols)
    pw, = _vectors([(weight, "weight")], cols)
    pr = _f32(rstd, rows, "rstd")
    writable(y, "y")
    res, ldr, hp, ldh = (residual.ptr, lds[2], h.ptr, lds[3]) if residual is not None else (None, 0, None, 0)
    _call(dev, "rmsnorm", rows, cols, x.ptr, lds[0], res, ldr, pw, _eps(eps), y.ptr, lds[1], pr, hp, ldh,
          _dt(x), stream)


def rmsnorm_backward(h, weight, rstd, dy, dx, dweight, stream=0):
    """dx, and dweight unless it is None; weight None: ones."""
    names = ("h", "dy", "dx")
    dev = _device(*_present((h, dy, dx, weight, dweight), names + ("weight", "dweight")))
    rows, cols, _ = rows_of(h, "h")
    ldh, lddy, lddx = _mats((h, dy, dx), names, rows, cols)
    pw, pdw = _vectors([(weight, "weight"), (dweight, "dweight")], cols)
    pr = _f32(rstd, rows, "rstd")
    _call(dev, "rmsnorm_backward", rows, cols, h.ptr, ldh, pw, pr, dy.ptr, lddy, dx.ptr, lddx, pdw, _dt(h), stream)


def layernorm(x, weight, bias, y, mean, rstd, eps, stream=0):
    """weight None: ones; bias None: zeros."""
    dev = _device(*_present((x, y, weight, bias), ("x", "y", "weight", "bias")))
    rows, cols, _ = rows_of(x, "x")
    ldx, ldy = _mats((x, y), ("x", "y"), rows, cols)
    pw, pb = _vectors([(weight, "weight"), (bias, "bias")], cols)
    pm, pr = _f32(mean, rows, "mean"), _f32(rstd, rows, "rstd")
    writable(y, "y")
    _call(dev, "layernorm", rows, cols, x.ptr, ldx, pw, pb, _eps(eps), y.ptr, ldy, pm, pr, _dt(x), stream)


def layernorm_backward(x, weight, mean, rstd, dy, dx, dweight, dbias, stream=0):
    """dx, and dweight and dbias unless None; weight None: ones."""
    names = ("x", "dy", "dx")
    dev = _device(*_present((x, dy, dx, weight, dweight, dbias), names + ("weight", "dweight", "dbias")))
    rows, cols, _ = rows_of(x, "x")
    ldx, lddy, lddx = _mats((x, dy, dx), names, rows, cols)
    pw, pdw, pdb = _vectors([(weight, "weight"), (dweight, "dweight"), (dbias, "dbias")], cols)
    pm, pr = _f32(mean, rows, "mean"), _f32(rstd, rows, "rstd")
    _call(dev, "layernorm_backward", rows, cols, x.ptr, ldx, pw, pm, pr, dy.ptr, lddy, dx.ptr, lddx, pdw, pdb,
          _dt(x), stream)


# --- cross-entropy: the loss of rows of logits against int64 targets ---------------------------

def _on(views, names):
    """The device of the call, every array on the same one (dtypes may differ)."""
    first = views[0]
    for v, n in zip(views[1:], names[1:]):
        if v.device != first.device:
            raise ValueError(f"{n}: on {v.device}, {names[0]} on {first.device}")
    return first.device


def _contiguous(v, shape, dtype, name):
    """The data pointer of a contiguous array of the shape and dtype given."""
    if v.dtype != dtype:
        raise TypeError(f"{name}: dtype {v.dtype} where {dtype} is needed")
    shape_is(v, shape, name)
    if not is_contiguous(v):
        raise ValueError(f"{name}: must be contiguous (shape {v.shape}, strides {v.strides})")
    return v.ptr


def _reduction(reduction, allowed=("mean", "sum", "none")):
    if reduction not in allowed:
        raise ValueError(f"reduction must be one of {', '.join(map(repr, allowed))}, not {reduction!r}")
    return _lib.REDUCTIONS[reduction]


def _loss_shape(rows, reduction):
    return (rows,) if reduction == "none" else ()


def cross_entropy(logits, targets, loss, lse, ignore_index, label_smoothing, softcap, reduction, stream=0):
    """loss (float32: one a row for "none", else a 0-d one) and lse (float32, one a row) of
    the rows of logits [rows, vocab] against int64 targets (softcap 0: none)."""
    dev = _on((logits, targets, loss, lse), ("logits", "targets", "loss", "lse"))
    red = _reduction(reduction)
    rows, vocab, ld = rows_of(logits, "logits")
    pt = _contiguous(targets, (rows,), "i64", "targets")
    pl = _contiguous(loss, _loss_shape(rows, reduction), "f32", "loss")
    ps = _contiguous(lse, (rows,), "f32", "lse")
    _call(dev, "cross_entropy", rows, vocab, logits.ptr, ld, pt, ignore_index, label_smoothing, softcap, red, pl, ps,
          _dt(logits), stream)


def cross_entropy_backward(logits, targets, lse, dloss, dlogits, ignore_index, label_smoothing, softcap, reduction,
                           stream=0):
    """dlogits, the gradient of cross_entropy's loss times dloss (float32, shaped as the loss)."""
    names = ("logits", "targets", "lse", "dloss", "dlogits")
    dev = _on((logits, targets, lse, dloss, dlogits), names)
    same((logits, dlogits), ("logits", "dlogits"))
    red = _reduction(reduction)
    rows, vocab, ld = rows_of(logits, "logits")
    ldd, = _mats((dlogits,), ("dlogits",), rows, vocab)
    pt = _contiguous(targets, (rows,), "i64", "targets")
    ps = _contiguous(lse, (rows,), "f32", "lse")
    pd = _contiguous(dloss, _loss_shape(rows, reduction), "f32", "dloss")
    writable(dlogits, "dlogits")
    _call(dev, "cross_entropy_backward", rows, vocab, logits.ptr, ld, pt, ignore_index, label_smoothing, softcap, red,
          ps, pd, dlogits.ptr, ldd, _dt(logits), stream)


def cross_entropy_fused(logits, targets, loss, dlogits, dloss, ignore_index, label_smoothing, softcap, reduction,
                        stream=0):
    """The loss and dlogits (its gradient times the host float dloss) in one read of the logits."""
    names = ("logits", "targets", "loss", "dlogits")
    dev = _on((logits, targets, loss, dlogits), names)
    same((logits, dlogits), ("logits", "dlogits"))
    red = _reduction(reduction)
    rows, vocab, ld = rows_of(logits, "logits")
    ldd, = _mats((dlogits,), ("dlogits",), rows, vocab)
    pt = _contiguous(targets, (rows,), "i64", "targets")
    pl = _contiguous(loss, _loss_shape(rows, reduction), "f32", "loss")
    writable(dlogits, "dlogits")
    _call(dev, "cross_entropy_fused", rows, vocab, logits.ptr, ld, pt, ignore_index, label_smoothing, softcap, red,
          dloss, pl, dlogits.ptr, ldd, _dt(logits), stream)


def linear_cross_entropy(hidden, weight, targets, loss_rows, dhidden, dweight, scratch, scratch_bytes, chunk_rows,
                         ignore_index, label_smoothing, softcap, reduction, dloss=1.0, count=-1, stream=0):
    """The LM head's loss a row and the gradients of the mean or sum times dloss, without
    its logits: hidden [rows, dim], weight [vocab, dim] (nn.Linear's), f16 or bf16;
    scratch a device pointer of scratch_bytes, chunk_rows rows of logits at a time."""
    names = ("hidden", "weight", "dhidden", "dweight")
    dev = _on((hidden, weight, targets, loss_rows, dhidden, dweight),
              ("hidden", "weight", "targets", "loss_rows", "dhidden", "dweight"))
    same((hidden, weight, dhidden, dweight), names)
    if hidden.dtype == "f32":
        raise TypeError("linear_cross_entropy: float32 is not supported (float16, bfloat16)")
    red = _reduction(reduction, ("mean", "sum"))
    rows, dim, ldh = rows_of(hidden, "hidden")
    vocab, wdim, ldw = rows_of(weight, "weight")
    if wdim != dim:
        raise ValueError(f"weight: rows of {wdim} where hidden's {dim} are needed")
    lddh, = _mats((dhidden,), ("dhidden",), rows, dim)
    lddw, = _mats((dweight,), ("dweight",), vocab, dim)
    pt = _contiguous(targets, (rows,), "i64", "targets")
    pl = _contiguous(loss_rows, (rows,), "f32", "loss_rows")
    writable(dhidden, "dhidden")
    writable(dweight, "dweight")
    _call(dev, "linear_cross_entropy", rows, dim, vocab, hidden.ptr, ldh, weight.ptr, ldw, pt, ignore_index,
          label_smoothing, softcap, red, count, dloss, pl, dhidden.ptr, lddh, dweight.ptr, lddw, chunk_rows, scratch,
          scratch_bytes, _dt(hidden), stream)


# --- flash attention on [batch, heads, seq, head_dim] arrays (torch's layout) -----------------------

def _strides3(v, shape, name):
    """libktune's (batch, sequence, head) strides of a [B, H, S, D] array, its D contiguous."""
    shape_is(v, shape, name)
    if shape[3] > 1 and v.strides[3] != 1:
        raise ValueError(f"{name}: the head dimension must be contiguous (stride 1), not stride {v.strides[3]}")
    st = v.strides
    return (ctypes.c_int64 * 3)(st[0], st[2], st[1])


def _attn_shapes(q, k):
    if len(q.shape) != 4 or len(k.shape) != 4:
        raise ValueError(f"attention: q and k must be 4-D [batch, heads, seq, head_dim], not {q.shape}, {k.shape}")
    b, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    return b, hq, sq, d, hkv, sk, (b, hq, sq, d), (b, hkv, sk, d)


def attention_fwd(q, k, v, o, lse, scale, causal, stream=0):
    """o = softmax(scale q k^T + mask) v and lse (float32 [B, Hq, Sq], contiguous); q and o
    [B, Hq, Sq, D], k and v [B, Hkv, Sk, D]; causal aligned bottom-right."""
    names = ("q", "k", "v", "o")
    dev = _device((q, k, v, o), names)
    if q.dtype == "f32":
        raise TypeError("attention: float32 is not supported (float16, bfloat16)")
    b, hq, sq, d, hkv, sk, qs, ks = _attn_shapes(q, k)
    st = [_strides3(t, s, n) for t, s, n in zip((q, k, v, o), (qs, ks, ks, qs), names)]
    pl = _contiguous(lse, (b, hq, sq), "f32", "lse")
    writable(o, "o")
    _call(dev, "attention_fwd", b, sq, sk, hq, hkv, d, q.ptr, st[0], k.ptr, st[1], v.ptr, st[2], o.ptr, st[3], pl,
          scale, int(bool(causal)), _dt(q), stream)


def attention_bwd(q, k, v, o, dout, lse, dq, dk, dv, scale, causal, deterministic=False, stream=0):
    """dq, dk, dv of attention_fwd's o given dout, from its o and lse."""
    names = ("q", "k", "v", "o", "dout", "dq", "dk", "dv")
    tensors = (q, k, v, o, dout, dq, dk, dv)
    dev = _device(tensors, names)
    if q.dtype == "f32":
        raise TypeError("attention: float32 is not supported (float16, bfloat16)")
    b, hq, sq, d, hkv, sk, qs, ks = _attn_shapes(q, k)
    st = [_strides3(t, s, n) for t, s, n in zip(tensors, (qs, ks, ks, qs, qs, qs, ks, ks), names)]
    pl = _contiguous(lse, (b, hq, sq), "f32", "lse")
    for t, n in zip((dq, dk, dv), names[5:]):
        writable(t, n)
    _call(dev, "attention_bwd", b, sq, sk, hq, hkv, d, q.ptr, st[0], k.ptr, st[1], v.ptr, st[2], o.ptr, st[3],
          dout.ptr, st[4], pl, dq.ptr, st[5], dk.ptr, st[6], dv.ptr, st[7], scale, int(bool(causal)),
          int(bool(deterministic)), _dt(q), stream)


# --- the weight-quantized GEMM and its format (docs/quant.md) ---------------------------------------

def quant_format(bits, group_size, mode, zero_scalar):
    """ktune_quant_format of the format's fields (mode by name or value)."""
    mode = _lib.QUANT_MODES.get(mode, mode)
    return _lib.ktune_quant_format(bits, group_size, mode, int(bool(zero_scalar)))


def quant_sizes(fmt, n, k):
    """(words, scales, zeros): the element counts of a packed [n, k] weight of format fmt
    (ktune_quant_sizes; no GPU).  ktune.Error with libktune's reason for a bad format or size."""
    lib = _lib.library()
    out = [ctypes.c_int64() for _ in range(3)]
    err = ctypes.create_string_buffer(512)
    status = lib.quant_sizes(ctypes.byref(fmt), n, k, *(ctypes.byref(o) for o in out), err, len(err))
    if status:
        raise Error(status, lib.name_of(status), err.value.decode(errors="replace"))
    return tuple(o.value for o in out)


def _host_check(status, what):
    if status:
        lib = _lib.library()
        raise Error(status, lib.name_of(status), f"{what}: {lib.strerror(status).decode()}")


def quant_pack(fmt, n, k, w, ldw, dtype, wq, scales, zeros):
    """Quantises and packs the host weight w [n, k] (row stride ldw) into the host buffers
    wq, scales and zeros (pointers; None where the format has none)."""
    _host_check(_lib.library().quant_pack(ctypes.byref(fmt), n, k, w, ldw, _DTYPES[dtype], wq, scales, zeros),
                "quant_pack")


def quant_unpack(fmt, n, k, wq, scales, zeros, dtype, w, ldw):
    """The dequantised host weight w [n, k] (row stride ldw) of packed host buffers."""
    _host_check(_lib.library().quant_unpack(ctypes.byref(fmt), n, k, wq, scales, zeros, _DTYPES[dtype], w, ldw),
                "quant_unpack")


def gemm_quant(fmt, a, wq, scales, zeros, bias, c, stream=0):
    """c [m, n] = a [m, k] @ dequant(wq, scales, zeros)^T (+ bias [n]): wq int32 words [n, RW],
    scales and zeros (None where the format has none) and bias (None: none) contiguous, of
    a's dtype (f16 or bf16)."""
    vecs = [(t, nm) for t, nm in ((scales, "scales"), (zeros, "zeros"), (bias, "bias")) if t is not None]
    dev = _on((a, wq, c) + tuple(t for t, _ in vecs), ("a", "wq", "c") + tuple(nm for _, nm in vecs))
    same((a, c) + tuple(t for t, _ in vecs), ("a", "c") + tuple(nm for _, nm in vecs))
    if a.dtype == "f32":
        raise TypeError("gemm_quant: float32 is not supported (float16, bfloat16)")
    if len(a.shape) != 2 or len(wq.shape) != 2:
        raise ValueError(f"gemm_quant: a and wq must be 2-D, not {len(a.shape)}-D and {len(wq.shape)}-D")
    m, k, lda = rows_of(a, "a")
    n = wq.shape[0]
    words, ns, nz = quant_sizes(fmt, n, k)
    pw = _contiguous(wq, (n, words // n), "i32", "wq")
    ptrs = []
    for t, count, name in ((scales, ns, "scales"), (zeros, nz, "zeros")):
        if (t is None) != (count == 0):
            raise ValueError(f"{name}: the format {'has none' if count == 0 else 'needs them'}")
        if t is not None:
            if t.numel != count or not is_contiguous(t):
                raise ValueError(f"{name}: {t.numel} elements (shape {t.shape}, strides {t.strides}) where {count} "
                                 "contiguous ones are needed")
        ptrs.append(None if t is None else t.ptr)
    if bias is not None:
        _vector(bias, n, "bias")
    mc, nc, ldc = rows_of(c, "c")
    if (mc, nc) != (m, n) or len(c.shape) != 2:
        raise ValueError(f"c: shape {c.shape} where {(m, n)} is needed")
    writable(c, "c")
    _call(dev, "gemm_quant", ctypes.byref(fmt), m, n, k, a.ptr, lda, pw, ptrs[0], ptrs[1],
          None if bias is None else bias.ptr, c.ptr, ldc, _dt(a), stream)
