#!/usr/bin/env python3
"""bench/ops/quant.py - ktune's weight-quantized GEMM (ktune_gemm_quant) against bf16
cuBLAS and gemlite, in the same process on the same GPU.

    python3 bench/ops/quant.py --lib build-device/install/lib/libktune.so --db DB --csv $OUT/quant.csv \\
        --plot $OUT
    python3 bench/ops/quant.py --dry-run              # the plan of cases, no GPU needed
    python3 bench/ops/quant.py --quick                # a smoke test

Cases: the weight shapes of issue 28's speed goals, (N, K) in {(4096, 4096),
(6144, 4096), (14336, 4096), (28672, 4096), (4096, 14336)}, at M = 1, 2, 4,
8, 16, 32, 64, 128 (--quick: two shapes, M = 1, 16, 128), for the formats
  w4g128  4 bits, groups of 128, (q - z) * s      gemlite W_nbits=4, group_size=128, fma_mode=False
  w8chan  8 bits, per channel, (q - z) * s        gemlite W_nbits=8, group_size=K
  w2g128  2 bits, groups of 128                   gemlite W_nbits=2, group_size=128
  w1g128  1 bit, groups of 128                    gemlite W_nbits=1, group_size=128
and the libraries
  cublas   torch.mm(x, W.t(), out=y) on the bf16 weight (cuBLAS), once per shape and M
  ktune    ktune_gemm_quant on ktune's packing of the same codes (docs/quant.md)
  gemlite  GemLiteLinearTriton.pack(codes, scales, zeros) and its forward, with the
           configs gemlite ships for the GPU (import gemlite: the wheel in .whl/)

The protocol is bench/ops/elementwise.py's (this script runs its Bench): the
codes, scales and zeros seeded per case and shared by ktune and gemlite; A
scaled so that |C| is near 1; every output checked against the float32
product of the dequantised weight (ktune within 1.6e-2 relative to
max(1, |ref|) in bf16, four ulps, the baselines within 4 times that), before
and after timing, outputs poisoned with NaN; the L2 flushed before every
timed call; eager and CUDA-graph replay, the median of many reps, a
library's figure the faster mode; the 1 GiB copy first and last as the
ceiling.

Reported per case: each library's time; ktune's speedup over cuBLAS and
over gemlite; the weight bandwidth (the weight bytes a library reads:
packed words, scales and zeros for ktune and gemlite, bf16 for cuBLAS, over
the time) and its fraction of the copy ceiling; then per format the
geometric mean of the speedups at M = 1..16 and the worst at M = 128 (issue
28's goals), and with --plot DIR ktune plot's figure over M (the speedup
over cuBLAS and the weight bandwidth: python/ktune/plot.py) in DIR.
The CSV (elementwise.py's columns, gbps = weight bandwidth) is written row
by row.  Exit status 0, 2 when a check failed, 1 on a fatal error.
"""
import argparse
import ctypes
import math
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import elementwise as ew  # noqa: E402  (the protocol, the ctypes wrapper, the CSV)

c_vp, c_i64, c_int = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
SIGS = {
    "ktune_gemm_quant": ([c_vp, c_vp, c_i64, c_i64, c_i64, c_vp, c_i64, c_vp, c_vp, c_vp, c_vp, c_vp, c_i64, c_int,
                          c_vp],
                         "ctx fmt m n k a lda wq scales zeros bias c ldc dtype stream"),
}
ew.KTUNE_SIGS.update(SIGS)
ew.OP_SYMBOLS["gemm_quant"] = ["ktune_gemm_quant"]
ew.C_TYPES["ktune_quant_format*"] = c_vp
ew.C_TYPES["uint32_t*"] = c_vp

TOL = 1.6e-2  # bf16: four ulps at 1, the op's own tolerance (a weight rounded for the mma, then C)
SHAPES = [(4096, 4096), (6144, 4096), (14336, 4096), (28672, 4096), (4096, 14336)]
MS = [1, 2, 4, 8, 16, 32, 64, 128]
# name -> (bits, group (0: per channel), ktune mode)
FORMATS = {"w4g128": (4, 128, 0), "w8chan": (8, 0, 0), "w2g128": (2, 128, 0), "w1g128": (1, 128, 0)}


