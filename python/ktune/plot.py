"""`ktune plot`: perf_report-style figures (one op per figure, a panel per
variant and dtype, the size on the x axis) of ktune against its baselines and
the floor, as PNG and SVG, from the CSVs the benchmarks write:

  bench/ops/elementwise.py, rowwise.py   columns op,...,library,mode,gbps,check: ktune, PyTorch
                                         eager and Liger in GB/s, each the best of eager and
                                         CUDA-graph (report.py's rule), the run's copy
                                         bandwidth as the floor
  bench/ops/quant.py                     the same columns, op gemm_quant: over M, a panel per
                                         weight shape (N, K), the speedup over bf16 cuBLAS
                                         (ktune, gemlite) and the weight bandwidth (each
                                         library's own weight bytes) against the copy, its
                                         fraction of the copy on the right axis
  bench/ops/attention.py                 columns setting,direction,...,seqlen,head_dim,library,
                                         tflops: TFLOP/s over the sequence length, ktune (and
                                         its deterministic backward) and SDPA's cuDNN and flash
                                         backends, a figure per pass and dtype
  bench/report.py (results/<gpu>.csv)    GEMM: ktune and cuBLAS TFLOP/s, the Triton tutorial's
                                         (the anchors' Triton/cuBLAS ratio times this run's
                                         cuBLAS), and the roofline (floor_us)
  ktune show --format csv                what a sweep or tune stored: ktune and its baseline
                                         (cuBLAS; for the other ops a copy of as many bytes:
                                         the floor)

A check that failed is a red cross (where none of eager and graph passed). An SVG drawn again
from the same CSV is the same file.

    ktune plot bench/results/h100-elementwise.csv -o plots/ [--title H100] [--formats png,svg]
"""
import argparse
import csv
import math
import os
import sys

STYLE = {"ktune": ("-o", "C0"), "torch": ("--s", "C1"), "liger": (":^", "C2"), "cublas": ("--s", "C1"),
         "triton": (":^", "C2"), "baseline": ("--s", "C1"), "gemlite": (":^", "C2"), "cudnn": ("--s", "C1"),
         "flash": (":^", "C2"), "ktune-det": ("-.D", "C4")}


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def kind(rows):
    """'ops', 'attention', 'gemm' or 'show', by the CSV's columns; ValueError otherwise."""
    cols = set(rows[0]) if rows else set()
    if {"seqlen", "head_dim", "library", "tflops"} <= cols:
        return "attention"
    if {"library", "gbps", "elements", "shape"} <= cols:
        return "ops"
    if {"ktune_tflops", "cublas_tflops", "floor_us"} <= cols:
        return "gemm"
    if {"op", "time_us", "baseline_us", "tflops", "gbps"} <= cols:
        return "show"
    raise ValueError("not a CSV of bench/ops (attention's included), bench/report.py or 'ktune show --format csv' "
                     f"(columns: {', '.join(sorted(cols)) or 'none'})")


def _size_label(shape):
    if "x" in shape:
        return shape
    n = int(shape)
    for unit, s in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= s and n % s == 0:
            return f"{n // s}{unit}"
    return str(n)


def _failed(r):
    return r["check"].startswith("FAIL")


def _best(rows, key, rate):
    """{key(r): (r, failed)}: per key the row of the highest rate(r) among those whose check
    passed (the best of eager and CUDA-graph); a failed row only where none passed."""
    best = {}
    for r in rows:
        k, failed = key(r), _failed(r)
        old = best.get(k)
        if old is None or (old[1] and not failed) or (old[1] == failed and rate(r) > rate(old[0])):
            best[k] = (r, failed)
    return best


def copy_floor(rows):
    """The run's copy bandwidth in GB/s (the largest copy measured), or None."""
    copies = [float(r["gbps"]) for r in rows if r["library"] == "copy" and r["gbps"] and not _failed(r)]
    return max(copies) if copies else None


def ops_series(rows):
    """{op: {(variant, dtype): {library: [(elements, shape, gbps, failed)]}}} and the
    copy floor (GB/s, the largest copy measured), from a bench/ops CSV; gemm_quant's
    rows are quant_series's."""
    mine = [r for r in rows if r["library"] not in ("copy", "-") and r["gbps"] and r["op"] != "gemm_quant"]
    best = {k: (int(r["elements"]), float(r["gbps"]), failed) for k, (r, failed) in
            _best(mine, lambda r: (r["op"], r["variant"], r["dtype"], r["shape"], r["library"]),
                  lambda r: float(r["gbps"])).items()}
    out = {}
    for (op, variant, dtype, shape, lib), (el, gb, failed) in best.items():
        out.setdefault(op, {}).setdefault((variant, dtype), {}).setdefault(lib, []).append(
            (el, shape, gb, failed))
    return out, copy_floor(rows)


