"""Drop-in modules: subclasses of torch's own (same parameters, state_dict
keys, init and isinstance), whose forward runs ktune's op where it can and
torch's otherwise:

    Linear      ktune.gemm on float16/bfloat16 inputs (or autocast to them)
    LayerNorm   ktune.layer_norm over a 1-D normalized_shape
    RMSNorm     ktune.rms_norm over a 1-D normalized_shape (torch >= 2.4)
    GELU        ktune.gelu
    SwiGLU, GeGLU   an LLM MLP: one fused up-projection [gate | up], the gated
                activation, the down-projection

A module served by torch (a dtype or device ktune lacks) says why in
`ktune_served` after an eager forward ("ktune", or "torch: <reason>");
report(model) gathers them.  Under autocast a module computes in the dtype
torch's autocast would (GEMMs in the autocast dtype, norms in float32)."""
import torch
import torch.nn.functional as F

from . import functional as kf
from ._lib import library

__all__ = ["Linear", "LayerNorm", "RMSNorm", "GELU", "SwiGLU", "GeGLU", "report"]

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


def report(model):
    """{qualified name: "ktune" | "torch: <reason>" | "not run"} for every
    ktune module of `model`, as its last eager forward left it."""
    mods = tuple(m for m in (Linear, LayerNorm, RMSNorm, GELU, SwiGLU, GeGLU) if m is not None)
    return {name: getattr(m, "ktune_served", "not run")
            for name, m in model.named_modules() if isinstance(m, mods)}
