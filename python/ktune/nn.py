"""Drop-in modules: subclasses of torch's own (same parameters, state_dict
keys, init and isinstance), whose forward runs ktune's op where it can and
torch's otherwise:

    Linear      ktune.gemm on float16/bfloat16 inputs (or autocast to them)
    LayerNorm   ktune.layer_norm over a 1-D normalized_shape
    RMSNorm     ktune.rms_norm over a 1-D normalized_shape (torch >= 2.4)
    GELU        ktune.gelu
    SwiGLU, GeGLU   an LLM MLP: one fused up-projection [gate | up], the gated
                activation, the down-projection
    CrossEntropyLoss    ktune.cross_entropy over [rows, classes] and int64 targets
    LinearCrossEntropy  the LM head and its loss in one, ktune.linear_cross_entropy:
                forward(hidden, weight, target), the logits never whole
    ScaledDotProductAttention   F.scaled_dot_product_attention as a module (its
                arguments), through ktune.attention where they map

A module served by torch (a dtype or device ktune lacks) says why in
`ktune_served` after an eager forward ("ktune", or "torch: <reason>");
report(model) gathers them.  Under autocast a module computes in the dtype
torch's autocast would (GEMMs in the autocast dtype, norms in float32)."""
import torch
import torch.nn.functional as F

from . import functional as kf
from ._lib import library

__all__ = ["Linear", "LayerNorm", "RMSNorm", "GELU", "SwiGLU", "GeGLU", "CrossEntropyLoss", "LinearCrossEntropy",
           "ScaledDotProductAttention", "report"]

try:  # loaded now, so that a compiled forward's first trace finds it loaded (its loading takes a lock)
    library()
except ImportError:
    pass  # the modules then run torch's forward and say why


def _device_ok(x):
    """'' if ktune can run on x's device, else the reason."""
    try:
        host = library().host
    except ImportError as e:
        return f"libktune not loaded ({str(e)[:80]})"
    return "" if (x.is_cpu if host else x.is_cuda) else f"device {x.device.type}"


def _autocast(x):
    t = "cuda" if x.is_cuda else x.device.type
    return torch.get_autocast_dtype(t) if torch.is_autocast_enabled(t) else None


def _record(module, how):
    # a side effect torch.compile need not trace; set only when it changes (Module.__setattr__ is slow)
    if not torch.compiler.is_compiling() and module.__dict__.get("ktune_served") != how:
        module.ktune_served = how


class Linear(torch.nn.Linear):
    __doc__ = "torch.nn.Linear, through ktune.gemm (weights [out, in]: the 'nt' layout)."

    def forward(self, x):
        why = _device_ok(x)
        autocast = _autocast(x)
        dt = autocast or x.dtype
        if not why and dt not in (torch.float16, torch.bfloat16):
            why = f"dtype {dt}"
        if not why and not autocast and self.weight.dtype != dt:
            why = f"weight dtype {self.weight.dtype} differs from input {dt}"
        if why:
            _record(self, "torch: " + why)
            return super().forward(x)
        _record(self, "ktune")
        y = kf.gemm(x.reshape(-1, self.in_features).to(dt), self.weight.to(dt).t())
        if self.bias is not None:
            y = y + self.bias.to(dt)
        return y.reshape(*x.shape[:-1], self.out_features)


def _norm_dtype(x):
    if _autocast(x) is not None:
        return torch.float32  # autocast runs torch's norms in float32
    return x.dtype if x.dtype in (torch.float16, torch.bfloat16, torch.float32) else None


def _norm_why(module, x):
    why = _device_ok(x)
    if not why and len(module.normalized_shape) != 1:
        why = f"normalized_shape {tuple(module.normalized_shape)} is not 1-D"
    if not why and _norm_dtype(x) is None:
        why = f"dtype {x.dtype}"
    return why


class LayerNorm(torch.nn.LayerNorm):
    __doc__ = ("torch.nn.LayerNorm over the last dimension, through ktune.layer_norm; without a weight or bias "
               "(elementwise_affine=False, bias=False) libktune supplies ones and zeros and computes no gradient "
               "for them.")

    def forward(self, x):
        why = _norm_why(self, x)
        if why:
            _record(self, "torch: " + why)
            return super().forward(x)
        _record(self, "ktune")
        return kf.layer_norm(x.to(_norm_dtype(x)), self.weight, self.bias, self.eps)


if hasattr(torch.nn, "RMSNorm"):
    class RMSNorm(torch.nn.RMSNorm):
        __doc__ = ("torch.nn.RMSNorm over the last dimension, through ktune.rms_norm (elementwise_affine=False: "
                   "no weight, ones).")

        def forward(self, x):
            why = _norm_why(self, x)
            if why:
                _record(self, "torch: " + why)
                return super().forward(x)
            _record(self, "ktune")
            dt = _norm_dtype(x)
            eps = self.eps if self.eps is not None else torch.finfo(dt).eps
            return kf.rms_norm(x.to(dt), self.weight, eps)
