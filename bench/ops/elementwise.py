#!/usr/bin/env python3
"""bench/ops/elementwise.py - ktune's elementwise ops against PyTorch eager and
Liger Kernel, in the same process on the same GPU.

    python3 bench/ops/elementwise.py --lib build-device/libktune.so --csv $OUT/elementwise.csv
    python3 bench/ops/elementwise.py --dry-run            # the plan of cases, no GPU needed
    python3 bench/ops/elementwise.py --quick --ops add    # a smoke test

Ops (bf16 unless noted):
  add          z = x + y, f16/bf16/f32, n = 2^20..2^28            bytes 3 n s
  gelu         F.gelu(x, approximate='none'|'tanh')                bytes 2 n s
  gelu_bwd     aten.gelu_backward(dy, x, approximate)              bytes 3 n s
  swiglu       F.silu(a) * b;  geglu: F.gelu(a, approximate) * b   bytes 3 r c s
  swiglu_bwd   da, db from dc (and geglu_bwd)                      bytes 5 r c s
               layouts: "separate" (a, b each [r, c]) and "split" (one [r, 2c]
               tensor, a = x[:, :c], b = x[:, c:]; the gradients likewise)
  dropout      F.dropout(x, p, training=True), p = 0.1, 0.5       bytes 2 n s
  dropout_bwd  aten.native_dropout_backward(dy, mask, scale)       bytes 2 n s
  copy         a 1 GiB device-to-device copy_, first and last: the ceiling
(s = bytes per element; "bytes" is the minimum traffic of the op, the same
figure for every library: torch's dropout also writes a bool mask, its
dropout_bwd reads one, its GLU backward runs three kernels, none counted.)

Timing protocol (every library, every case):
  * inputs: torch.randn(...) * 2 in the dtype, from a generator seeded per case;
    outputs preallocated where the API allows (ktune always, torch's out=
    variants) and poisoned with NaN before the verification and before each
    measurement batch, and checked again after each batch.
  * verify before timing: the output in float32 against a float32 reference
    computed from the same (rounded) inputs: max over elements of
    |out - ref| / max(1, |ref|) within 1e-2 (bf16), 2e-3 (f16), 1e-5 (f32), and
    every element finite.  Dropout: the kept fraction (y != 0) within 4 sigma
    of 1 - p overall and in each half, y == x / (1 - p) on kept elements (same
    tolerance), the same output again for the same seed and offset; its
    backward keeps exactly the forward's elements.  ktune is held to these
    tolerances; torch and Liger (the baselines, which round intermediates) to
    4 times them.  A failed check prints FAIL and marks the row; it is timed
    all the same.
  * warm-up: 5 calls.  Reps: at least 50 (--quick: 10), more for small cases,
    up to 1000 (--quick: 100), as many as fit in --budget seconds (0.15 s) per
    batch.
  * each rep: [restore the inputs an in-place op overwrote (Liger's backward)];
    flush L2 by writing a buffer of 2 x L2_cache_size bytes (50 MiB x 2 if the
    size is unknown); start.record(); op(); end.record().  The flush and the
    restore are not between the events.  One synchronize after the batch; the
    figure is the median over reps, p20 and p80 beside it.
  * two modes: eager (the Python call between the events) and graph (the same
    call captured once in a torch.cuda.CUDAGraph, replay() between the events),
    so that Python launch overhead does not penalise the Python baselines.
    A library's figure for the ratios is min(eager, graph).
  * the copy ceiling: dst.copy_(src) of 1 GiB (2 GiB moved), measured first
    and last in the run; the ceiling is the larger bandwidth of the two.

ktune is called through ctypes on libktune.so (--lib), on torch's current
stream (so capture works).  Without the library, or without an op's symbol,
the ktune column is skipped with a message; without Liger, its column.
The CSV is written row by row (a crash keeps what was measured); PATH.meta.json
beside it holds the device, versions and the copy ceiling.  Exit status 0, or
2 when any check failed, 1 on a fatal error.

--cpu-test runs the whole pipeline on the CPU at tiny sizes (for development
without a GPU): --lib must then be a stub library that computes on host
memory; timings mean nothing, no graph mode, no Liger.
"""
import argparse
import csv
import ctypes
import json
import math
import os
import re
import statistics
import sys
import time
import traceback

MiB = 1 << 20
GiB = 1 << 30
ESIZE = {"f16": 2, "bf16": 2, "f32": 4}
KTUNE_DTYPE = {"f16": 0, "bf16": 1, "f32": 2}
TOL = {"bf16": 1e-2, "f16": 2e-3, "f32": 1e-5}
BASELINE_TOL_FACTOR = 4.0
OPS = ("add", "gelu", "glu", "dropout")
GLU_KIND = {("swiglu", ""): 0, ("geglu", "erf"): 1, ("geglu", "tanh"): 2}
FIELDS = ["op", "variant", "dtype", "shape", "elements", "bytes", "library", "mode",
          "time_us", "p20_us", "p80_us", "gbps", "check", "dispatch"]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# The plan: cases as plain dicts, no torch needed (--dry-run).
# ---------------------------------------------------------------------------

def sizes(args):
    if args.cpu_test:
        return dict(add=[1000, 1 << 16], gelu=[1000, 1 << 16], glu=[(8, 96), (33, 200)],
                    drop=[1 << 16], add_dtypes=["f16", "bf16", "f32"])
    if args.quick:
        return dict(add=[1 << 20, 1 << 24], gelu=[1 << 20, 1 << 24], glu=[(1024, 4096), (4096, 14336)],
                    drop=[1 << 20, 1 << 24], add_dtypes=["f16", "bf16", "f32"])
    return dict(add=[1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28], gelu=[1 << 20, 1 << 22, 1 << 24, 1 << 26],
                glu=[(1024, 4096), (4096, 14336), (8192, 14336)], drop=[1 << 20, 1 << 24, 1 << 26],
                add_dtypes=["f16", "bf16", "f32"])


