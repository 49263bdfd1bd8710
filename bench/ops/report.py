#!/usr/bin/env python3
"""bench/ops/report.py - Markdown (and optional plots) from the CSV of bench/ops/elementwise.py
or bench/ops/rowwise.py.

    python3 bench/ops/report.py elementwise.csv [more.csv ...] --command "CMD" [--out REPORT.md] [--plots DIR]

Several CSVs are merged (a row measured again in a later file replaces the
earlier one); PATH.meta.json beside a CSV, if there, adds the device and the
versions.  Per case, a library's figure is the best of its eager and graph
rows whose check passed (elementwise.py's rule).  The copy ceiling is the
largest copy bandwidth measured (first and last of each run).  Plots need
matplotlib; without it they are skipped with a message.
"""
import argparse
import csv
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from elementwise import best_by_case  # noqa: E402  (stdlib-only at import)

BIG = 16 * 1024 * 1024  # the "large" sizes: >= 16M elements


def load(paths):
    rows, metas, order = {}, [], []
    for i, p in enumerate(paths):
        with open(p, newline="") as f:
            for r in csv.DictReader(f):
                k = (r["op"], r["variant"], r["dtype"], r["shape"], r["library"], r["mode"])
                if r["library"] == "copy":
                    k = k + (i,)  # every run's copy figures count
                if k not in rows:
                    order.append(k)
                rows[k] = r
        mp = p + ".meta.json"
        if os.path.exists(mp):
            try:
                metas.append(json.load(open(mp)))
            except (OSError, ValueError) as e:
                print(f"report.py: {mp}: {e}", file=sys.stderr)
    return [rows[k] for k in order], metas


def fnum(v, fmt):
    return format(v, fmt) if v is not None else "-"


