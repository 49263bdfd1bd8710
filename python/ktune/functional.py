"""The public ops: on torch tensors through the custom ops of torch_ops.py
(autograd, torch.compile), and, for the forward ops, on any object with
__cuda_array_interface__ (CuPy, Numba) or DLPack.

Errors: TypeError for an unsupported dtype or a non-array argument,
ValueError for a bad shape, device or argument value, ktune.Error when
libktune refuses or fails (its status name and ktune_errmsg)."""
import math
import sys

from . import calls
from .arrays import of_cai

_FLOATS = ("torch.float16", "torch.bfloat16", "torch.float32")


def _torch():
    return sys.modules.get("torch")


def _is_tensor(x):
    t = sys.modules.get("torch")
    return t is not None and isinstance(x, t.Tensor)


_ALLOWED = {}  # a tuple of dtype names -> the set of torch dtypes (torch is imported after this module)


def _check(tensors, names, dtypes=_FLOATS):
    """The checks that need no data pointer (they run on fake tensors under
    torch.compile too): dtypes allowed and equal, one device."""
    first = tensors[0]
    allowed = _ALLOWED.get(dtypes)
    if allowed is None:
        t = _torch()
        allowed = frozenset(getattr(t, d[6:]) for d in dtypes) if t else frozenset()
        if t:
            _ALLOWED[dtypes] = allowed
    device = None
    for t, n in zip(tensors, names):
        if not _is_tensor(t):
            raise TypeError(f"{n}: expected a torch.Tensor, not {type(t).__name__}")
        if t.dtype not in allowed:
            raise TypeError(f"{n}: dtype {t.dtype} is not supported ({', '.join(d[6:] for d in dtypes)})")
        if t.dtype != first.dtype:
            raise TypeError(f"{n}: dtype {t.dtype} differs from {names[0]}'s {first.dtype}")
        if t is not first:
            device = device or first.device
            if t.device != device:
                raise ValueError(f"{n}: on {t.device}, {names[0]} on {device}")


def _same_shape(x, y, nx, ny):
    if tuple(x.shape) != tuple(y.shape):
        raise ValueError(f"{ny}: shape {tuple(y.shape)} differs from {nx}'s {tuple(x.shape)}")


_torch_ops = None


def _ops():
    global _torch_ops
    if _torch_ops is None:
        from . import torch_ops
        _torch_ops = torch_ops
    return _torch_ops


# --- __cuda_array_interface__ and DLPack ---------------------------------------------------

def _foreign(x):
    """True for an array that is not a torch tensor but speaks
    __cuda_array_interface__; a DLPack-only object becomes a torch tensor
    here (torch.from_dlpack), or a TypeError without torch."""
    if _is_tensor(x):
        return False
    if hasattr(x, "__cuda_array_interface__"):
        return True
    if hasattr(x, "__dlpack__"):
        return False
    raise TypeError(f"expected a torch.Tensor or an array with __cuda_array_interface__ or DLPack, "
                    f"not {type(x).__name__}")


def _from_dlpack(x):
    if _is_tensor(x) or not hasattr(x, "__dlpack__"):
        return x
    t = _torch()
    if t is None:
        raise TypeError(f"{type(x).__name__}: DLPack arrays need torch (or __cuda_array_interface__)")
    return t.from_dlpack(x)


class _Foreign:
    """A forward call on __cuda_array_interface__ arrays: the device (CuPy's
    .device.id, else `device`), the stream (`stream`, else CuPy's current
    one, else 0) and outputs made by the inputs' own library (CuPy), else
    torch, else the caller's `out`."""

    def __init__(self, first, device, stream):
        self.first = first
        self.cupy = type(first).__module__.split(".")[0] == "cupy"
        dev = getattr(getattr(first, "device", None), "id", None)
        self.device = dev if isinstance(dev, int) else (device or 0)
        if stream is None:
            stream = sys.modules["cupy"].cuda.get_current_stream().ptr if self.cupy else 0
        self.stream = int(stream)

    def view(self, obj, name):
        if not hasattr(obj, "__cuda_array_interface__"):
            raise TypeError(f"{name}: {type(obj).__name__} has no __cuda_array_interface__")
        return of_cai(obj, name, self.device)

    def empty(self, shape, dtype):
        if self.cupy:
            cp = sys.modules["cupy"]
            with cp.cuda.Device(self.device):
                return cp.empty(shape, dtype={"f16": cp.float16, "f32": cp.float32}[dtype])
        t = _torch()
        if t is None:
            raise TypeError("no library to allocate the output with: pass out=, or install torch or CuPy")
        return t.empty(shape, dtype={"f16": t.float16, "f32": t.float32}[dtype], device=f"cuda:{self.device}")

    def out(self, out, shape, dtype, name="out"):
        o = self.empty(shape, dtype) if out is None else out
        v = self.view(o, name)
        if v.dtype != dtype:
            raise TypeError(f"{name}: dtype {v.dtype} where {dtype} is needed")
        return o, v


