"""What the runtime says about its calls: a context's counters
(ktune_get_stats), warming the cubin cache (ktune_warm), and, in the Python
layer, which dispatch source served each op's calls (ktune_last_dispatch
read after each call while count_dispatch() is active)."""
import contextlib
import ctypes
import sys
from collections import Counter
from dataclasses import dataclass, fields

from . import _lib, calls
from .contexts import context

_WARM = {0: "never", 1: "running", 2: "done"}


@dataclass(frozen=True)
class Stats:
    """A context's counters since it opened (set_db_path, tune and sweep
    reopen it: the counts start again).  Fields as ktune_stats's
    (include/ktune.h); warm_state as "never", "running" or "done"."""
    calls: int
    keys: int
    missed_keys: int
    missed_calls: int
    kernels: int
    nvrtc_compiles: int
    nvrtc_seconds: float
    cache_loads: int
    warm_state: str
    warm_compiled: int
    warm_cached: int
    warm_failed: int
    warm_seconds: float
    tune_queued: int
    tune_done: int
    tune_failed: int
    tune_skipped: int

    @property
    def tuned_calls(self):
        """Calls served by a tuned entry (exact, arch or shipped)."""
        return self.calls - self.missed_calls


def _device(device):
    """device, or torch's current CUDA device where torch has one, else 0."""
    if device is not None:
        return device
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized() and not _lib.library().host:
        return torch.cuda.current_device()
    return 0


def stats(device=None):
    """The counters of the context of `device` (None: torch's current CUDA
    device, else 0), opening it if needed: calls, keys and how many of each
    were served without a tuned entry (missed), kernels loaded, NVRTC
    compiles and their seconds, cubin cache loads, the last warm, and the
    keys KTUNE_TUNE=background queued, tuned, failed to tune and skipped
    (past KTUNE_TUNE_MAX)."""
    lib = _lib.library()
    ctx = context(_device(device))
    s = _lib.ktune_stats()
    lib.check(lib.get_stats(ctx, ctypes.byref(s), ctypes.sizeof(s)), ctx)
    vals = {f.name: getattr(s, f.name) for f in fields(Stats)}
    vals["warm_state"] = _WARM.get(s.warm_state, str(s.warm_state))
    return Stats(**vals)


def warm(wait=True, device=None):
    """Compiles the kernel of every tuned and shipped entry of the device
    into the cubin cache (ktune_warm), so that a key's first call loads it
    instead of running NVRTC.  wait=False warms on a background thread and
    returns at once (stats().warm_state says when it is done).  Returns
    stats().  ktune.Error ERR_COMPILE if a kernel failed to compile (the
    others are cached), ERR_UNSUPPORTED without a usable cache
    (KTUNE_NO_CACHE)."""
    lib = _lib.library()
    d = _device(device)
    ctx = context(d)
    lib.check(lib.warm(ctx, 1 if wait else 0), ctx)
    return stats(d)


@contextlib.contextmanager
def count_dispatch():
    """Counts what served each libktune call made inside the block, by op:

        with ktune.count_dispatch() as served:
            train_step()
        served    # Counter({("gemm", "nearest"): 96, ("layernorm", "exact"): 50, ...})

    The op is the C function's name without its prefix ("gemm",
    "layernorm_backward"), the source ktune_last_dispatch's ("exact",
    "arch", "shipped", "nearest", "default").  Every thread's calls count,
    compiled ones too (torch.compile runs the ops' Python implementations);
    CUDA graph replays make no call.  While a block is active each call
    costs one more C call and a lock; blocks nest, each counting its calls."""
    served = Counter()
    with calls.count_lock:
        calls.counting = calls.counting + (served,)
    try:
        yield served
    finally:
        with calls.count_lock:
            calls.counting = tuple(c for c in calls.counting if c is not served)
