#!/usr/bin/env python3
"""bench/ops/attention.py - ktune's flash attention, forward and backward, against
PyTorch's scaled_dot_product_attention with the cuDNN and the flash backends
forced, in the same process on the same GPU.

    python3 bench/ops/attention.py --lib build-device/install/lib/libktune.so --csv $OUT/attention.csv
    python3 bench/ops/attention.py --dry-run            # the plan of cases, no GPU needed
    python3 bench/ops/attention.py --quick              # a smoke test

Cases (bf16 unless --dtype f16; head dim D 64 and 128; causal and not):
  fa3      FlashAttention-3's setting: B x S = 16384, H x D = 2048, S = 512 .. 16384
  triton   the Triton tutorial's: B = 4, H = 32, S = 1024 .. 16384
Every library reads the same tensors, [B, H, S, D] contiguous (SDPA's layout;
ktune takes their strides).  FLOPs: forward 4 B H S^2 D, halved when causal,
backward 2.5 times that (the FlashAttention papers' counts); TFLOP/s = FLOPs
/ median time.  The backward is timed alone: ktune_attention_bwd from its own
forward's O and lse (deterministic=0; "ktune-det" the deterministic pass),
SDPA through torch.autograd.grad of its forward's output (eager only:
capturing autograd.grad in a CUDA graph failed, bench/ops/rowwise.py).

The timing protocol is bench/ops/elementwise.py's (this script runs its
Bench's timing and capture): inputs torch.randn in the dtype from a seeded
generator; outputs poisoned with NaN before the check and before each timed
batch and checked again after it; L2 flushed before every timed call;
eager (the Python call between the events) and CUDA-graph replay; at least
10 reps (--quick 5), as many as fit in --budget seconds (0.3), the median
with p20 and p80.  The check: 128 sampled query rows of every (batch, head)
against a float32 reference computed from the same rounded inputs, within
1e-2 (bf16) or 2e-3 (f16) of max(1, |ref|), every element finite, and
ktune's log-sum-exp within 1e-3 of the reference's; backward: dQ of 128
sampled rows and dK, dV of 128 sampled keys, against float32 gradients
(3e-2, 6e-3: P and dS round to the element type in every library), relative
to max(1, the gradient's rms); the SDPA backends are held to 4 times the
tolerances.  A failed check prints FAIL and marks the row.
A backend that refuses a case (cuDNN or flash not available for it) is
skipped with its message.  Exit status 0, 2 when a check failed, 1 on a
fatal error.
"""
import argparse
import csv
import ctypes
import json
import math
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import elementwise as ew  # noqa: E402  (the timing protocol, the ctypes wrapper, the header check)

c_vp, c_i64, c_int, c_f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
SIGS = {
    "ktune_attention_fwd": ([c_vp, c_i64, c_i64, c_i64, c_i64, c_i64, c_i64, c_vp, c_vp, c_vp, c_vp, c_vp, c_vp,
                             c_vp, c_vp, c_vp, c_f32, c_int, c_int, c_vp],
                            "ctx batch sq sk hq hkv head_dim q q_strides k k_strides v v_strides o o_strides lse "
                            "scale causal dtype stream"),
    "ktune_attention_bwd": ([c_vp, c_i64, c_i64, c_i64, c_i64, c_i64, c_i64] + [c_vp] * 17 + [c_f32, c_int, c_int,
                                                                                              c_int, c_vp],
                            "ctx batch sq sk hq hkv head_dim q q_strides k k_strides v v_strides o o_strides dout "
                            "dout_strides lse dq dq_strides dk dk_strides dv dv_strides scale causal deterministic "
                            "dtype stream"),
}
ew.KTUNE_SIGS.update(SIGS)
ew.OP_SYMBOLS.update({"attention": ["ktune_attention_fwd"],
                      "attention_bwd": ["ktune_attention_fwd", "ktune_attention_bwd"]})
ew.C_TYPES.update({"int64_t*": c_vp, "float*": c_vp})
FIELDS = ["setting", "direction", "dtype", "batch", "heads", "seqlen", "head_dim", "causal", "flops", "library",
          "mode", "time_us", "p20_us", "p80_us", "tflops", "check", "dispatch"]
LIBS = ("ktune", "ktune-det", "cudnn", "flash")
BWD_TOL = {"bf16": 3e-2, "f16": 6e-3}