def _rstd(f, rows):
    return f.view(f.empty((rows,), "f32"), "rstd")


def _norm_vectors(f, vx, vectors):
    """Views of a norm's weight and bias (None where absent), checked before
    the per-row float32 outputs are allocated (so that a bad vector is a
    ValueError or TypeError even where nothing can allocate)."""
    out = []
    for obj, name in vectors:
        if obj is None:
            out.append(None)
            continue
        v = f.view(obj, name)
        if v.shape != vx.shape[-1:]:
            raise ValueError(f"{name}: shape {v.shape} where {vx.shape[-1:]}, the last dimension of x, is needed")
        if v.dtype != vx.dtype:
            raise TypeError(f"{name}: dtype {v.dtype} differs from x's {vx.dtype}")
        out.append(v)
    return out


# --- the ops --------------------------------------------------------------------------------

def gemm(a, b, alpha=1.0, *, out=None, device=None, stream=None):
    """alpha * a @ b for 2-D a [m, k] and b [k, n], float16 or bfloat16; a and b
    may be transposed views (b = w.t() is nn.Linear's layout), f32
    accumulation, the result [m, n] in their dtype."""
    if _foreign(a):
        f = _Foreign(a, device, stream)
        va, vb = f.view(a, "a"), f.view(b, "b")
        if len(va.shape) != 2 or len(vb.shape) != 2:
            raise ValueError("gemm: a and b must be 2-D")
        o, vo = f.out(out, (va.shape[0], vb.shape[1]), va.dtype)
        calls.gemm(va, vb, vo, float(alpha), 0.0, f.stream)
        return o
    a, b = _from_dlpack(a), _from_dlpack(b)
    _check((a, b), ("a", "b"), _FLOATS[:2])
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"gemm: a and b must be 2-D, not {a.dim()}-D and {b.dim()}-D")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"gemm: a is {tuple(a.shape)} and b is {tuple(b.shape)}: inner sizes differ")
    return _ops().gemm(a, b, float(alpha))


def add(x, y, *, out=None, device=None, stream=None):
    """x + y, same shape and dtype (no broadcasting)."""
    if _foreign(x):
        f = _Foreign(x, device, stream)
        vx, vy = f.view(x, "x"), f.view(y, "y")
        o, vo = f.out(out, vx.shape, vx.dtype)
        calls.add(vx, vy, vo, f.stream)
        return o
    x, y = _from_dlpack(x), _from_dlpack(y)
    _check((x, y), ("x", "y"))
    _same_shape(x, y, "x", "y")
    return _ops().add(x, y)


def _approximate(approximate):
    if approximate not in calls.GELU:
        raise ValueError(f"approximate must be 'none' or 'tanh', not {approximate!r}")


def gelu(x, approximate="none", *, out=None, device=None, stream=None):
    """GeLU, exact ('none') or the tanh approximation, as torch.nn.functional.gelu."""
    _approximate(approximate)
    if _foreign(x):
        f = _Foreign(x, device, stream)
        vx = f.view(x, "x")
        o, vo = f.out(out, vx.shape, vx.dtype)
        calls.gelu(vx, vo, approximate, f.stream)
        return o
    x = _from_dlpack(x)
    _check((x,), ("x",))
    return _ops().gelu(x, approximate)


def gelu_backward(dy, x, approximate="none"):
    """dy * gelu'(x) (torch tensors)."""
    _approximate(approximate)
    _check((dy, x), ("dy", "x"))
    _same_shape(x, dy, "x", "dy")
    return _ops().gelu_backward(dy, x, approximate)


