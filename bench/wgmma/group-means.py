#!/usr/bin/env python3
# Geometric means of cuBLAS time / ktune time over the suite's groups (squares, the LLM
# shapes with M = 1024 and 4096, M <= 16 on them), from a results CSV or a `ktune bench` log
# (column 1 = "now", 0 = "stored"):  python3 bench/wgmma/group-means.py FILE [COLUMN]
import csv, math, sys, re
# groups: from results.csv (ratio column) or a bench log (key, stored, now ...)
def groups(rows):
    g = {'suite': [], 'squares': [], 'LLM': [], 'M=1024': [], 'M=4096': [], 'M<=16': []}
    llm = {(6144,4096),(4096,4096),(28672,4096),(4096,14336)}
    for (m,n,k,r) in rows:
        g['suite'].append(r)
        if m==n==k and m>=2048: g['squares'].append(r)
        if (n,k) in llm:
            if m in (1024,4096): g['LLM'].append(r); g['M=%d'%m].append(r)
            if m<=16: g['M<=16'].append(r)
    return {k:(math.exp(sum(map(math.log,v))/len(v)),len(v),min(v)) for k,v in g.items() if v}
def from_csv(p):
    return [(int(r['m']),int(r['n']),int(r['k']),float(r['ratio'])) for r in csv.DictReader(open(p))]
def from_log(p, col):
    out=[]
    for line in open(p):
        mm=re.match(r'gemm \w+ \w+ (\d+)x(\d+)x(\d+) \w+\s+([\d.]+)\s+([\d.]+)', line)
        if mm: out.append((int(mm[1]),int(mm[2]),int(mm[3]),float(mm[4+col])))
    return out
p=sys.argv[1]
rows = from_csv(p) if p.endswith('.csv') else from_log(p, int(sys.argv[2]) if len(sys.argv)>2 else 1)
for k,(gm,n,mn) in groups(rows).items(): print(f"{k:8s} {gm:.3f} ({n} keys, lowest {mn:.3f})")