def plan(args):
    sz = sizes(args)
    cases = []

    def case(op, variant, dtype, shape, nbytes_per_elem_s, libs, **kw):
        elements = shape[0] * shape[1] if isinstance(shape, tuple) else shape
        s = ESIZE[dtype]
        c = dict(op=op, variant=variant, dtype=dtype, shape=shape,
                 shape_str=f"{shape[0]}x{shape[1]}" if isinstance(shape, tuple) else str(shape),
                 elements=elements, bytes=nbytes_per_elem_s * elements * s, libs=libs)
        c.update(kw)
        cases.append(c)

    if "add" in args.ops:
        for dt in sz["add_dtypes"]:
            for n in sz["add"]:
                case("add", "-", dt, n, 3, ["ktune", "torch"])
    if "gelu" in args.ops:
        for approx in ("erf", "tanh"):
            for n in sz["gelu"]:
                case("gelu", approx, "bf16", n, 2, ["ktune", "torch"], approx=approx)
            for n in sz["gelu"]:
                case("gelu_bwd", approx, "bf16", n, 3, ["ktune", "torch"], approx=approx)
    if "glu" in args.ops:
        for act, approx in (("swiglu", ""), ("geglu", "tanh"), ("geglu", "erf")):
            for direction in ("", "_bwd"):
                for layout in ("separate", "split"):
                    libs = ["ktune", "torch"]
                    # Liger: LigerSiLUMulFunction / LigerGELUMulFunction (tanh only) on
                    # separate tensors, the fused gate-up SwiGLU on the split layout.
                    if (layout == "separate" and (act == "swiglu" or approx == "tanh")) or \
                            (layout == "split" and act == "swiglu"):
                        libs.append("liger")
                    variant = f"{approx}/{layout}" if approx else layout
                    for shape in sz["glu"]:
                        case(act + direction, variant, "bf16", shape, 5 if direction else 3, libs,
                             act=act, approx=approx, layout=layout, bwd=bool(direction))
    if "dropout" in args.ops:
        for direction in ("", "_bwd"):
            for p in (0.1, 0.5):
                for n in sz["drop"]:
                    case("dropout" + direction, f"p={p}", "bf16", n, 2, ["ktune", "torch"], p=p)
    return cases


# ---------------------------------------------------------------------------
# ktune through ctypes.
# ---------------------------------------------------------------------------

c_vp, c_i64, c_int = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
# name -> (argtypes, header parameter types in order, for the header check)
KTUNE_SIGS = {
    "ktune_add": ([c_vp, c_i64, c_vp, c_vp, c_vp, c_int, c_vp],
                  "ctx n x y z dtype stream"),
    "ktune_gelu": ([c_vp, c_i64, c_vp, c_vp, c_int, c_int, c_vp],
                   "ctx n x y approx dtype stream"),
    "ktune_gelu_backward": ([c_vp, c_i64, c_vp, c_vp, c_vp, c_int, c_int, c_vp],
                            "ctx n x dy dx approx dtype stream"),
    "ktune_glu": ([c_vp, c_int, c_i64, c_i64, c_vp, c_i64, c_vp, c_i64, c_vp, c_i64, c_int, c_vp],
                  "ctx act rows cols a lda b ldb out ldo dtype stream"),
    "ktune_glu_backward": ([c_vp, c_int, c_i64, c_i64, c_vp, c_i64, c_vp, c_i64, c_vp, c_i64,
                            c_vp, c_i64, c_vp, c_i64, c_int, c_vp],
                           "ctx act rows cols a lda b ldb dout ld_dout da ld_da db ld_db dtype stream"),
    "ktune_dropout": ([c_vp, c_i64, ctypes.c_float, ctypes.c_uint64, ctypes.c_uint64, c_vp, c_vp, c_int, c_vp],
                      "ctx n p seed offset x y dtype stream"),
    "ktune_dropout_backward": ([c_vp, c_i64, ctypes.c_float, ctypes.c_uint64, ctypes.c_uint64, c_vp, c_vp,
                                c_int, c_vp],
                               "ctx n p seed offset dy dx dtype stream"),
}
OP_SYMBOLS = {"add": ["ktune_add"], "gelu": ["ktune_gelu"], "gelu_bwd": ["ktune_gelu_backward"],
              "swiglu": ["ktune_glu"], "geglu": ["ktune_glu"], "swiglu_bwd": ["ktune_glu_backward"],
              "geglu_bwd": ["ktune_glu_backward"], "dropout": ["ktune_dropout"],
              "dropout_bwd": ["ktune_dropout", "ktune_dropout_backward"]}
# C parameter type (as the header spells it, qualifiers and names dropped) -> ctypes
C_TYPES = {"ktune_ctx*": c_vp, "void*": c_vp, "int64_t": c_i64, "int": c_int, "ktune_dtype": c_int,
           "ktune_gelu_approx": c_int, "ktune_glu_act": c_int,
           "float": ctypes.c_float, "uint64_t": ctypes.c_uint64, "size_t": ctypes.c_size_t}


def header_check(path):
    """Compares KTUNE_SIGS with the prototypes in include/ktune.h: a list of (symbol, kind, message),
    kind "missing" (not declared), "names" (parameter names differ: a warning), "types" (the
    parameter types differ: the script then does not call that symbol) or "unknown"."""
    try:
        text = open(path).read()
    except OSError as e:
        return [("", "missing", f"header {path}: {e}")]
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    msgs = []
    for name, (argtypes, _) in KTUNE_SIGS.items():
        m = re.search(r"\b" + name + r"\s*\(([^)]*)\)\s*;", text)
        if not m:
            msgs.append((name, "missing", f"{name}: not declared in {path}"))
            continue
        params = [p.strip() for p in m.group(1).split(",")]
        got = []
        for p in params:
            p = re.sub(r"\bconst\b", " ", p)
            p = p.replace("*", " * ")
            toks = p.split()
            # drop the parameter name: the last token when it is an identifier after a type
            if len(toks) >= 2 and re.match(r"^[A-Za-z_]\w*$", toks[-1]) and toks[-1] not in C_TYPES:
                toks = toks[:-1]
            got.append("".join(toks))
        names = [re.sub(r"[^\w]", "", p.split()[-1]) if len(p.split()) >= 2 else "?" for p in params]
        want_names = KTUNE_SIGS[name][1].split()
        if len(names) == len(want_names) and names != want_names:
            msgs.append((name, "names", f"{name}: parameter names ({' '.join(names)}) differ from the script's "
                                        f"({' '.join(want_names)}): check their order"))
        mapped = [C_TYPES.get(t) for t in got]
        if any(t is None for t in mapped):
            msgs.append((name, "unknown", f"{name}: unknown parameter type in ({', '.join(got)})"))
        elif mapped != argtypes:
            msgs.append((name, "types", f"{name}: header ({', '.join(got)}) differs from the script's argtypes "
                                        f"({', '.join(t.__name__ for t in argtypes)}): not called"))
    return msgs