def ratio(a, b):
    return a / b if a and b else None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--command", default="", help="the command line that made the CSV(s)")
    ap.add_argument("--out", default="-", help="Markdown output (default stdout)")
    ap.add_argument("--plots", default=None, help="directory for one PNG per op (needs matplotlib)")
    ap.add_argument("--title", default="Elementwise ops: ktune against PyTorch eager and Liger Kernel",
                    help="the page's title")
    args = ap.parse_args(argv)
    rows, metas = load(args.csv)
    if not rows:
        sys.exit("report.py: no rows")

    copies = [float(r["gbps"]) for r in rows
              if r["library"] == "copy" and r["gbps"] and not r["check"].startswith("FAIL")]
    ceiling = max(copies) if copies else None
    best = best_by_case(rows)
    ops = []
    for key in best:
        if key[0] not in ops:
            ops.append(key[0])

    out = []
    w = out.append
    w(f"# {args.title}\n")
    if args.command:
        w(f"Made by `{args.command}`.\n")
    for m in metas:
        bits = [f"device {m.get('device')}", f"torch {m.get('torch')}", f"CUDA {m.get('cuda')}",
                f"Liger {m.get('liger') or 'absent'}", f"ktune {m.get('ktune') or 'absent'}"]
        if m.get("wall_s") is not None:
            bits.append(f"{m['wall_s']} s")
        if m.get("started"):
            bits.append(f"started {m['started']}")
        w("Run: " + ", ".join(bits) + ".\n")
    per = ", ".join(f"{r['variant']} {r['mode']} {float(r['gbps']):.0f}" for r in rows
                    if r["library"] == "copy" and r["gbps"])
    w(f"Copy ceiling: **{fnum(ceiling, '.0f')} GB/s** (a 1 GiB device-to-device `copy_`, 2 GiB moved; "
      f"measured first and last: {per or 'none'}; the larger is the ceiling).\n")
    w("GB/s = the op's minimum traffic (bytes column of the CSV) / median time; a library's figure is the "
      "best of eager and CUDA-graph replay; ratios are ktune's GB/s over the baseline's (> 1: ktune faster). "
      "L2 flushed before every timed call.\n")
    fails = [r for r in rows if r["check"].startswith("FAIL")]
    if fails:
        w(f"**{len(fails)} rows failed their check** (marked FAIL below).\n")

    for op in ops:
        keys = [k for k in best if k[0] == op]
        w(f"\n## {op}\n")
        w("| variant | shape | dtype | ktune GB/s | of copy | torch GB/s | ktune/torch | liger GB/s | ktune/liger "
          "| dispatch |")
        w("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
        frac_big, rt_all, rl_all, rt_big, rl_big = [], [], [], [], []
        for k in keys:
            d = best[k]
            kt = d.get("ktune", (None, "-", ""))
            kg, tg, lg = kt[0], d.get("torch", (None,))[0], d.get("liger", (None,))[0]
            elements = next((int(r["elements"]) for r in rows if (r["op"], r["variant"], r["dtype"], r["shape"]) == k),
                            0)
            fr, rt, rl = ratio(kg, ceiling), ratio(kg, tg), ratio(kg, lg)
            marks = [f"{lib}: {v[1]}" for lib, v in d.items() if v[1].startswith("FAIL")]
            disp = kt[2] + ("; " if kt[2] and marks else "") + "; ".join(marks)
            w(f"| {k[1]} | {k[3]} | {k[2]} | {fnum(kg, '.0f')} | {fnum(fr, '.2f')} | {fnum(tg, '.0f')} | "
              f"{fnum(rt, '.2f')} | {fnum(lg, '.0f')} | {fnum(rl, '.2f')} | {disp.replace('|', '/')} |")
            if rt is not None:
                rt_all.append((rt, k))
            if rl is not None:
                rl_all.append((rl, k))
            if elements >= BIG:
                if fr is not None:
                    frac_big.append((fr, k))
                if rt is not None:
                    rt_big.append((rt, k))
                if rl is not None:
                    rl_big.append((rl, k))

        def mn(xs, fmt=".2f"):
            if not xs:
                return "-"
            v, k = min(xs)
            return f"{v:{fmt}} ({(k[1] + ' ') if k[1] != '-' else ''}{k[3]} {k[2]})"
        w("")
        w(f"{op}: min fraction of copy at >= 16M elements {mn(frac_big)}; min ktune/torch {mn(rt_all)} "
          f"(>= 16M: {mn(rt_big)}); min ktune/liger {mn(rl_all)} (>= 16M: {mn(rl_big)}).")

    if args.plots:
        out.append("")
        out.extend(plots(args.plots, rows, best, ops, ceiling, args.out))
    text = "\n".join(out) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


def plots(d, rows, best, ops, ceiling, out_path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        print(f"report.py: no plots: matplotlib not importable ({e})", file=sys.stderr)
        return []
    os.makedirs(d, exist_ok=True)
    elements = {}
    for r in rows:
        elements[(r["op"], r["variant"], r["dtype"], r["shape"])] = int(r["elements"])
    lines = []
    for op in ops:
        series = {}
        for k, libs in best.items():
            if k[0] != op:
                continue
            for lib, (gb, chk, _) in libs.items():
                if gb is None:
                    continue
                name = lib + ("" if k[1] == "-" else f" {k[1]}") + (f" {k[2]}" if k[2] != "bf16" else "")
                series.setdefault(name, []).append((elements[k], gb, chk.startswith("FAIL")))
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name, pts in sorted(series.items()):
            pts.sort()
            style = "-o" if name.startswith("ktune") else "--s" if name.startswith("torch") else ":^"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=name, markersize=4)
            bad = [p for p in pts if p[2]]
            if bad:
                ax.plot([p[0] for p in bad], [p[1] for p in bad], "rx", markersize=9)
        if ceiling:
            ax.axhline(ceiling, color="k", lw=1, ls="-.", label=f"copy {ceiling:.0f} GB/s")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("elements (per output)")
        ax.set_ylabel("GB/s (minimum traffic / median time)")
        ax.set_title(f"{op}: best of eager and graph (x: failed check)")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        path = os.path.join(d, f"{op}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        rel = os.path.relpath(path, os.path.dirname(os.path.abspath(out_path))) if out_path != "-" else path
        lines.append(f"![{op}]({rel})")
    return lines


if __name__ == "__main__":
    sys.exit(main())