def _glu(act, a, b, out, device, stream):
    if _foreign(a):
        f = _Foreign(a, device, stream)
        va = f.view(a, "a")
        if b is None:
            if not va.shape or va.shape[-1] % 2:
                raise ValueError(f"a: the last dimension must be even to split it in halves, not {va.shape}")
            c = va.shape[-1] // 2
            vb = type(va)(va.ptr + c * (2 if va.dtype == "f16" else 4), va.shape[:-1] + (c,), va.strides,
                          va.dtype, va.device)
            va = type(va)(va.ptr, vb.shape, va.strides, va.dtype, va.device)
        else:
            vb = f.view(b, "b")
        o, vo = f.out(out, va.shape, va.dtype)
        calls.glu(va, vb, vo, act, f.stream)
        return o
    a = _from_dlpack(a)
    if b is None:
        _check((a,), ("a",))
        if a.dim() == 0 or a.shape[-1] % 2:
            raise ValueError(f"a: the last dimension must be even to split it in halves, not {tuple(a.shape)}")
        return _ops().glu_fused(a, act)
    b = _from_dlpack(b)
    _check((a, b), ("a", "b"))
    _same_shape(a, b, "a", "b")
    return _ops().glu(a, b, act)


def swiglu(a, b=None, *, out=None, device=None, stream=None):
    """silu(a) * b.  With b None, a is [..., 2 c], the fused up-projection of an
    LLM MLP: its first half the gate, its second half the up value."""
    return _glu("swiglu", a, b, out, device, stream)


def geglu(a, b=None, approximate="none", *, out=None, device=None, stream=None):
    """gelu(a) * b (exact, or approximate='tanh'); b None as in swiglu."""
    _approximate(approximate)
    return _glu("geglu" if approximate == "none" else "geglu_tanh", a, b, out, device, stream)


def glu_backward(a, b, dout, act="swiglu"):
    """(da, db) of act(a) * b from dout; act is 'swiglu', 'geglu' or 'geglu_tanh' (torch tensors)."""
    _check((a, b, dout), ("a", "b", "dout"))
    _same_shape(a, b, "a", "b")
    _same_shape(a, dout, "a", "dout")
    if act not in calls.GLU:
        raise ValueError(f"act must be one of {', '.join(calls.GLU)}, not {act!r}")
    return _ops().glu_backward(a, b, dout, act)


def _signed64(v, name):
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"{name} must be an int, not {type(v).__name__}")
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >> 63 else v  # the op schema's int is int64: same bits


def _dropout_p(p):
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 <= p < 1:
        raise ValueError(f"dropout: p must be a number in [0, 1), not {p!r}")
    return float(p)


def dropout(x, p, seed, offset=0, *, out=None, device=None, stream=None):
    """x / (1 - p) where the Philox draw of (seed, offset, i) keeps element i,
    else 0; no mask is stored (the same seed and offset give the same mask).
    A caller drawing fresh masks advances offset by ceil(numel / 4) a call."""
    p = _dropout_p(p)
    seed, offset = _signed64(seed, "seed"), _signed64(offset, "offset")
    if _foreign(x):
        f = _Foreign(x, device, stream)
        vx = f.view(x, "x")
        o, vo = f.out(out, vx.shape, vx.dtype)
        calls.dropout(vx, vo, p, seed, offset, f.stream)
        return o
    x = _from_dlpack(x)
    _check((x,), ("x",))
    return _ops().dropout(x, p, seed, offset)


def dropout_backward(dy, p, seed, offset=0):
    """dy * mask / (1 - p), the mask of dropout(x, p, seed, offset) (torch tensors)."""
    p = _dropout_p(p)
    _check((dy,), ("dy",))
    return _ops().dropout_backward(dy, p, _signed64(seed, "seed"), _signed64(offset, "offset"))


def _last_dim(dim, ndim):
    if dim not in (-1, ndim - 1):
        raise ValueError(f"ktune reduces over the last dimension only, not dim={dim}")


def softmax(x, dim=-1, *, out=None, device=None, stream=None):
    """softmax over the last dimension."""
    if _foreign(x):
        f = _Foreign(x, device, stream)
        vx = f.view(x, "x")
        _last_dim(dim, len(vx.shape))
        o, vo = f.out(out, vx.shape, vx.dtype)
        calls.softmax(vx, vo, f.stream)
        return o
    x = _from_dlpack(x)
    _check((x,), ("x",))
    _last_dim(dim, x.dim())
    return _ops().softmax(x)