def _panels(n):
    cols = 2 if n == 4 else min(n, 3)
    return math.ceil(n / cols), cols


def _finish(ax, ylabel, legend="lower right"):
    """What every panel has: its unit, a y axis from zero, a light grid and a small legend."""
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc=legend)


def _hide_unused(axes, used):
    for ax in list(axes.flat)[used:]:
        ax.set_visible(False)


def _failures(ax, lib, pts, y):
    """A red cross on each point of `pts` (x first, `failed` last, the value at index y) whose
    check failed."""
    bad = [p for p in pts if p[-1]]
    if bad:
        ax.plot([p[0] for p in bad], [p[y] for p in bad], "rx", ms=9, label=f"{lib}: check failed")


def _save(fig, outdir, name, formats):
    paths = []
    for ext in formats:
        p = os.path.join(outdir, f"{name}.{ext}")
        fig.savefig(p, dpi=110, metadata={"Date": None} if ext == "svg" else None)
        paths.append(p)
    return paths


def plot_ops(plt, rows, outdir, title, formats):
    series, floor = ops_series(rows)
    paths = []
    for op, panels in series.items():
        nr, nc = _panels(len(panels))
        fig, axes = plt.subplots(nr, nc, figsize=(max(4.6 * nc, 7.5), 3.5 * nr), squeeze=False)
        for ax, ((variant, dtype), libs) in zip(axes.flat, sorted(panels.items())):
            shapes = sorted({(el, sh) for pts in libs.values() for el, sh, _, _ in pts})
            xs = {sh: i for i, (_, sh) in enumerate(shapes)}
            for lib in sorted(libs, key=lambda name: (name != "ktune", name)):
                pts = sorted(libs[lib], key=lambda p: xs[p[1]])
                style, color = STYLE.get(lib, ("-.", None))
                ax.plot([xs[p[1]] for p in pts], [p[2] for p in pts], style, color=color, label=lib, ms=4)
                bad = [p for p in pts if p[3]]
                if bad:
                    ax.plot([xs[p[1]] for p in bad], [p[2] for p in bad], "rx", ms=9, label=f"{lib}: check failed")
            if floor:
                ax.axhline(floor, color="k", lw=1, ls="-.", label=f"copy {floor:.0f} GB/s")
            ax.set_xticks(range(len(shapes)), [_size_label(sh) for _, sh in shapes],
                          rotation=30 if any("x" in sh for _, sh in shapes) else 0, fontsize=8)
            ax.set_title(" ".join(s for s in (variant if variant != "-" else "", dtype) if s), fontsize=9)
            _finish(ax, "GB/s")
        _hide_unused(axes, len(panels))
        fig.suptitle(f"{title}{op}: GB/s (the op's fewest bytes / median time), higher is better", fontsize=10)
        fig.tight_layout()
        paths += _save(fig, outdir, op, formats)
        plt.close(fig)
    return paths


def _nest(items):
    """{figure: {panel: {library: [point, ...] in order}}} of (figure, panel, library, point)s."""
    out = {}
    for figure, panel, lib, point in items:
        out.setdefault(figure, {}).setdefault(panel, {}).setdefault(lib, []).append(point)
    for panels in out.values():
        for libs in panels.values():
            for pts in libs.values():
                pts.sort()
    return out


def quant_series(rows):
    """{(variant, dtype): {(n, k): {library: [(m, time_us, gbps, failed)]}}} of a bench/ops
    CSV's gemm_quant rows (shape "MxNxK"), each the best of eager and graph."""
    mine = [r for r in rows if r["op"] == "gemm_quant" and r["time_us"]]
    best = _best(mine, lambda r: (r["variant"], r["dtype"], r["shape"], r["library"]),
                 lambda r: -float(r["time_us"]))
    return _nest(((variant, dtype), tuple(int(v) for v in shape.split("x")[1:]), lib,
                  (int(shape.split("x")[0]), float(r["time_us"]), float(r["gbps"]), failed))
                 for (variant, dtype, shape, lib), (r, failed) in best.items())