def plan(args):
    cases = []
    dims = [128] if args.quick else [64, 128]
    for direction in args.directions:
        for c in plan_direction(args, dims):
            c["direction"] = direction
            if direction == "bwd":
                c["flops"] = c["flops"] * 5 // 2
            cases.append(c)
    return cases


def plan_direction(args, dims):
    cases = []
    for setting in args.settings:
        if setting == "fa3":
            seqs = [1024, 4096] if args.quick else [512, 1024, 2048, 4096, 8192, 16384]
        else:
            seqs = [1024, 4096] if args.quick else [1024, 2048, 4096, 8192, 16384]
        for d in dims:
            for causal in (False, True):
                for s in seqs:
                    b, h = (16384 // s, 2048 // d) if setting == "fa3" else (4, 32)
                    flops = 4 * b * h * s * s * d // (2 if causal else 1)
                    cases.append(dict(setting=setting, direction="fwd", dtype=args.dtype, batch=b, heads=h,
                                      seqlen=s, head_dim=d, causal=causal, flops=flops))
    return cases


class AttentionBench(ew.Bench):
    def write_row(self, c, lib, mode, t=None, check="-", dispatch=""):
        med, p20, p80 = (t[0], t[1], t[2]) if t else (None, None, None)
        row = {k: c[k] for k in ("setting", "direction", "dtype", "batch", "heads", "seqlen", "head_dim", "flops")}
        row.update(causal=int(c["causal"]), library=lib, mode=mode,
                   time_us=f"{med:.3f}" if med else "", p20_us=f"{p20:.3f}" if p20 else "",
                   p80_us=f"{p80:.3f}" if p80 else "",
                   tflops=f"{c['flops'] / (med * 1e-6) / 1e12:.1f}" if med else "", check=check, dispatch=dispatch)
        self.csv_writer.writerow(row)
        self.csv_file.flush()
        self.rows.append(row)
        return row

    def attention_check(self, o, lse, ref, ref_lse, rows, tol):
        """o [B, H, S, D] (its sampled rows) against ref; lse [B, H, S] (or None) against ref_lse."""
        torch = self.torch
        got = o[:, :, rows].float()
        bad = int((~torch.isfinite(got)).sum())
        if bad:
            return f"FAIL: {bad} non-finite elements in the sampled rows (NaN poison left?)"
        rel = (got - ref).abs_() / ref.abs().clamp_min(1.0)
        err = float(rel.max())
        if not err <= tol:
            at = int(rel.argmax())
            return (f"FAIL: rel err {err:.3g} > {tol:g} at flat index {at} of the sampled rows "
                    f"(got {float(got.flatten()[at]):.6g}, want {float(ref.flatten()[at]):.6g})")
        if lse is not None:
            lerr = float((lse[:, :, rows] - ref_lse).abs().max())
            if not lerr <= 1e-3 * max(1.0, float(ref_lse.abs().max())):
                return f"FAIL: log-sum-exp err {lerr:.3g}"
        self.last_err = err
        return "ok"

    def grad_check(self, got, want, tol):
        """Sampled dq rows, dk and dv keys against float32 references: |got - want| / max(1, rms(want))."""
        torch = self.torch
        worst = 0.0
        for name, g, w in zip(("dq", "dk", "dv"), got, want):
            g = g.float()
            bad = int((~torch.isfinite(g)).sum())
            if bad:
                return f"FAIL: {name}: {bad} non-finite elements in the sampled rows (NaN poison left?)"
            err = float((g - w).abs().max()) / max(1.0, float(w.pow(2).mean().sqrt()))
            if not err <= tol:
                return f"FAIL: {name}: err {err:.3g} > {tol:g} (relative to max(1, rms))"
            worst = max(worst, err)
        self.last_err = worst
        return "ok"

    def bwd_reference(self, q, k, v, do, causal, scale, rows, keys):
        """float32 dQ of the sampled rows, dK and dV of the sampled keys, from the whole forward's lse and delta."""
        torch = self.torch
        b, h, s, _ = q.shape
        qf, kf, vf, dof = q.float(), k.float(), v.float(), do.float()
        lse = torch.empty((b, h, s), device=self.dev)
        delta = torch.empty((b, h, s), device=self.dev)
        ar = torch.arange(s, device=self.dev)
        chunk = max(1, (1 << 28) // (b * h * s))  # rows a chunk: its scores in 1 GiB
        for i0 in range(0, s, chunk):
            sc = (qf[:, :, i0:i0 + chunk] @ kf.transpose(-1, -2)) * scale
            if causal:
                sc.masked_fill_(ar[None, :] > ar[i0:i0 + chunk, None], float("-inf"))
            lse[:, :, i0:i0 + chunk] = torch.logsumexp(sc, -1)
            o = torch.softmax(sc, -1) @ vf
            delta[:, :, i0:i0 + chunk] = (o * dof[:, :, i0:i0 + chunk]).sum(-1)
            del sc, o
        sc = (qf[:, :, rows] @ kf.transpose(-1, -2)) * scale
        if causal:
            sc.masked_fill_(ar[None, :] > rows[:, None], float("-inf"))
        p = torch.exp(sc - lse[:, :, rows, None])
        ds = p * (dof[:, :, rows] @ vf.transpose(-1, -2) - delta[:, :, rows, None])
        dq = scale * ds @ kf
        sc = (qf @ kf[:, :, keys].transpose(-1, -2)) * scale
        if causal:
            sc.masked_fill_(keys[None, :] > ar[:, None], float("-inf"))
        p = torch.exp(sc - lse[..., None])
        dv = p.transpose(-1, -2) @ dof
        ds = p * (dof @ vf[:, :, keys].transpose(-1, -2) - delta[..., None])
        dk = scale * ds.transpose(-1, -2) @ qf
        return dq, dk, dv

    def build_bwd(self, c, gen):
        torch = self.torch
        F = torch.nn.functional
        from torch.nn.attention import SDPBackend, sdpa_kernel
        b, h, s, d, causal = c["batch"], c["heads"], c["seqlen"], c["head_dim"], c["causal"]
        dt = self.dtype(c["dtype"])
        tol = BWD_TOL[c["dtype"]]
        scale = 1.0 / math.sqrt(d)
        q, k, v, do = (torch.randn((b, h, s, d), dtype=dt, device=self.dev, generator=gen) for _ in range(4))
        rows = torch.unique(torch.cat([torch.randperm(s, generator=gen, device=self.dev)[:126],
                                       torch.tensor([0, s - 1], device=self.dev)]))
        keys = torch.unique(torch.cat([torch.randperm(s, generator=gen, device=self.dev)[:126],
                                       torch.tensor([0, s - 1], device=self.dev)]))
        want = self.bwd_reference(q, k, v, do, causal, scale, rows, keys)
        impls = {}
        for lib, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            qr, kr, vr = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
            try:
                with sdpa_kernel([backend]):
                    out = F.scaled_dot_product_attention(qr, kr, vr, is_causal=causal, scale=scale)
                self.sync()
            except Exception as e:
                impls[lib] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:120] if str(e).strip() else ''}"
                continue

            def run(out=out, qr=qr, kr=kr, vr=vr):
                return torch.autograd.grad(out, (qr, kr, vr), do, retain_graph=True)

            def check(f, run=run):
                gq, gk, gv = run()
                return self.grad_check([gq[:, :, rows], gk[:, :, keys], gv[:, :, keys]], want, tol * f)
            impls[lib] = dict(fn=run, api=f"autograd of sdpa {lib} (eager)", eager_only=True, check=check)
        kt = self.kt
        for lib, det in (("ktune", 0), ("ktune-det", 1)):
            if kt is None:
                impls[lib] = "no library"
                continue
            if not kt.has("attention_bwd"):
                impls[lib] = "symbol ktune_attention_bwd missing"
                continue
            st = (ctypes.c_int64 * 3)(h * s * d, d, s * d)
            kdt = ew.KTUNE_DTYPE[c["dtype"]]
            o = torch.empty_like(q)
            lse = torch.empty((b, h, s), dtype=torch.float32, device=self.dev)
            kt.call("ktune_attention_fwd", b, s, s, h, h, d, q.data_ptr(), st, k.data_ptr(), st, v.data_ptr(), st,
                    o.data_ptr(), st, lse.data_ptr(), ctypes.c_float(scale), int(causal), kdt, self.stream())
            dq, dk, dv = (torch.empty_like(q) for _ in range(3))

            def run(det=det, o=o, lse=lse, dq=dq, dk=dk, dv=dv, st=st, kdt=kdt):
                kt.call("ktune_attention_bwd", b, s, s, h, h, d, q.data_ptr(), st, k.data_ptr(), st, v.data_ptr(),
                        st, o.data_ptr(), st, do.data_ptr(), st, lse.data_ptr(), dq.data_ptr(), st, dk.data_ptr(),
                        st, dv.data_ptr(), st, ctypes.c_float(scale), int(causal), det, kdt, self.stream())
            impls[lib] = dict(fn=run, outs=[dq, dk, dv],
                              check=lambda f, dq=dq, dk=dk, dv=dv: self.grad_check(
                                  [dq[:, :, rows], dk[:, :, keys], dv[:, :, keys]], want, tol * f))
        return impls

    def build(self, c, gen):
        if c["direction"] == "bwd":
            return self.build_bwd(c, gen)
        torch = self.torch
        F = torch.nn.functional
        from torch.nn.attention import SDPBackend, sdpa_kernel
        b, h, s, d, causal = c["batch"], c["heads"], c["seqlen"], c["head_dim"], c["causal"]
        dt = self.dtype(c["dtype"])
        tol = ew.TOL[c["dtype"]]
        scale = 1.0 / math.sqrt(d)
        q, k, v = (torch.randn((b, h, s, d), dtype=dt, device=self.dev, generator=gen) for _ in range(3))
        # the reference of 128 sampled rows (and always the first and the last), in float32
        rows = torch.randperm(s, generator=gen, device=self.dev)[:126].sort().values
        rows = torch.unique(torch.cat([rows, torch.tensor([0, s - 1], device=self.dev)]))
        sc = (q[:, :, rows].float() @ k.float().transpose(-1, -2)) * scale
        if causal:
            sc.masked_fill_(torch.arange(s, device=self.dev)[None, :] > rows[:, None], float("-inf"))
        ref_lse = torch.logsumexp(sc, -1)
        ref = torch.softmax(sc, -1) @ v.float()
        del sc
        impls = {}
        for lib, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            def run(backend=backend):
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
            try:
                run()
                self.sync()
            except Exception as e:
                impls[lib] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:120] if str(e).strip() else ''}"
                continue
            impls[lib] = dict(fn=run, api=f"sdpa {lib}",
                              check=lambda f, run=run: self.attention_check(run(), None, ref, ref_lse, rows, tol * f))
        kt = self.kt
        if kt is None:
            impls["ktune"] = "no library"
        elif not kt.has("attention"):
            impls["ktune"] = "symbol ktune_attention_fwd missing"
        else:
            o = torch.empty_like(q)
            lse = torch.empty((b, h, s), dtype=torch.float32, device=self.dev)
            st = (ctypes.c_int64 * 3)(h * s * d, d, s * d)  # [B, H, S, D]: batch, sequence, head strides
            kdt = ew.KTUNE_DTYPE[c["dtype"]]
            impls["ktune"] = dict(
                fn=lambda: kt.call("ktune_attention_fwd", b, s, s, h, h, d, q.data_ptr(), st, k.data_ptr(), st,
                                   v.data_ptr(), st, o.data_ptr(), st, lse.data_ptr(), ctypes.c_float(scale),
                                   int(causal), kdt, self.stream()),
                outs=[o, lse], check=lambda f: self.attention_check(o, lse, ref, ref_lse, rows, tol * f))
        return impls

    def run_lib(self, c, lib, impl):
        fn = impl["fn"]
        tol_factor = 1.0 if lib == "ktune" else ew.BASELINE_TOL_FACTOR

        def poison():
            for t in impl.get("outs", []):
                t.fill_(float("nan"))

        def verify():
            self.last_err = None
            try:
                return impl["check"](tol_factor)
            except Exception as e:
                return f"FAIL: check raised {type(e).__name__}: {e}"

        dispatch = impl.get("api", "")
        try:
            for _ in range(3):
                fn()
            self.sync()
            poison()
            fn()
            self.sync()
            if lib.startswith("ktune"):
                dispatch = self.kt.dispatch()
            check = verify()
        except Exception as e:
            self.sync_quiet()
            msg = f"FAIL: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]
            self.failed += 1
            self.write_row(c, lib, "eager", None, msg, dispatch)
            return f"{lib} FAIL"
        if check != "ok":
            self.failed += 1
            ew.log(f"  {lib}: {check}")
        summary = []
        for mode in (["eager", "graph"] if not self.args.no_graph and not impl.get("eager_only") else ["eager"]):
            try:
                run = self.capture(fn).replay if mode == "graph" else fn
                poison()
                t = self.timing(run)
                self.sync()
                post = verify() if check == "ok" else check
                if post != "ok" and check == "ok":
                    self.failed += 1
                    ew.log(f"  {lib} {mode}: after timing: {post}")
                row = self.write_row(c, lib, mode, t, post, dispatch)
                summary.append(f"{mode} {float(row['tflops']):.0f}")
            except Exception as e:
                self.sync_quiet()
                msg = f"FAIL: {mode}: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
                self.failed += 1
                self.write_row(c, lib, mode, None, msg[:300], dispatch)
                summary.append(f"{mode} FAIL")
        return f"{lib} {'/'.join(summary)} TFLOP/s" + ("" if check == "ok" else " FAIL") + \
            (f" [{dispatch}]" if lib.startswith("ktune") and dispatch else "")

    def run(self, cases):
        torch, args = self.torch, self.args
        self.rows, self.kt = [], None
        if args.no_ktune:
            ew.log("ktune: skipped (--no-ktune)")
        elif not os.path.exists(args.lib):
            ew.log(f"ktune: {args.lib} not found: the ktune column is skipped")
        else:
            try:
                disabled = {n for n, kind, _ in self.header_msgs if kind == "types"}
                self.kt = ew.Ktune(args.lib, args.db, self.dev.index or 0, disabled)
                ew.log(f"ktune: {args.lib} (version {self.kt.version})")
            except (OSError, ew.KtuneError) as e:
                ew.log(f"ktune: {e}: the ktune column is skipped")
        os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
        self.csv_file = open(args.csv, "w", newline="")
        self.csv_writer = csv.DictWriter(self.csv_file, fieldnames=FIELDS)
        self.csv_writer.writeheader()
        meta = dict(command=" ".join(sys.argv), device=self.device_name, torch=torch.__version__,
                    cudnn=torch.backends.cudnn.version(), cuda=torch.version.cuda,
                    ktune=self.kt.version if self.kt else None, ktune_lib=args.lib if self.kt else None,
                    started=time.strftime("%Y-%m-%d %H:%M:%S"))
        t0 = time.time()
        try:
            for i, c in enumerate(cases):
                gen = torch.Generator(device=self.dev)
                gen.manual_seed(1000 + i)
                name = (f"{c['setting']} {c['direction']} {c['dtype']} b{c['batch']} h{c['heads']} s{c['seqlen']} "
                        f"d{c['head_dim']}"
                        f"{' causal' if c['causal'] else ''}")
                try:
                    impls = self.build(c, gen)
                    line = []
                    for lib in LIBS:
                        impl = impls.get(lib)
                        if isinstance(impl, str):
                            line.append(f"{lib} skipped ({impl})")
                        elif impl is not None:
                            line.append(self.run_lib(c, lib, impl))
                    ew.log(f"[{i + 1}/{len(cases)}] {name}: " + "; ".join(line))
                except Exception as e:
                    self.failed += 1
                    ew.log(f"[{i + 1}/{len(cases)}] {name}: FAIL: {type(e).__name__}: {e}")
                    traceback.print_exc(file=sys.stderr)
                    self.write_row(c, "-", "-", None, f"FAIL: setup: {type(e).__name__}: {e}"[:300])
                    self.sync_quiet()
                impls = None
                torch.cuda.empty_cache()
        finally:
            meta["wall_s"] = round(time.time() - t0, 1)
            meta["failed_checks"] = self.failed
            self.csv_file.close()
            with open(args.csv + ".meta.json", "w") as f:
                json.dump(meta, f, indent=1)
            if self.kt:
                self.kt.close()
        print_table(self.rows)
        return meta


