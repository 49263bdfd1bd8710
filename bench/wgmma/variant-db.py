#!/usr/bin/env python3
"""A copy of a ktune export file with some keys' configs replaced, for A/B runs
of 'ktune bench' (import each copy into its own database, bench both).

  variant-db.py IN.yaml OUT.yaml CONFIG [-m M] [-n N] [-k K] [--dtype D] [--layout L]

CONFIG is a wgmma config as 'ktune show' writes it (FAMILY=wgmma,BLOCK_M=...).
Every entry whose key matches the filters gets it, with the family and
template hash of an entry of that family already in the file (import checks
both); its stored times stay, so bench's "stored" column then means nothing.
"""
import argparse
import re
import sys


def blocks(text):
    """The header, then each entry's lines (an entry starts at '  - device:')."""
    parts = re.split(r"(?m)^(?=  - device:)", text)
    return parts[0], parts[1:]


def field(block, name):
    m = re.search(r"(?m)^\s+%s: \"?([^\"\n]*)\"?$" % name, block)
    return m.group(1) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("config")
    ap.add_argument("-m", type=int)
    ap.add_argument("-n", type=int)
    ap.add_argument("-k", type=int)
    ap.add_argument("--dtype")
    ap.add_argument("--layout")
    a = ap.parse_args()
    if not a.config.startswith("FAMILY=wgmma,"):
        sys.exit("variant-db.py: only wgmma configs (FAMILY=wgmma,...)")
    head, entries = blocks(open(a.src).read())
    donor = next((e for e in entries if field(e, "family") == "gemm_wgmma"), None)
    if donor is None:
        sys.exit("variant-db.py: no gemm_wgmma entry in %s to take the template hash from" % a.src)
    template_hash = field(donor, "template_hash")
    want = {"m": a.m, "n": a.n, "k": a.k, "dtype": a.dtype, "layout": a.layout}
    changed = 0
    out = []
    for e in entries:
        if all(v is None or field(e, f) == str(v) for f, v in want.items()):
            e = re.sub(r'(?m)^(\s+config: )".*"$', lambda m: m.group(1) + '"%s"' % a.config, e)
            e = re.sub(r'(?m)^(\s+family: )".*"$', lambda m: m.group(1) + '"gemm_wgmma"', e)
            e = re.sub(r'(?m)^(\s+template_hash: )".*"$', lambda m: m.group(1) + '"%s"' % template_hash, e)
            changed += 1
        out.append(e)
    open(a.dst, "w").write(head + "".join(out))
    print("%s: %d of %d entries now %s" % (a.dst, changed, len(entries), a.config))


if __name__ == "__main__":
    main()
