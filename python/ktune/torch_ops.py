"""The ops as PyTorch custom ops (namespace `ktune`, torch.ops.ktune.*): each
with its real implementation (libktune through calls.py on torch's current
stream, outputs from torch's allocator), a fake implementation (shapes only,
for torch.compile and meta tensors) and, for the forward ops, an autograd
formula whose backward is the C backward pass, itself a custom op so that
compiled backward graphs stay whole.

Inputs whose strides libktune cannot express (expanded gradients, permuted
views) are copied to contiguous ones first, as torch's own ops do; outputs
are always new contiguous tensors, in the real and the fake implementation
alike."""
import math
from typing import Optional

import torch
from torch import Tensor

from . import calls
from .arrays import of_torch, rows_of, matrix_of

_MASK64 = (1 << 64) - 1

try:  # the raw cudaStream_t of the current stream, as inductor's generated code reads it
    from torch._C import _cuda_getCurrentRawStream as _raw_stream
except ImportError:
    _raw_stream = None


def _stream(t):
    if not t.is_cuda:
        return 0
    if _raw_stream is not None:
        return _raw_stream(t.get_device())
    return torch.cuda.current_stream(t.device).cuda_stream


def _v(t, name="x"):
    return of_torch(t, name)


def _rowwise(t, name="x"):
    """(t, its View), or a contiguous copy's when its rows are not evenly strided."""
    v = of_torch(t, name)
    try:
        rows_of(v, name)
        return t, v
    except ValueError:
        t = t.contiguous()
        return t, of_torch(t, name)


def _matrix(t, name):
    """(t, its View), or a contiguous copy's when it is neither row- nor column-major."""
    v = of_torch(t, name)
    try:
        matrix_of(v, name)
        return t, v
    except ValueError:
        t = t.contiguous()
        return t, of_torch(t, name)


def _flat(t):
    return t if t.is_contiguous() else t.contiguous()


def _rows(x):
    return math.prod(x.shape[:-1])


def _new(x, shape=None, dtype=None):
    return torch.empty(x.shape if shape is None else shape, dtype=dtype or x.dtype, device=x.device)


def _vec(w, name):
    """A norm's optional vector, contiguous, and its View (None, None when absent)."""
    if w is None:
        return None, None
    w = w.contiguous()
    return w, of_torch(w, name)


def _op(name):
    # device_types=None: every device reaches the implementation, whose checks say
    # "ktune runs on 'cuda' tensors" in a ValueError rather than a dispatcher error.
    return torch.library.custom_op(f"ktune::{name}", mutates_args=())


# --- gemm ---------------------------------------------------------------------------------
#
# ktune_gemm serves a key from its aligned class (16-byte cp.async, the wgmma family) only when
# every pointer is 16-byte aligned and every leading dimension a multiple of 8 elements; one odd
# leading dimension (GPT-2's vocabulary of 50257) sends the whole GEMM to element loads.  So C's
# rows are allocated padded to 8 elements (a view [:, :n] of the padded buffer: no cost), and in
# a GEMM big enough to repay a copy, an unaligned operand is copied into a padded buffer first.

ALIGN = 8  # elements of f16/bf16: 16 bytes
PAD_MIN_FLOPS = 1 << 30  # copy an unaligned operand only for a GEMM of this many flops or more,
PAD_MIN_REUSE = 256  # whose other dimension (the times each element is used) is at least this


