"""`ktune plot`: perf_report-style figures (one op per figure, a panel per
variant and dtype, the size on the x axis) of ktune against its baselines and
the floor, as PNG and SVG, from the CSVs the benchmarks write:

  bench/ops/elementwise.py, rowwise.py   columns op,...,library,mode,gbps,check: ktune, PyTorch
                                         eager and Liger in GB/s, each the best of eager and
                                         CUDA-graph (report.py's rule), the run's copy
                                         bandwidth as the floor
  bench/report.py (results/<gpu>.csv)    GEMM: ktune and cuBLAS TFLOP/s, the Triton tutorial's
                                         (the anchors' Triton/cuBLAS ratio times this run's
                                         cuBLAS), and the roofline (floor_us)
  ktune show --format csv                what a sweep or tune stored: ktune and its baseline
                                         (cuBLAS; for the other ops a copy of as many bytes:
                                         the floor)

    ktune plot bench/results/h100-elementwise.csv -o plots/ [--title H100] [--formats png,svg]
"""
import argparse
import csv
import math
import os
import sys

STYLE = {"ktune": ("-o", "C0"), "torch": ("--s", "C1"), "liger": (":^", "C2"), "cublas": ("--s", "C1"),
         "triton": (":^", "C2"), "baseline": ("--s", "C1")}


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def kind(rows):
    """'ops', 'gemm' or 'show', by the CSV's columns; ValueError otherwise."""
    cols = set(rows[0]) if rows else set()
    if {"library", "gbps", "elements", "shape"} <= cols:
        return "ops"
    if {"ktune_tflops", "cublas_tflops", "floor_us"} <= cols:
        return "gemm"
    if {"op", "time_us", "baseline_us", "tflops", "gbps"} <= cols:
        return "show"
    raise ValueError("not a CSV of bench/ops, bench/report.py or 'ktune show --format csv' "
                     f"(columns: {', '.join(sorted(cols)) or 'none'})")


def _size_label(shape):
    if "x" in shape:
        return shape
    n = int(shape)
    for unit, s in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= s and n % s == 0:
            return f"{n // s}{unit}"
    return str(n)


def ops_series(rows):
    """{op: {(variant, dtype): {library: [(elements, shape, gbps, failed)]}}} and the
    copy floor (GB/s, the largest copy measured), from a bench/ops CSV."""
    copies = [float(r["gbps"]) for r in rows if r["library"] == "copy" and r["gbps"]
              and not r["check"].startswith("FAIL")]
    best = {}
    for r in rows:
        if r["library"] in ("copy", "-") or not r["gbps"]:
            continue
        key = (r["op"], r["variant"], r["dtype"], r["shape"], r["library"])
        failed = r["check"].startswith("FAIL")
        gb = float(r["gbps"])
        old = best.get(key)
        # the best of eager and graph among rows that passed; a failed row only where none passed
        if old is None or (old[2] and not failed) or (old[2] == failed and gb > old[1]):
            best[key] = (int(r["elements"]), gb, failed)
    out = {}
    for (op, variant, dtype, shape, lib), (el, gb, failed) in best.items():
        out.setdefault(op, {}).setdefault((variant, dtype), {}).setdefault(lib, []).append(
            (el, shape, gb, failed))
    return out, (max(copies) if copies else None)


def _panels(n):
    cols = 2 if n == 4 else min(n, 3)
    return math.ceil(n / cols), cols


def _save(fig, outdir, name, formats):
    paths = []
    for ext in formats:
        p = os.path.join(outdir, f"{name}.{ext}")
        fig.savefig(p, dpi=110)
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
            ax.set_ylim(bottom=0)
            ax.grid(True, alpha=0.3)
            ax.set_ylabel("GB/s")
            ax.legend(fontsize=7, loc="lower right")
        for ax in list(axes.flat)[len(panels):]:
            ax.set_visible(False)
        fig.suptitle(f"{title}{op}: GB/s (the op's fewest bytes / median time), higher is better", fontsize=10)
        fig.tight_layout()
        paths += _save(fig, outdir, op, formats)
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
    ax.set_ylabel("TFLOP/s")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")


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
        for ax in list(axes.flat)[len(square):]:
            ax.set_visible(False)
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
        for ax in list(axes.flat)[len(shapes):]:
            ax.set_visible(False)
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
            ax.set_ylabel("TFLOP/s" if gemm else "GB/s")
            ax.set_ylim(bottom=0)
            ax.grid(True, alpha=0.3)
            ax.set_title(f"{dt} {var}", fontsize=9)
            ax.legend(fontsize=7, loc="lower right")
        for ax in list(axes.flat)[len(panels):]:
            ax.set_visible(False)
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
    import matplotlib.pyplot as plt
    os.makedirs(outdir, exist_ok=True)
    prefix = f"{title}: " if title else ""
    written = []
    for p in paths:
        rows = _read(p)
        k = kind(rows)
        draw = {"ops": plot_ops, "gemm": plot_gemm, "show": plot_show}[k]
        written += draw(plt, rows, outdir, prefix, formats)
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
