#!/usr/bin/env python3
"""tests/emu/run.py - the weight-quantized GEMM's kernels run on the CPU
(quant-emu.cc) against a float64 reference, where no GPU is.

    python3 tests/emu/run.py              # every format, and a sample of each space
    python3 tests/emu/run.py --sample 60  # a larger sample of tunables
    python3 tests/emu/run.py --quick      # a few configs, to try a change

What it builds (g++ -std=c++17, one binary per kernel configuration, in
--dir) and runs:
  * every bits x mode x group in bf16 (and a quarter of them in f16), with
    the GEMV (qgemv.cu, MAX_M 4), the tiled kernel (qgemm.cu), the
    register-streamed one (qmma.cu) and the codes-on-tensor-cores one
    (qcode.cu, MAX_M 16; formats whose groups hold its k-block) at a mid
    configuration of each space, on awkward shapes: m in {1, 3, 16, 33},
    n in {1, 8, 37}, k = the group (or 96 per channel) and three times it,
    split 1 and 3, the zero per group or one scalar, with and without bias;
  * a seeded sample of each family's space (--sample configurations of
    each, constraints and the 48 KiB of shared memory kept) in random
    formats and dtypes, each on m in {1, 3, 16, 33, 128} (the GEMV and qcode to 33), n
    in {1, 8, 70}, k of three groups.
--family limits both to one family.  Exit 0 when every problem passes.  It checks index arithmetic, bounds,
the pipeline's order, splits and reductions as the emulation reads the PTX
ISA; only the GPU test (tests/gpu/test-quant-gpu.c) checks the kernels on
the hardware.
"""
import argparse
import itertools
import os
import random
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "..", "..", "kernels", "templates")
BITS = [8, 4, 2, 1]
GROUPS = [32, 64, 128, 0]
MODES = [0, 1, 2, 3]
FAMILIES = ["qgemv", "qgemm", "qmma", "qcode"]
FEW_ROWS = ("qgemv", "qcode")  # the families compiled for the key's rows of A (MAX_M), run to m = 33


def space(name):
    """A family's parameters and constraints from kernels/templates/<name>.yaml (its simple subset of YAML)."""
    params, constraints, section = {}, [], None
    for line in open(os.path.join(TEMPLATES, name + ".yaml")):
        line = line.split("#", 1)[0].rstrip()
        if not line:
            continue
        if re.match(r"^\w+:", line):
            section = line.split(":")[0]
            continue
        if section == "params":
            m = re.match(r"^\s+(\w+):\s*\[(.*)\]", line)
            params[m.group(1)] = [int(v) for v in m.group(2).split(",")]
        elif section == "constraints":
            expr = line.strip()[2:].replace("&&", " and ").replace("||", " or ").replace("/", "//")
            constraints.append(expr)
    return params, constraints


def admitted(params, constraints, cfg):
    return all(eval(c, {}, dict(cfg)) for c in constraints)