def quant_speedups(libs):
    """{library: [(m, speedup, failed)]}: each library but cuBLAS against bf16 cuBLAS (its time
    over the library's) at the M where cuBLAS's check passed; a failed row keeps its flag, to be
    drawn as a failure and not read as a win."""
    base = {m: t for m, t, _, failed in libs.get("cublas", []) if not failed}
    return {lib: [(m, base[m] / t, failed) for m, t, _, failed in pts if m in base]
            for lib, pts in libs.items() if lib != "cublas"}


def _quant_panels(axes, col, libs, floor):
    """Column `col`: above, each library's speedup over bf16 cuBLAS at each M; below, its weight
    GB/s, with its fraction of the copy on the right axis (the issue's "fraction of the copy
    ceiling next to each ratio")."""
    up, bw = axes[0][col], axes[1][col]
    speedups = quant_speedups(libs)
    for lib in sorted(libs, key=lambda name: (name != "ktune", name)):
        pts = libs[lib]
        style, color = STYLE.get(lib, ("-.", None))
        bw.plot([p[0] for p in pts], [p[2] for p in pts], style, color=color, label=lib, ms=4)
        _failures(bw, lib, pts, 2)
        if speedups.get(lib):
            up.plot([p[0] for p in speedups[lib]], [p[1] for p in speedups[lib]], style, color=color, label=lib,
                    ms=4)
            _failures(up, lib, speedups[lib], 1)
    up.axhline(1.0, color="C1", lw=1, ls="--", label="bf16 cuBLAS")
    if floor:
        bw.axhline(floor, color="k", lw=1, ls="-.", label=f"copy {floor:.0f} GB/s")
        frac = bw.secondary_yaxis("right", functions=(lambda gb: gb / floor, lambda f: f * floor))
        frac.set_ylabel("of the copy", fontsize=8)
    ms = sorted({p[0] for pts in libs.values() for p in pts})
    for ax, ylabel in ((up, "x bf16 cuBLAS"), (bw, "weight GB/s")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ms, [str(m) for m in ms], fontsize=8)
        _finish(ax, ylabel, "best")
    bw.set_xlabel("M (tokens)")


def plot_quant(plt, rows, outdir, title, formats):
    """gemm_quant over M: a figure per format and dtype, a column per weight shape (N, K)."""
    paths, floor = [], copy_floor(rows)
    for (variant, dtype), panels in sorted(quant_series(rows).items()):
        nc = len(panels)
        fig, axes = plt.subplots(2, nc, figsize=(max(4.2 * nc, 7.5), 6.4), squeeze=False)
        for col, ((n, k), libs) in enumerate(sorted(panels.items())):
            _quant_panels(axes, col, libs, floor)
            axes[0][col].set_title(f"N={n}, K={k}", fontsize=9)
        fig.suptitle(f"{title}gemm_quant {variant} {dtype}: speedup over bf16 cuBLAS; weight GB/s "
                     "(a library's own weight bytes / time)", fontsize=10)
        fig.tight_layout()
        paths += _save(fig, outdir, f"gemm_quant-{variant}-{dtype}", formats)
        plt.close(fig)
    return paths


def attention_series(rows):
    """{(direction, dtype): {(setting, head_dim, causal): {library: [(seqlen, tflops, failed)]}}}
    of a bench/ops/attention.py CSV, each the best of eager and graph."""
    best = _best([r for r in rows if r["tflops"]],
                 lambda r: (r["direction"], r["dtype"], r["setting"], int(r["head_dim"]), int(r["causal"]),
                            int(r["seqlen"]), r["library"]),
                 lambda r: float(r["tflops"]))
    return _nest(((direction, dtype), (setting, d, causal), lib, (s, float(r["tflops"]), failed))
                 for (direction, dtype, setting, d, causal, s, lib), (r, failed) in best.items())