def _padded(rows, cols, like):
    """An empty [rows, cols] of like's dtype and device, its rows ALIGN-element aligned."""
    if cols % ALIGN == 0:  # no view to make: contiguous is aligned
        return torch.empty((rows, cols), dtype=like.dtype, device=like.device)
    ld = -(-cols // ALIGN) * ALIGN
    return torch.empty((rows, ld), dtype=like.dtype, device=like.device)[:, :cols]


def _unaligned(t):
    """Whether a row- or column-major matrix of more than one row and column has a
    leading dimension that is not a multiple of ALIGN (as arrays.matrix_of reads
    it; strides only, so that it runs on the fake tensors of a compiled backward).
    A single row or column has no leading dimension to pad."""
    r, c = t.shape
    if r <= 1 or c <= 1:
        return False
    s0, s1 = t.stride()
    return (s0 if s1 == 1 else s1) % ALIGN != 0


def _aligned_copy(t):
    """t copied into a padded buffer of the same orientation (row- or column-major)."""
    if t.shape[1] <= 1 or t.stride()[1] == 1:
        p = _padded(t.shape[0], t.shape[1], t)
    else:  # column-major: the transposed buffer, padded
        p = _padded(t.shape[1], t.shape[0], t).t()
    return p.copy_(t)


def _worth_padding(m, n, k, reuse):
    return 2 * m * n * k >= PAD_MIN_FLOPS and reuse >= PAD_MIN_REUSE


@_op("gemm")
def gemm(a: Tensor, b: Tensor, alpha: float = 1.0) -> Tensor:
    (a, va), (b, vb) = _matrix(a, "a"), _matrix(b, "b")
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    c = _padded(m, n, a)
    if c.numel() == 0:
        return c
    if k == 0:
        return c.zero_()
    if (va.ptr % 16 or _unaligned(a)) and _worth_padding(m, n, k, n):  # a's elements are used n times
        a = _aligned_copy(a)
        va = _v(a, "a")
    if (vb.ptr % 16 or _unaligned(b)) and _worth_padding(m, n, k, m):
        b = _aligned_copy(b)
        vb = _v(b, "b")
    calls.gemm(va, vb, _v(c, "c"), alpha, 0.0, _stream(a))
    return c


@gemm.register_fake
def _(a, b, alpha=1.0):
    return _padded(a.shape[0], b.shape[1], a)


def _gemm_setup(ctx, inputs, output):
    a, b, alpha = inputs
    ctx.save_for_backward(a, b)
    ctx.alpha = alpha


def _gemm_backward(ctx, grad):
    a, b = ctx.saved_tensors
    need_a, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    if need_a and need_b and _unaligned(grad) and _worth_padding(m, n, k, k):  # grad's elements: used k times
        grad = _aligned_copy(grad)  # one copy for both GEMMs, not one in each (GPT-2's LM head)
    da = gemm(grad, b.t(), ctx.alpha) if need_a else None
    db = gemm(a.t(), grad, ctx.alpha) if need_b else None
    return da, db, None


gemm.register_autograd(_gemm_backward, setup_context=_gemm_setup)


# --- add ----------------------------------------------------------------------------------

@_op("add")
def add(x: Tensor, y: Tensor) -> Tensor:
    x, y = _flat(x), _flat(y)
    z = _new(x)
    if z.numel():
        calls.add(_v(x, "x"), _v(y, "y"), _v(z, "z"), _stream(x))
    return z


@add.register_fake
def _(x, y):
    return _new(x)


add.register_autograd(lambda ctx, g: (g, g), setup_context=lambda ctx, inputs, output: None)


# --- gelu ---------------------------------------------------------------------------------

@_op("gelu")
def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    x = _flat(x)
    y = _new(x)
    if y.numel():
        calls.gelu(_v(x, "x"), _v(y, "y"), approximate, _stream(x))
    return y


@gelu.register_fake
def _(x, approximate="none"):
    return _new(x)


@_op("gelu_backward")
def gelu_backward(dy: Tensor, x: Tensor, approximate: str = "none") -> Tensor:
    x, dy = _flat(x), _flat(dy)
    dx = _new(x)
    if dx.numel():
        calls.gelu_backward(_v(x, "x"), _v(dy, "dy"), _v(dx, "dx"), approximate, _stream(x))
    return dx


@gelu_backward.register_fake
def _(dy, x, approximate="none"):
    return _new(x)


def _gelu_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.approximate = inputs[1]


gelu.register_autograd(lambda ctx, g: (gelu_backward(g, ctx.saved_tensors[0], ctx.approximate), None),
                       setup_context=_gelu_setup)


# --- glu: two tensors, or the two halves of one ---------------------------------------------

@_op("glu")
def glu(a: Tensor, b: Tensor, act: str) -> Tensor:
    (a, va), (b, vb) = _rowwise(a, "a"), _rowwise(b, "b")
    out = _new(a)
    if out.numel():
        calls.glu(va, vb, _v(out, "out"), act, _stream(a))
    return out


@glu.register_fake
def _(a, b, act):
    return _new(a)


@_op("glu_backward")
def glu_backward(a: Tensor, b: Tensor, dout: Tensor, act: str) -> tuple[Tensor, Tensor]:
    (a, va), (b, vb), (dout, vd) = _rowwise(a, "a"), _rowwise(b, "b"), _rowwise(dout, "dout")
    da, db = _new(a), _new(a)
    if da.numel():
        calls.glu_backward(va, vb, vd, _v(da, "da"), _v(db, "db"), act, _stream(a))
    return da, db


@glu_backward.register_fake
def _(a, b, dout, act):
    return _new(a), _new(a)


def _glu_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1])
    ctx.act = inputs[2]


glu.register_autograd(lambda ctx, g: (*glu_backward(*ctx.saved_tensors, g, ctx.act), None),
                      setup_context=_glu_setup)


def _halves(h):
    c = h.shape[-1] // 2
    return h[..., :c], h[..., c:]


@_op("glu_fused")
def glu_fused(h: Tensor, act: str) -> Tensor:
    h, _ = _rowwise(h, "h")
    a, b = _halves(h)
    out = _new(a)
    if out.numel():
        calls.glu(_v(a, "a"), _v(b, "b"), _v(out, "out"), act, _stream(h))
    return out


