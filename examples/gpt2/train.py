#!/usr/bin/env python3
"""examples/gpt2/train.py - train GPT-2 small (124M, random init) for a few
steps, stock PyTorch and with ktune.patch, from the same seed on the same
batches, and compare: loss per step, tokens per second, which modules ktune
served and which stayed with torch.  Besides ktune.patch's modules, the ktune
run's attention is ktune.nn.ScaledDotProductAttention (flash attention where
the head dim allows, torch's otherwise) and its LM head and loss one
ktune.nn.LinearCrossEntropy (the logits never held whole); --torch-attention
and --torch-loss keep torch's.

    python3 examples/gpt2/train.py                       # both runs on cuda, 20 steps
    python3 examples/gpt2/train.py --mode ktune --compile
    python3 examples/gpt2/train.py --json out.json       # the figures, for bench/results
    python3 examples/gpt2/train.py --record misses.yaml  # then: ktune sweep --misses misses.yaml, and again
    python3 examples/gpt2/train.py --profile             # the top CUDA kernels of one step of each run

The data is bytes of this repository's own text (docs, sources): real text
with no download, one token per byte (ids 0-255 of the 50257).  Training is
bf16 autocast over float32 weights with fused AdamW, as nanoGPT does; the
runs agree when each step's loss is within --tol of the other's.  Exit status
1 when they do not, 0 otherwise.

After the ktune run it says what served its libktune calls: each op's calls
by dispatch source (a tuned entry: exact, arch, shipped; or a fallback:
nearest, default), counted in the Python layer (ktune.count_dispatch), beside
the context's own counters (ktune.stats).  --record PATH saves the keys served
by a fallback into the misses file PATH, so that `ktune sweep --misses PATH`
tunes exactly them for the next run.
"""
import argparse
import contextlib
import json
import math
import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import GPT, Config  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, os.pardir, os.pardir))


def corpus(path=None, limit=8 << 20):
    """The bytes of the file `path`, else the repository's text files (sorted
    paths: the same bytes every run of one checkout), as one tensor."""
    chunks, total = [], 0
    if path:
        with open(path, "rb") as fh:
            chunks.append(fh.read(limit))
    for top in () if path else ("docs", "src", "include", "kernels", "cli", "bench", "python"):
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
        sys.exit(f"train.py: too little text in {path or 'the repository'}")
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
    served = not_run = None
    counting = contextlib.nullcontext(None)
    if name == "ktune":
        import ktune
        rep = ktune.patch(model)
        print(rep)
        print(ktune_ops(model, args))
        if args.record:
            ktune.record_misses(args.record)  # checked now: a typo fails before the run, not at exit
        counting = ktune.count_dispatch()  # one more C call per ktune call: about a microsecond
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=args.device.startswith("cuda"))
    step_fn = torch.compile(model) if args.compile else model
    losses, times = [], []
    ctx = torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16)

    def step(x, y):
        with ctx:
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    data_iter = batches(data, args.steps + bool(args.profile), args.batch, args.seq, args.seed)
    cprofile = None
    if args.cprofile:  # the host's Python time of the timed steps, where a host-bound run spends it
        import cProfile
        cprofile = cProfile.Profile()
    with counting as dispatch:
        for i in range(args.steps):
            x, y = (t.to(args.device) for t in next(data_iter))
            sync(args.device)
            prof = cprofile if cprofile is not None and i >= args.warmup else None
            if prof is not None:
                prof.enable()
            t0 = time.perf_counter()
            loss = step(x, y)
            sync(args.device)
            times.append(time.perf_counter() - t0)
            if prof is not None:
                prof.disable()
            losses.append(loss.item())
            print(f"{name:6s} step {i:3d}  loss {losses[-1]:.4f}  {args.batch * args.seq / times[-1]:10.0f} tok/s",
                  flush=True)
            if served is None and name == "ktune" and not args.compile:
                import ktune
                kinds = {n: type(m).__name__ for n, m in model.named_modules()}
                rep = ktune.nn.report(model)
                served = {n: (kinds[n], how) for n, how in rep.items() if how != "not run"}
                not_run = [n for n, how in rep.items() if how == "not run"]  # lm_head: fused into lm_loss
    timed = times[args.warmup:] or times
    tps = args.batch * args.seq * len(timed) / sum(timed)
    out = {"losses": losses, "tokens_per_s": tps, "served": served, "step_s": times}
    if served is not None:
        out["not_run"] = not_run
    if name == "ktune":
        out.update(runtime(args, dispatch))
    if cprofile is not None:
        import io
        import pstats
        text = io.StringIO()
        stats = pstats.Stats(cprofile, stream=text)
        stats.sort_stats("tottime").print_stats(args.cprofile)
        stats.sort_stats("cumulative").print_stats(args.cprofile)
        out["cprofile"] = text.getvalue()
    if args.profile:  # one more step, after the timed ones, on the next batch (the same for both runs)
        x, y = (t.to(args.device) for t in next(data_iter))
        out["profile"] = profile_step(lambda: step(x, y), args.device)
    return out


