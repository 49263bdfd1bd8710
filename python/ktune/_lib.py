"""Finding and loading libktune with ctypes, and the C signatures.

No compiler is involved at import time: the library is found in this order,
  1. $KTUNE_LIBRARY, a path to libktune.so (e.g. build-device/install/lib/libktune.so);
  2. the copy that `pip install ./python` put inside this package (ktune/lib/);
  3. the system's loader path (an installed `cmake --install` prefix).
It is loaded on first use, so that `import ktune` works on a machine without it.
"""
import ctypes
import ctypes.util
import glob
import os
import threading

from .errors import Error, LibraryNotFoundError

c_int64, c_float, c_char, c_int, c_uint64 = ctypes.c_int64, ctypes.c_float, ctypes.c_char, ctypes.c_int, ctypes.c_uint64
c_double, c_size_t = ctypes.c_double, ctypes.c_size_t
vp, cvp, fp, ccp = ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_char_p
i64p, u32p = ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_uint32)


class ktune_stats(ctypes.Structure):  # noqa: N801 (the C name)
    """ktune_stats (include/ktune.h), field for field: what a context's calls
    have cost so far (ktune_get_stats).  tests/test_package.py holds it equal
    to the header, and to the C layout where the host double can tell it."""
    _fields_ = [
        ("calls", c_int64),           # calls of any op that resolved a key
        ("keys", c_int64),            # distinct keys resolved
        ("missed_keys", c_int64),     # of those, served without a tuned entry
        ("missed_calls", c_int64),    # the calls of those keys
        ("kernels", c_int64),         # kernels loaded
        ("nvrtc_compiles", c_int64),  # of those, compiled with NVRTC during a call
        ("nvrtc_seconds", c_double),  # the time those compiles took
        ("cache_loads", c_int64),     # of those, read from the disk cache: no NVRTC
        ("warm_state", c_int),        # ktune_warm: 0 never asked, 1 running, 2 done
        ("warm_compiled", c_int64),   # kernels the last ktune_warm compiled into the cache
        ("warm_cached", c_int64),     # kernels it found there already
        ("warm_failed", c_int64),     # kernels that failed to compile
        ("warm_seconds", c_double),   # its wall time
        ("tune_queued", c_int64),     # KTUNE_TUNE=background: keys waiting or being tuned
        ("tune_done", c_int64),       # keys tuned and stored, served by their tuning since
        ("tune_failed", c_int64),     # tunes that failed
        ("tune_skipped", c_int64),    # keys not queued: KTUNE_TUNE_MAX reached
    ]


class ktune_quant_format(ctypes.Structure):  # noqa: N801 (the C name)
    """ktune_quant_format (include/ktune.h): a weight-quantized matrix's format
    (tests/test_package.py holds it equal to the header)."""
    _fields_ = [
        ("bits", c_int),         # 8, 4, 2 or 1 bits per weight
        ("group_size", c_int),   # 32, 64, 128, or 0: one group per row (per channel)
        ("mode", c_int),         # ktune_quant_mode
        ("zero_scalar", c_int),  # 1: one zero for the whole weight; 0: one per group
    ]


qfp = ctypes.POINTER(ktune_quant_format)