else:  # torch < 2.4 has no nn.RMSNorm to stand in for
    RMSNorm = None


class GELU(torch.nn.GELU):
    __doc__ = "torch.nn.GELU (approximate 'none' or 'tanh'), through ktune.gelu."

    def forward(self, x):
        why = _device_ok(x) or ("" if x.dtype in (torch.float16, torch.bfloat16, torch.float32)
                                else f"dtype {x.dtype}")
        if why:
            _record(self, "torch: " + why)
            return super().forward(x)
        _record(self, "ktune")
        return kf.gelu(x, self.approximate)


class _GatedMLP(torch.nn.Module):
    """down(act(gate) * up) with [gate | up] = up_proj(x), one GEMM for both."""
    act = None

    def __init__(self, dim, hidden, bias=False, device=None, dtype=None):
        super().__init__()
        self.up_proj = Linear(dim, 2 * hidden, bias=bias, device=device, dtype=dtype)
        self.down_proj = Linear(hidden, dim, bias=bias, device=device, dtype=dtype)

    def _torch_act(self, gate, up):
        raise NotImplementedError

    def forward(self, x):
        h = self.up_proj(x)
        why = _device_ok(h) or ("" if h.dtype in (torch.float16, torch.bfloat16, torch.float32)
                                else f"dtype {h.dtype}")
        if why:
            _record(self, "torch: " + why)
            gate, up = h.chunk(2, dim=-1)
            return self.down_proj(self._torch_act(gate, up))
        _record(self, "ktune")
        return self.down_proj(self._ktune_act(h))


class SwiGLU(_GatedMLP):
    """The SwiGLU MLP of LLaMA-style models: down(silu(gate) * up)."""

    def _ktune_act(self, h):
        return kf.swiglu(h)

    def _torch_act(self, gate, up):
        return F.silu(gate) * up


class GeGLU(_GatedMLP):
    """The GeGLU MLP: down(gelu(gate) * up), exact or approximate='tanh'."""

    def __init__(self, dim, hidden, bias=False, approximate="none", device=None, dtype=None):
        super().__init__(dim, hidden, bias, device, dtype)
        self.approximate = approximate

    def _ktune_act(self, h):
        return kf.geglu(h, approximate=self.approximate)

    def _torch_act(self, gate, up):
        return F.gelu(gate, approximate=self.approximate) * up


_HALF = (torch.float16, torch.bfloat16)


def _index_why(target, shape):
    if target.dtype != torch.int64:
        return f"target dtype {target.dtype} (ktune takes int64 class indices)"
    if tuple(target.shape) != tuple(shape):
        return f"target shape {tuple(target.shape)} (class probabilities, or not one a row)"
    return ""


class CrossEntropyLoss(torch.nn.CrossEntropyLoss):
    __doc__ = ("torch.nn.CrossEntropyLoss over [rows, classes] and int64 class indices, through ktune.cross_entropy "
               "(float32 math; the loss in the input's dtype, float32 under autocast, as torch's).  torch's own for a "
               "class weight, other shapes, or class probabilities.  A mean over no row not ignored is 0 (torch: "
               "NaN).")

    def forward(self, input, target):
        why = _device_ok(input)
        if not why and self.weight is not None:
            why = "a class weight"
        if not why and input.dim() != 2:
            why = f"input of {input.dim()} dimensions (ktune takes [rows, classes])"
        if not why and input.dtype not in (torch.float16, torch.bfloat16, torch.float32):
            why = f"dtype {input.dtype}"
        if not why and not 1 <= input.shape[-1] <= kf.MAX_VOCAB:
            why = f"{input.shape[-1]} classes (1 to {kf.MAX_VOCAB})"
        why = why or _index_why(target, input.shape[:1])
        if why:
            _record(self, "torch: " + why)
            return super().forward(input, target)
        _record(self, "ktune")
        loss = kf.cross_entropy(input, target, self.ignore_index, self.reduction, self.label_smoothing)
        return loss if _autocast(input) is not None else loss.to(input.dtype)