class KtuneError(Exception):
    pass


class Ktune:
    def __init__(self, path, db, device, disabled=()):
        self.lib = ctypes.CDLL(path)
        self.path = path
        self.ctx = None
        L = self.lib
        for name in ("ktune_open", "ktune_close", "ktune_errmsg", "ktune_last_dispatch"):
            if not hasattr(L, name):
                raise KtuneError(f"{path} lacks {name}")
        L.ktune_open.argtypes = [ctypes.c_char_p, c_int, ctypes.POINTER(c_vp), ctypes.c_char_p, ctypes.c_size_t]
        L.ktune_open.restype = c_int
        L.ktune_close.argtypes = [c_vp]
        L.ktune_close.restype = None
        L.ktune_errmsg.argtypes = [c_vp]
        L.ktune_errmsg.restype = ctypes.c_char_p
        L.ktune_last_dispatch.argtypes = [c_vp]
        L.ktune_last_dispatch.restype = ctypes.c_char_p
        self.status_name = None
        if hasattr(L, "ktune_status_name"):
            L.ktune_status_name.argtypes = [c_int]
            L.ktune_status_name.restype = ctypes.c_char_p
            self.status_name = L.ktune_status_name
        self.version = "?"
        if hasattr(L, "ktune_version"):
            L.ktune_version.argtypes = []
            L.ktune_version.restype = ctypes.c_char_p
            self.version = (L.ktune_version() or b"?").decode(errors="replace")
        self.fns = {}
        for name, (argtypes, _) in KTUNE_SIGS.items():
            if hasattr(L, name) and name not in disabled:
                f = getattr(L, name)
                f.argtypes = argtypes
                f.restype = c_int
                self.fns[name] = f
        ctx = c_vp()
        err = ctypes.create_string_buffer(1024)
        st = L.ktune_open(None if db is None else db.encode(), device, ctypes.byref(ctx), err, len(err))
        if st != 0 or not ctx.value:
            raise KtuneError(f"ktune_open failed: {self._name(st)}: {err.value.decode(errors='replace')}")
        self.ctx = ctx.value

    def _name(self, st):
        if self.status_name:
            s = self.status_name(st)
            if s:
                return f"{st} ({s.decode(errors='replace')})"
        return str(st)

    def has(self, op):
        return all(n in self.fns for n in OP_SYMBOLS[op])

    def call(self, name, *args):
        st = self.fns[name](self.ctx, *args)
        if st != 0:
            msg = self.lib.ktune_errmsg(self.ctx) or b""
            raise KtuneError(f"{name} returned {self._name(st)}: {msg.decode(errors='replace')}")

    def dispatch(self):
        s = self.lib.ktune_last_dispatch(self.ctx)
        return s.decode(errors="replace") if s else ""

    def close(self):
        if self.ctx:
            self.lib.ktune_close(self.ctx)
            self.ctx = None


# ---------------------------------------------------------------------------
# The bench.
# ---------------------------------------------------------------------------

