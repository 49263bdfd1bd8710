"""One libktune context per CUDA device, opened on first use, and the
tuning database they read.

A context loads its device's tuned keys when it opens (include/ktune.h), so
changing the database path, or tuning from Python, closes the open contexts
and the next call opens them again on the new data.
"""
import ctypes
import os
import threading

from . import _lib
from .errors import Error

_lock = threading.Lock()
_contexts = {}  # device ordinal -> ctypes.c_void_p
_db_path = None  # None: libktune's default ($KTUNE_DB, else ~/.cache/ktune/ktune.db); "": none


def context(device=0):
    """The context of CUDA device `device` (an ordinal), opened on first use.
    Raises ktune.Error (ERR_NO_DRIVER, ERR_NO_DEVICE, ...) with ktune_open's
    reason when it cannot be opened: a machine without a GPU gets that, not
    a crash."""
    if not isinstance(device, int) or isinstance(device, bool) or device < 0:
        raise ValueError(f"device must be a CUDA device ordinal >= 0, not {device!r}")
    ctx = _contexts.get(device)
    if ctx is not None:
        return ctx
    lib = _lib.library()
    with _lock:
        ctx = _contexts.get(device)
        if ctx is None:
            ctx = ctypes.c_void_p()
            err = ctypes.create_string_buffer(1024)
            path = None if _db_path is None else os.fsencode(_db_path)
            status = lib.open(path, device, ctypes.byref(ctx), err, len(err))
            if status != 0:
                raise Error(status, lib.name_of(status), err.value.decode(errors="replace"))
            _contexts[device] = ctx
        return ctx


def set_db_path(path):
    """Use the tuning database at `path` from now on (None: libktune's
    default, $KTUNE_DB, else ~/.cache/ktune/ktune.db; "": none, shipped
    tuning and defaults only).  Open contexts are closed after their device
    finished its queued work; the next call opens them on the new database."""
    global _db_path
    if path is not None:
        path = os.fspath(path)
    _db_path = path
    close()


def db_path():
    """The database path set with set_db_path (None: libktune's default)."""
    return _db_path


def close():
    """Closes every open context (they reopen on the next call).  Waits for
    each device's queued work first: a kernel still queued must not lose
    its module."""
    with _lock:
        if not _contexts:
            return
        lib = _lib.library()
        _synchronize(list(_contexts), lib)
        for ctx in _contexts.values():
            lib.close(ctx)
        _contexts.clear()


def _synchronize(devices, lib):
    if lib.host:
        return
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_initialized():
        for d in devices:
            torch.cuda.synchronize(d)
        return
    try:
        import cupy
    except ImportError:
        return
    for d in devices:
        with cupy.cuda.Device(d):
            cupy.cuda.Device(d).synchronize()