def softmax_backward(y, dy):
    """y * (dy - sum over the last dimension of y * dy), from softmax's output y (torch tensors)."""
    _check((y, dy), ("y", "dy"))
    _same_shape(y, dy, "y", "dy")
    return _ops().softmax_backward(y, dy)


def _vector(w, x, name):
    """The weight or bias of a norm: None (absent: ones or zeros, which
    libktune supplies), or a tensor of x's dtype (a cast, differentiable)."""
    if w is None:
        return None
    if not _is_tensor(w):
        raise TypeError(f"{name}: expected a torch.Tensor, not {type(w).__name__}")
    cols = x.shape[-1]
    if w.dim() != 1 or w.shape[0] != cols:
        raise ValueError(f"{name}: shape {tuple(w.shape)} where ({cols},), the last dimension of x, is needed")
    if w.device != x.device:
        raise ValueError(f"{name}: on {w.device}, x on {x.device}")
    return w if w.dtype == x.dtype else w.to(x.dtype)


def _eps(eps):
    if not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"eps must be a number >= 0, not {eps!r}")
    return float(eps)


def rms_norm(x, weight=None, eps=1e-6, residual=None, *, out=None, device=None, stream=None):
    """x * rsqrt(mean(x^2) + eps) * weight over the last dimension.  With
    residual, h = x + residual is normalised instead and (y, h) returned:
    h is the next layer's residual stream, from one kernel."""
    eps = _eps(eps)
    if _foreign(x):
        f = _Foreign(x, device, stream)
        vx = f.view(x, "x")
        if not vx.shape:
            raise ValueError("x: a 0-d array has no rows")
        vw, = _norm_vectors(f, vx, [(weight, "weight")])
        o, vo = f.out(out, vx.shape, vx.dtype)
        rows = math.prod(vx.shape[:-1])
        if residual is None:
            calls.rmsnorm(vx, vw, vo, _rstd(f, rows), eps, stream=f.stream)
            return o
        h, vh = f.out(None, vx.shape, vx.dtype, "h")
        calls.rmsnorm(vx, vw, vo, _rstd(f, rows), eps, f.view(residual, "residual"), vh, f.stream)
        return o, h
    x = _from_dlpack(x)
    _check((x,), ("x",))
    if x.dim() == 0:
        raise ValueError("x: a 0-d tensor has no rows")
    w = _vector(weight, x, "weight")
    if residual is None:
        return _ops().rms_norm(x, w, eps)[0]
    residual = _from_dlpack(residual)
    _check((x, residual), ("x", "residual"))
    _same_shape(x, residual, "x", "residual")
    y, h, _ = _ops().rms_norm_residual(x, residual, w, eps)
    return y, h


def _given(tensors, names):
    keep = [(t, n) for t, n in zip(tensors, names) if t is not None]
    return tuple(t for t, _ in keep), tuple(n for _, n in keep)


def rms_norm_backward(h, weight, rstd, dy, dweight=True):
    """(dx, dweight) of rms_norm from dy, the normalised input h (x, or x +
    residual) and the forward's rstd (float32, one a row) (torch tensors).
    weight None: ones; dweight=False: not computed (None returned)."""
    _check(*_given((h, weight, dy), ("h", "weight", "dy")))
    _check((rstd,), ("rstd",), ("torch.float32",))
    dx, dw = _ops().rms_norm_backward(h, weight, rstd, dy, bool(dweight))
    return dx, (dw if dweight else None)


def layer_norm(x, weight=None, bias=None, eps=1e-5, *, out=None, device=None, stream=None):
    """(x - mean) * rsqrt(var + eps) * weight + bias over the last dimension
    (weight None: ones; bias None: zeros)."""
    eps = _eps(eps)
    if _foreign(x):
        f = _Foreign(x, device, stream)
        vx = f.view(x, "x")
        if not vx.shape:
            raise ValueError("x: a 0-d array has no rows")
        vw, vb = _norm_vectors(f, vx, [(weight, "weight"), (bias, "bias")])
        o, vo = f.out(out, vx.shape, vx.dtype)
        rows = math.prod(vx.shape[:-1])
        calls.layernorm(vx, vw, vb, vo, _rstd(f, rows),
                        _rstd(f, rows), eps, f.stream)
        return o
    x = _from_dlpack(x)
    _check((x,), ("x",))
    if x.dim() == 0:
        raise ValueError("x: a 0-d tensor has no rows")
    return _ops().layer_norm(x, _vector(weight, x, "weight"), _vector(bias, x, "bias"), eps)[0]