class Bench:
    def __init__(self, args, torch):
        self.args, self.torch = args, torch
        self.cuda = not args.cpu_test
        self.dev = torch.device("cuda", 0) if self.cuda else torch.device("cpu")
        self.failed = 0
        if self.cuda:
            torch.cuda.set_device(self.dev)
            props = torch.cuda.get_device_properties(self.dev)
            self.device_name = props.name
            l2 = int(getattr(props, "L2_cache_size", 0) or 0)
            self.l2 = l2 if l2 > 0 else 50 * MiB
            self.l2_known = l2 > 0
        else:
            self.device_name, self.l2, self.l2_known = "cpu", 4 * MiB, False
        self.flush_buf = torch.empty(2 * self.l2 // 4, dtype=torch.float32, device=self.dev)
        self.flush_i = 0
        if args.quick or args.cpu_test:
            self.min_reps, self.max_reps, self.budget = 10, 100, args.budget or 0.03
        else:
            self.min_reps, self.max_reps, self.budget = 50, 1000, args.budget or 0.15
        self.csv_file = None

    # -- infrastructure ----------------------------------------------------
    def stream(self):
        return self.torch.cuda.current_stream().cuda_stream if self.cuda else None

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def flush(self):
        self.flush_i = (self.flush_i + 1) % 97
        self.flush_buf.fill_(float(self.flush_i))

    def _batch(self, fn, reps, before):
        """Times reps calls of fn, each after before() and an L2 flush; returns microseconds."""
        torch = self.torch
        if not self.cuda:
            out = []
            for _ in range(reps):
                if before:
                    before()
                self.flush()
                t0 = time.perf_counter()
                fn()
                out.append((time.perf_counter() - t0) * 1e6)
            return out
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            if before:
                before()
            self.flush()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]

    def reps_for(self, fn, before):
        """How many reps fit in the budget: the cost of a rep (flush, restore, op, Python) from 3 tries."""
        self.sync()
        t0 = time.perf_counter()
        ts = self._batch(fn, 3, before)
        wall = (time.perf_counter() - t0) / 3
        per = max(wall, (statistics.median(ts) * 1e-6) if ts else 0, 1e-6)
        return max(self.min_reps, min(self.max_reps, int(self.budget / per)))

    def timing(self, fn, before=None):
        reps = self.reps_for(fn, before)
        ts = sorted(self._batch(fn, reps, before))
        q = lambda f: ts[min(len(ts) - 1, int(round(f * (len(ts) - 1))))]
        return statistics.median(ts), q(0.2), q(0.8), reps

    def capture(self, fn):
        """A CUDA graph of one call of fn, after a warm-up on a side stream."""
        torch = self.torch
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        torch.cuda.synchronize()
        return g

    def write(self, c, lib, mode, t=None, check="-", dispatch=""):
        med, p20, p80 = (t[0], t[1], t[2]) if t else (None, None, None)
        row = dict(op=c["op"], variant=c["variant"], dtype=c["dtype"], shape=c["shape_str"],
                   elements=c["elements"], bytes=c["bytes"], library=lib, mode=mode,
                   time_us=f"{med:.3f}" if med else "", p20_us=f"{p20:.3f}" if p20 else "",
                   p80_us=f"{p80:.3f}" if p80 else "",
                   gbps=f"{c['bytes'] / (med * 1e-6) / 1e9:.1f}" if med else "",
                   check=check, dispatch=dispatch)
        self.csv_writer.writerow(row)
        self.csv_file.flush()
        self.rows.append(row)
        return row

    # -- inputs and checks ------------------------------------------------------
    def dtype(self, name):
        t = self.torch
        return {"f16": t.float16, "bf16": t.bfloat16, "f32": t.float32}[name]

    def randn(self, shape, dtype, gen):
        return self.torch.randn(shape, dtype=self.dtype(dtype), device=self.dev, generator=gen).mul_(2)

    def close_check(self, outs, refs, tol):
        """'ok' or 'FAIL: ...' for outputs against float32 references."""
        torch = self.torch
        worst = 0.0
        for i, (o, r) in enumerate(zip(outs, refs)):
            o = o.float()
            if tuple(o.shape) != tuple(r.shape):
                return f"FAIL: output {i} shape {tuple(o.shape)} != {tuple(r.shape)}"
            nonfinite = int((~torch.isfinite(o)).sum())
            if nonfinite:
                return f"FAIL: output {i} has {nonfinite} non-finite elements (NaN poison left?)"
            err = float(((o - r).abs_() / r.abs().clamp_min_(1.0)).max()) if o.numel() else 0.0
            if not err <= tol:
                at = int(((o - r).abs_() / r.abs().clamp_min_(1.0)).argmax())
                return (f"FAIL: output {i} rel err {err:.3g} > {tol:g} at flat index {at} "
                        f"(got {float(o.flatten()[at]):.6g}, want {float(r.flatten()[at]):.6g})")
            worst = max(worst, err)
        self.last_err = worst
        return "ok"

    def dropout_check(self, x, y, p, tol):
        torch = self.torch
        xf, yf = x.float().flatten(), y.float().flatten()
        nonfinite = int((~torch.isfinite(yf)).sum())
        if nonfinite:
            return f"FAIL: {nonfinite} non-finite elements (NaN poison left?)"
        nz = xf != 0
        kept = (yf != 0) & nz
        n = xf.numel()
        for name, sl in (("all", slice(0, n)), ("first half", slice(0, n // 2)), ("second half", slice(n // 2, n))):
            ne = int(nz[sl].sum())
            if ne == 0:
                continue
            frac = int(kept[sl].sum()) / ne
            sigma = math.sqrt(p * (1 - p) / ne)
            if abs(frac - (1 - p)) > 4 * sigma:
                return f"FAIL: kept fraction {frac:.5f} ({name}) vs {1 - p:.3f} +- 4 sigma {4 * sigma:.5f}"
        want = xf[kept] / (1 - p)
        if want.numel():
            err = float(((yf[kept] - want).abs() / want.abs().clamp_min(1.0)).max())
            if not err <= tol:
                return f"FAIL: kept elements != x / (1 - p): rel err {err:.3g} > {tol:g}"
        return "ok"

    # -- one case -------------------------------------------------------------
    def run_case(self, c, idx, total):
        torch = self.torch
        gen = torch.Generator(device=self.dev)
        gen.manual_seed(1000 + idx)
        impls = self.build(c, gen)
        line = []
        for lib in c["libs"]:
            if lib not in impls:
                continue
            impl = impls[lib]
            if isinstance(impl, str):  # a reason for skipping
                line.append(f"{lib} skipped ({impl})")
                continue
            line.append(self.run_impl(c, lib, impl))
        log(f"[{idx + 1}/{total}] {c['op']} {c['variant']} {c['dtype']} {c['shape_str']}: " + "; ".join(line))
        del impls
        self.sync()
        if self.cuda:
            torch.cuda.empty_cache()

    def run_impl(self, c, lib, impl):
        """impl: dict(fn, outs (to poison), check () -> str, before (restore, optional), api)."""
        fn, before = impl["fn"], impl.get("before")
        tol_factor = 1.0 if lib == "ktune" else BASELINE_TOL_FACTOR

        def poison():
            for o in impl.get("outs", []):
                o.fill_(float("nan"))

        def verify():
            self.last_err = None
            try:
                return impl["check"](tol_factor)
            except Exception as e:  # a check that cannot run is a failed check
                return f"FAIL: check raised {type(e).__name__}: {e}"

        dispatch = impl.get("api", "")
        try:
            for _ in range(5):
                if before:
                    before()
                fn()
            self.sync()
            poison()
            if before:
                before()
            fn()
            self.sync()
            if lib == "ktune":
                dispatch = self.kt.dispatch()
            check = verify()
            err = self.last_err
        except Exception as e:
            self.sync_quiet()
            msg = f"FAIL: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]
            self.failed += 1
            self.write(c, lib, "eager", None, msg, dispatch)
            log(f"  {lib}: {msg}")
            return f"{lib} FAIL"
        if check != "ok":
            self.failed += 1
            log(f"  {lib} {c['op']} {c['variant']} {c['dtype']} {c['shape_str']}: {check}")
        best = None
        summary = []
        modes = ["eager", "graph"] if self.cuda and not self.args.no_graph else ["eager"]
        for mode in modes:
            try:
                g = None
                if mode == "graph":
                    g = self.capture(fn)
                    run = g.replay
                else:
                    run = fn
                poison()
                t = self.timing(run, before)
                self.sync()
                post = verify() if check == "ok" else check
                if post != "ok" and check == "ok":
                    self.failed += 1
                    log(f"  {lib} {mode}: after timing: {post}")
                row = self.write(c, lib, mode, t, post, dispatch)
                gb = float(row["gbps"])
                summary.append(f"{mode} {gb:.0f}")
                best = gb if best is None else max(best, gb)
                del g
            except Exception as e:
                self.sync_quiet()
                msg = f"FAIL: {mode}: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
                self.failed += 1
                self.write(c, lib, mode, None, msg[:300], dispatch)
                log(f"  {lib}: {msg[:300]}")
                summary.append(f"{mode} FAIL")
        tag = (f" err {err:.1e}" if err is not None else "") if check == "ok" else " FAIL"
        return f"{lib} {'/'.join(summary)} GB/s{tag}" + (f" [{dispatch}]" if lib == "ktune" and dispatch else "")

    def sync_quiet(self):
        try:
            self.sync()
        except Exception as e:
            log(f"  synchronize after the failure raised too: {e}")

    # -- the implementations per case ----------------------------------------------
    def build(self, c, gen):
        """lib -> impl dict, or lib -> reason string when skipped."""
        torch = self.torch
        F = torch.nn.functional
        op, dt = c["op"], c["dtype"]
        kdt = KTUNE_DTYPE[dt]
        tol = TOL[dt]
        kt = self.kt
        impls = {}
        have_kt = kt is not None and kt.has(op)
        if kt is None:
            impls["ktune"] = "no library"
        elif not have_kt:
            impls["ktune"] = "symbol " + " or ".join(n for n in OP_SYMBOLS[op] if n not in kt.fns) + " missing"
        st = self.stream

        if op == "add":
            n = c["shape"]
            x, y = self.randn(n, dt, gen), self.randn(n, dt, gen)
            ref = x.float() + y.float()
            zt = torch.empty_like(x)
            impls["torch"] = dict(fn=lambda: torch.add(x, y, out=zt), outs=[zt], api="torch.add(out=)",
                                  check=lambda f: self.close_check([zt], [ref], tol * f))
            if have_kt:
                zk = torch.empty_like(x)
                impls["ktune"] = dict(
                    fn=lambda: kt.call("ktune_add", n, x.data_ptr(), y.data_ptr(), zk.data_ptr(), kdt, st()),
                    outs=[zk], check=lambda f: self.close_check([zk], [ref], tol * f))
            return impls

        if op in ("gelu", "gelu_bwd"):
            n, approx = c["shape"], c["approx"]
            ta = "none" if approx == "erf" else "tanh"
            ka = 0 if approx == "erf" else 1
            x = self.randn(n, dt, gen)
            if op == "gelu":
                ref = F.gelu(x.float(), approximate=ta)
                impls["torch"] = dict(fn=lambda: F.gelu(x, approximate=ta), api=f"F.gelu(approximate='{ta}')",
                                      check=lambda f: self.close_check([F.gelu(x, approximate=ta)], [ref], tol * f))
                if have_kt:
                    yk = torch.empty_like(x)
                    impls["ktune"] = dict(
                        fn=lambda: kt.call("ktune_gelu", n, x.data_ptr(), yk.data_ptr(), ka, kdt, st()),
                        outs=[yk], check=lambda f: self.close_check([yk], [ref], tol * f))
            else:
                dy = self.randn(n, dt, gen)
                ref = torch.ops.aten.gelu_backward(dy.float(), x.float(), approximate=ta)
                dxt = torch.empty_like(x)
                impls["torch"] = dict(
                    fn=lambda: torch.ops.aten.gelu_backward.grad_input(dy, x, approximate=ta, grad_input=dxt),
                    outs=[dxt], api=f"aten.gelu_backward(approximate='{ta}')",
                    check=lambda f: self.close_check([dxt], [ref], tol * f))
                if have_kt:
                    dxk = torch.empty_like(x)
                    impls["ktune"] = dict(
                        fn=lambda: kt.call("ktune_gelu_backward", n, x.data_ptr(), dy.data_ptr(), dxk.data_ptr(),
                                           ka, kdt, st()),
                        outs=[dxk], check=lambda f: self.close_check([dxk], [ref], tol * f))
            return impls

        if op in ("swiglu", "geglu", "swiglu_bwd", "geglu_bwd"):
            return self.build_glu(c, gen, impls, have_kt)

        if op in ("dropout", "dropout_bwd"):
            n, p = c["shape"], c["p"]
            seed, offset = 1234 + n % 1000, 0
            x = self.randn(n, dt, gen)
            if op == "dropout":
                impls["torch"] = dict(fn=lambda: F.dropout(x, p, training=True), api="F.dropout (+ bool mask)",
                                      check=lambda f: self.dropout_check(x, F.dropout(x, p, training=True), p,
                                                                         tol * f))
                if have_kt:
                    yk = torch.empty_like(x)

                    def kfwd():
                        kt.call("ktune_dropout", n, p, seed, offset, x.data_ptr(), yk.data_ptr(), kdt, st())

                    def kcheck(f):
                        r = self.dropout_check(x, yk, p, tol * f)
                        if r != "ok":
                            return r
                        y1 = yk.clone()
                        kfwd()
                        self.sync()
                        if not torch.equal(y1, yk):
                            return "FAIL: the same seed and offset gave another output"
                        return "ok"
                    impls["ktune"] = dict(fn=kfwd, outs=[yk], check=kcheck)
            else:
                dy = self.randn(n, dt, gen)
                scale = 1.0 / (1.0 - p)
                y_t, mask = torch.ops.aten.native_dropout(x, p, True)

                def tbwd():
                    return torch.ops.aten.native_dropout_backward(dy, mask, scale)

                def tcheck(f):
                    dx = tbwd()
                    return self.bwd_mask_check(dy, dx, mask, p, tol * f)
                impls["torch"] = dict(fn=tbwd, api="aten.native_dropout_backward (reads a bool mask)", check=tcheck)
                if have_kt:
                    yk = torch.empty_like(x)
                    dxk = torch.empty_like(x)

                    def kbwd():
                        kt.call("ktune_dropout_backward", n, p, seed, offset, dy.data_ptr(), dxk.data_ptr(), kdt, st())

                    def kcheck(f):
                        # the forward with the same seed and offset gives the mask to hold the backward to
                        yk.fill_(float("nan"))
                        kt.call("ktune_dropout", n, p, seed, offset, x.data_ptr(), yk.data_ptr(), kdt, st())
                        self.sync()
                        r = self.dropout_check(x, yk, p, tol * f)
                        if r != "ok":
                            return "FAIL: forward: " + r[6:]
                        kept = (yk != 0) | (x == 0)   # where x == 0 the forward cannot tell
                        return self.bwd_mask_check(dy, dxk, kept, p, tol * f, exact_where=(x != 0))
                    impls["ktune"] = dict(fn=kbwd, outs=[dxk], check=kcheck)
            return impls
        raise ValueError(op)

    def bwd_mask_check(self, dy, dx, mask, p, tol, exact_where=None):
        """dx == dy / (1 - p) where mask, 0 elsewhere (elements with dy == 0 or outside exact_where skipped)."""
        torch = self.torch
        dxf, dyf = dx.float().flatten(), dy.float().flatten()
        mask = mask.flatten().bool()
        nonfinite = int((~torch.isfinite(dxf)).sum())
        if nonfinite:
            return f"FAIL: {nonfinite} non-finite elements (NaN poison left?)"
        valid = dyf != 0
        if exact_where is not None:
            valid &= exact_where.flatten()
        got_kept = dxf != 0
        bad = int(((got_kept != mask) & valid).sum())
        if bad:
            return f"FAIL: the backward's mask differs from the forward's at {bad} elements"
        want = dyf[mask & valid] / (1 - p)
        if want.numel():
            err = float(((dxf[mask & valid] - want).abs() / want.abs().clamp_min(1.0)).max())
            if not err <= tol:
                return f"FAIL: kept elements != dy / (1 - p): rel err {err:.3g} > {tol:g}"
        return "ok"

    def build_glu(self, c, gen, impls, have_kt):
        torch = self.torch
        F = torch.nn.functional
        dt, (rows, cols) = c["dtype"], c["shape"]
        kdt, s, tol = KTUNE_DTYPE[dt], ESIZE[dt], TOL[dt]
        act, approx, layout, bwd = c["act"], c["approx"], c["layout"], c["bwd"]
        kind = GLU_KIND[(act, approx)]
        ta = "none" if approx == "erf" else "tanh"
        kt, st = self.kt, self.stream
        split = layout == "split"

        if split:
            xin = self.randn((rows, 2 * cols), dt, gen)
            a, b = xin[:, :cols], xin[:, cols:]
            a_ptr, b_ptr, ld = xin.data_ptr(), xin.data_ptr() + cols * s, 2 * cols
        else:
            a, b = self.randn((rows, cols), dt, gen), self.randn((rows, cols), dt, gen)
            a_ptr, b_ptr, ld = a.data_ptr(), b.data_ptr(), cols
        af, bf = a.float(), b.float()

        def act_t(v):
            return F.silu(v) if act == "swiglu" else F.gelu(v, approximate=ta)
        api_t = "F.silu(a) * b" if act == "swiglu" else f"F.gelu(a, approximate='{ta}') * b"
        lg = self.liger

        if not bwd:
            ref = act_t(af) * bf
            del af, bf
            impls["torch"] = dict(fn=lambda: act_t(a) * b, api=api_t + (" (views)" if split else ""),
                                  check=lambda f: self.close_check([act_t(a) * b], [ref], tol * f))
            if have_kt:
                ok = torch.empty((rows, cols), dtype=a.dtype, device=self.dev)
                impls["ktune"] = dict(
                    fn=lambda: kt.call("ktune_glu", kind, rows, cols, a_ptr, ld, b_ptr, ld, ok.data_ptr(), cols,
                                       kdt, st()),
                    outs=[ok], check=lambda f: self.close_check([ok], [ref], tol * f))
            if "liger" in c["libs"]:
                if lg is None:
                    impls["liger"] = self.liger_why
                elif split:
                    fwd = lg["swiglu_fused_gate_up_forward"]
                    impls["liger"] = dict(fn=lambda: fwd(xin)[1], api="swiglu_fused_gate_up_forward",
                                          check=lambda f: self.close_check([fwd(xin)[1]], [ref], tol * f))
                else:
                    Fn = lg["LigerSiLUMulFunction"] if act == "swiglu" else lg["LigerGELUMulFunction"]
                    impls["liger"] = dict(fn=lambda: Fn.apply(a, b), api=Fn.__name__ + ".apply",
                                          check=lambda f: self.close_check([Fn.apply(a, b)], [ref], tol * f))
            return impls

        # backward: dc -> da, db
        dc = self.randn((rows, cols), dt, gen)
        dcf = dc.float()
        if act == "swiglu":
            sg = torch.sigmoid(af)
            ref_da = dcf * bf * (sg * (1 + af * (1 - sg)))
            ref_db = dcf * af * sg
            del sg
        else:
            ref_db = dcf * F.gelu(af, approximate=ta)
            ref_da = torch.ops.aten.gelu_backward(dcf * bf, af, approximate=ta)
        del af, bf, dcf
        refs = [ref_da, ref_db]

        # torch eager: the kernels autograd runs for act(a) * b, the activation saved by the forward
        saved = act_t(a).contiguous()
        if split:
            dxt = torch.empty((rows, 2 * cols), dtype=a.dtype, device=self.dev)
            da_t, db_t = dxt[:, :cols], dxt[:, cols:]
        else:
            da_t, db_t = torch.empty_like(a), torch.empty_like(b)
        tmp = torch.empty((rows, cols), dtype=a.dtype, device=self.dev)

        def tbwd():
            torch.mul(dc, saved, out=db_t)
            torch.mul(dc, b, out=tmp)
            if act == "swiglu":
                torch.ops.aten.silu_backward.grad_input(tmp, a, grad_input=da_t)
            else:
                torch.ops.aten.gelu_backward.grad_input(tmp, a, approximate=ta, grad_input=da_t)
        impls["torch"] = dict(
            fn=tbwd, outs=[da_t, db_t],
            api=("db = dc * silu(a); da = silu_backward(dc * b, a)" if act == "swiglu" else
                 f"db = dc * gelu(a); da = gelu_backward(dc * b, a, '{ta}')") + (" (views)" if split else ""),
            check=lambda f: self.close_check([da_t, db_t], refs, tol * f))
        if have_kt:
            if split:
                dxk = torch.empty((rows, 2 * cols), dtype=a.dtype, device=self.dev)
                outs = [dxk]
                da_ptr, db_ptr, ldd = dxk.data_ptr(), dxk.data_ptr() + cols * s, 2 * cols
                got = lambda: [dxk[:, :cols], dxk[:, cols:]]
            else:
                dak, dbk = torch.empty_like(a), torch.empty_like(b)
                outs = [dak, dbk]
                da_ptr, db_ptr, ldd = dak.data_ptr(), dbk.data_ptr(), cols
                got = lambda: [dak, dbk]
            impls["ktune"] = dict(
                fn=lambda: kt.call("ktune_glu_backward", kind, rows, cols, a_ptr, ld, b_ptr, ld, dc.data_ptr(), cols,
                                   da_ptr, ldd, db_ptr, ldd, kdt, st()),
                outs=outs, check=lambda f: self.close_check(got(), refs, tol * f))
        if "liger" in c["libs"]:
            if lg is None:
                impls["liger"] = self.liger_why
            elif split:
                bw = lg["swiglu_fused_gate_up_backward"]
                impls["liger"] = dict(
                    fn=lambda: bw(xin, dc, False), api="swiglu_fused_gate_up_backward(in_place=False)",
                    check=lambda f: self.close_check(
                        (lambda d: [d[:, :cols], d[:, cols:]])(bw(xin, dc, False)), refs, tol * f))
            else:
                # Liger's backward writes da into a and db into b: it works on copies, restored
                # (untimed) before every call.
                bw = lg["swiglu_backward"] if act == "swiglu" else lg["geglu_backward"]
                aw, bw_ = a.clone(), b.clone()

                def restore():
                    aw.copy_(a)
                    bw_.copy_(b)
                impls["liger"] = dict(
                    fn=lambda: bw(aw, bw_, dc), before=restore, outs=[aw, bw_],
                    api=bw.__name__ + " (in place into a, b; restored untimed)",
                    check=lambda f: self.close_check([aw, bw_], refs, tol * f))
        return impls

    # -- copy ceiling -------------------------------------------------------------
    def copy_ceiling(self, which):
        torch = self.torch
        nbytes = GiB if not self.args.cpu_test else 64 * MiB
        if self.args.quick and not self.args.cpu_test:
            nbytes = GiB // 2
        src = torch.empty(nbytes, dtype=torch.uint8, device=self.dev).fill_(7)
        dst = torch.empty_like(src)
        c = dict(op="copy", variant=which, dtype="u8", shape_str=str(nbytes), elements=nbytes, bytes=2 * nbytes)
        fn = lambda: dst.copy_(src)
        for _ in range(5):
            fn()
        res, run = [], None
        modes = ["eager", "graph"] if self.cuda and not self.args.no_graph else ["eager"]
        for mode in modes:
            try:
                run = self.capture(fn).replay if mode == "graph" else fn
                t = self.timing(run)
                row = self.write(c, "copy", mode, t, "ok" if torch.equal(src[:4096], dst[:4096]) else "FAIL: copy",
                                 "Tensor.copy_")
                res.append(float(row["gbps"]))
            except Exception as e:
                log(f"copy {which} {mode}: {type(e).__name__}: {e}")
        src = dst = run = None  # noqa: F841  (frees the buffers and the graph before empty_cache)
        self.sync()
        if self.cuda:
            torch.cuda.empty_cache()
        log(f"copy ceiling ({which}, {nbytes >> 20} MiB copied): " + ", ".join(f"{g:.0f}" for g in res) + " GB/s")
        return max(res) if res else None

    # -- the run --------------------------------------------------------------------
    def run(self, cases):
        torch, args = self.torch, self.args
        self.rows = []
        self.kt = None
        if args.no_ktune:
            log("ktune: skipped (--no-ktune)")
        elif not os.path.exists(args.lib):
            log(f"ktune: {args.lib} not found: the ktune column is skipped")
        else:
            try:
                disabled = {n for n, kind, _ in self.header_msgs if kind == "types"}
                self.kt = Ktune(args.lib, args.db, self.dev.index or 0, disabled)
                miss = [n for n in KTUNE_SIGS if n not in self.kt.fns]
                log(f"ktune: {args.lib} (version {self.kt.version})" +
                    (f"; missing symbols, those ops skipped: {', '.join(miss)}" if miss else ""))
            except (OSError, KtuneError) as e:
                log(f"ktune: {e}: the ktune column is skipped")
                self.kt = None
        self.liger, self.liger_why, self.liger_version = None, "", ""
        if not self.cuda:
            self.liger_why = "cpu test"
        elif args.no_liger:
            self.liger_why = "--no-liger"
        else:
            try:
                import importlib.metadata
                import importlib
                lswiglu = importlib.import_module("liger_kernel.ops.swiglu")
                lgeglu = importlib.import_module("liger_kernel.ops.geglu")
                self.liger = dict(LigerSiLUMulFunction=lswiglu.LigerSiLUMulFunction,
                                  swiglu_backward=lswiglu.swiglu_backward,
                                  LigerGELUMulFunction=lgeglu.LigerGELUMulFunction,
                                  geglu_backward=lgeglu.geglu_backward)
                for name in ("swiglu_fused_gate_up_forward", "swiglu_fused_gate_up_backward"):
                    if hasattr(lswiglu, name):
                        self.liger[name] = getattr(lswiglu, name)
                try:
                    self.liger_version = importlib.metadata.version("liger_kernel")
                except Exception:
                    self.liger_version = "?"
                log(f"liger: liger_kernel {self.liger_version} from {os.path.dirname(lswiglu.__file__)}")
            except Exception as e:
                self.liger_why = f"not importable: {type(e).__name__}: {e}"
                log(f"liger: {self.liger_why}: its column is skipped")
        if self.liger is not None and "swiglu_fused_gate_up_forward" not in self.liger:
            for c in cases:  # an older Liger without the fused gate-up SwiGLU
                if c.get("layout") == "split" and "liger" in c["libs"]:
                    c["libs"] = [l for l in c["libs"] if l != "liger"]

        os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
        self.csv_file = open(args.csv, "w", newline="")
        self.csv_writer = csv.DictWriter(self.csv_file, fieldnames=FIELDS)
        self.csv_writer.writeheader()
        meta = dict(command=" ".join(sys.argv), device=self.device_name, l2_bytes=self.l2,
                    l2_known=self.l2_known, torch=torch.__version__, liger=self.liger_version or None,
                    ktune=self.kt.version if self.kt else None, ktune_lib=args.lib if self.kt else None,
                    cuda=torch.version.cuda, started=time.strftime("%Y-%m-%d %H:%M:%S"))
        log(f"device: {self.device_name}; L2 {self.l2 >> 20} MiB{'' if self.l2_known else ' (assumed)'}, "
            f"flush buffer {2 * self.l2 >> 20} MiB; torch {torch.__version__}")
        t0 = time.time()
        ceil = [self.copy_ceiling("first")]
        try:
            for i, c in enumerate(cases):
                if c["op"] == "add" and self.cuda:
                    need = 5 * c["bytes"] // 3 + 2 * 4 * c["elements"]  # x, y, 2 outputs, f32 ref + temporaries
                    free = torch.cuda.mem_get_info()[0]
                    if need > 0.9 * free:
                        log(f"[{i + 1}/{len(cases)}] add {c['dtype']} {c['shape_str']}: skipped, needs about "
                            f"{need / GiB:.1f} GiB, {free / GiB:.1f} GiB free")
                        continue
                try:
                    self.run_case(c, i, len(cases))
                except Exception as e:
                    self.failed += 1
                    log(f"[{i + 1}/{len(cases)}] {c['op']} {c['variant']} {c['dtype']} {c['shape_str']}: "
                        f"FAIL: {type(e).__name__}: {e}")
                    traceback.print_exc(file=sys.stderr)
                    self.write(c, "-", "-", None, f"FAIL: setup: {type(e).__name__}: {e}"[:300])
                    self.sync_quiet()
            ceil.append(self.copy_ceiling("last"))
        finally:
            meta["copy_gbps"] = [x for x in ceil if x]
            meta["copy_ceiling_gbps"] = max(meta["copy_gbps"]) if meta["copy_gbps"] else None
            meta["wall_s"] = round(time.time() - t0, 1)
            meta["failed_checks"] = self.failed
            self.csv_file.close()
            with open(args.csv + ".meta.json", "w") as f:
                json.dump(meta, f, indent=1)
            if self.kt:
                self.kt.close()
        log(f"done in {time.time() - t0:.0f} s; {args.csv}")
        print_table(self.rows, meta["copy_ceiling_gbps"])
        return meta


def best_by_case(rows):
    """(op, variant, dtype, shape) -> library -> (gbps, check, dispatch): the best of eager and graph
    among the rows whose check passed (failed rows count only when none passed); check is the first
    failure, if any."""
    groups = {}
    for r in rows:
        if r["library"] in ("copy", "-"):
            continue
        key = (r["op"], r["variant"], r["dtype"], r["shape"])
        groups.setdefault(key, {}).setdefault(r["library"], []).append(r)
    out = {}
    for key, libs in groups.items():
        d = out[key] = {}
        for lib, rs in libs.items():
            fails = [r for r in rs if r["check"].startswith("FAIL")]
            timed = [r for r in rs if r.get("gbps")]
            good = [r for r in timed if not r["check"].startswith("FAIL")]
            pick = good or timed
            gb = max(float(r["gbps"]) for r in pick) if pick else None
            check = fails[0]["check"] if fails else rs[0]["check"]
            disp = next((r["dispatch"] for r in rs if r.get("dispatch")), "")
            d[lib] = (gb, check, disp)
    return out


def fmt_gb(v, w=7):
    return f"{v:{w}.0f}" if v is not None else f"{'-':>{w}}"


def fmt_ratio(a, b, w=6):
    return f"{a / b:{w}.2f}" if a and b else f"{'-':>{w}}"


def print_table(rows, ceiling):
    best = best_by_case(rows)
    if not best:
        return
    print(f"\ncopy ceiling {ceiling:.0f} GB/s" if ceiling else "\ncopy ceiling: not measured")
    hdr = f"{'op':<12} {'variant':<15} {'dtype':<5} {'shape':>11} {'ktune':>7} {'%copy':>6} {'torch':>7} " \
          f"{'k/t':>6} {'liger':>7} {'k/l':>6}  check, dispatch"
    print(hdr)
    print("-" * len(hdr))
    for key, d in best.items():
        k = d.get("ktune", (None, "-", ""))[0]
        t = d.get("torch", (None,))[0]
        l = d.get("liger", (None,))[0]
        checks = ",".join(f"{lib} {v[1]}" for lib, v in d.items() if v[1].startswith("FAIL"))
        disp = d.get("ktune", (None, "", ""))[2]
        print(f"{key[0]:<12} {key[1]:<15} {key[2]:<5} {key[3]:>11} {fmt_gb(k)} {fmt_ratio(k, ceiling)} {fmt_gb(t)} "
              f"{fmt_ratio(k, t)} {fmt_gb(l)} {fmt_ratio(k, l)}  {checks or 'ok'}{', ' + disp if disp else ''}")
    sys.stdout.flush()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build-device/libktune.so", help="libktune.so (default %(default)s)")
    ap.add_argument("--db", default=None,
                    help="tuning database for ktune_open (default: NULL, the default database; '' = none)")
    ap.add_argument("--csv", default="bench-elementwise.csv", help="output CSV (default %(default)s)")
    ap.add_argument("--ops", default=",".join(OPS), help="subset of " + ",".join(OPS))
    ap.add_argument("--quick", action="store_true", help="fewer sizes and reps (a smoke test)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan of cases and exit (no GPU, no torch)")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds per timed batch (default 0.15; --quick 0.03)")
    ap.add_argument("--no-graph", action="store_true", help="eager mode only")
    ap.add_argument("--no-liger", action="store_true", help="skip Liger")
    ap.add_argument("--no-ktune", action="store_true", help="skip ktune (baselines only)")
    ap.add_argument("--header", default=None,
                    help="include/ktune.h to check the ctypes signatures against (default: beside the script's repo)")
    ap.add_argument("--cpu-test", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    bad = [o for o in args.ops if o not in OPS]
    if bad or not args.ops:
        ap.error(f"--ops: unknown {','.join(bad) or '(empty)'}; choose from {','.join(OPS)}")

    header = args.header or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include",
                                         "ktune.h")
    hmsgs = header_check(header) if os.path.exists(header) else [("", "missing", f"no header at {header}: not checked")]
    cases = plan(args)
    if args.dry_run:
        import signal
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        n_timings = 0
        print(f"# plan: {len(cases)} cases; ops {','.join(args.ops)}; quick={args.quick}")
        print(f"{'op':<12} {'variant':<15} {'dtype':<5} {'shape':>11} {'elements':>10} {'MiB moved':>10}  libraries")
        for c in cases:
            print(f"{c['op']:<12} {c['variant']:<15} {c['dtype']:<5} {c['shape_str']:>11} {c['elements']:>10} "
                  f"{c['bytes'] / MiB:>10.1f}  {','.join(c['libs'])}")
            n_timings += len(c["libs"]) * (1 if args.no_graph else 2)
        budget = args.budget or (0.03 if args.quick else 0.15)
        print(f"# + copy ceiling first and last ({'512 MiB' if args.quick else '1 GiB'} copy_); {n_timings} "
              f"timed batches of at most about "
              f"{budget} s (plus warm-up, checks, graph captures)")
        print(f"# ktune library: {args.lib} ({'present' if os.path.exists(args.lib) else 'not here'}); db: {args.db}")
        print("# header check: " + ("ok, " + header if not hmsgs else "; ".join(m for _, _, m in hmsgs)))
        return 0
    for _, _, m in hmsgs:
        log(f"header check: {m}")

    try:
        import torch
    except Exception as e:
        log(f"cannot import torch: {e}")
        return 1
    if not args.cpu_test and not torch.cuda.is_available():
        log("no CUDA device visible to torch (use --dry-run to see the plan)")
        return 1
    torch.manual_seed(0)
    b = Bench(args, torch)
    b.header_msgs = hmsgs
    try:
        b.run(cases)
    except Exception:
        traceback.print_exc()
        return 1
    if b.failed:
        log(f"FAILED CHECKS: {b.failed} (see the check column of {args.csv})")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
