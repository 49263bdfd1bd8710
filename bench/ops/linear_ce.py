#!/usr/bin/env python3
"""bench/ops/linear_ce.py - the LM head's loss and gradients, CE(hidden @ weight^T), forward and
backward: ktune_linear_cross_entropy (chunks of rows: GEMM, the fused cross-entropy in place, two
GEMMs) against PyTorch unfused (logits = hidden @ weight.T in bf16, F.cross_entropy of them upcast
to fp32, as Hugging Face models do, autograd.grad) and Liger's LigerFusedLinearCrossEntropyLoss,
in the same process on the same GPU.

    python3 bench/ops/linear_ce.py --lib build-device/install/lib/libktune.so --csv $OUT/linear_ce.csv
    python3 bench/ops/linear_ce.py --dry-run             # the plan, no GPU needed

Each case: bf16, rows x dim hidden, vocab x dim weight, int64 targets, the mean loss; time is
forward + backward (median of --reps calls, CUDA events, after 2 warm-up calls), "extra" the peak
memory the call allocates beyond its inputs and its gradients (torch.cuda.max_memory_allocated;
ktune's is its scratch, which the script allocates: --scratch-mib).  Every library's loss,
dhidden and dweight are checked against an fp32 reference (relative Frobenius error within
2e-2).  The issue's goal at rows 8192, dim 4096, vocab 128256: <= 45 ms and < 1 GB extra.
Exit status 0, 2 when a check failed, 1 on a fatal error.
"""
import argparse
import ctypes
import csv
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import elementwise as ew  # noqa: E402  (the ctypes wrapper and its header check)

c_vp, c_i64, c_int, c_f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
SIGS = {
    "ktune_linear_cross_entropy": (
        [c_vp, c_i64, c_i64, c_i64, c_vp, c_i64, c_vp, c_i64, c_vp, c_i64, c_f32, c_f32, c_int, c_i64, c_f32, c_vp,
         c_vp, c_i64, c_vp, c_i64, c_i64, c_vp, ctypes.c_size_t, c_int, c_vp],
        "ctx rows dim vocab hidden ld_hidden weight ld_weight targets ignore_index label_smoothing softcap "
        "reduction count dloss loss_rows dhidden ld_dhidden dweight ld_dweight chunk_rows scratch scratch_bytes "
        "dtype stream"),
}
ew.KTUNE_SIGS.clear()  # this script calls only the LM head
ew.KTUNE_SIGS.update(SIGS)
ew.OP_SYMBOLS["linear_ce"] = ["ktune_linear_cross_entropy"]
ew.C_TYPES.update({"float*": c_vp, "int64_t*": c_vp, "ktune_reduction": c_int})
MiB = 1 << 20
FIELDS = ["library", "rows", "dim", "vocab", "time_ms", "p20_ms", "p80_ms", "extra_mib", "loss_err", "dhidden_err",
          "dweight_err", "check", "api"]


def shapes(args):
    if args.quick:
        return [(2048, 4096, 32000)]
    return [(8192, 4096, 128256), (8192, 4096, 32000), (4096, 4096, 262144)]


def rel_err(got, want):
    return float((got.float() - want).norm() / want.norm().clamp_min(1e-30))