def plot_attention(plt, rows, outdir, title, formats):
    """TFLOP/s over the sequence length: a figure per pass and dtype, a panel per setting,
    head dim and mask."""
    paths = []
    for (direction, dtype), panels in sorted(attention_series(rows).items()):
        nr, nc = _panels(len(panels))
        fig, axes = plt.subplots(nr, nc, figsize=(max(4.6 * nc, 7.5), 3.5 * nr), squeeze=False)
        for ax, ((setting, d, causal), libs) in zip(axes.flat, sorted(panels.items())):
            for lib in sorted(libs, key=lambda name: (name != "ktune", name)):
                pts = libs[lib]
                style, color = STYLE.get(lib, ("-.", None))
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, color=color, label=lib, ms=4)
                _failures(ax, lib, pts, 1)
            seqs = sorted({p[0] for pts in libs.values() for p in pts})
            ax.set_xscale("log", base=2)
            ax.set_xticks(seqs, [_size_label(str(s)) for s in seqs], fontsize=8)
            ax.set_xlabel("sequence length")
            ax.set_title(f"{setting}, head dim {d}{', causal' if causal else ''}", fontsize=9)
            _finish(ax, "TFLOP/s")
        _hide_unused(axes, len(panels))
        rule = "4·B·H·S²·D, halved when causal" + (", x2.5 for the backward" if direction != "fwd" else "")
        fig.suptitle(f"{title}attention {direction} {dtype}: TFLOP/s ({rule}), higher is better", fontsize=10)
        fig.tight_layout()
        paths += _save(fig, outdir, f"attention-{direction}-{dtype}", formats)
        plt.close(fig)
    return paths


def _gemm_panel(ax, pts, xkey, xlabel):
    pts = sorted(pts, key=lambda r: int(r[xkey]))
    x = [int(r[xkey]) for r in pts]
    flops = [2.0 * int(r["m"]) * int(r["n"]) * int(r["k"]) for r in pts]
    ax.plot(x, [float(r["ktune_tflops"]) for r in pts], "-o", color="C0", label="ktune", ms=4)
    ax.plot(x, [float(r["cublas_tflops"]) for r in pts], "--s", color="C1", label="cuBLAS", ms=4)
    tri = [(xi, float(r["cublas_tflops"]) * float(r["triton_ratio"])) for xi, r in zip(x, pts)
           if r.get("triton_ratio")]
    if tri:
        ax.plot(*zip(*tri), ":^", color="C2", label="Triton tutorial (anchors)", ms=4)
    ax.plot(x, [f / float(r["floor_us"]) / 1e6 for f, r in zip(flops, pts)], "-.", color="k", lw=1,
            label="roofline")
    ax.set_xscale("log", base=2)
    ax.set_xticks(x, [str(v) for v in x], fontsize=8)
    ax.set_xlabel(xlabel)
    _finish(ax, "TFLOP/s")


def plot_gemm(plt, rows, outdir, title, formats):
    """Squares M=N=K per dtype and layout; then, per dtype and layout, the LLM
    weight shapes (N, K) over M."""
    paths = []
    groups = sorted({(r["dtype"], r["layout"]) for r in rows})
    square = [(g, [r for r in rows if (r["dtype"], r["layout"]) == g and r["m"] == r["n"] == r["k"]])
              for g in groups]
    square = [(g, pts) for g, pts in square if pts]
    if square:
        nr, nc = _panels(len(square))
        fig, axes = plt.subplots(nr, nc, figsize=(max(4.6 * nc, 7.5), 3.5 * nr), squeeze=False)
        for ax, ((dt, lay), pts) in zip(axes.flat, square):
            _gemm_panel(ax, pts, "m", "M = N = K")
            ax.set_title(f"{dt} {lay}", fontsize=9)
        _hide_unused(axes, len(square))
        fig.suptitle(f"{title}GEMM, square: TFLOP/s, higher is better", fontsize=10)
        fig.tight_layout()
        paths += _save(fig, outdir, "gemm-square", formats)
        plt.close(fig)
    for dt, lay in groups:
        mine = [r for r in rows if (r["dtype"], r["layout"]) == (dt, lay)]
        shapes = sorted({(int(r["n"]), int(r["k"])) for r in mine if not r["m"] == r["n"] == r["k"]})
        if not shapes:
            continue
        nr, nc = _panels(len(shapes))
        fig, axes = plt.subplots(nr, nc, figsize=(max(4.6 * nc, 7.5), 3.5 * nr), squeeze=False)
        for ax, (n, k) in zip(axes.flat, shapes):
            _gemm_panel(ax, [r for r in mine if (int(r["n"]), int(r["k"])) == (n, k)], "m", "M (tokens)")
            ax.set_title(f"N={n}, K={k}", fontsize=9)
        _hide_unused(axes, len(shapes))
        fig.suptitle(f"{title}GEMM {dt} {lay}, LLM weight shapes: TFLOP/s over M", fontsize=10)
        fig.tight_layout()
        paths += _save(fig, outdir, f"gemm-llm-{dt}-{lay}", formats)
        plt.close(fig)
    return paths


