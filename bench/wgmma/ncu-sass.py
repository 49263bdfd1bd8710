#!/usr/bin/env python3
"""bench/wgmma/ncu-sass.py - read a kernel's SASS out of Nsight Compute's source counters.

    python3 bench/wgmma/ncu-sass.py SOURCE.csv opcodes      > OPCODES.txt
    python3 bench/wgmma/ncu-sass.py SOURCE.csv hot [MIN]    > HOT.sass

SOURCE.csv is what probe.sh's NCU_SOURCE writes ($OUT/DIR.source.csv: `ncu
--page source --csv --print-source sass`).  `opcodes` sums, per opcode, the
warp-level instructions executed (a warpgroup instruction counts once per
warp), the warp stall samples and the shared-memory wavefronts; `hot` lists
the instructions executed at least MIN times (default: a tenth of the most
executed one), sampled at least 1000 times, or storing C (STSM, UTMASTG,
F2FP), in address order.  Probe 34 (README.md) was read this way.
"""
import collections
import csv
import re
import sys


def read(path):
    rows = list(csv.reader(open(path)))
    header, data = rows[1], rows[2:]
    col = {name: header.index(name) for name in
           ("Source", "Instructions Executed", "Warp Stall Sampling (All Samples)", "L1 Wavefronts Shared")}

    def num(r, name):
        try:
            return int(r[col[name]].replace(",", "") or 0)
        except (IndexError, ValueError):
            return 0
    return [(r[col["Source"]].strip(), num(r, "Instructions Executed"),
             num(r, "Warp Stall Sampling (All Samples)"), num(r, "L1 Wavefronts Shared"))
            for r in data if len(r) > col["Source"]]


def opcodes(lines):
    count, samples, wavefronts = collections.Counter(), collections.Counter(), collections.Counter()
    for src, n, s, w in lines:
        op = re.sub(r"^@!?U?P\w+\s+", "", src).split(" ")[0]  # without its predicate
        count[op] += n
        samples[op] += s
        wavefronts[op] += w
    total, total_s = sum(count.values()), max(sum(samples.values()), 1)
    print(f"instructions {total}  stall samples {sum(samples.values())}  "
          f"shared wavefronts {sum(wavefronts.values())}")
    for op, n in count.most_common(40):
        print(f"{op:32s} {n:12d} {100 * n / max(total, 1):6.2f}%  "
              f"samples {100 * samples[op] / total_s:5.1f}%  wavefronts {wavefronts[op]}")


def hot(lines, least):
    if least is None:
        least = max(n for _, n, _, _ in lines) // 10
    print(f"# line, warp-level instructions executed, stall samples, SASS "
          f"(executed >= {least} times, sampled >= 1000 times, or storing C)")
    for i, (src, n, s, _) in enumerate(lines):
        stores_c = n > 0 and any(k in src for k in ("STSM", "UTMASTG", "F2FP"))
        if n >= least or s >= 1000 or stores_c:
            print(f"{i:5d} {n:10d} {s:6d}  {src}")


def main():
    if len(sys.argv) < 3 or sys.argv[2] not in ("opcodes", "hot"):
        sys.exit(__doc__.strip().split("\n\n")[1])
    lines = read(sys.argv[1])
    if sys.argv[2] == "opcodes":
        opcodes(lines)
    else:
        hot(lines, int(sys.argv[3]) if len(sys.argv) > 3 else None)


if __name__ == "__main__":
    main()