# Each public function of include/ktune.h: (restype, argtypes), in header order.
# tests/test_package.py holds this table equal to the header's prototypes.  A
# `float *` is bound as `void *` (the same in the ABI), so that a tensor's data
# pointer passes as an int, without a ctypes.cast on every call.
SIGNATURES = {
    "ktune_version_number": (ctypes.c_uint, []),
    "ktune_version": (ccp, []),
    "ktune_strerror": (ccp, [c_int]),
    "ktune_status_name": (ccp, [c_int]),
    "ktune_open": (c_int, [ccp, c_int, ctypes.POINTER(vp), ctypes.c_char_p, ctypes.c_size_t]),
    "ktune_close": (None, [vp]),
    "ktune_errmsg": (ccp, [vp]),
    "ktune_gemm": (c_int, [vp, c_char, c_char, c_int64, c_int64, c_int64, c_float, cvp, c_int64, cvp,
                           c_int64, c_float, vp, c_int64, c_int, vp]),
    "ktune_last_dispatch": (ccp, [vp]),
    "ktune_record_misses": (c_int, [vp, ccp]),
    "ktune_save_misses": (c_int, [vp, ccp]),
    "ktune_get_stats": (c_int, [vp, ctypes.POINTER(ktune_stats), c_size_t]),
    "ktune_warm": (c_int, [vp, c_int]),
    "ktune_add": (c_int, [vp, c_int64, cvp, cvp, vp, c_int, vp]),
    "ktune_gelu": (c_int, [vp, c_int64, cvp, vp, c_int, c_int, vp]),
    "ktune_gelu_backward": (c_int, [vp, c_int64, cvp, cvp, vp, c_int, c_int, vp]),
    "ktune_glu": (c_int, [vp, c_int, c_int64, c_int64, cvp, c_int64, cvp, c_int64, vp, c_int64, c_int, vp]),
    "ktune_glu_backward": (c_int, [vp, c_int, c_int64, c_int64, cvp, c_int64, cvp, c_int64, cvp, c_int64,
                                   vp, c_int64, vp, c_int64, c_int, vp]),
    "ktune_dropout": (c_int, [vp, c_int64, c_float, c_uint64, c_uint64, cvp, vp, c_int, vp]),
    "ktune_dropout_backward": (c_int, [vp, c_int64, c_float, c_uint64, c_uint64, cvp, vp, c_int, vp]),
    "ktune_softmax": (c_int, [vp, c_int64, c_int64, cvp, c_int64, vp, c_int64, c_int, vp]),
    "ktune_softmax_backward": (c_int, [vp, c_int64, c_int64, cvp, c_int64, cvp, c_int64, vp, c_int64,
                                       c_int, vp]),
    "ktune_rmsnorm": (c_int, [vp, c_int64, c_int64, cvp, c_int64, cvp, c_int64, cvp, c_float, vp, c_int64,
                              fp, vp, c_int64, c_int, vp]),
    "ktune_rmsnorm_backward": (c_int, [vp, c_int64, c_int64, cvp, c_int64, cvp, fp, cvp, c_int64, vp,
                                       c_int64, vp, c_int, vp]),
    "ktune_layernorm": (c_int, [vp, c_int64, c_int64, cvp, c_int64, cvp, cvp, c_float, vp, c_int64, fp,
                                fp, c_int, vp]),
    "ktune_layernorm_backward": (c_int, [vp, c_int64, c_int64, cvp, c_int64, cvp, fp, fp, cvp, c_int64,
                                         vp, c_int64, vp, vp, c_int, vp]),
    "ktune_cross_entropy": (c_int, [vp, c_int64, c_int64, cvp, c_int64, i64p, c_int64, c_float, c_float, c_int, fp,
                                    fp, c_int, vp]),
    "ktune_cross_entropy_backward": (c_int, [vp, c_int64, c_int64, cvp, c_int64, i64p, c_int64, c_float, c_float,
                                             c_int, fp, fp, vp, c_int64, c_int, vp]),
    "ktune_cross_entropy_fused": (c_int, [vp, c_int64, c_int64, cvp, c_int64, i64p, c_int64, c_float, c_float, c_int,
                                          c_float, fp, vp, c_int64, c_int, vp]),
    "ktune_linear_cross_entropy": (c_int, [vp, c_int64, c_int64, c_int64, cvp, c_int64, cvp, c_int64, i64p, c_int64,
                                           c_float, c_float, c_int, c_int64, c_float, fp, vp, c_int64, vp, c_int64,
                                           c_int64, vp, c_size_t, c_int, vp]),
    "ktune_quant_sizes": (c_int, [qfp, c_int64, c_int64, i64p, i64p, i64p, ccp, c_size_t]),
    "ktune_quant_pack": (c_int, [qfp, c_int64, c_int64, cvp, c_int64, c_int, u32p, vp, vp]),
    "ktune_quant_unpack": (c_int, [qfp, c_int64, c_int64, u32p, cvp, cvp, c_int, vp, c_int64]),
    "ktune_gemm_quant": (c_int, [vp, qfp, c_int64, c_int64, c_int64, cvp, c_int64, u32p, cvp, cvp, cvp, vp, c_int64,
                                 c_int, vp]),
    "ktune_attention_fwd": (c_int, [vp, c_int64, c_int64, c_int64, c_int64, c_int64, c_int64, cvp, i64p, cvp, i64p,
                                    cvp, i64p, vp, i64p, fp, c_float, c_int, c_int, vp]),
    "ktune_attention_bwd": (c_int, [vp, c_int64, c_int64, c_int64, c_int64, c_int64, c_int64, cvp, i64p, cvp, i64p,
                                    cvp, i64p, cvp, i64p, cvp, i64p, fp, vp, i64p, vp, i64p, vp, i64p, c_float, c_int,
                                    c_int, c_int, vp]),
}

