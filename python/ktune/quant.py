"""Weight-quantized matrices (docs/quant.md): the format, and packing a
torch weight into it and back.  Packing runs on the host (libktune's
ktune_quant_pack and ktune_quant_unpack, no GPU): the weight is copied to
the CPU, and the packed tensors come back on its device.  ktune.gemm_quant
multiplies by a packed weight on the GPU.

    fmt = ktune.QuantFormat(bits=4, group_size=128)          # gemlite's (q - zero) * scale
    wq, scales, zeros = ktune.quant_pack(linear.weight, fmt)  # int32 words [n, RW], [n, k / 128] twice
    y = ktune.gemm_quant(x, wq, scales, zeros, fmt, bias=linear.bias)
"""
import math
import sys
from dataclasses import dataclass

from . import _lib, calls
from .arrays import of_torch, of_torch_index

GROUPS = (32, 64, 128, 0)
BITS = (8, 4, 2, 1)
K_MULTIPLE = 32  # every k: 32 one-bit weights fill a word, and ktune asks it of every format


@dataclass(frozen=True)
class QuantFormat:
    """A quantized weight's format (include/ktune.h's ktune_quant_format): b-bit
    codes q, and per group of group_size weights of a row (0: the whole row,
    per channel) a scale and a zero, dequantised by mode:

        "scale_shift"  w = (q - zero) * scale   (zero_scalar: one zero for all)
        "scale"        w = q * scale            no zeros
        "shift"        w = q - zero             no scales
        "fma"          w = q * scale + zero
    """
    bits: int = 4
    group_size: int = 128
    mode: str = "scale_shift"
    zero_scalar: bool = False

    def __post_init__(self):
        if self.bits not in BITS or isinstance(self.bits, bool):
            raise ValueError(f"QuantFormat: bits must be one of 8, 4, 2, 1, not {self.bits!r}")
        if self.group_size not in GROUPS or isinstance(self.group_size, bool):
            raise ValueError(f"QuantFormat: group_size must be 32, 64, 128 or 0 (per channel), not {self.group_size!r}")
        if self.mode not in _lib.QUANT_MODES:
            raise ValueError(f"QuantFormat: mode must be one of {', '.join(_lib.QUANT_MODES)}, not {self.mode!r}")
        if not isinstance(self.zero_scalar, bool):
            raise TypeError(f"QuantFormat: zero_scalar must be a bool, not {type(self.zero_scalar).__name__}")

    @property
    def has_scales(self):
        return self.mode != "shift"

    @property
    def has_zeros(self):
        return self.mode != "scale"

    def c_format(self):
        """The ktune_quant_format of this format (ctypes)."""
        return calls.quant_format(self.bits, self.group_size, self.mode, self.zero_scalar)

    def check(self, n, k):
        """ValueError unless a [n, k] weight can take this format."""
        if n < 1 or k < 1:
            raise ValueError(f"quant: a weight [n, k] = [{n}, {k}] has no elements")
        if k % K_MULTIPLE:
            raise ValueError(f"quant: k = {k} is not a multiple of {K_MULTIPLE} (32 one-bit weights fill a word; "
                             "ktune asks it of every format)")
        if self.group_size and k % self.group_size:
            raise ValueError(f"quant: k = {k} is not a multiple of the group size {self.group_size}")

    def sizes(self, n, k):
        """(words, scales, zeros): the element counts of a packed [n, k] weight
        (ktune_quant_sizes); 0 where the mode has none, 1 for a scalar zero."""
        self.check(n, k)
        return calls.quant_sizes(self.c_format(), n, k)

    def shapes(self, n, k):
        """The shapes of quant_pack's three tensors for a [n, k] weight (None where
        none), from the layout include/ktune.h documents: rows of k * bits / 32 words
        rounded up to a multiple of 4, a scale and a zero per group.  Python only, so
        that torch.compile traces it (tests/test_validation.py holds it to sizes())."""
        self.check(n, k)
        row_words = -(-(k * self.bits // 32) // 4) * 4
        groups = k // (self.group_size or k)
        zshape = None if not self.has_zeros else (1,) if self.zero_scalar else (n, groups)
        return (n, row_words), ((n, groups) if self.has_scales else None), zshape


def _torch():
    return sys.modules["torch"]


def _format(fmt):
    if not isinstance(fmt, QuantFormat):
        raise TypeError(f"fmt: expected a ktune.QuantFormat, not {type(fmt).__name__}")
    return fmt


def quant_pack(w, fmt=QuantFormat()):
    """(wq, scales, zeros) of the weight w [n, k] (float16 or bfloat16, nn.Linear's
    [out, in]), quantised to fmt by rounding to nearest and packed: wq int32 words
    [n, RW] (the uint32 words' bits), scales [n, k / group] and zeros [n, k / group]
    or [1] of w's dtype, None where the mode has none; on w's device."""
    from .functional import _check
    fmt = _format(fmt)
    torch = _torch()
    _check((w,), ("w",), ("torch.float16", "torch.bfloat16"))
    if w.dim() != 2:
        raise ValueError(f"w: must be 2-D [n, k], not {w.dim()}-D")
    n, k = w.shape
    wshape, sshape, zshape = fmt.shapes(n, k)
    host = w.detach().to("cpu").contiguous()
    if not torch.isfinite(host).all():
        raise ValueError("w: has NaN or infinite weights (no grid holds them)")
    wq = torch.zeros(wshape, dtype=torch.int32)
    scales = None if sshape is None else torch.empty(sshape, dtype=w.dtype)
    zeros = None if zshape is None else torch.empty(zshape, dtype=w.dtype)
    vw = of_torch(host, "w")
    calls.quant_pack(fmt.c_format(), n, k, vw.ptr, k, vw.dtype, wq.data_ptr(),
                     None if scales is None else scales.data_ptr(), None if zeros is None else zeros.data_ptr())
    return tuple(None if t is None else t.to(w.device) for t in (wq, scales, zeros))


def quant_unpack(wq, scales, zeros, fmt, k):
    """The dequantised weight [n, k] of quant_pack's tensors (float64 math, rounded
    to the dtype of scales or zeros), on wq's device."""
    fmt = _format(fmt)
    torch = _torch()
    ref = scales if scales is not None else zeros
    if ref is None:
        raise ValueError("quant_unpack: the format has scales or zeros (or both): neither is given")
    if ref.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"scales, zeros: dtype {ref.dtype} is not supported (float16, bfloat16)")
    if wq.dim() != 2:
        raise ValueError(f"wq: must be 2-D [n, RW], not {wq.dim()}-D")
    n = wq.shape[0]
    wshape, sshape, zshape = fmt.shapes(n, k)
    host = [None if t is None else t.detach().to("cpu").contiguous() for t in (wq, scales, zeros)]
    vq = of_torch_index(host[0], "wq")
    if vq.dtype != "i32" or tuple(vq.shape) != wshape:
        raise ValueError(f"wq: int32 {wshape} is needed, not {wq.dtype} {tuple(wq.shape)}")
    for t, shape, name in ((host[1], sshape, "scales"), (host[2], zshape, "zeros")):
        if (t is None) != (shape is None):
            raise ValueError(f"{name}: the format {'has none' if shape is None else 'needs them'}")
        if t is not None and (t.numel() != math.prod(shape) or t.dtype != ref.dtype):
            raise ValueError(f"{name}: {ref.dtype} {shape} is needed, not {t.dtype} {tuple(t.shape)}")
    w = torch.empty((n, k), dtype=ref.dtype)
    calls.quant_unpack(fmt.c_format(), n, k, vq.ptr, None if host[1] is None else host[1].data_ptr(),
                       None if host[2] is None else host[2].data_ptr(), of_torch(w, "w").dtype, w.data_ptr(), k)
    return w.to(wq.device)