class LinearCrossEntropy(torch.nn.Module):
    """The LM head and its loss in one: forward(hidden, weight, target) is
    F.cross_entropy(F.linear(hidden, weight) (flattened to rows), target), with
    weight nn.Linear's [vocab, dim] (the head's, or a tied embedding's), through
    ktune.linear_cross_entropy: the logits are made a chunk of rows at a time and
    never held whole.  Its gradients are computed in the forward, Liger's way (see
    ktune.linear_cross_entropy).  GEMMs in float16 or bfloat16 (the autocast dtype
    under autocast); torch's own, logits and all, for float32, reduction="none", or
    a vocabulary over 262144.  softcap > 0 caps the logits first (Gemma 2's)."""

    def __init__(self, ignore_index=-100, reduction="mean", label_smoothing=0.0, softcap=None):
        super().__init__()
        kf._ce_args(ignore_index, reduction, label_smoothing, softcap)
        self.ignore_index, self.reduction = ignore_index, reduction
        self.label_smoothing, self.softcap = label_smoothing, softcap

    def extra_repr(self):
        return (f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, "
                f"label_smoothing={self.label_smoothing}, softcap={self.softcap}")

    def forward(self, hidden, weight, target):
        why = _device_ok(hidden)
        autocast = _autocast(hidden)
        dt = autocast or hidden.dtype
        if not why and dt not in _HALF:
            why = f"dtype {dt}"
        if not why and not autocast and weight.dtype != dt:
            why = f"weight dtype {weight.dtype} differs from hidden's {dt}"
        if not why and self.reduction not in ("mean", "sum"):
            why = f"reduction {self.reduction!r} (ktune's gradients are of one loss)"
        if not why and not 1 <= weight.shape[0] <= kf.MAX_VOCAB:
            why = f"vocab {weight.shape[0]} (1 to {kf.MAX_VOCAB})"
        why = why or _index_why(target, hidden.shape[:-1])
        if why:
            _record(self, "torch: " + why)
            logits = F.linear(hidden, weight)
            if self.softcap:
                logits = self.softcap * torch.tanh(logits.float() / self.softcap)
            return F.cross_entropy(logits.float().reshape(-1, weight.shape[0]), target.reshape(-1),
                                   ignore_index=self.ignore_index, reduction=self.reduction,
                                   label_smoothing=self.label_smoothing)
        _record(self, "ktune")
        return kf.linear_cross_entropy(hidden.to(dt), weight.to(dt), target, self.ignore_index, self.reduction,
                                       self.label_smoothing, self.softcap)


def _attention_why(q, k, v, attn_mask, dropout_p, is_causal, enable_gqa, dt):
    """'' where ktune.attention computes what F.scaled_dot_product_attention would, else why not."""
    if attn_mask is not None:
        return "an attention mask"
    if dropout_p:
        return f"dropout_p {dropout_p}"
    if dt not in _HALF:
        return f"dtype {dt}"
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return f"tensors of {q.dim()} dimensions (ktune takes [batch, heads, seq, head_dim])"
    if k.shape != v.shape or k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
        return f"shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
    d, sq, sk, hq, hkv = q.shape[3], q.shape[2], k.shape[2], q.shape[1], k.shape[1]
    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if d not in kf.HEAD_DIMS:
        return f"head_dim {d} (ktune's: 64, 128, 256)"
    if grad and d not in (64, 128):
        return f"head_dim {d} with a backward (ktune's: 64, 128)"
    if hq != hkv and (not enable_gqa or hkv < 1 or hq % hkv):
        return f"{hq} query heads and {hkv} key heads" + ("" if enable_gqa else " without enable_gqa")
    if sk < 1:
        return "no keys"
    if is_causal and sq != sk:
        return "is_causal with seq_q != seq_k (torch aligns the mask top-left, ktune bottom-right)"
    return ""


class ScaledDotProductAttention(torch.nn.Module):
    """F.scaled_dot_product_attention as a module: forward(query, key, value,
    attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False)
    with its arguments and result, through ktune.attention where it computes the
    same: no mask, no dropout, float16 or bfloat16 (the autocast dtype under
    autocast, as torch's), head_dim 64 or 128 (256 without a backward), is_causal
    only with equal query and key lengths (torch aligns the causal mask top-left,
    ktune bottom-right), grouped-query attention with enable_gqa=True; torch's
    own otherwise.  The output has BSHD strides (y.transpose(1, 2) is contiguous)."""

    def forward(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                enable_gqa=False):
        why = _device_ok(query)
        dt = _autocast(query) or query.dtype
        why = why or _attention_why(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa, dt)
        if why:
            _record(self, "torch: " + why)
            kw = {"enable_gqa": True} if enable_gqa else {}  # torch >= 2.5; 2.4 has no such argument
            return F.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale=scale,
                                                  **kw)
        _record(self, "ktune")
        return kf.attention(query.to(dt), key.to(dt), value.to(dt), bool(is_causal), scale)


def report(model):
    """{qualified name: "ktune" | "torch: <reason>" | "not run"} for every
    ktune module of `model`, as its last eager forward left it."""
    mods = tuple(m for m in (Linear, LayerNorm, RMSNorm, GELU, SwiGLU, GeGLU, CrossEntropyLoss, LinearCrossEntropy,
                             ScaledDotProductAttention) if m is not None)
    return {name: getattr(m, "ktune_served", "not run")
            for name, m in model.named_modules() if isinstance(m, mods)}
