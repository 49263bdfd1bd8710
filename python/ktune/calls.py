"""The C calls on Views (arrays.py): each checks its arguments, then calls
libktune on the device's context and stream.  The torch ops and the
__cuda_array_interface__ path both come through here; arguments are checked
before the library is loaded or a context opened, so a bad call raises the
same ValueError or TypeError on a machine without a GPU.

`stream` is a CUstream handle as an int (0: the legacy default stream)."""
import threading

from . import _lib, contexts
from .arrays import is_contiguous, matrix_of, rows_of, same, shape_is, writable

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
