#!/usr/bin/env python3
"""Each probe variant's ratio to cuBLAS over its base variant's, from harness probe logs.

    python3 bench/wgmma/probe-rel.py pass1/probe.log pass2/probe.log ...

A variant's base is the same tile without the extra defines (the part of the
name from "_D" on): for every (log, shape) both ran in, the variant's ratio to
the cuBLAS run timed right after it, divided by the base's.  Prints the
geometric mean over all of them and per shape (over the logs).  Identical
code read 0.98-1.01 this way over 21 rows (probe 49): differences under two
points are not resolved.
"""
import collections
import math
import re
import sys


def geo(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


def median(xs):
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2


rows = {}
for path in sys.argv[1:]:
    shape = None
    for line in open(path):
        if line.startswith("=="):
            shape = "x".join(line[3:].split())
            continue
        p = line.split()
        if len(p) >= 9 and p[0].startswith("bm"):
            rows[(path, shape, p[0])] = float(p[8])
names = sorted({n for _, _, n in rows})
for name in names:
    m = re.match(r"(.*?)(_D.*)?$", name)
    base = m.group(1)
    rel = collections.defaultdict(list)
    for (path, shape, n), r in rows.items():
        if n == name and (path, shape, base) in rows:
            rel[shape].append(r / rows[(path, shape, base)])
    if not rel:
        continue
    flat = [x for xs in rel.values() for x in xs]
    print(f"{name:60s} median {median(flat):.3f} geo {geo(flat):.3f} (n={len(flat)}) | " +
          " ".join(f"{s}:{geo(xs):.3f}" for s, xs in rel.items()))
