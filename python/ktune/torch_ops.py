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
from .arrays import of_torch, of_torch_index, rows_of, matrix_of

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


# --- the ops: torch.library custom ops, and a fast path for eager calls ---------------------------
#
# A call through torch.library's dispatcher (the custom op, then its generated autograd.Function,
# then a redispatch to the implementation) costs about 100 us of Python a call, 170 with
# gradients: several times libktune's own 10-20 us, and for a model of small kernels (GPT-2's
# hundreds of calls a step) the whole step's wall time.  So a plain eager call, one torch.compile
# does not trace and no tensor subclass or functorch transform sees, goes straight to the same
# implementation, through an autograd.Function built from the same setup_context and backward as
# the custom op's (which is what torch.library itself builds); everything else (torch.compile,
# FakeTensor, opcheck, torch.ops.ktune.*) takes the custom op.  The two compute the same: one
# implementation, one autograd formula.

def _plain(args):
    """Whether the arguments are plain tensors (or nn.Parameters) and other values, nothing a
    tensor subclass (FakeTensor, FunctionalTensor, ...) would have to see."""
    for a in args:
        if isinstance(a, Tensor) and type(a) is not Tensor and type(a) is not torch.nn.Parameter:
            return False
    return True


def _eager(args):
    return (not torch.compiler.is_compiling() and not torch._C._are_functorch_transforms_active()
            and _plain(args))


class _Op:
    """A ktune op: `op` the torch.library custom op (torch.ops.ktune.NAME), `impl` its
    implementation; calling it takes the fast path when _eager() allows."""

    def __init__(self, name, impl):
        import inspect
        # device_types=None: every device reaches the implementation, whose checks say
        # "ktune runs on 'cuda' tensors" in a ValueError rather than a dispatcher error.
        self.op = torch.library.custom_op(f"ktune::{name}", mutates_args=())(impl)
        self.impl = impl
        self.name = name
        params = list(inspect.signature(impl).parameters.values())
        self._names = [p.name for p in params]
        self._defaults = [p.default for p in params]
        self._function = None

    def register_fake(self, fn):
        return self.op.register_fake(fn)

    def register_autograd(self, backward, *, setup_context):
        self.op.register_autograd(backward, setup_context=setup_context)
        impl = self.impl

        # forward with ctx, as torch.library's own: a separate setup_context makes
        # Function.apply bind the arguments through inspect.signature, 30 us a call
        def forward(ctx, *args):
            output = impl(*args)
            setup_context(ctx, args, output)
            return output

        self._function = type(f"ktune_{self.name}_eager", (torch.autograd.Function,), {
            "forward": staticmethod(forward),
            "backward": staticmethod(backward),
        })

    def _inputs(self, args, kwargs):
        """Every argument positionally, defaults filled in, as setup_context sees them."""
        if kwargs:
            args = list(args) + [kwargs.pop(n, d) for n, d in zip(self._names[len(args):],
                                                                   self._defaults[len(args):])]
            if kwargs:
                raise TypeError(f"ktune.{self.name}: unexpected arguments {sorted(kwargs)}")
            return tuple(args)
        if len(args) < len(self._names):
            return tuple(args) + tuple(self._defaults[len(args):])
        return args

    def __call__(self, *args, **kwargs):
        if not _eager(args) or not _plain(kwargs.values()):
            return self.op(*args, **kwargs)
        args = self._inputs(args, kwargs)
        if self._function is not None and torch.is_grad_enabled() and torch._C._any_requires_grad(*args):
            return self._function.apply(*args)
        return self.impl(*args)


def _op(name):
    return lambda impl: _Op(name, impl)


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


# --- cross-entropy: fp32 losses; the backward from the forward's lse ----------------------------------

def _idx(t, name="target"):
    return of_torch_index(t, name)


def _ce_loss(logits, reduction):
    rows = logits.shape[0]
    return _new(logits, (rows,) if reduction == "none" else (), torch.float32)