def layer_norm_backward(x, weight, mean, rstd, dy, dweight=True, dbias=True):
    """(dx, dweight, dbias) of layer_norm from dy, x and the forward's mean and
    rstd (float32, one a row) (torch tensors).  weight None: ones;
    dweight=False, dbias=False: not computed (None returned)."""
    _check(*_given((x, weight, dy), ("x", "weight", "dy")))
    _check((mean, rstd), ("mean", "rstd"), ("torch.float32",))
    dx, dw, db = _ops().layer_norm_backward(x, weight, mean, rstd, dy, bool(dweight), bool(dbias))
    return dx, (dw if dweight else None), (db if dbias else None)


# --- cross-entropy ---------------------------------------------------------------------------

def _target(target, name, shape, like):
    """int64 class indices of `shape` on like's device."""
    t = _torch()
    if not _is_tensor(target):
        raise TypeError(f"{name}: expected a torch.Tensor, not {type(target).__name__}")
    if target.dtype != t.int64:
        raise TypeError(f"{name}: dtype {target.dtype} is not supported (int64 class indices)")
    if tuple(target.shape) != tuple(shape):
        raise ValueError(f"{name}: shape {tuple(target.shape)} where {tuple(shape)} is needed")
    if target.device != like.device:
        raise ValueError(f"{name}: on {target.device}, {'logits' if like.dim() == 2 else 'hidden'} on {like.device}")


MAX_VOCAB = 262144  # the longest row cross_entropy holds (include/ktune.h)


def _ce_args(ignore_index, reduction, label_smoothing, softcap, reductions=("mean", "sum", "none")):
    """The scalars of a cross-entropy call, checked: (ignore_index, label_smoothing, softcap as a float, 0 for none)."""
    if not isinstance(ignore_index, int) or isinstance(ignore_index, bool) or not -(1 << 63) <= ignore_index < 1 << 63:
        raise TypeError(f"ignore_index must be an int64, not {ignore_index!r}")
    if reduction not in reductions:
        raise ValueError(f"reduction must be one of {', '.join(map(repr, reductions))}, not {reduction!r}")
    if not isinstance(label_smoothing, (int, float)) or not 0 <= label_smoothing <= 1:
        raise ValueError(f"label_smoothing must be a number in [0, 1], not {label_smoothing!r}")
    if softcap is not None and (not isinstance(softcap, (int, float)) or not 0 < softcap < math.inf):
        raise ValueError(f"softcap must be None or a finite number > 0, not {softcap!r}")
    return int(ignore_index), float(label_smoothing), float(softcap or 0.0)


def _vocab(vocab, what):
    if not 1 <= vocab <= MAX_VOCAB:
        raise ValueError(f"{what}: vocab {vocab} is not in 1..{MAX_VOCAB}")


def cross_entropy(logits, target, ignore_index=-100, reduction="mean", label_smoothing=0.0, softcap=None):
    """F.cross_entropy(logits, target, ignore_index=..., reduction=...,
    label_smoothing=...) of logits [rows, vocab] (float32, float16 or bfloat16, read
    as they are) against int64 target [rows], in float32 math: the loss is float32
    (0-d, or [rows] for reduction="none").  softcap > 0 caps the logits first,
    softcap * tanh(logits / softcap) (Gemma 2's).  Unlike torch: a mean over no
    row not ignored is 0 (torch: NaN), and a target outside [0, vocab) that is
    not ignore_index gives a NaN loss (torch raises).  Autograd: the gradient
    by the logits through ktune_cross_entropy_backward, from the forward's lse."""
    ignore_index, label_smoothing, softcap = _ce_args(ignore_index, reduction, label_smoothing, softcap)
    _check((logits,), ("logits",))
    if logits.dim() != 2:
        raise ValueError(f"logits: must be 2-D [rows, vocab], not {logits.dim()}-D")
    _vocab(logits.shape[1], "cross_entropy")
    _target(target, "target", logits.shape[:1], logits)
    return _ops().cross_entropy(logits, target, ignore_index, reduction, label_smoothing, softcap)[0]


