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

import torch
from torch import Tensor

from . import calls
from .arrays import of_torch, rows_of, matrix_of

_MASK64 = (1 << 64) - 1


def _stream(t):
    return torch.cuda.current_stream(t.device).cuda_stream if t.device.type == "cuda" else 0


def _v(t, name="x"):
    return of_torch(t, name)


def _rowwise(t):
    """t, or a contiguous copy when its rows are not evenly strided."""
    try:
        rows_of(_v(t), "x")
        return t
    except ValueError:
        return t.contiguous()


def _matrix(t):
    try:
        matrix_of(_v(t), "x")
        return t
    except ValueError:
        return t.contiguous()


def _flat(t):
    return t if t.is_contiguous() else t.contiguous()


def _rows(x):
    return math.prod(x.shape[:-1])


def _new(x, shape=None, dtype=None):
    return torch.empty(x.shape if shape is None else shape, dtype=dtype or x.dtype, device=x.device)


def _op(name):
    # device_types=None: every device reaches the implementation, whose checks say
    # "ktune runs on 'cuda' tensors" in a ValueError rather than a dispatcher error.
    return torch.library.custom_op(f"ktune::{name}", mutates_args=())


# --- gemm ---------------------------------------------------------------------------------

@_op("gemm")
def gemm(a: Tensor, b: Tensor, alpha: float = 1.0) -> Tensor:
    a, b = _matrix(a), _matrix(b)
    c = _new(a, (a.shape[0], b.shape[1]))
    if c.numel() == 0:
        return c
    if a.shape[1] == 0:
        return c.zero_()
    calls.gemm(_v(a, "a"), _v(b, "b"), _v(c, "c"), alpha, 0.0, _stream(a))
    return c


@gemm.register_fake
def _(a, b, alpha=1.0):
    return _new(a, (a.shape[0], b.shape[1]))


def _gemm_setup(ctx, inputs, output):
    a, b, alpha = inputs
    ctx.save_for_backward(a, b)
    ctx.alpha = alpha


def _gemm_backward(ctx, grad):
    a, b = ctx.saved_tensors
    da = gemm(grad, b.t(), ctx.alpha) if ctx.needs_input_grad[0] else None
    db = gemm(a.t(), grad, ctx.alpha) if ctx.needs_input_grad[1] else None
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
    a, b = _rowwise(a), _rowwise(b)
    out = _new(a)
    if out.numel():
        calls.glu(_v(a, "a"), _v(b, "b"), _v(out, "out"), act, _stream(a))
    return out


@glu.register_fake
def _(a, b, act):
    return _new(a)


@_op("glu_backward")
def glu_backward(a: Tensor, b: Tensor, dout: Tensor, act: str) -> tuple[Tensor, Tensor]:
    a, b, dout = _rowwise(a), _rowwise(b), _rowwise(dout)
    da, db = _new(a), _new(a)
    if da.numel():
        calls.glu_backward(_v(a, "a"), _v(b, "b"), _v(dout, "dout"), _v(da, "da"), _v(db, "db"), act,
                           _stream(a))
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
    h = _rowwise(h)
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
    h, dout = _rowwise(h), _rowwise(dout)
    dh = _new(h)
    if dh.numel():
        (a, b), (da, db) = _halves(h), _halves(dh)
        calls.glu_backward(_v(a, "a"), _v(b, "b"), _v(dout, "dout"), _v(da, "da"), _v(db, "db"), act,
                           _stream(h))
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
    x = _rowwise(x)
    y = _new(x)
    if y.numel():
        calls.softmax(_v(x, "x"), _v(y, "y"), _stream(x))
    return y


@softmax.register_fake
def _(x):
    return _new(x)


@_op("softmax_backward")
def softmax_backward(y: Tensor, dy: Tensor) -> Tensor:
    y, dy = _rowwise(y), _rowwise(dy)
    dx = _new(y)
    if dx.numel():
        calls.softmax_backward(_v(y, "y"), _v(dy, "dy"), _v(dx, "dx"), _stream(y))
    return dx


@softmax_backward.register_fake
def _(y, dy):
    return _new(y)


softmax.register_autograd(lambda ctx, g: softmax_backward(ctx.saved_tensors[0], g),
                          setup_context=lambda ctx, inputs, output: ctx.save_for_backward(output))


# --- RMSNorm, with the residual add fused ----------------------------------------------------

