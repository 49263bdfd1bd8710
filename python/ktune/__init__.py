"""ktune from Python: libktune's tuned GPU kernels as PyTorch ops.

    import torch, ktune
    y = ktune.gemm(x, w.t())                     # x @ w.T, the nn.Linear layout
    y = ktune.swiglu(h)                          # silu(h[..., :c]) * h[..., c:]
    y = ktune.rms_norm(x, w, residual=r)         # (y, x + r)
    o = ktune.attention(q, k, v, causal=True)    # flash attention on [B, H, S, D], GQA
    loss = ktune.linear_cross_entropy(h, w, t)   # the LM head and its loss; the logits never whole
    wq, s, z = ktune.quant_pack(w, fmt)          # fmt = ktune.QuantFormat(bits=4, group_size=128)
    y = ktune.gemm_quant(x, wq, s, z, fmt)       # x @ dequant(w).T
    ktune.patch(model)                           # nn.Linear, LayerNorm, ... served by ktune
    ktune.record_misses("misses.yaml")           # untuned shapes saved at exit: ktune sweep --misses
    ktune.stats()                                # calls, misses, NVRTC compiles, cache loads

The ops are torch custom ops (torch.ops.ktune.*) with autograd and fake
implementations, so torch.compile traces them whole; the forward ops also
take CuPy arrays (__cuda_array_interface__) and DLPack objects.  libktune is
loaded with ctypes (no compiler at import); docs/python.md has the rest."""
import sys

from .contexts import close, context, db_path, record_misses, recording, save_misses, set_db_path
from .errors import Error, LibraryNotFoundError
from .functional import (add, attention, cross_entropy, cross_entropy_fused, dropout, dropout_backward, gelu,
                         gelu_backward, geglu, gemm, gemm_quant, glu_backward, layer_norm, layer_norm_backward,
                         linear_cross_entropy, rms_norm, rms_norm_backward, softmax, softmax_backward, swiglu)
from .quant import QuantFormat, quant_pack, quant_unpack
from .runtime import Stats, count_dispatch, stats, warm
from .tuning import CommandError, last_dispatch, sweep, tune


def _source_version():
    """project(ktune VERSION x.y.z) of the checkout this package sits in (run
    from the source tree, PYTHONPATH=python): the version's one source."""
    import os
    import re
    try:
        with open(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "CMakeLists.txt")) as f:
            return re.search(r"project\(ktune VERSION ([0-9.]+)", f.read()).group(1)
    except (OSError, AttributeError):
        return "unknown"


try:
    from importlib.metadata import PackageNotFoundError, version as _version
    __version__ = _version("ktune")
except PackageNotFoundError:
    __version__ = _source_version()


def library():
    """The loaded libktune (path, version_text, host); loads it on first call.
    Raises LibraryNotFoundError naming every path tried."""
    from ._lib import library as _library
    return _library()


def patch(model):
    """Swaps the torch modules of `model` that ktune serves for ktune.nn's, in
    place; returns a report of what was swapped (ktune.patching.PatchReport)."""
    from .patching import patch as _patch
    return _patch(model)


def __getattr__(name):
    if name == "nn":  # torch only when asked for; import_module, as `from . import` would ask here again
        import importlib
        return importlib.import_module(".nn", __name__)
    raise AttributeError(f"module 'ktune' has no attribute {name!r}")


if "torch" in sys.modules:  # torch.ops.ktune.* exist as soon as both are imported
    from . import torch_ops  # noqa: F401
