#!/usr/bin/env python3
"""bench/report.py - turn a sweep's results into bench/results/<gpu>.md and .csv.

    python3 bench/report.py RESULTS.csv SWEEP.log OUT_PREFIX [COMMAND] [--bench BENCH.log]

RESULTS.csv is `ktune show --format csv` after the sweep; SWEEP.log is the
sweep's output (for its wall time); OUT_PREFIX e.g. bench/results/h100.
Adds the roofline floor (max of bytes / the GPU's copy bandwidth and FLOPs /
800 TFLOP/s; CEILINGS below), the ratio cuBLAS time / ktune time measured in
the same run, and, on the H100, the Triton tutorial matmul's ratio from
bench/anchors/ for the same key (layout nn only: the anchors were measured for
nn).  BENCH.log, the output of `ktune bench` on the same results, adds each
key's ratio timed again apart from the sweep.
"""
import csv
import math
import os
import re
import sys

LLM = {(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)}  # the default suite's weight shapes (N, K)
# Per GPU (the device name the sweep stored): the copy bandwidth in bytes/s
# (read + written: the anchors' 3005 GB/s on the H100, where bench/copy reads
# 2987; bench/copy elsewhere), the GEMM ceiling in FLOP/s (800 T measured on
# the H100; the H200 is the same chip at the same clocks), and the Triton
# anchors' file where they were measured.
CEILINGS = {
    "NVIDIA H100 80GB HBM3": (3.0e12, 800e12, "h100-gemm-cublas-triton.csv"),
    "NVIDIA H200": (4.19e12, 800e12, None),  # bench/copy: 4185 GB/s (bench/results/h200-bench.log)
}


def geomean(xs):
    xs = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def again(out, pick):
    """', timed again by ktune bench: G (range)' over the picked keys, or '' without a bench log."""
    sel = [o["bench_ratio"] for o in out if pick(o) and o.get("bench_ratio", 0) > 0]
    if not sel:
        return ""
    return f"; timed again (ktune bench): {geomean(sel):.3f} ({min(sel):.2f}-{max(sel):.2f})"


def bench_ratios(path):
    """(dtype, layout, m, n, k) -> the ratio 'ktune bench' printed for the key now."""
    out = {}
    for line in open(path):
        m = re.match(r"gemm (\w+) (\w+) (\d+)x(\d+)x(\d+) \w+\s+\S+\s+([0-9.]+)\s", line)
        if m:
            out[(m.group(1), m.group(2), int(m.group(3)), int(m.group(4)), int(m.group(5)))] = float(m.group(6))
    return out