def ktune_ops(model, args):
    """The ktune run's attention and LM-head loss: ktune.nn's stand-ins, each
    falling back to torch's where the shapes do not map (they say why)."""
    import ktune
    done = []
    if not args.torch_attention:
        for block in model.h:
            block.attn.sdpa = ktune.nn.ScaledDotProductAttention()
        done.append(f"attention: ktune.nn.ScaledDotProductAttention in {len(model.h)} blocks")
    if not args.torch_loss:
        model.lm_loss = ktune.nn.LinearCrossEntropy()
        done.append("LM head and loss: ktune.nn.LinearCrossEntropy (lm_head's GEMM fused into it)")
    return "ktune ops: " + ("; ".join(done) if done else "none (--torch-attention --torch-loss)")


def torch_kept(res, args):
    """What the ktune run left to torch: always the embeddings, the residual adds and AdamW;
    attention and the loss where ktune.nn's stand-ins were not used or fell back."""
    served = res["served"] or {}
    kept = ["token and position embeddings"]
    attn = [how for cls, how in served.values() if cls == "ScaledDotProductAttention"]
    if args.torch_attention or not attn or any(how != "ktune" for how in attn):
        kept.append("attention (scaled_dot_product_attention)")
    loss = [how for cls, how in served.values() if cls == "LinearCrossEntropy"]
    if args.torch_loss or not loss or any(how != "ktune" for how in loss):
        kept.append("cross-entropy")
    return kept + ["residual adds", "AdamW"]


def runtime(args, dispatch):
    """What served the ktune run's calls: its dispatch sources by op, the
    context's counters, and the misses saved (--record)."""
    import dataclasses

    import ktune
    stats = ktune.stats()
    out = {"dispatch": [[op, src, n] for (op, src), n in sorted(dispatch.items())],
           "stats": dataclasses.asdict(stats)}
    if args.record:
        # now, where a failure is seen (ktune_close could not say), then no second save at exit
        ktune.save_misses()
        ktune.record_misses(None)
        out["record"] = args.record
    return out