@_op("rms_norm")
def rms_norm(x: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    x, weight = _rowwise(x), weight.contiguous()
    y, rstd = _new(x), _new(x, (_rows(x),), torch.float32)
    if y.numel():
        calls.rmsnorm(_v(x, "x"), _v(weight, "weight"), _v(y, "y"), _v(rstd, "rstd"), eps, stream=_stream(x))
    return y, rstd


@rms_norm.register_fake
def _(x, weight, eps):
    return _new(x), _new(x, (_rows(x),), torch.float32)


@_op("rms_norm_residual")
def rms_norm_residual(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    x, residual, weight = _rowwise(x), _rowwise(residual), weight.contiguous()
    y, h, rstd = _new(x), _new(x), _new(x, (_rows(x),), torch.float32)
    if y.numel():
        calls.rmsnorm(_v(x, "x"), _v(weight, "weight"), _v(y, "y"), _v(rstd, "rstd"), eps,
                      _v(residual, "residual"), _v(h, "h"), _stream(x))
    return y, h, rstd


@rms_norm_residual.register_fake
def _(x, residual, weight, eps):
    return _new(x), _new(x), _new(x, (_rows(x),), torch.float32)


@_op("rms_norm_backward")
def rms_norm_backward(h: Tensor, weight: Tensor, rstd: Tensor, dy: Tensor) -> tuple[Tensor, Tensor]:
    h, dy, weight = _rowwise(h), _rowwise(dy), weight.contiguous()
    dx, dw = _new(h), _new(weight)
    if dx.numel():
        calls.rmsnorm_backward(_v(h, "h"), _v(weight, "weight"), _v(rstd, "rstd"), _v(dy, "dy"), _v(dx, "dx"),
                               _v(dw, "dweight"), _stream(h))
    else:
        dw.zero_()
    return dx, dw


@rms_norm_backward.register_fake
def _(h, weight, rstd, dy):
    return _new(h), _new(weight)


def _rms_setup(ctx, inputs, output):
    x, weight = inputs[0], inputs[1]
    ctx.save_for_backward(x, weight, output[1])


def _rms_backward(ctx, gy, grstd):
    h, weight, rstd = ctx.saved_tensors
    dx, dw = rms_norm_backward(h, weight, rstd, gy)
    return dx, dw, None


rms_norm.register_autograd(_rms_backward, setup_context=_rms_setup)


def _rms_res_setup(ctx, inputs, output):
    ctx.save_for_backward(output[1], inputs[2], output[2])


def _rms_res_backward(ctx, gy, gh, grstd):
    h, weight, rstd = ctx.saved_tensors
    dx, dw = rms_norm_backward(h, weight, rstd, gy)
    if gh is not None:
        dx = dx + gh  # h is also an output (the next residual): its gradient joins the norm's
    return dx, dx, dw, None


rms_norm_residual.register_autograd(_rms_res_backward, setup_context=_rms_res_setup)


# --- LayerNorm ------------------------------------------------------------------------------

@_op("layer_norm")
def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    x, weight, bias = _rowwise(x), weight.contiguous(), bias.contiguous()
    rows = _rows(x)
    y, mean, rstd = _new(x), _new(x, (rows,), torch.float32), _new(x, (rows,), torch.float32)
    if y.numel():
        calls.layernorm(_v(x, "x"), _v(weight, "weight"), _v(bias, "bias"), _v(y, "y"), _v(mean, "mean"),
                        _v(rstd, "rstd"), eps, _stream(x))
    return y, mean, rstd


@layer_norm.register_fake
def _(x, weight, bias, eps):
    rows = _rows(x)
    return _new(x), _new(x, (rows,), torch.float32), _new(x, (rows,), torch.float32)


@_op("layer_norm_backward")
def layer_norm_backward(x: Tensor, weight: Tensor, mean: Tensor, rstd: Tensor,
                        dy: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    x, dy, weight = _rowwise(x), _rowwise(dy), weight.contiguous()
    dx, dw, db = _new(x), _new(weight), _new(weight)
    if dx.numel():
        calls.layernorm_backward(_v(x, "x"), _v(weight, "weight"), _v(mean, "mean"), _v(rstd, "rstd"),
                                 _v(dy, "dy"), _v(dx, "dx"), _v(dw, "dweight"), _v(db, "dbias"), _stream(x))
    else:
        dw.zero_()
        db.zero_()
    return dx, dw, db


@layer_norm_backward.register_fake
def _(x, weight, mean, rstd, dy):
    return _new(x), _new(weight), _new(weight)


def _ln_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1], output[1], output[2])


def _ln_backward(ctx, gy, gmean, grstd):
    x, weight, mean, rstd = ctx.saved_tensors
    dx, dw, db = layer_norm_backward(x, weight, mean, rstd, gy)
    return dx, dw, db, None


layer_norm.register_autograd(_ln_backward, setup_context=_ln_setup)
