#!/usr/bin/env python3
"""bench/wgmma/ncu-idle.py - where the time of each kernel in NCU_SHAPES logs goes.

    python3 bench/wgmma/ncu-idle.py [--each] $OUT/ncu_*.log > summary.txt

For each log probe.sh's NCU_SHAPES wrote, and each kernel profiled in it
(ours and cuBLAS's), the median launch's time, grid, the share of elapsed
SM cycles in which an SM had no block (idle: the last wave's tail), its
active cycles per SM and the tensor pipe's activity.  All launches of a
kernel name are pooled, so the median mixes our variants where a directory
holds several; --each lists every launch in order instead.  Probes 35 and
38 (README.md) were read this way.
"""
import re
import sys


def metric(block, name):
    m = re.search(re.escape(name) + r"\s+\S*\s+([\d,.]+)\n", block)
    return float(m.group(1).replace(",", "")) if m else float("nan")


def summarise(path, each):
    text = open(path).read()
    sms = re.search(r"(\d+) SMs", text)  # the harness's device line
    sms = int(sms.group(1)) if sms else 132
    launches = []
    for block in re.split(r"\n  (?=\S+.*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\))", text)[1:]:
        head = block.split("\n")[0]
        grid = re.search(r"\((\d+, \d+, \d+)\)x", head)
        elapsed = metric(block, "sm__cycles_elapsed.max")
        active = metric(block, "sm__cycles_active.sum") / sms
        launches.append((head.split(" ")[0], (
            metric(block, "gpu__time_duration.sum"), grid.group(1) if grid else "?",
            1 - active / elapsed, active,
            metric(block, "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"))))
    groups = [(name, [run]) for name, run in launches] if each else {}
    if not each:
        for name, run in launches:
            groups.setdefault(name, []).append(run)
        groups = list(groups.items())
    print(path)
    for name, runs in groups:
        runs.sort()
        t, grid, idle, active, tensor = runs[len(runs) // 2]
        print(f"   {name[:60]:60s} grid {grid:12s} n={len(runs)} t={t:8.1f} idle={100 * idle:5.1f}% "
              f"active={active / 1e3:8.0f}K tensor={tensor:5.1f}%")


def main():
    each = "--each" in sys.argv[1:]
    paths = [a for a in sys.argv[1:] if a != "--each"]
    if not paths:
        sys.exit(__doc__.strip().split("\n\n")[1])
    for path in sorted(paths, key=lambda p: [int(x) for x in re.findall(r"\d+", p)]):
        summarise(path, each)


if __name__ == "__main__":
    main()