@glu_fused.register_fake
def _(h, act):
    return _new(h, (*h.shape[:-1], h.shape[-1] // 2))


@_op("glu_fused_backward")
def glu_fused_backward(h: Tensor, dout: Tensor, act: str) -> Tensor:
    (h, _), (dout, vd) = _rowwise(h, "h"), _rowwise(dout, "dout")
    dh = _new(h)
    if dh.numel():
        (a, b), (da, db) = _halves(h), _halves(dh)
        calls.glu_backward(_v(a, "a"), _v(b, "b"), vd, _v(da, "da"), _v(db, "db"), act, _stream(h))
    return dh


@glu_fused_backward.register_fake
def _(h, dout, act):
    return _new(h)


def _glu_fused_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.act = inputs[1]


glu_fused.register_autograd(lambda ctx, g: (glu_fused_backward(ctx.saved_tensors[0], g, ctx.act), None),
                            setup_context=_glu_fused_setup)


# --- dropout: (seed, offset) names the mask, none is stored ----------------------------------

@_op("dropout")
def dropout(x: Tensor, p: float, seed: int, offset: int) -> Tensor:
    x = _flat(x)
    y = _new(x)
    if y.numel():
        calls.dropout(_v(x, "x"), _v(y, "y"), p, seed & _MASK64, offset & _MASK64, _stream(x))
    return y


@dropout.register_fake
def _(x, p, seed, offset):
    return _new(x)


@_op("dropout_backward")
def dropout_backward(dy: Tensor, p: float, seed: int, offset: int) -> Tensor:
    dy = _flat(dy)
    dx = _new(dy)
    if dx.numel():
        calls.dropout_backward(_v(dy, "dy"), _v(dx, "dx"), p, seed & _MASK64, offset & _MASK64, _stream(dy))
    return dx


@dropout_backward.register_fake
def _(dy, p, seed, offset):
    return _new(dy)


def _dropout_setup(ctx, inputs, output):
    ctx.p, ctx.seed, ctx.offset = inputs[1:]


dropout.register_autograd(
    lambda ctx, g: (dropout_backward(g, ctx.p, ctx.seed, ctx.offset), None, None, None),
    setup_context=_dropout_setup)


# --- softmax over the last dimension ---------------------------------------------------------

@_op("softmax")
def softmax(x: Tensor) -> Tensor:
    x, vx = _rowwise(x)
    y = _new(x)
    if y.numel():
        calls.softmax(vx, _v(y, "y"), _stream(x))
    return y


@softmax.register_fake
def _(x):
    return _new(x)


@_op("softmax_backward")
def softmax_backward(y: Tensor, dy: Tensor) -> Tensor:
    (y, vy), (dy, vdy) = _rowwise(y, "y"), _rowwise(dy, "dy")
    dx = _new(y)
    if dx.numel():
        calls.softmax_backward(vy, vdy, _v(dx, "dx"), _stream(y))
    return dx


@softmax_backward.register_fake
def _(y, dy):
    return _new(y)


softmax.register_autograd(lambda ctx, g: softmax_backward(ctx.saved_tensors[0], g),
                          setup_context=lambda ctx, inputs, output: ctx.save_for_backward(output))


# --- RMSNorm, with the residual add fused; the weight optional (NULL: ones) ----------------------

def _unused(x):
    """What a backward op returns for a gradient it was not asked for."""
    return _new(x, (0,))


@_op("rms_norm")
def rms_norm(x: Tensor, weight: Optional[Tensor], eps: float) -> tuple[Tensor, Tensor]:
    (x, vx), (weight, vw) = _rowwise(x), _vec(weight, "weight")
    y, rstd = _new(x), _new(x, (_rows(x),), torch.float32)
    if y.numel():
        calls.rmsnorm(vx, vw, _v(y, "y"), _v(rstd, "rstd"), eps, stream=_stream(x))
    return y, rstd


@rms_norm.register_fake
def _(x, weight, eps):
    return _new(x), _new(x, (_rows(x),), torch.float32)


@_op("rms_norm_residual")
def rms_norm_residual(x: Tensor, residual: Tensor, weight: Optional[Tensor],
                      eps: float) -> tuple[Tensor, Tensor, Tensor]:
    (x, vx), (residual, vr), (weight, vw) = _rowwise(x), _rowwise(residual, "residual"), _vec(weight, "weight")
    y, h, rstd = _new(x), _new(x), _new(x, (_rows(x),), torch.float32)
    if y.numel():
        calls.rmsnorm(vx, vw, _v(y, "y"), _v(rstd, "rstd"), eps, vr, _v(h, "h"), _stream(x))
    return y, h, rstd


@rms_norm_residual.register_fake
def _(x, residual, weight, eps):
    return _new(x), _new(x), _new(x, (_rows(x),), torch.float32)


@_op("rms_norm_backward")
def rms_norm_backward(h: Tensor, weight: Optional[Tensor], rstd: Tensor, dy: Tensor,
                      dweight: bool = True) -> tuple[Tensor, Tensor]:
    """(dx, dweight); dweight False: not computed, an empty tensor in its place."""
    (h, vh), (dy, vdy), (weight, vw) = _rowwise(h, "h"), _rowwise(dy, "dy"), _vec(weight, "weight")
    dx = _new(h)
    dw = _new(h, h.shape[-1:]) if dweight else _unused(h)
    if dx.numel():
        calls.rmsnorm_backward(vh, vw, _v(rstd, "rstd"), vdy, _v(dx, "dx"), _v(dw, "dweight") if dweight else None,
                               _stream(h))
    else:
        dw.zero_()
    return dx, dw


@rms_norm_backward.register_fake
def _(h, weight, rstd, dy, dweight=True):
    return _new(h), (_new(h, h.shape[-1:]) if dweight else _unused(h))


def _rms_setup(ctx, inputs, output):
    x, weight = inputs[0], inputs[1]
    ctx.save_for_backward(x, weight, output[1])


def _rms_backward(ctx, gy, grstd):
    h, weight, rstd = ctx.saved_tensors
    need_w = ctx.needs_input_grad[1]
    dx, dw = rms_norm_backward(h, weight, rstd, gy, need_w)
    return dx, (dw if need_w else None), None


rms_norm.register_autograd(_rms_backward, setup_context=_rms_setup)


def _rms_res_setup(ctx, inputs, output):
    ctx.save_for_backward(output[1], inputs[2], output[2])


def _rms_res_backward(ctx, gy, gh, grstd):
    h, weight, rstd = ctx.saved_tensors
    need_w = ctx.needs_input_grad[2]
    dx, dw = rms_norm_backward(h, weight, rstd, gy, need_w)
    if gh is not None:
        dx = dx + gh  # h is also an output (the next residual): its gradient joins the norm's
    return dx, dx, (dw if need_w else None), None


rms_norm_residual.register_autograd(_rms_res_backward, setup_context=_rms_res_setup)


# --- LayerNorm; weight and bias optional (NULL: ones, zeros) -----------------------------------

@_op("layer_norm")
def layer_norm(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
               eps: float) -> tuple[Tensor, Tensor, Tensor]:
    (x, vx), (weight, vw), (bias, vb) = _rowwise(x), _vec(weight, "weight"), _vec(bias, "bias")
    rows = _rows(x)
    y, mean, rstd = _new(x), _new(x, (rows,), torch.float32), _new(x, (rows,), torch.float32)
    if y.numel():
        calls.layernorm(vx, vw, vb, _v(y, "y"), _v(mean, "mean"), _v(rstd, "rstd"), eps, _stream(x))
    return y, mean, rstd


@layer_norm.register_fake
def _(x, weight, bias, eps):
    rows = _rows(x)
    return _new(x), _new(x, (rows,), torch.float32), _new(x, (rows,), torch.float32)


@_op("layer_norm_backward")
def layer_norm_backward(x: Tensor, weight: Optional[Tensor], mean: Tensor, rstd: Tensor, dy: Tensor,
                        dweight: bool = True, dbias: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, dweight, dbias); a gradient not asked for is not computed, an
    empty tensor in its place."""
    (x, vx), (dy, vdy), (weight, vw) = _rowwise(x), _rowwise(dy, "dy"), _vec(weight, "weight")
    dx = _new(x)
    dw = _new(x, x.shape[-1:]) if dweight else _unused(x)
    db = _new(x, x.shape[-1:]) if dbias else _unused(x)
    if dx.numel():
        calls.layernorm_backward(vx, vw, _v(mean, "mean"), _v(rstd, "rstd"), vdy, _v(dx, "dx"),
                                 _v(dw, "dweight") if dweight else None, _v(db, "dbias") if dbias else None,
                                 _stream(x))
    else:
        dw.zero_()
        db.zero_()
    return dx, dw, db


@layer_norm_backward.register_fake
def _(x, weight, mean, rstd, dy, dweight=True, dbias=True):
    return (_new(x), _new(x, x.shape[-1:]) if dweight else _unused(x),
            _new(x, x.shape[-1:]) if dbias else _unused(x))


def _ln_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1], output[1], output[2])


def _ln_backward(ctx, gy, gmean, grstd):
    x, weight, mean, rstd = ctx.saved_tensors
    need_w, need_b = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
    dx, dw, db = layer_norm_backward(x, weight, mean, rstd, gy, need_w, need_b)
    return dx, (dw if need_w else None), (db if need_b else None), None


layer_norm.register_autograd(_ln_backward, setup_context=_ln_setup)
