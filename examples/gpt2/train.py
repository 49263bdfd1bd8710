#!/usr/bin/env python3
"""examples/gpt2/train.py - train GPT-2 small (124M, random init) for a few
steps, stock PyTorch and with ktune.patch, from the same seed on the same
batches, and compare: loss per step, tokens per second, which modules ktune
served and which stayed with torch.

    python3 examples/gpt2/train.py                       # both runs on cuda, 20 steps
    python3 examples/gpt2/train.py --mode ktune --compile
    python3 examples/gpt2/train.py --json out.json       # the figures, for bench/results

The data is bytes of this repository's own text (docs, sources): real text
with no download, one token per byte (ids 0-255 of the 50257).  Training is
bf16 autocast over float32 weights with fused AdamW, as nanoGPT does; the
runs agree when each step's loss is within --tol of the other's.  Exit status
1 when they do not, 0 otherwise.
"""
import argparse
import json
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import GPT, Config  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, os.pardir, os.pardir))


def corpus(limit=8 << 20):
    """The repository's text files as one byte tensor (sorted paths: the same
    bytes every run)."""
    chunks, total = [], 0
    for top in ("docs", "src", "include", "kernels", "cli", "bench", "python"):
        for root, dirs, files in sorted(os.walk(os.path.join(REPO, top))):
            dirs.sort()
            for f in sorted(files):
                if f.endswith((".md", ".c", ".h", ".cu", ".cuh", ".py", ".yaml")):
                    with open(os.path.join(root, f), "rb") as fh:
                        chunks.append(fh.read())
                    total += len(chunks[-1])
                    if total >= limit:
                        break
    data = torch.frombuffer(bytearray(b"".join(chunks)), dtype=torch.uint8).long()
    if data.numel() < 4096:
        sys.exit("train.py: found too little text in the repository")
    return data


def batches(data, steps, batch, seq, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        ix = torch.randint(data.numel() - seq - 1, (batch,), generator=g)
        x = torch.stack([data[i:i + seq] for i in ix])
        y = torch.stack([data[i + 1:i + seq + 1] for i in ix])
        yield x, y


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run(name, args, data):
    torch.manual_seed(args.seed)
    cfg = Config(n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd, block_size=args.seq,
                 vocab_size=args.vocab)
    model = GPT(cfg).to(args.device)
    served = None
    if name == "ktune":
        import ktune
        rep = ktune.patch(model)
        print(rep)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=args.device.startswith("cuda"))
    step_fn = torch.compile(model) if args.compile else model
    losses, times = [], []
    ctx = torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16)
    for step, (x, y) in enumerate(batches(data, args.steps, args.batch, args.seq, args.seed)):
        x, y = x.to(args.device), y.to(args.device)
        sync(args.device)
        t0 = time.perf_counter()
        with ctx:
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(args.device)
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
        print(f"{name:6s} step {step:3d}  loss {losses[-1]:.4f}  {args.batch * args.seq / times[-1]:10.0f} tok/s",
              flush=True)
        if served is None and name == "ktune" and not args.compile:
            import ktune
            kinds = {n: type(m).__name__ for n, m in model.named_modules()}
            served = {n: (kinds[n], how) for n, how in ktune.nn.report(model).items()}
    timed = times[args.warmup:] or times
    tps = args.batch * args.seq * len(timed) / sum(timed)
    return {"losses": losses, "tokens_per_s": tps, "served": served, "step_s": times}


def summary(served):
    """{(class, "ktune" or "torch: why"): [module names]} from the run's report."""
    by = {}
    for name, (cls, how) in served.items():
        by.setdefault((cls, how), []).append(name)
    return by


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=["both", "stock", "ktune"], default="both")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5, help="steps left out of tokens/s (compiles, caches)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--tol", type=float, default=0.05, help="largest |loss difference| at any step (nats)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (both runs)")
    ap.add_argument("--json", help="write losses, tokens/s and the served modules here")
    args = ap.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("train.py: no CUDA device (use --device cpu with the host double for a functional run)")
    data = corpus()
    print(f"GPT-2: {args.n_layer} layers, {args.n_head} heads, {args.n_embd} wide, vocab {args.vocab}; "
          f"batch {args.batch} x {args.seq} tokens, {args.steps} steps, seed {args.seed}, device {args.device}"
          + (", torch.compile" if args.compile else ""), flush=True)
    names = ["stock", "ktune"] if args.mode == "both" else [args.mode]
    res = {n: run(n, args, data) for n in names}
    out = {"args": vars(args), "torch": torch.__version__, "runs": res}
    status = 0
    print()
    for n in names:
        print(f"{n:6s} {res[n]['tokens_per_s']:10.0f} tokens/s (steps {args.warmup}..{args.steps - 1}), "
              f"final loss {res[n]['losses'][-1]:.4f}")
    if "ktune" in res and res["ktune"]["served"] is not None:
        print("\nserved by ktune (its last eager forward):")
        for (cls, how), mods in sorted(summary(res["ktune"]["served"]).items()):
            print(f"  {cls:10s} {len(mods):3d} by {how} (e.g. {', '.join(mods[:3])})")
        print("  torch throughout: token and position embeddings, attention (scaled_dot_product_attention),"
              " residual adds, cross-entropy, AdamW")
    if len(names) == 2:
        diffs = [abs(a - b) for a, b in zip(res["stock"]["losses"], res["ktune"]["losses"])]
        worst = max(range(len(diffs)), key=diffs.__getitem__)
        ok = all(math.isfinite(d) and d <= args.tol for d in diffs)
        speed = res["ktune"]["tokens_per_s"] / res["stock"]["tokens_per_s"]
        print(f"\nloss curves: largest |difference| {diffs[worst]:.4f} at step {worst} "
              f"(tolerance {args.tol}): {'agree' if ok else 'DIFFER'}; ktune/stock tokens/s {speed:.3f}")
        out.update(max_loss_diff=diffs[worst], agree=ok, speedup=speed)
        status = 0 if ok else 1
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