@_op("cross_entropy")
def cross_entropy(logits: Tensor, target: Tensor, ignore_index: int, reduction: str, label_smoothing: float,
                  softcap: float) -> tuple[Tensor, Tensor]:
    """(loss, lse): the loss float32 (0-d, or [rows] for "none"), lse float32 [rows]."""
    (logits, vl), target = _rowwise(logits, "logits"), _flat(target)
    loss, lse = _ce_loss(logits, reduction), _new(logits, (logits.shape[0],), torch.float32)
    if logits.numel():
        calls.cross_entropy(vl, _idx(target), _v(loss, "loss"), _v(lse, "lse"), ignore_index, label_smoothing,
                            softcap, reduction, _stream(logits))
    else:  # libktune writes nothing: a mean or sum over no rows is 0
        loss.zero_()
        lse.zero_()
    return loss, lse


@cross_entropy.register_fake
def _(logits, target, ignore_index, reduction, label_smoothing, softcap):
    return _ce_loss(logits, reduction), _new(logits, (logits.shape[0],), torch.float32)


@_op("cross_entropy_backward")
def cross_entropy_backward(logits: Tensor, target: Tensor, lse: Tensor, dloss: Tensor, ignore_index: int,
                           reduction: str, label_smoothing: float, softcap: float) -> Tensor:
    """dlogits, the gradient of cross_entropy's loss times dloss (shaped as the loss)."""
    (logits, vl), target, lse = _rowwise(logits, "logits"), _flat(target), _flat(lse)
    dloss = _flat(dloss.to(torch.float32))
    dlogits = _new(logits)
    if dlogits.numel():
        calls.cross_entropy_backward(vl, _idx(target), _v(lse, "lse"), _v(dloss, "dloss"), _v(dlogits, "dlogits"),
                                     ignore_index, label_smoothing, softcap, reduction, _stream(logits))
    return dlogits


@cross_entropy_backward.register_fake
def _(logits, target, lse, dloss, ignore_index, reduction, label_smoothing, softcap):
    return _new(logits)


def _ce_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1], output[1])
    ctx.args = inputs[2:]


def _ce_backward(ctx, gloss, glse):
    logits, target, lse = ctx.saved_tensors
    return (cross_entropy_backward(logits, target, lse, gloss, *ctx.args), None, None, None, None, None)


cross_entropy.register_autograd(_ce_backward, setup_context=_ce_setup)


@_op("cross_entropy_fused")
def cross_entropy_fused(logits: Tensor, target: Tensor, ignore_index: int, reduction: str, label_smoothing: float,
                        softcap: float, dloss: float) -> tuple[Tensor, Tensor]:
    """(loss, dlogits) in one read of the logits; dloss the loss's gradient, a number."""
    (logits, vl), target = _rowwise(logits, "logits"), _flat(target)
    loss, dlogits = _ce_loss(logits, reduction), _new(logits)
    if logits.numel():
        calls.cross_entropy_fused(vl, _idx(target), _v(loss, "loss"), _v(dlogits, "dlogits"), dloss, ignore_index,
                                  label_smoothing, softcap, reduction, _stream(logits))
    else:
        loss.zero_()
        dlogits.zero_()
    return loss, dlogits


@cross_entropy_fused.register_fake
def _(logits, target, ignore_index, reduction, label_smoothing, softcap, dloss):
    return _ce_loss(logits, reduction), _new(logits)


# --- the LM head's linear cross-entropy: gradients computed in the forward (Liger's way) ------------------
#
# libktune computes the loss a row and the gradients of the *sum* (dloss 1) a chunk of rows at a time;
# the op returns the loss, those gradients and the factor a mean's gradients get (1 / the rows not
# ignored), so that the backward scales them once by the loss's gradient times that factor, and
# nothing waits for the GPU to count the rows (ktune_linear_cross_entropy's own mean would).

LCE_SCRATCH_BYTES = 256 << 20  # the most one call's chunk of logits takes (the C call's `scratch`)