def cross_entropy_fused(logits, target, ignore_index=-100, reduction="mean", label_smoothing=0.0, softcap=None,
                        dloss=1.0):
    """(loss, dlogits) in one read of the logits (ktune_cross_entropy_fused): the
    loss of cross_entropy and its gradient by the logits times dloss, a number
    (1 for loss.backward() of a mean or sum; with reduction="none", every row's
    loss gets dloss), for a training step that writes its own backward
    (logits.backward(dlogits)).  No autograd."""
    ignore_index, label_smoothing, softcap = _ce_args(ignore_index, reduction, label_smoothing, softcap)
    if not isinstance(dloss, (int, float)) or not math.isfinite(dloss):
        raise ValueError(f"dloss must be a finite number, not {dloss!r}")
    _check((logits,), ("logits",))
    if logits.dim() != 2:
        raise ValueError(f"logits: must be 2-D [rows, vocab], not {logits.dim()}-D")
    _vocab(logits.shape[1], "cross_entropy_fused")
    _target(target, "target", logits.shape[:1], logits)
    return _ops().cross_entropy_fused(logits, target, ignore_index, reduction, label_smoothing, softcap, float(dloss))


def linear_cross_entropy(hidden, weight, target, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                         softcap=None):
    """cross_entropy(hidden @ weight.T, target) without the logits: the LM head and its
    loss in one (ktune_linear_cross_entropy), hidden [..., dim] and weight [vocab,
    dim] (nn.Linear's) float16 or bfloat16, target [...] int64; reduction "mean" or
    "sum"; a float32 0-d loss.  The logits are made a chunk of rows at a time and
    their gradient in place of them, so the [rows, vocab] logits never exist whole.
    Autograd as Liger's fused linear cross-entropy: the gradients by hidden and
    weight are computed in the forward (for a loss gradient of 1) and kept until the
    backward, which scales them by the loss's gradient; so the forward costs three
    GEMMs, even without a backward to follow."""
    ignore_index, label_smoothing, softcap = _ce_args(ignore_index, reduction, label_smoothing, softcap,
                                                      ("mean", "sum"))
    _check((hidden, weight), ("hidden", "weight"), _FLOATS[:2])
    if hidden.dim() < 1 or weight.dim() != 2:
        raise ValueError(f"linear_cross_entropy: hidden [..., dim] and weight [vocab, dim], not {hidden.dim()}-D "
                         f"and {weight.dim()}-D")
    dim = hidden.shape[-1]
    if weight.shape[1] != dim or dim < 1:
        raise ValueError(f"weight: shape {tuple(weight.shape)} where [vocab, {dim}] (hidden's last dimension, "
                         "at least 1) is needed")
    _vocab(weight.shape[0], "linear_cross_entropy")
    _target(target, "target", hidden.shape[:-1], hidden)
    return _ops().linear_cross_entropy(hidden.reshape(-1, dim), weight, target.reshape(-1), ignore_index, reduction,
                                       label_smoothing, softcap)[0]


# --- attention -----------------------------------------------------------------------------------

HEAD_DIMS = (64, 128, 256)  # the forward's; the backward's are 64 and 128