def profile_step(fn, device):
    """One step under torch.profiler: its wall time, the GPU time of its
    kernels, and the kernels (CPU ops on a CPU device) by total time."""
    from torch.profiler import ProfilerActivity, profile
    cuda = device.startswith("cuda")
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sync(device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the profiler's notes on event cycles, and CUDA's absence on a CPU run
        with profile(activities=acts) as prof:
            t0 = time.perf_counter()
            fn()
            sync(device)
            wall = time.perf_counter() - t0
    rows = {}
    if cuda:
        from torch.autograd import DeviceType
        for e in prof.events():
            if e.device_type == DeviceType.CUDA:  # a kernel (or a memcpy/memset) on the GPU
                r = rows.setdefault(e.name, [0, 0.0])
                r[0] += 1
                r[1] += e.time_range.elapsed_us()
    else:
        for e in prof.key_averages():
            rows[e.key] = [e.count, e.self_cpu_time_total]
    table = sorted(([name, n, us] for name, (n, us) in rows.items()), key=lambda r: -r[2])
    return {"wall_us": wall * 1e6, "device_us": sum(r[2] for r in table), "what": "kernels" if cuda else "CPU ops",
            "rows": table}


def print_profile(name, p, top):
    total = p["device_us"] or 1.0
    print(f"\n{name}: one step {p['wall_us'] / 1e3:.1f} ms wall, {p['what']} {p['device_us'] / 1e3:.1f} ms "
          f"({100 * p['device_us'] / max(p['wall_us'], 1e-9):.0f}% of the wall time); top {top} by time:")
    print(f"  {'ms':>8s} {'%':>5s} {'calls':>5s}  {p['what'][:-1]}")
    for nm, n, us in p["rows"][:top]:
        print(f"  {us / 1e3:8.2f} {100 * us / total:5.1f} {n:5d}  {nm[:100]}")
    rest = p["rows"][top:]
    if rest:
        print(f"  {sum(r[2] for r in rest) / 1e3:8.2f} {100 * sum(r[2] for r in rest) / total:5.1f} "
              f"{sum(r[1] for r in rest):5d}  ({len(rest)} others)")


def print_dispatch(res, steps):
    """The ktune run's calls by op and dispatch source, and the tuned share."""
    rows = res["dispatch"]
    sources = [s for s in ("exact", "arch", "shipped", "nearest", "default") if any(r[1] == s for r in rows)]
    sources += sorted({r[1] for r in rows} - set(sources))
    by_op = {}
    for op, src, n in rows:
        by_op.setdefault(op, {})[src] = n
    calls = sum(n for _, _, n in rows)
    st = res["stats"]
    print(f"\nktune's calls by dispatch source ({steps} steps; tuned: exact, arch, shipped; fallbacks: the rest):")
    print(f"  {'op':20s}" + "".join(f"{s:>9s}" for s in sources) + f"{'calls':>9s}")
    for op in sorted(by_op):
        print(f"  {op:20s}" + "".join(f"{by_op[op].get(s, 0):9d}" for s in sources)
              + f"{sum(by_op[op].values()):9d}")
    tuned = sum(n for _, s, n in rows if s in ("exact", "arch", "shipped"))
    if calls:
        print(f"  {calls} calls: {tuned} ({100 * tuned / calls:.1f}%) served by tuned entries, {calls - tuned} "
              f"({100 * (calls - tuned) / calls:.1f}%) by fallbacks")
    print(f"  the context's counters: {st['calls']} calls, {st['keys']} keys, of which {st['missed_keys']} served "
          f"without a tuned entry ({st['missed_calls']} calls); {st['kernels']} kernels loaded, "
          f"{st['nvrtc_compiles']} compiled by NVRTC ({st['nvrtc_seconds']:.1f} s), {st['cache_loads']} from the cache")
    if res.get("record"):
        print(f"  {st['missed_keys']} missed keys saved to {res['record']} (added to what it held): "
              f"tune them with `ktune sweep --misses {res['record']}`, then run this again")


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
    ap.add_argument("--data", metavar="FILE", help="train on this file's bytes (default: the repository's text)")
    ap.add_argument("--tol", type=float, default=0.05, help="largest |loss difference| at any step (nats)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (both runs)")
    ap.add_argument("--torch-attention", action="store_true",
                    help="the ktune run keeps torch's attention (default: ktune.nn.ScaledDotProductAttention)")
    ap.add_argument("--torch-loss", action="store_true",
                    help="the ktune run keeps torch's LM head logits and cross-entropy (default: "
                         "ktune.nn.LinearCrossEntropy)")
    ap.add_argument("--json", help="write losses, tokens/s and the served modules here")
    ap.add_argument("--record", metavar="PATH",
                    help="save the keys the ktune run served without a tuned entry into the misses file PATH "
                         "(added to what it holds), for `ktune sweep --misses PATH`")
    ap.add_argument("--profile", action="store_true",
                    help="profile one more step of each run with torch.profiler and print the top CUDA kernels")
    ap.add_argument("--profile-top", type=int, default=15, help="rows of each --profile table")
    ap.add_argument("--cprofile", type=int, default=0, metavar="N",
                    help="cProfile the timed steps of each run (after --warmup) and print its N costliest "
                         "functions, by own time and by cumulative time (per step: divide by the steps)")
    args = ap.parse_args(argv)
    if args.record and args.mode == "stock":
        ap.error("--record records the ktune run's misses: not with --mode stock")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("train.py: no CUDA device (use --device cpu with the host double for a functional run)")
    data = corpus(args.data)
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
            print(f"  {cls:25s} {len(mods):3d} by {how} (e.g. {', '.join(mods[:3])})")
        if res["ktune"].get("not_run"):
            print(f"  not run: {', '.join(res['ktune']['not_run'])} (lm_head's GEMM is inside LinearCrossEntropy)")
        print("  torch throughout: " + ", ".join(torch_kept(res["ktune"], args)))
    if "ktune" in res:
        print_dispatch(res["ktune"], args.steps)
    for n in names:
        if "profile" in res[n]:
            print_profile(n, res[n]["profile"], args.profile_top)
    for n in names:
        if "cprofile" in res[n]:
            print(f"\n{n}: cProfile of steps {args.warmup}..{args.steps - 1}\n{res[n].pop('cprofile')}")
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