class QuantFormat(ctypes.Structure):
    _fields_ = [("bits", c_int), ("group_size", c_int), ("mode", c_int), ("zero_scalar", c_int)]


def weight_bytes(fmt, n, k):
    """The bytes ktune and gemlite read of the weight: codes, scales and zeros (bf16)."""
    bits, group, _ = FORMATS[fmt]
    groups = k // group if group else 1
    return n * k * bits // 8 + 2 * 2 * n * groups


def plan(args):
    shapes = SHAPES[:2] if args.quick else SHAPES
    ms = [1, 16, 128] if args.quick else MS
    if args.m:
        ms = [m for m in ms if m in args.m]
    cases = []
    for fmt in args.formats:
        for n, k in shapes:
            for m in ms:
                cases.append(dict(op="gemm_quant", variant=fmt, dtype="bf16", shape=(m, n, k),
                                  shape_str=f"{m}x{n}x{k}", elements=m * n, bytes=weight_bytes(fmt, n, k),
                                  lib_bytes={"cublas": 2 * n * k}, libs=["ktune", "cublas", "gemlite"], fmt=fmt))
    return cases


class QuantBench(ew.Bench):
    def write(self, c, lib, mode, t=None, check="-", dispatch=""):
        """elementwise.py's row, its gbps the weight bandwidth of this library."""
        return super().write(dict(c, bytes=c.get("lib_bytes", {}).get(lib, c["bytes"])), lib, mode, t, check,
                             dispatch)

    def build(self, c, gen):
        torch = self.torch
        (m, n, k), fmt = c["shape"], c["fmt"]
        bits, group, mode = FORMATS[fmt]
        g = group or k
        top = (1 << bits) - 1
        kt, st = self.kt, self.stream
        impls = {}

        # the codes, scales and zeros both quantized libraries get; the weight they stand for
        q = torch.randint(0, top + 1, (n, k), dtype=torch.uint8, device=self.dev, generator=gen)
        scales = (torch.rand((n, k // g), device=self.dev, generator=gen) * 0.5 + 0.5).to(torch.bfloat16)
        zeros = (torch.rand((n, k // g), device=self.dev, generator=gen) * top).to(torch.bfloat16)
        w = ((q.float().view(n, k // g, g) - zeros.float()[..., None]) * scales.float()[..., None]).view(n, k)
        w_bf16 = w.to(torch.bfloat16)
        amp = 1.0 / (math.sqrt(k) * float(w.pow(2).mean().sqrt()))
        x = (torch.randn((m, k), device=self.dev, generator=gen) * amp).to(torch.bfloat16)
        ref = x.float() @ w.t()

        # cuBLAS on the bf16 weight: its rounding of w is the baseline's business (4x tolerance)
        yt = torch.empty((m, n), dtype=torch.bfloat16, device=self.dev)
        impls["cublas"] = dict(fn=lambda: torch.mm(x, w_bf16.t(), out=yt), outs=[yt], api="torch.mm (cuBLAS, bf16)",
                               check=lambda f: self.close_check([yt], [ref], TOL * f))

        if kt is None:
            impls["ktune"] = "no library"
        elif not kt.has("gemm_quant"):
            impls["ktune"] = "symbol ktune_gemm_quant missing"
        else:
            e = 32 // bits
            qv = q.view(n, k // e, e).to(torch.int64)
            shifts = torch.arange(e, device=self.dev, dtype=torch.int64) * bits
            words = (qv << shifts).sum(-1)
            words = torch.where(words >= 2 ** 31, words - 2 ** 32, words).to(torch.int32)
            rw = (k // e + 3) // 4 * 4
            wq = torch.zeros((n, rw), dtype=torch.int32, device=self.dev)
            wq[:, : k // e] = words
            fmt_c = QuantFormat(bits, group, mode, 0)
            yk = torch.empty((m, n), dtype=torch.bfloat16, device=self.dev)
            impls["ktune"] = dict(
                fn=lambda: kt.call("ktune_gemm_quant", ctypes.addressof(fmt_c), m, n, k, x.data_ptr(), k, wq.data_ptr(),
                                   scales.data_ptr(), zeros.data_ptr(), None, yk.data_ptr(), n,
                                   ew.KTUNE_DTYPE["bf16"], st()),
                outs=[yk], check=lambda f: self.close_check([yk], [ref], TOL * f))

        if self.gemlite is None:
            impls["gemlite"] = self.gemlite_why
        else:
            try:
                GL, DType = self.gemlite
                gl = GL(W_nbits=bits, group_size=g, in_features=k, out_features=n, input_dtype=DType.BF16,
                        output_dtype=DType.BF16)
                gl.pack(q, scales, zeros, bias=None, fma_mode=False)
                impls["gemlite"] = dict(fn=lambda: gl(x), api="GemLiteLinearTriton forward",
                                        check=lambda f: self.close_check([gl(x)], [ref], TOL * f))
            except Exception as e:  # a format gemlite does not take is its column's gap, not a failure
                impls["gemlite"] = f"pack refused: {type(e).__name__}: {str(e)[:120]}"
        return impls

    def run(self, cases):
        self.gemlite, self.gemlite_why = None, "--no-gemlite"
        if not self.args.no_gemlite:
            try:
                import importlib
                core = importlib.import_module("gemlite.core")
                self.gemlite = (core.GemLiteLinearTriton, core.DType)
                gm = importlib.import_module("gemlite")
                ew.log(f"gemlite: {getattr(gm, '__version__', '?')} from {os.path.dirname(core.__file__)}")
            except Exception as e:
                self.gemlite_why = f"not importable: {type(e).__name__}: {e}"
                ew.log(f"gemlite: {self.gemlite_why}: its column is skipped")
        meta = super().run(cases)
        summarize(self.rows, meta.get("copy_ceiling_gbps"))
        if self.args.plot:
            draw(self.args.csv, self.args.plot, meta.get("device", ""))
        return meta


def best_times(rows):
    """(fmt, m, n, k) -> lib -> (time_us, gbps, check): the faster mode whose check passed."""
    out = {}
    for r in rows:
        if r["library"] in ("copy", "-") or not r.get("time_us"):
            continue
        m, n, k = (int(v) for v in r["shape"].split("x"))
        d = out.setdefault((r["variant"], m, n, k), {})
        t = float(r["time_us"])
        ok = not r["check"].startswith("FAIL")
        old = d.get(r["library"])
        if old is None or (ok and (not old[3] or t < old[0])):
            d[r["library"]] = (t, float(r["gbps"]), r["check"], ok)
    return out


def geomean(v):
    v = [x for x in v if x]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


def summarize(rows, ceiling):
    best = best_times(rows)
    if not best:
        return
    f = lambda v, w=8, p=1: f"{v:{w}.{p}f}" if v is not None else f"{'-':>{w}}"
    print(f"\nweight bandwidth ceiling (copy): {ceiling:.0f} GB/s" if ceiling else "\ncopy ceiling: not measured")
    hdr = (f"{'format':<7} {'shape':>16} {'cuBLAS us':>9} {'ktune us':>8} {'gemlite':>8} {'k/cuBLAS':>8} "
           f"{'k/gemlite':>9} {'ktune GB/s':>10} {'%copy':>6} {'cuBLAS GB/s':>11}  check")
    print(hdr)
    print("-" * len(hdr))
    per_fmt = {}
    for (fmt, m, n, k), d in sorted(best.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][3], kv[0][1])):
        tk, tc, tg = (d.get(lib, (None,))[0] for lib in ("ktune", "cublas", "gemlite"))
        gk, gc = d.get("ktune", (None, None))[1], d.get("cublas", (None, None))[1]
        rc = tc / tk if tk and tc else None
        rg = tg / tk if tk and tg else None
        per_fmt.setdefault(fmt, []).append((m, n, k, rc, rg))
        bad = ",".join(lib for lib, v in d.items() if not v[3])
        print(f"{fmt:<7} {f'{m}x{n}x{k}':>16} {f(tc, 9)} {f(tk)} {f(tg)} {f(rc, 8, 2)} {f(rg, 9, 2)} {f(gk, 10, 0)} "
              f"{f(100 * gk / ceiling if gk and ceiling else None, 6, 0)} {f(gc, 11, 0)}  {'FAIL ' + bad if bad else 'ok'}")
    print("\nissue 28's goals, per format: geometric mean over M = 1..16 of ktune's speedup, and at M = 128 the least")
    for fmt, v in per_fmt.items():
        small = [x for x in v if x[0] <= 16]
        big = [x[3] for x in v if x[0] == 128 and x[3]]
        gc, gg = geomean([x[3] for x in small]), geomean([x[4] for x in small])
        least_g = min((x[4] for x in small if x[4]), default=None)
        print(f"  {fmt}: x cuBLAS {f(gc, 5, 2)} (geomean, M <= 16), x gemlite {f(gg, 5, 2)} (geomean), "
              f"{f(least_g, 5, 2)} (least); M = 128: x cuBLAS {f(min(big) if big else None, 5, 2)} (least)")
    sys.stdout.flush()


def draw(csv_path, outdir, title):
    """The figure over M of ktune plot (python/ktune/plot.py: plot_quant) from this run's CSV."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    try:
        from ktune import plot
        for path in plot.plot_files([csv_path], outdir, title, ["png"]):
            ew.log(f"plot: {path}")
    except ImportError as e:
        ew.log(f"--plot: {e}: no plot")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build-device/libktune.so", help="libktune.so (default %(default)s)")
    ap.add_argument("--db", default=None, help="tuning database for ktune_open (default: the default database)")
    ap.add_argument("--csv", default="bench-quant.csv", help="output CSV (default %(default)s)")
    ap.add_argument("--formats", default=",".join(FORMATS), help="subset of " + ",".join(FORMATS))
    ap.add_argument("--plot", default=None, metavar="DIR",
                    help="ktune plot's figure over M into DIR: the speedup over bf16 cuBLAS and the weight "
                         "bandwidth (needs matplotlib)")
    ap.add_argument("--quick", action="store_true", help="two shapes, M = 1, 16, 128, fewer reps")
    ap.add_argument("--m", type=lambda v: [int(x) for x in v.split(",")], default=None, metavar="M,...",
                    help="only these M (of " + ",".join(map(str, MS)) + ")")
    ap.add_argument("--dry-run", action="store_true", help="print the plan of cases and exit (no GPU, no torch)")
    ap.add_argument("--budget", type=float, default=None, help="seconds per timed batch (default 0.15)")
    ap.add_argument("--no-graph", action="store_true", help="eager mode only")
    ap.add_argument("--no-gemlite", action="store_true", help="skip gemlite")
    ap.add_argument("--no-ktune", action="store_true", help="skip ktune (baselines only)")
    args = ap.parse_args(argv)
    args.cpu_test = False
    args.no_liger = True  # the shared timing protocol asks; Liger has no quantized GEMM
    args.formats = [x.strip() for x in args.formats.split(",") if x.strip()]
    if not args.formats or any(x not in FORMATS for x in args.formats):
        ap.error(f"--formats: choose from {','.join(FORMATS)}")
    header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include", "ktune.h")
    hmsgs = [msg for msg in ew.header_check(header) if msg[0] in SIGS] if os.path.exists(header) else []
    cases = plan(args)
    if args.dry_run:
        print(f"# plan: {len(cases)} cases; formats {','.join(args.formats)}")
        for c in cases:
            print(f"{c['fmt']:<7} {c['shape_str']:>16} weight {c['bytes'] / ew.MiB:>8.1f} MiB "
                  f"(bf16 {c['lib_bytes']['cublas'] / ew.MiB:.1f} MiB)  {','.join(c['libs'])}")
        print("# header check: " + ("ok" if not hmsgs else "; ".join(msg for _, _, msg in hmsgs)))
        return 0
    for _, _, msg in hmsgs:
        ew.log(f"header check: {msg}")
    try:
        import torch
    except Exception as e:
        ew.log(f"cannot import torch: {e}")
        return 1
    if not torch.cuda.is_available():
        ew.log("no CUDA device visible to torch (use --dry-run to see the plan)")
        return 1
    torch.manual_seed(0)
    b = QuantBench(args, torch)
    b.header_msgs = hmsgs
    try:
        b.run(cases)
    except Exception:
        traceback.print_exc()
        return 1
    if b.failed:
        ew.log(f"FAILED CHECKS: {b.failed} (see the check column of {args.csv})")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
