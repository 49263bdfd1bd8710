"""One libktune context per CUDA device, opened on first use, the tuning
database they read, and where they save the keys they served without a
tuned entry (the runtime's record of misses, docs/runtime.md).

A context loads its device's tuned keys when it opens (include/ktune.h), so
changing the database path, or tuning from Python, closes the open contexts
and the next call opens them again on the new data.  A context saves its
recorded misses when it closes, if asked: the package closes its contexts at
exit when recording is on, as a C program's ktune_close would.
"""
import atexit
import ctypes
import os
import threading

from . import _lib
from .errors import Error

_lock = threading.RLock()
_contexts = {}  # device ordinal -> ctypes.c_void_p
_db_path = None  # None: libktune's default ($KTUNE_DB, else ~/.cache/ktune/ktune.db); "": none
_ENV = object()
_record = _ENV  # record_misses: _ENV (as KTUNE_RECORD says), "db", "" (nowhere) or a misses file's path
_exit_hook = False


def context(device=0):
    """The context of CUDA device `device` (an ordinal), opened on first use.
    Raises ktune.Error (ERR_NO_DRIVER, ERR_NO_DEVICE, ...) with ktune_open's
    reason when it cannot be opened: a machine without a GPU gets that, not
    a crash."""
    ctx = _contexts.get(device)
    if ctx is not None and type(device) is int:
        return ctx
    if not isinstance(device, int) or isinstance(device, bool) or device < 0:
        raise ValueError(f"device must be a CUDA device ordinal >= 0, not {device!r}")
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
            if _record is not _ENV:
                status = lib.record_misses(ctx, _record_arg(_record))
                if status != 0:
                    msg = lib.errmsg(ctx).decode(errors="replace")
                    lib.close(ctx)
                    raise Error(status, lib.name_of(status), msg)
            _contexts[device] = ctx
            _hook_exit()
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
    """Closes every open context (they reopen on the next call), each saving
    its recorded misses if recording is on.  Waits for each device's queued
    work first: a kernel still queued must not lose its module."""
    _close_all(True)


def _close_all(sync):
    with _lock:
        if not _contexts:
            return
        lib = _lib.library()
        try:
            if sync:
                _synchronize(list(_contexts), lib)
        finally:
            for ctx in _contexts.values():
                lib.close(ctx)
            _contexts.clear()


# --- the record of misses ---------------------------------------------------------------

def _record_arg(target):
    """ktune_record_misses's argument: NULL for the database, else the path."""
    return None if target == "db" else os.fsencode(target)


def _target(path):
    if path is None:
        return ""
    path = os.fspath(path)
    return os.fsdecode(path) if isinstance(path, bytes) else path


def _check_target(target):
    """What ktune_record_misses refuses, said before any context opens: a
    typo is seen at once, not lost at exit."""
    if target == "db":
        if _db_path == "":
            raise ValueError("cannot record misses into the database: set_db_path('') set none")
        return
    folder = os.path.dirname(target) or "."
    if target and not os.path.isdir(folder):
        raise ValueError(f"cannot record misses to '{target}': directory '{folder}' does not exist")


def record_misses(path):
    """Where the contexts save the keys they served without a tuned entry
    (the GEMM and op shapes nobody tuned) when they close: at exit, on
    ktune.close(), set_db_path(), tune() and sweep().  Each save adds its
    keys and calls to what is there.

        ktune.record_misses("misses.yaml")   # then: ktune sweep --misses misses.yaml
        ktune.record_misses("db")            # the tuning database: ktune sweep --from-db
        ktune.record_misses(None)            # nowhere (the keys are still counted)

    Replaces what $KTUNE_RECORD asked (the same values) for open contexts
    and those opened later.  ValueError for a file in a directory that does
    not exist, or "db" where set_db_path("") set none; ktune.Error if
    libktune refuses (ktune_record_misses).  A file named db is "./db"."""
    global _record
    target = _target(path)
    with _lock:
        _check_target(target)
        if _contexts:
            lib = _lib.library()
            for ctx in _contexts.values():
                lib.check(lib.record_misses(ctx, _record_arg(target)), ctx)
        _record = target


def recording():
    """Where the contexts save their misses: a path, "db", or "" for nowhere
    (record_misses, else $KTUNE_RECORD)."""
    return os.environ.get("KTUNE_RECORD", "") if _record is _ENV else _record


def save_misses(path=None):
    """Saves the keys each open context has counted so far, now, and raises
    ktune.Error if a save fails (ktune_close cannot say so): to `path` (a
    misses file, or "db"), else where recording() says.  The counts run
    from each context's open, so a context that later closes with recording
    on adds them again: to end a run, save, then record_misses(None).
    Returns how many contexts were saved (0 when none is open)."""
    target = recording() if path is None else _target(path)
    if not target:
        raise ValueError("save_misses: nowhere to save: give a path (or 'db'), or call record_misses first")
    with _lock:
        _check_target(target)
        if not _contexts:
            return 0
        lib = _lib.library()
        for ctx in _contexts.values():
            lib.check(lib.save_misses(ctx, _record_arg(target)), ctx)
        return len(_contexts)


def _hook_exit():
    global _exit_hook
    if not _exit_hook:
        _exit_hook = True
        atexit.register(_at_exit)


def _at_exit():
    """A C program saves its misses in ktune_close; a Python one never closes
    its contexts unless the package does it at exit."""
    if not recording():
        return
    try:
        _close_all(True)
    except Exception:  # noqa: BLE001 (nothing to report to at exit: a failed synchronize still closes)
        pass


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