def attention(q, k, v, causal=False, scale=None, return_lse=False):
    """Flash attention on [batch, heads, seq, head_dim] tensors, as
    F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
    enable_gqa=True): softmax(scale q k^T + mask) v, float16 or bfloat16 with fp32
    accumulation, scale 1/sqrt(head_dim) by default.  k and v are [batch, kv_heads,
    seq_k, head_dim], q's heads a multiple of kv_heads (grouped-query attention).
    Any strides with head_dim contiguous (torch's BHSD, or BSHD transposed) are read
    as they are.  Unlike torch, causal is aligned bottom-right (FlashAttention-2's:
    query i sees key j when j <= i + seq_k - seq_q; the same as torch's for seq_q ==
    seq_k), and a row that sees no key gives zeros, not NaN.  head_dim 64, 128 or
    256 (the backward: 64 and 128); the output is [batch, heads, seq, head_dim]
    with BSHD strides (o.transpose(1, 2) is contiguous).  return_lse: (o, lse),
    lse float32 [batch, heads, seq_q], the rows' log-sum-exp.  Autograd through
    ktune_attention_bwd, deterministic when torch.use_deterministic_algorithms is on."""
    _check((q, k, v), ("q", "k", "v"), _FLOATS[:2])
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"attention: q, k, v must be 4-D [batch, heads, seq, head_dim], not {q.dim()}-D, "
                         f"{k.dim()}-D, {v.dim()}-D")
    _same_shape(k, v, "k", "v")
    b, hq, sq, d = q.shape
    if k.shape[0] != b or k.shape[3] != d:
        raise ValueError(f"k: shape {tuple(k.shape)} where [{b}, kv_heads, seq_k, {d}] (q's batch and head_dim) "
                         "is needed")
    hkv, sk = k.shape[1], k.shape[2]
    if hkv < 1 or hq % hkv:
        raise ValueError(f"attention: q's {hq} heads are not a multiple of k's {hkv}")
    if sk < 1:
        raise ValueError("attention: k and v have no keys (seq_k is 0)")
    if d not in HEAD_DIMS:
        raise ValueError(f"attention: head_dim {d} is not 64, 128 or 256")
    t = _torch()
    if d == 256 and t.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        raise ValueError("attention: head_dim 256 has no backward (64 and 128 have): run it under torch.no_grad()")
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not 0 < scale < math.inf:
        raise ValueError(f"scale must be a finite number > 0, not {scale!r}")
    o, lse = _ops().attention(q, k, v, bool(causal), float(scale))
    return (o, lse) if return_lse else o


# --- the weight-quantized GEMM -----------------------------------------------------------------

def gemm_quant(a, wq, scales, zeros, fmt, bias=None):
    """a @ dequant(wq, scales, zeros).T (+ bias) with the weight packed by
    ktune.quant_pack in format fmt (a ktune.QuantFormat): a [..., k] float16 or
    bfloat16, wq int32 [n, RW], scales and zeros of a's dtype (None where fmt has
    none), bias [n] or None; fp32 accumulation, the result [..., n] in a's dtype,
    its rows padded to 8 elements as gemm's.  Forward only (no autograd: the
    weight is frozen, and a's gradient would need the dequantised weight)."""
    from .quant import _format
    fmt = _format(fmt)
    _check((a,), ("a",), _FLOATS[:2])
    t = _torch()
    if a.dim() < 1:
        raise ValueError("a: a 0-d tensor has no rows")
    if not _is_tensor(wq) or wq.dtype != t.int32:
        raise TypeError(f"wq: expected an int32 torch.Tensor (quant_pack's words), not "
                        f"{getattr(wq, 'dtype', type(wq).__name__)}")
    if wq.dim() != 2:
        raise ValueError(f"wq: must be 2-D [n, RW], not {wq.dim()}-D")
    k, n = a.shape[-1], wq.shape[0]
    wshape, sshape, zshape = fmt.shapes(n, k)
    if tuple(wq.shape) != wshape:
        raise ValueError(f"wq: shape {tuple(wq.shape)} where {wshape} is needed for [n, k] = [{n}, {k}]")
    for x, shape, name in ((scales, sshape, "scales"), (zeros, zshape, "zeros")):
        if (x is None) != (shape is None):
            raise ValueError(f"{name}: format {fmt.mode!r} {'has none' if shape is None else 'needs them'}")
        if x is not None:
            _check((a, x), ("a", name), _FLOATS[:2])
            if x.numel() != math.prod(shape):
                raise ValueError(f"{name}: shape {tuple(x.shape)} where {shape} is needed")
    for x, name in ((wq, "wq"), (bias, "bias")):
        if x is not None and x.device != a.device:
            raise ValueError(f"{name}: on {x.device}, a on {a.device}")
    if bias is not None:
        _check((a, bias), ("a", "bias"), _FLOATS[:2])
        if tuple(bias.shape) != (n,):
            raise ValueError(f"bias: shape {tuple(bias.shape)} where ({n},) is needed")
    y = _ops().gemm_quant(a.reshape(-1, k), wq, scales, zeros, bias, fmt.bits, fmt.group_size,
                          fmt.mode, fmt.zero_scalar)
    return y.reshape(*a.shape[:-1], n) if a.dim() != 2 else y