def lce_chunk_rows(rows, vocab, scratch_bytes=None):
    """The rows of a linear_cross_entropy chunk: as many as LCE_SCRATCH_BYTES holds (a
    multiple of 64 above 64), at least 1, at most rows."""
    per_row = -(-vocab // ALIGN) * ALIGN * 2
    chunk = max(1, (LCE_SCRATCH_BYTES if scratch_bytes is None else scratch_bytes) // per_row)
    if chunk > 64:
        chunk -= chunk % 64
    return min(chunk, max(rows, 1)), per_row


@_op("linear_cross_entropy")
def linear_cross_entropy(hidden: Tensor, weight: Tensor, target: Tensor, ignore_index: int, reduction: str,
                         label_smoothing: float, softcap: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(loss, dhidden, dweight, factor): dhidden and dweight the gradients of the sum of
    the rows' losses, factor what a gradient of the loss gets (1 / count for a mean)."""
    (hidden, vh), (weight, vw), target = _rowwise(hidden, "hidden"), _rowwise(weight, "weight"), _flat(target)
    rows, vocab = hidden.shape[0], weight.shape[0]
    dhidden, dweight = _new(hidden), _new(weight)
    loss_rows = _new(hidden, (rows,), torch.float32)
    if rows == 0:
        dweight.zero_()
        loss_rows.zero_()
    else:
        chunk, per_row = lce_chunk_rows(rows, vocab)
        scratch = torch.empty(chunk * per_row, dtype=torch.uint8, device=hidden.device)
        calls.linear_cross_entropy(vh, vw, _idx(target), _v(loss_rows, "loss_rows"), _v(dhidden, "dhidden"),
                                   _v(dweight, "dweight"), scratch.data_ptr(), scratch.numel(), chunk, ignore_index,
                                   label_smoothing, softcap, "sum", 1.0, -1, _stream(hidden))
    if reduction == "mean":
        factor = 1.0 / (target != ignore_index).sum().clamp(min=1).to(torch.float32)
    else:
        factor = torch.ones((), dtype=torch.float32, device=hidden.device)
    return loss_rows.sum() * factor, dhidden, dweight, factor


@linear_cross_entropy.register_fake
def _(hidden, weight, target, ignore_index, reduction, label_smoothing, softcap):
    scalar = _new(hidden, (), torch.float32)
    return scalar, _new(hidden), _new(weight), _new(hidden, (), torch.float32)


def _lce_setup(ctx, inputs, output):
    ctx.save_for_backward(output[1], output[2], output[3])


def _lce_backward(ctx, gloss, gdhidden, gdweight, gfactor):
    dhidden, dweight, factor = ctx.saved_tensors
    g = gloss * factor
    return (dhidden * g if ctx.needs_input_grad[0] else None, dweight * g if ctx.needs_input_grad[1] else None,
            None, None, None, None, None)


linear_cross_entropy.register_autograd(_lce_backward, setup_context=_lce_setup)


# --- flash attention on [B, H, S, D] tensors; outputs with BSHD strides ------------------------------------

def _attn_ok(t):
    """Whether libktune reads t [B, H, S, D] as it is: D contiguous, 16-byte aligned, the
    strides of the dimensions longer than 1 multiples of 8 elements."""
    if t.shape[3] > 1 and t.stride(3) != 1 or t.data_ptr() % 16:
        return False
    return all(st % ALIGN == 0 for size, st in zip(t.shape[:3], t.stride()[:3]) if size > 1)


def _attn_in(t):
    return t if _attn_ok(t) else torch.empty_like(t, memory_format=torch.contiguous_format).copy_(t)


def _bshd(like, shape):
    """An empty [B, H, S, D] tensor with BSHD strides (the transpose of a contiguous [B, S, H, D])."""
    b, h, s, d = shape
    return torch.empty((b, s, h, d), dtype=like.dtype, device=like.device).transpose(1, 2)


@_op("attention")
def attention(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float) -> tuple[Tensor, Tensor]:
    """(o, lse): o [B, Hq, Sq, D] with BSHD strides, lse float32 [B, Hq, Sq]."""
    q, k, v = _attn_in(q), _attn_in(k), _attn_in(v)
    o, lse = _bshd(q, q.shape), _new(q, q.shape[:3], torch.float32)
    if o.numel():
        calls.attention_fwd(_v(q, "q"), _v(k, "k"), _v(v, "v"), _v(o, "o"), _v(lse, "lse"), scale, causal,
                            _stream(q))
    return o, lse


@attention.register_fake
def _(q, k, v, causal, scale):
    return _bshd(q, q.shape), _new(q, q.shape[:3], torch.float32)


@_op("attention_backward")
def attention_backward(q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, dout: Tensor, causal: bool,
                       scale: float, deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv), shaped as q, k, v with BSHD strides."""
    q, k, v, o, dout, lse = _attn_in(q), _attn_in(k), _attn_in(v), _attn_in(o), _attn_in(dout), _flat(lse)
    dq, dk, dv = _bshd(q, q.shape), _bshd(k, k.shape), _bshd(v, v.shape)
    if q.shape[0] * q.shape[1] * q.shape[2] == 0:  # no query rows: nothing reaches k or v
        dk.zero_()
        dv.zero_()
    elif dq.numel():
        calls.attention_bwd(_v(q, "q"), _v(k, "k"), _v(v, "v"), _v(o, "o"), _v(dout, "dout"), _v(lse, "lse"),
                            _v(dq, "dq"), _v(dk, "dk"), _v(dv, "dv"), scale, causal, deterministic, _stream(q))
    return dq, dk, dv


@attention_backward.register_fake
def _(q, k, v, o, lse, dout, causal, scale, deterministic=False):
    return _bshd(q, q.shape), _bshd(k, k.shape), _bshd(v, v.shape)


def _attn_setup(ctx, inputs, output):
    q, k, v, causal, scale = inputs
    ctx.save_for_backward(q, k, v, output[0], output[1])
    ctx.causal, ctx.scale = causal, scale


def _attn_backward(ctx, go, glse):
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = attention_backward(q, k, v, o, lse, go, ctx.causal, ctx.scale,
                                    torch.are_deterministic_algorithms_enabled())
    return dq, dk, dv, None, None


attention.register_autograd(_attn_backward, setup_context=_attn_setup)


# --- the weight-quantized GEMM (forward only) -------------------------------------------------------

@_op("gemm_quant")
def gemm_quant(a: Tensor, wq: Tensor, scales: Optional[Tensor], zeros: Optional[Tensor], bias: Optional[Tensor],
               bits: int, group_size: int, mode: str, zero_scalar: bool) -> Tensor:
    """a [m, k] @ dequant(wq, scales, zeros)^T (+ bias): [m, n], its rows padded to 8 elements."""
    m, k, n = a.shape[0], a.shape[1], wq.shape[0]
    c = _padded(m, n, a)
    if c.numel() == 0:
        return c
    va = of_torch(a, "a")
    if va.ptr % 16 or a.stride(1) != 1 or (m > 1 and a.stride(0) % ALIGN):  # a's rows 16-byte aligned, as asked
        a = torch.empty((m, k), dtype=a.dtype, device=a.device).copy_(a)
        va = _v(a, "a")
    if wq.data_ptr() % 16 or not wq.is_contiguous():
        wq = wq.clone(memory_format=torch.contiguous_format)
    vs, vz, vb = (None if t is None else _v(_flat(t), name)
                  for t, name in ((scales, "scales"), (zeros, "zeros"), (bias, "bias")))
    calls.gemm_quant(calls.quant_format(bits, group_size, mode, zero_scalar), va, _idx(wq, "wq"), vs, vz, vb,
                     _v(c, "c"), _stream(a))
    return c


@gemm_quant.register_fake
def _(a, wq, scales, zeros, bias, bits, group_size, mode, zero_scalar):
    return _padded(a.shape[0], wq.shape[0], a)