# ktune_dtype, ktune_reduction and ktune_quant_mode values (include/ktune.h).
DTYPES = {"f16": 0, "bf16": 1, "f32": 2}
REDUCTIONS = {"mean": 0, "sum": 1, "none": 2}
QUANT_MODES = {"scale_shift": 0, "scale": 1, "shift": 2, "fma": 3}
_AS_VOID_P = (fp, i64p, u32p)

_lock = threading.Lock()
_lib = None


def candidates():
    """The paths tried, in order (see the module's docstring)."""
    env = os.environ.get("KTUNE_LIBRARY")
    if env:
        return [env]  # an explicit choice is never silently replaced by another library
    here = os.path.dirname(os.path.abspath(__file__))
    found = []
    for sub in ("lib", "lib64"):
        found += sorted(glob.glob(os.path.join(here, sub, "libktune.so*")))[:1]
    found += ["libktune.so.0", "libktune.so"]
    name = ctypes.util.find_library("ktune")
    if name:
        found.append(name)
    return found


class Library:
    """libktune loaded, with its functions typed.  `host` is true only for the
    test double of tests/host/, which computes on host memory (CPU tensors)."""

    def __init__(self, path, cdll):
        self.path = path
        self.cdll = cdll
        missing = []
        for name, (res, args) in SIGNATURES.items():
            try:
                f = getattr(cdll, name)
            except AttributeError:
                missing.append(name)
                continue
            f.restype, f.argtypes = res, [vp if a in _AS_VOID_P else a for a in args]
            setattr(self, name[len("ktune_"):], f)
        if missing:
            raise LibraryNotFoundError(f"'{path}' is not a libktune this package can use: it lacks "
                                       + ", ".join(missing))
        self.host = hasattr(cdll, "ktune_test_host_memory")
        self.version_text = self.version().decode()

    def name_of(self, status):
        """"ERR_INVALID" for -1: the status's name without its prefix."""
        return self.status_name(status).decode()

    def check(self, status, ctx):
        """Raises ktune.Error for a failed call on context `ctx`."""
        if status != 0:
            raise Error(status, self.name_of(status), self.errmsg(ctx).decode(errors="replace"))


def library():
    """The loaded libktune (loaded on the first call).  Raises
    LibraryNotFoundError naming every path tried."""
    global _lib
    if _lib is not None:  # no lock once loaded: torch.compile traces this from ktune.nn's forwards
        return _lib
    with _lock:
        if _lib is None:
            tried = []
            for path in candidates():
                try:
                    cdll = ctypes.CDLL(path)
                except OSError as e:
                    tried.append(f"{path} ({e})")
                    continue
                _lib = Library(path, cdll)
                break
            else:
                raise LibraryNotFoundError("libktune not found; set KTUNE_LIBRARY to its path, or "
                                           "install the package with `pip install ./python`. Tried: "
                                           + "; ".join(tried))
        return _lib