def main():
    argv = sys.argv[1:]
    bench = {}
    if "--bench" in argv:
        i = argv.index("--bench")
        bench = bench_ratios(argv[i + 1])
        del argv[i:i + 2]
    results, log, prefix = argv[0], argv[1], argv[2]
    command = argv[3] if len(argv) > 3 else "ktune sweep"
    rows = list(csv.DictReader(open(results)))
    gpu = rows[0]["device"] if rows else "?"
    if gpu not in CEILINGS:
        sys.exit(f"report.py: no ceilings for '{gpu}': measure its copy bandwidth with bench/copy "
                 "and add it to CEILINGS")
    bw, peak, anchors = CEILINGS[gpu]
    triton = {}
    anchor_rows = csv.DictReader(open(os.path.join(os.path.dirname(__file__), "anchors", anchors))) if anchors else []
    for a in anchor_rows:
        dt = {"float16": "f16", "bfloat16": "bf16"}[a["dtype"]]
        triton[(dt, int(a["M"]), int(a["N"]), int(a["K"]))] = float(a["triton_over_cublas"])
    wall = ""
    m = re.search(r"keys: .*?; ([0-9.]+) s", open(log).read()) if os.path.exists(log) else None
    if m:
        wall = m.group(1)

    out = []
    for r in rows:
        if r.get("op", "gemm") != "gemm":
            continue  # the other ops' tables: bench/ops/report.py
        layout = r.get("variant", r.get("layout"))  # 'ktune show --format csv' before op variants said layout
        M, N, K = int(r["m"]), int(r["n"]), int(r["k"])
        flops = 2.0 * M * N * K
        bytes_ = 2.0 * (M * K + K * N + M * N)
        t_bw, t_fl = bytes_ / bw * 1e6, flops / peak * 1e6
        floor = max(t_bw, t_fl)
        t = float(r["time_us"])
        cub = float(r.get("baseline_us", r.get("cublas_us")))
        out.append({
            "dtype": r["dtype"], "layout": layout, "m": M, "n": N, "k": K,
            "ktune_us": t, "ktune_tflops": flops / t / 1e6,
            "cublas_us": cub, "cublas_tflops": flops / cub / 1e6 if cub > 0 else 0,
            "ratio": cub / t if cub > 0 else 0,
            "floor_us": floor, "bound": "memory" if t_bw > t_fl else "compute",
            "ktune_over_floor": t / floor,
            "triton_ratio": triton.get((r["dtype"], M, N, K), "") if layout == "nn" else "",
            "candidates": int(r["candidates"]), "tune_s": float(r["tune_s"]),
            "err_fro": float(r["err_fro"]), "config": r["config"],
        })
        if bench:
            out[-1]["bench_ratio"] = bench.get((r["dtype"], layout, M, N, K), 0)
    out.sort(key=lambda o: (o["dtype"], o["layout"], o["m"] != o["n"] or o["n"] != o["k"],
                            o["n"], o["k"], o["m"]))
    with open(prefix + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(out[0].keys()))
        w.writeheader()
        for o in out:
            w.writerow({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in o.items()})

    lines = [f"# ktune GEMM on {gpu}: the default suite", "",
             f"Made by `{command}` (bench/README.md says how, and how to read it), then "
             f"`python3 bench/report.py`. Ratio = cuBLAS time / ktune time, both measured in the same "
             f"run by the same protocol ({rows[0]['template_hash'][:12] if rows else ''}... template): "
             "CUDA events, L2 flushed before every run, warm-up, repetitions until the p20-p80 spread is "
             "within 2% of the median (at most 200 or 0.5 s), median; the winner and cuBLAS then four times each "
             "in turns (ABBA), the median of each side's four. Inputs uniform random in [-1, 1). "
             f"Floor = max(bytes / {bw / 1e12:.1f} TB/s, FLOPs / {peak / 1e12:.0f} TFLOP/s)." +
             (" Again = the ratio timed again by `ktune bench` apart from the sweep (the median of its "
              "rounds; the sweep times a key on a GPU hot from its candidates)." if bench else ""), ""]
    ratios = [o["ratio"] for o in out if o["ratio"] > 0]
    lines.append(f"- keys: {len(out)}; sweep wall time: {wall or '?'} s; "
                 f"candidates timed per key: {min(o['candidates'] for o in out)}-"
                 f"{max(o['candidates'] for o in out)} (total {sum(o['candidates'] for o in out)})")
    lines.append(f"- geometric mean of cuBLAS time / ktune time: **{geomean(ratios):.3f}** "
                 f"(range {min(ratios):.2f}-{max(ratios):.2f}){again(out, lambda o: True)}")
    for dt in ("f16", "bf16"):
        for lay in ("nn", "nt"):
            sel = [o["ratio"] for o in out if o["dtype"] == dt and o["layout"] == lay]
            if sel:
                lines.append(f"  - {dt} {lay}: {geomean(sel):.3f}")
    nn = [o for o in out if o["layout"] == "nn" and o["triton_ratio"] != ""]
    if nn:
        lines.append(f"- Triton tutorial matmul (anchors, layout nn, same keys): geometric mean "
                     f"{geomean([o['triton_ratio'] for o in nn]):.3f}; ktune on the same {len(nn)} keys: "
                     f"**{geomean([o['ratio'] for o in nn]):.3f}**")
    small = [o for o in out if o["m"] <= 16 and (o["n"], o["k"]) in LLM]
    if small:
        worst = min(small, key=lambda o: o["ratio"])
        lines.append(f"- M <= 16 on the LLM weight shapes: {sum(o['ratio'] > 1 for o in small)}/"
                     f"{len(small)} keys faster than cuBLAS; the lowest ratio is {worst['ratio']:.2f} "
                     f"({worst['dtype']} {worst['layout']} {worst['m']}x{worst['n']}x{worst['k']})")
    wg = [o for o in out if o["config"].startswith("FAMILY=wgmma")]
    lines.append(f"- families: {len(wg)} keys won by wgmma (gemm_wgmma.cu), {len(out) - len(wg)} by "
                 f"mma.sync (gemm.cu)")
    big = [o for o in out if o["dtype"] == "bf16" and o["m"] == o["n"] == o["k"] == 8192]
    for o in big:
        lines.append(f"- bf16 8192^3 ({o['layout']}): **{o['ktune_tflops']:.0f} TFLOP/s** (cuBLAS in the same run: "
                     f"{o['cublas_tflops']:.0f}); checkpoints of hand-written H100 kernels: about 490 "
                     f"(TMA + wgmma, one warpgroup), 630 (producer/consumer), 770 (persistent, raw "
                     f"mbarrier waits), 800 (cluster multicast)")
    issue5 = [("square 2048, 4096, 8192", lambda o: o["m"] == o["n"] == o["k"] and o["m"] >= 2048),
              ("LLM shapes, M = 1024 and 4096", lambda o: o["m"] in (1024, 4096) and (o["n"], o["k"]) in LLM)]
    for name, pick in issue5:
        sel = [o["ratio"] for o in out if pick(o)]
        if sel:
            lines.append(f"- {name}: geometric mean {geomean(sel):.3f} (range {min(sel):.2f}-{max(sel):.2f})"
                         f"{again(out, pick)}")
    lines.append(f"- keys below 0.95: {sum(o['ratio'] < 0.95 for o in out)} of {len(out)}")
    # (name, right-aligned) per column; "again" only with a bench log
    cols = [("dtype", 0), ("layout", 0), ("M x N x K", 0), ("ktune us", 1), ("TFLOP/s", 1), ("cuBLAS us", 1),
            ("cuBLAS TFLOP/s", 1), ("ratio", 1)] + ([("again", 1)] if bench else []) + \
           ([("Triton ratio", 1)] if anchors else []) + \
           [("floor us", 1), ("bound", 0), ("x floor", 1), ("cands", 1), ("tune s", 1), ("config", 0)]
    lines += ["", "| " + " | ".join(c for c, _ in cols) + " |",
              "|" + "|".join("---:" if right else "---" for _, right in cols) + "|"]
    for o in out:
        tr = f"{o['triton_ratio']:.2f}" if o["triton_ratio"] != "" else ""
        cfg = re.sub(r"(BLOCK_|WARPS_|GROUP_SIZE|SPLIT_K|STAGES)", lambda m: {
            "BLOCK_": "", "WARPS_": "W", "GROUP_SIZE": "G", "SPLIT_K": "SK", "STAGES": "S"}[m.group(1)],
            o["config"])
        lines.append(f"| {o['dtype']} | {o['layout']} | {o['m']}x{o['n']}x{o['k']} | {o['ktune_us']:.1f} | "
                     f"{o['ktune_tflops']:.1f} | {o['cublas_us']:.1f} | {o['cublas_tflops']:.1f} | "
                     f"{o['ratio']:.2f} | " + (f"{o['bench_ratio']:.2f} | " if bench else "") +
                     (f"{tr} | " if anchors else "") + f"{o['floor_us']:.1f} | {o['bound']} | "
                     f"{o['ktune_over_floor']:.2f} | {o['candidates']} | {o['tune_s']:.1f} | {cfg} |")
    open(prefix + ".md", "w").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