class LceBench:
    def __init__(self, args, torch):
        self.args, self.torch = args, torch
        self.dev = torch.device("cuda", 0)
        self.failed = 0
        self.kt = None

    def timing(self, fn):
        torch = self.torch
        for _ in range(2):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(self.args.reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e))
        ts.sort()
        q = lambda f: ts[min(len(ts) - 1, int(round(f * (len(ts) - 1))))]
        return q(0.5), q(0.2), q(0.8)

    def extra(self, fn, keep):
        """Peak bytes fn allocates beyond what is allocated before it, less `keep` (its gradients)."""
        torch = self.torch
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = fn()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        del out
        return (peak - before - keep) / MiB

    def reference(self, h, w, t):
        """fp32 loss, dhidden and dweight of the mean, in chunks of rows (the logits in fp32 whole would be
        4 GiB at 8192 x 128256)."""
        torch = self.torch
        rows = h.shape[0]
        hf, wf = h.float(), w.float()
        dh = torch.empty_like(hf)
        dw = torch.zeros_like(wf)
        loss = torch.zeros((), dtype=torch.float64, device=self.dev)
        for r0 in range(0, rows, 1024):
            hc, tc = hf[r0:r0 + 1024], t[r0:r0 + 1024]
            logits = hc @ wf.T
            lse = torch.logsumexp(logits, -1)
            loss += (lse - logits.gather(1, tc[:, None]).squeeze(1)).double().sum()
            g = torch.softmax(logits, -1)
            g.scatter_add_(1, tc[:, None], torch.full((tc.shape[0], 1), -1.0, device=self.dev))
            g /= rows
            dh[r0:r0 + 1024] = g @ wf
            dw += g.T @ hc
            del logits, g
        return (loss / rows).float(), dh, dw

    def run_case(self, rows, dim, vocab, writer):
        torch = self.torch
        F = torch.nn.functional
        gen = torch.Generator(device=self.dev)
        gen.manual_seed(rows * 7 + vocab)
        h = (torch.randn((rows, dim), device=self.dev, generator=gen) * 0.5).to(torch.bfloat16)
        w = (torch.randn((vocab, dim), device=self.dev, generator=gen) * dim ** -0.5).to(torch.bfloat16)
        t = torch.randint(0, vocab, (rows,), device=self.dev, generator=gen)
        torch.backends.cuda.matmul.allow_tf32 = True
        ref = self.reference(h, w, t)
        grad_bytes = (h.numel() + w.numel()) * 2
        impls = {}

        hr, wr = h.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)

        def torch_fn():
            loss = F.cross_entropy((hr @ wr.T).float(), t)
            dh, dw = torch.autograd.grad(loss, (hr, wr))
            return loss.detach(), dh, dw
        impls["torch"] = (torch_fn, grad_bytes, "logits = h @ W.T; F.cross_entropy(logits.float()); autograd.grad")

        if not self.args.no_liger:
            try:
                import importlib
                lt = importlib.import_module("liger_kernel.transformers")
                lce = lt.LigerFusedLinearCrossEntropyLoss()
                hl, wl = h.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)

                def liger_fn():
                    loss = lce(wl, hl, t)
                    dh, dw = torch.autograd.grad(loss, (hl, wl))
                    return loss.detach(), dh, dw
                impls["liger"] = (liger_fn, grad_bytes, "LigerFusedLinearCrossEntropyLoss + autograd.grad")
            except Exception as e:
                print(f"liger: {type(e).__name__}: {e}: skipped", file=sys.stderr)

        if self.kt is not None:
            scratch_bytes = self.args.scratch_mib * MiB
            kt, st = self.kt, lambda: torch.cuda.current_stream().cuda_stream
            count = int(rows)  # no target is ignored here: given, so the call stays asynchronous

            def ktune_fn():
                scratch = torch.empty(scratch_bytes, dtype=torch.uint8, device=self.dev)
                loss_rows = torch.empty(rows, dtype=torch.float32, device=self.dev)
                dh, dw = torch.empty_like(h), torch.empty_like(w)
                kt.call("ktune_linear_cross_entropy", rows, dim, vocab, h.data_ptr(), dim, w.data_ptr(), dim,
                        t.data_ptr(), -100, 0.0, 0.0, 0, count, 1.0, loss_rows.data_ptr(), dh.data_ptr(), dim,
                        dw.data_ptr(), dim, 0, scratch.data_ptr(), scratch_bytes, ew.KTUNE_DTYPE["bf16"], st())
                return loss_rows.sum() / count, dh, dw
            impls["ktune"] = (ktune_fn, grad_bytes, f"ktune_linear_cross_entropy ({self.args.scratch_mib} MiB scratch)")

        for lib, (fn, keep, api) in impls.items():
            row = dict(library=lib, rows=rows, dim=dim, vocab=vocab, api=api)
            try:
                loss, dh, dw = fn()
                errs = [rel_err(loss, ref[0]), rel_err(dh, ref[1]), rel_err(dw, ref[2])]
                del loss, dh, dw
                ok = all(e <= 2e-2 for e in errs)
                row.update(loss_err=f"{errs[0]:.2e}", dhidden_err=f"{errs[1]:.2e}", dweight_err=f"{errs[2]:.2e}",
                           check="ok" if ok else "FAIL: relative error over 2e-2")
                self.failed += not ok
                row["extra_mib"] = f"{self.extra(fn, keep):.0f}"
                med, p20, p80 = self.timing(fn)
                row.update(time_ms=f"{med:.2f}", p20_ms=f"{p20:.2f}", p80_ms=f"{p80:.2f}")
                if lib == "ktune":
                    row["api"] += f" [{self.kt.dispatch()}]"
            except Exception as e:
                self.failed += 1
                row["check"] = f"FAIL: {type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e) else ''}"
            writer.writerow(row)
            print(f"{lib:<6} {rows}x{dim}x{vocab}: {row.get('time_ms', '-'):>8} ms  extra {row.get('extra_mib', '-'):>6} MiB"
                  f"  errors {row.get('loss_err', '-')}/{row.get('dhidden_err', '-')}/{row.get('dweight_err', '-')}"
                  f"  {row['check']}", flush=True)
            torch.cuda.empty_cache()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build-device/libktune.so", help="libktune.so (default %(default)s)")
    ap.add_argument("--db", default=None, help="tuning database for ktune_open (default: the default database)")
    ap.add_argument("--csv", default="bench-linear-ce.csv", help="output CSV (default %(default)s)")
    ap.add_argument("--reps", type=int, default=10, help="timed calls a library (default %(default)s)")
    ap.add_argument("--scratch-mib", type=int, default=512, help="ktune's scratch (default %(default)s MiB)")
    ap.add_argument("--quick", action="store_true", help="one small case")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit (no GPU, no torch)")
    ap.add_argument("--no-liger", action="store_true", help="skip Liger")
    ap.add_argument("--no-ktune", action="store_true", help="skip ktune")
    args = ap.parse_args(argv)
    header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include", "ktune.h")
    hmsgs = ew.header_check(header) if os.path.exists(header) else []
    if args.dry_run:
        for rows, dim, vocab in shapes(args):
            print(f"linear_ce {rows}x{dim}x{vocab}: logits {rows * vocab * 2 / MiB:.0f} MiB in bf16, "
                  f"{6 * rows * dim * vocab / 1e12:.1f} TFLOP")
        print("# header check: " + ("ok" if not hmsgs else "; ".join(m for _, _, m in hmsgs)))
        return 0
    try:
        import torch
    except Exception as e:
        print(f"cannot import torch: {e}", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("no CUDA device visible to torch (use --dry-run to see the plan)", file=sys.stderr)
        return 1
    b = LceBench(args, torch)
    if not args.no_ktune:
        try:
            disabled = {n for n, kind, _ in hmsgs if kind == "types"}
            b.kt = ew.Ktune(args.lib, args.db, 0, disabled)
            if "ktune_linear_cross_entropy" not in b.kt.fns:
                print(f"{args.lib} lacks ktune_linear_cross_entropy: ktune skipped", file=sys.stderr)
                b.kt = None
        except (OSError, ew.KtuneError) as e:
            print(f"ktune: {e}: skipped", file=sys.stderr)
    t0 = time.time()
    with open(args.csv, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for rows, dim, vocab in shapes(args):
            b.run_case(rows, dim, vocab, writer)
    print(f"done in {time.time() - t0:.0f} s; {args.csv}")
    if b.kt:
        b.kt.close()
    return 2 if b.failed else 0


if __name__ == "__main__":
    sys.exit(main())