def qgemm_smem(cfg, bits, group):
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    w_row = bk * bits // 8
    stage = bm * (bk + 8) * 2 + bn * (w_row + 16 if w_row >= 32 else w_row) + \
        bn * (bk // group if group and bk > group else 1) * 8
    red = (cfg["WARPS_K"] - 1) * cfg["WARPS_M"] * cfg["WARPS_N"] * 32 * \
        (bm // cfg["WARPS_M"] // 16) * (bn // cfg["WARPS_N"] // 8) * 16
    return max(cfg["STAGES"] * stage, red)


def qcode_fits(cfg, bits, group):
    """qcode's k-block (4 VEC words of a quad's lanes) lies inside one group."""
    return group == 0 or group % (4 * cfg["VEC"] * 32 // bits) == 0


def sample(name, n, rng, fmt_of):
    params, constraints = space(name)
    names = [p for p in params if p != "SPLIT_K"]
    out = []
    tries = 0
    while len(out) < n and tries < 100000:
        tries += 1
        cfg = {p: rng.choice(params[p]) for p in names}
        if not admitted(params, constraints, dict(cfg, SPLIT_K=1)):
            continue
        fmt = fmt_of(rng)
        if name == "qgemm" and qgemm_smem(cfg, fmt[0], fmt[1]) > 48 * 1024:
            continue
        if name == "qcode" and not qcode_fits(cfg, fmt[0], fmt[1]):
            continue
        out.append((cfg, fmt))
    return out


def defines(name, cfg, fmt):
    bits, group, mode, dtype = fmt
    d = [f"-DBITS={bits}", f"-DGROUP={group}", f"-DMODE={mode}", f"-DDTYPE={dtype}"]
    d += [f"-D{k}={v}" for k, v in sorted(cfg.items())]
    d += {"qgemm": ["-DKERNEL=\"qgemm.cu\"", "-DIS_QGEMM"], "qmma": ["-DKERNEL=\"qmma.cu\"", "-DIS_QMMA"],
          "qcode": ["-DKERNEL=\"qcode.cu\"", "-DIS_QCODE"],
          "qgemv": ["-DKERNEL=\"qgemv.cu\""]}[name]
    return d


def build(args, name, cfg, fmt):
    tag = name + "-" + "-".join(f"{v}" for v in fmt) + "-" + "-".join(f"{v}" for _, v in sorted(cfg.items()))
    exe = os.path.join(args.dir, tag)
    if not os.path.exists(exe):
        cmd = ["g++", "-std=c++17", "-O1", "-w", "-I", TEMPLATES, "-I", HERE] + \
            defines(name, cfg, fmt) + [os.path.join(HERE, "quant-emu.cc"), "-o", exe]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            return None, f"build failed: {' '.join(cmd)}\n{r.stderr[-2000:]}"
    return exe, None


def run(args, exe, problems):
    fails = []
    for p in problems:
        r = subprocess.run([exe] + [str(v) for v in p], capture_output=True, text=True, timeout=args.timeout)
        if r.returncode:
            fails.append(f"{os.path.basename(exe)} {' '.join(map(str, p))}: {(r.stdout + r.stderr).strip()[-600:]}")
    return fails


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/tmp/ktune-quant-emu", help="where the binaries go (reused)")
    ap.add_argument("--sample", type=int, default=16, help="sampled configurations of each space")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--timeout", type=int, default=300, help="seconds a problem")
    ap.add_argument("--quick", action="store_true", help="a few formats and configurations")
    ap.add_argument("--family", choices=FAMILIES, help="only this family")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    rng = random.Random(args.seed)

    mid = {"qgemv": dict(THREADS=64, ROWS=2, VEC=4, UNROLL=2, CACHE=1, MIN_WARPS=0, MAX_M=4),
           "qgemm": dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=64, WARPS_M=1, WARPS_N=2, WARPS_K=2, STAGES=3),
           "qmma": dict(BLOCK_M=16, NFRAG=2, WARPS_N=2, WARPS_K=2, VEC=4, UNROLL=2),
           "qcode": dict(MFRAG=2, WARPS_N=2, WARPS_K=2, VEC=1, UNROLL=2, MIN_WARPS=0, MAX_M=16)}
    families = [args.family] if args.family else FAMILIES
    jobs = []  # (family, cfg, fmt, problems)
    formats = list(itertools.product(BITS, GROUPS, MODES))
    if args.quick:
        formats = [(4, 128, 0), (1, 32, 3), (8, 0, 2), (2, 64, 1)]
    for i, (bits, group, mode) in enumerate(formats):
        for dtype in ([1, 0] if i % 4 == 0 else [1]):
            k1 = group or 96
            probs = []
            for (m, n), k, split in itertools.product([(1, 1), (3, 8), (16, 37), (33, 8)], [k1, 3 * k1], [1, 3]):
                zs, bias = (m + n + split) % 2, (m + k // 32) % 2
                probs.append((m, n, k, split, zs, bias, m * 131 + n * 7 + k + split))
            for name in families:
                if name == "qcode" and not qcode_fits(mid[name], bits, group):
                    continue
                jobs.append((name, mid[name], (bits, group, mode, dtype), probs))

    def rand_fmt(r):
        return (r.choice(BITS), r.choice(GROUPS), r.choice(MODES), r.choice([0, 1]))

    nsample = 3 if args.quick else args.sample
    for name in families:
        for cfg, fmt in sample(name, nsample, rng, rand_fmt):
            if name in FEW_ROWS:
                cfg = dict(cfg, MAX_M=rng.choice([1, 2, 4, 8, 16]))
            k = 3 * (fmt[1] or 32)
            probs = []
            for m, n in itertools.product([1, 3, 16, 33] + ([128] if name not in FEW_ROWS else []), [1, 8, 70]):
                split = rng.choice([1, 1, 2, 3, 8])
                probs.append((m, n, k, split, rng.choice([0, 1]), rng.choice([0, 1]), rng.randrange(1 << 30)))
            jobs.append((name, cfg, fmt, probs))

    print(f"{len(jobs)} kernels, {sum(len(j[3]) for j in jobs)} problems; binaries in {args.dir}", flush=True)
    failures = []

    def one(job):
        name, cfg, fmt, probs = job
        exe, err = build(args, name, cfg, fmt)
        if err:
            return [err]
        return run(args, exe, probs)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for i, fails in enumerate(pool.map(one, jobs)):
            failures += fails
            if (i + 1) % 20 == 0 or i + 1 == len(jobs):
                print(f"  {i + 1}/{len(jobs)} kernels, {len(failures)} failures", flush=True)
    for f in failures[:40]:
        print("FAIL " + f)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