def print_table(rows):
    """Per case: each library's best TFLOP/s (eager or graph, checked rows first), ktune over the faster SDPA."""
    cases = {}
    for r in rows:
        if r["library"] == "-":
            continue
        key = (r["setting"], r["direction"], r["dtype"], r["batch"], r["heads"], r["seqlen"], r["head_dim"],
               r["causal"])
        lib = cases.setdefault(key, {}).setdefault(r["library"], [])
        lib.append(r)
    if not cases:
        return
    hdr = f"{'setting':<7} {'dir':<3} {'dtype':<5} {'B':>4} {'H':>3} {'S':>6} {'D':>4} {'causal':>6} " \
          f"{'ktune':>7} {'k-det':>7} {'cudnn':>7} {'flash':>7} {'k/best':>7}  check, dispatch"
    print(hdr)
    print("-" * len(hdr))
    for key, libs in cases.items():
        best = {}
        for lib, rs in libs.items():
            good = [float(r["tflops"]) for r in rs if r["tflops"] and not r["check"].startswith("FAIL")]
            best[lib] = max(good) if good else None
        peers = [best.get(l) for l in ("cudnn", "flash") if best.get(l)]
        k = best.get("ktune")
        fails = ",".join(f"{lib}" for lib, rs in libs.items() if any(r["check"].startswith("FAIL") for r in rs))
        disp = next((r["dispatch"] for r in libs.get("ktune", []) if r["dispatch"]), "")  # the atomic pass's
        f = lambda v: f"{v:7.0f}" if v else f"{'-':>7}"
        ratio = f"{k / max(peers):7.2f}" if k and peers else f"{'-':>7}"
        print(f"{key[0]:<7} {key[1]:<3} {key[2]:<5} {key[3]:>4} {key[4]:>3} {key[5]:>6} {key[6]:>4} {key[7]:>6} "
              f"{f(k)} {f(best.get('ktune-det'))} {f(best.get('cudnn'))} {f(best.get('flash'))} {ratio}  "
              f"{('FAIL ' + fails) if fails else 'ok'}{', ' + disp if disp else ''}")
    sys.stdout.flush()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build-device/install/lib/libktune.so", help="libktune.so (default %(default)s)")
    ap.add_argument("--db", default=None, help="tuning database for ktune_open (default: the default database)")
    ap.add_argument("--csv", default="bench-attention.csv", help="output CSV (default %(default)s)")
    ap.add_argument("--settings", default="fa3,triton", help="fa3, triton or both (default %(default)s)")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16"])
    ap.add_argument("--directions", default="fwd,bwd", help="fwd, bwd or both (default %(default)s)")
    ap.add_argument("--quick", action="store_true", help="fewer cases and reps (a smoke test)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan of cases and exit (no GPU, no torch)")
    ap.add_argument("--budget", type=float, default=None, help="seconds per timed batch (default 0.3)")
    ap.add_argument("--no-graph", action="store_true", help="eager mode only")
    ap.add_argument("--no-ktune", action="store_true", help="skip ktune (the baselines only)")
    args = ap.parse_args(argv)
    args.cpu_test, args.no_liger = False, True
    args.settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    if not args.settings or any(s not in ("fa3", "triton") for s in args.settings):
        ap.error("--settings: fa3, triton or both")
    args.directions = [s.strip() for s in args.directions.split(",") if s.strip()]
    if not args.directions or any(s not in ("fwd", "bwd") for s in args.directions):
        ap.error("--directions: fwd, bwd or both")
    header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include", "ktune.h")
    hmsgs = [m for m in ew.header_check(header) if m[0] in SIGS] if os.path.exists(header) else []
    cases = plan(args)
    if args.dry_run:
        print(f"# plan: {len(cases)} cases")
        for c in cases:
            print(f"{c['setting']:<7} {c['direction']:<3} {c['dtype']:<5} b{c['batch']:<4} h{c['heads']:<3} s{c['seqlen']:<6} "
                  f"d{c['head_dim']:<4} {'causal' if c['causal'] else 'full':<6} {c['flops'] / 1e12:8.3f} TFLOP")
        print("# header check: " + ("ok" if not hmsgs else "; ".join(m for _, _, m in hmsgs)))
        return 0
    for _, _, m in hmsgs:
        ew.log(f"header check: {m}")
    try:
        import torch
    except Exception as e:
        ew.log(f"cannot import torch: {e}")
        return 1
    if not torch.cuda.is_available():
        ew.log("no CUDA device visible to torch (use --dry-run to see the plan)")
        return 1
    torch.manual_seed(0)
    b = AttentionBench(args, torch)
    if args.quick:
        b.min_reps, b.max_reps = 5, 50
    else:
        b.min_reps, b.max_reps = 10, 200
    b.budget = args.budget or 0.3
    b.header_msgs = hmsgs
    try:
        b.run(cases)
    except Exception:
        traceback.print_exc()
        return 1
    if b.failed:
        ew.log(f"FAILED CHECKS: {b.failed} (see the check column of {args.csv})")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