def plot_show(plt, rows, outdir, title, formats):
    """A stored result per key: ktune's rate and its baseline's (the same
    bytes or FLOPs over the baseline's time)."""
    paths = []
    for op in sorted({r["op"] for r in rows}):
        mine = [r for r in rows if r["op"] == op]
        gemm = op == "gemm"
        panels = sorted({(r["dtype"], r["variant"]) for r in mine})
        nr, nc = _panels(len(panels))
        fig, axes = plt.subplots(nr, nc, figsize=(max(4.6 * nc, 7.5), 3.5 * nr), squeeze=False)
        for ax, (dt, var) in zip(axes.flat, panels):
            pts = [r for r in mine if (r["dtype"], r["variant"]) == (dt, var)]
            size = (lambda r: int(r["m"]) * int(r["n"]) * max(int(r["k"]), 1))
            pts.sort(key=lambda r: (size(r), r["m"], r["n"], r["k"]))
            label = (lambda r: f"{r['m']}x{r['n']}x{r['k']}" if gemm else
                     (f"{r['m']}x{r['n']}" if int(r["n"]) > 0 and op not in ("add", "gelu", "dropout")
                      else _size_label(r["m"])))
            rate = [float(r["tflops"] if gemm else r["gbps"]) for r in pts]
            base = [x * float(r["time_us"]) / float(r["baseline_us"]) if float(r["baseline_us"]) > 0 else float("nan")
                    for x, r in zip(rate, pts)]
            xs = range(len(pts))
            ax.plot(xs, rate, "-o", color="C0", label="ktune", ms=4)
            ax.plot(xs, base, "--s", color="C1" if gemm else "k", label="cuBLAS" if gemm else "copy (floor)", ms=4)
            ax.set_xticks(list(xs), [label(r) for r in pts], rotation=40, fontsize=7)
            ax.set_title(f"{dt} {var}", fontsize=9)
            _finish(ax, "TFLOP/s" if gemm else "GB/s")
        _hide_unused(axes, len(panels))
        fig.suptitle(f"{title}{op}: stored results against their baseline", fontsize=10)
        fig.tight_layout()
        paths += _save(fig, outdir, f"{op}-stored", formats)
        plt.close(fig)
    return paths


def plot_files(paths, outdir, title="", formats=("png", "svg")):
    """Draws every CSV of `paths` into `outdir`; returns the files written."""
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller, searchable SVGs
    matplotlib.rcParams["svg.hashsalt"] = "ktune plot"  # with no date: an SVG drawn again from the same CSV is
    # the same file, so git shows only the figures whose content changed
    import matplotlib.pyplot as plt
    os.makedirs(outdir, exist_ok=True)
    prefix = f"{title}: " if title else ""
    written = []
    for p in paths:
        rows = _read(p)
        k = kind(rows)
        draws = {"ops": (plot_ops, plot_quant), "attention": (plot_attention,), "gemm": (plot_gemm,),
                 "show": (plot_show,)}[k]
        for draw in draws:
            paths = draw(plt, rows, outdir, prefix, formats)
            again = sorted(set(paths) & set(written))
            if again:  # two CSVs of the same op and variant: the second would hide the first
                raise ValueError(f"{p} draws {', '.join(again)} again: plot it into another directory (-o)")
            written += paths
    return written


def main(argv=None):
    ap = argparse.ArgumentParser(prog="ktune plot", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("csv", nargs="+", help="CSV files (the kind is told by the columns)")
    ap.add_argument("-o", "--out", default="plots", help="output directory (default ./plots)")
    ap.add_argument("--title", default="", help="a prefix of every figure's title, e.g. the GPU")
    ap.add_argument("--formats", default="png,svg", help="comma-separated: png, svg, pdf (default png,svg)")
    args = ap.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("ktune plot: needs matplotlib (pip install matplotlib)", file=sys.stderr)
        return 2
    try:
        for path in plot_files(args.csv, args.out, args.title, [f for f in args.formats.split(",") if f]):
            print(path)
    except (OSError, ValueError, KeyError) as e:
        print(f"ktune plot: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
