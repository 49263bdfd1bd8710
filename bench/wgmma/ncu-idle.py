#!/usr/bin/env python3
"""bench/wgmma/ncu-idle.py - where the time of each kernel in NCU_SHAPES logs goes.

    python3 bench/wgmma/ncu-idle.py $OUT/ncu_*.log > summary.txt

For each log probe.sh's NCU_SHAPES wrote, and each kernel profiled in it
(ours and cuBLAS's), the median launch's time, grid, the share of elapsed
SM cycles in which an SM had no block (idle: the last wave's tail), its
active cycles per SM and the tensor pipe's activity.  Probe 35 (README.md)
was read this way.
"""
import re
import sys


def metric(block, name):
    m = re.search(re.escape(name) + r"\s+\S*\s+([\d,.]+)\n", block)
    return float(m.group(1).replace(",", "")) if m else float("nan")


def summarise(path):
    text = open(path).read()
    kernels = {}
    for block in re.split(r"\n  (?=\S+.*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\))", text)[1:]:
        head = block.split("\n")[0]
        grid = re.search(r"\((\d+, \d+, \d+)\)x", head)
        elapsed = metric(block, "sm__cycles_elapsed.max")
        active = metric(block, "sm__cycles_active.sum") / 132  # per SM, on the H100's 132
        kernels.setdefault(head.split(" ")[0], []).append((
            metric(block, "gpu__time_duration.sum"), grid.group(1) if grid else "?",
            1 - active / elapsed, active,
            metric(block, "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed")))
    print(path)
    for name, runs in kernels.items():
        runs.sort()
        t, grid, idle, active, tensor = runs[len(runs) // 2]
        print(f"   {name[:60]:60s} grid {grid:12s} n={len(runs)} t={t:8.1f} idle={100 * idle:5.1f}% "
              f"active={active / 1e3:8.0f}K tensor={tensor:5.1f}%")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__.strip().split("\n\n")[1])
    for path in sorted(sys.argv[1:], key=lambda p: [int(x) for x in re.findall(r"\d+", p)]):
        summarise(path)


if __name__ == "__main__":
    main()
