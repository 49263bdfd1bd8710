#!/usr/bin/env python3
"""bench/ops/rowwise.py - ktune's row-wise ops (softmax, RMSNorm, LayerNorm, cross-entropy) against
PyTorch eager, torch.compile (cross-entropy) and Liger Kernel, in the same process on the same GPU.

    python3 bench/ops/rowwise.py --lib build-device/install/lib/libktune.so --csv $OUT/rowwise.csv
    python3 bench/ops/rowwise.py --dry-run              # the plan of cases, no GPU needed

Ops (bf16, [rows, cols]; s = 2 bytes an element; "bytes" is the op's minimum
traffic, the same figure for every library):
  softmax           y = softmax(x, -1)                           bytes 2 r c s
  softmax_bwd       dx = y (dy - sum(y dy))                      bytes 3 r c s
  rmsnorm           y = x rstd w, rstd saved (fp32)              bytes 2 r c s + c s + 4 r
  rmsnorm_residual  h = x + res written, y = h rstd w            bytes 4 r c s + c s + 4 r
  rmsnorm_bwd       dx and dw from h, w, rstd, dy                bytes 3 r c s + 2 c s + 4 r
  layernorm         y = (x - mean) rstd w + b, mean, rstd saved  bytes 2 r c s + 2 c s + 8 r
  layernorm_bwd     dx, dw, db from x, w, mean, rstd, dy         bytes 3 r c s + 3 c s + 8 r
  cross_entropy     the mean loss of logits [r, c] (c: the vocab)  bytes r c s + 8 r (targets)
                    against int64 targets (ktune saves lse too)
  cross_entropy_fused  the mean loss and dlogits: forward and      bytes 2 r c s + 8 r
                    backward (ktune: one kernel reading the logits once)
Baselines: torch (softmax: aten._softmax.out and _softmax_backward_data.out;
RMSNorm: F.rms_norm, its residual add as x + res first, its backward through
autograd, eager only: capturing autograd.grad in a graph failed; LayerNorm:
F.layer_norm, its backward through autograd, eager only), Liger
(liger_kernel.ops.softmax's _softmax_forward/_backward,
liger_kernel.ops.rms_norm's rms_norm_forward/backward in the llama casting
mode, no residual variant; liger_kernel.ops.layer_norm's layer_norm_forward
and layer_norm_backward); cross-entropy: F.cross_entropy, forward and autograd.grad of it, eager
and torch.compile'd (AOTAutograd compiles the backward too; eager only, as the norms' backward),
Liger's LigerCrossEntropyLoss (liger_kernel.transformers; it writes the gradient into the logits'
memory in its forward, so they are restored, untimed, before every call).  torch.compile rows are
in the CSV as library "compile" (the printed table has the ktune, torch and liger columns).  The
cross-entropy checks scale dlogits by rows x vocab (p vocab - vocab at the target: of order 1)
before the relative check.

The timing protocol is bench/ops/elementwise.py's (this script runs its Bench):
seeded inputs, outputs poisoned with NaN, checked against a float32 reference
before and after timing (ktune within 1e-2 relative to max(1, |ref|) in bf16,
dw and db relative to max(1, rms(ref)) since they sum rows-many rounded terms; the
baselines within 4 times that), L2 flushed before every timed call, eager
and CUDA-graph replay, the median of many reps, the 1 GiB copy first and last
as the ceiling.  Exit status 0, 2 when a check failed, 1 on a fatal error.
"""
import argparse
import ctypes
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import elementwise as ew  # noqa: E402  (the protocol, the ctypes wrapper, the CSV)

c_vp, c_i64, c_int, c_f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
SIGS = {
    "ktune_softmax": ([c_vp, c_i64, c_i64, c_vp, c_i64, c_vp, c_i64, c_int, c_vp],
                      "ctx rows cols x ldx y ldy dtype stream"),
    "ktune_softmax_backward": ([c_vp, c_i64, c_i64, c_vp, c_i64, c_vp, c_i64, c_vp, c_i64, c_int, c_vp],
                               "ctx rows cols y ldy dy lddy dx lddx dtype stream"),
    "ktune_rmsnorm": ([c_vp, c_i64, c_i64, c_vp, c_i64, c_vp, c_i64, c_vp, c_f32, c_vp, c_i64, c_vp, c_vp, c_i64,
                       c_int, c_vp],
                      "ctx rows cols x ldx residual ld_residual weight eps y ldy rstd h ldh dtype stream"),
    "ktune_rmsnorm_backward": ([c_vp, c_i64, c_i64, c_vp, c_i64, c_vp, c_vp, c_vp, c_i64, c_vp, c_i64, c_vp, c_int,
                                c_vp],
                               "ctx rows cols h ldh weight rstd dy lddy dx lddx dweight dtype stream"),
    "ktune_layernorm": ([c_vp, c_i64, c_i64, c_vp, c_i64, c_vp, c_vp, c_f32, c_vp, c_i64, c_vp, c_vp, c_int, c_vp],
                        "ctx rows cols x ldx weight bias eps y ldy mean rstd dtype stream"),
    "ktune_layernorm_backward": ([c_vp, c_i64, c_i64, c_vp, c_i64, c_vp, c_vp, c_vp, c_vp, c_i64, c_vp, c_i64, c_vp,
                                  c_vp, c_int, c_vp],
                                 "ctx rows cols x ldx weight mean rstd dy lddy dx lddx dweight dbias dtype stream"),
    "ktune_cross_entropy": ([c_vp, c_i64, c_i64, c_vp, c_i64, c_vp, c_i64, c_f32, c_f32, c_int, c_vp, c_vp, c_int,
                             c_vp],
                            "ctx rows vocab logits ld_logits targets ignore_index label_smoothing softcap reduction "
                            "loss lse dtype stream"),
    "ktune_cross_entropy_backward": ([c_vp, c_i64, c_i64, c_vp, c_i64, c_vp, c_i64, c_f32, c_f32, c_int, c_vp, c_vp,
                                      c_vp, c_i64, c_int, c_vp],
                                     "ctx rows vocab logits ld_logits targets ignore_index label_smoothing softcap "
                                     "reduction lse dloss dlogits ld_dlogits dtype stream"),
    "ktune_cross_entropy_fused": ([c_vp, c_i64, c_i64, c_vp, c_i64, c_vp, c_i64, c_f32, c_f32, c_int, c_f32, c_vp, c_vp,
                                   c_i64, c_int, c_vp],
                                  "ctx rows vocab logits ld_logits targets ignore_index label_smoothing softcap "
                                  "reduction dloss loss dlogits ld_dlogits dtype stream"),
}
OPS = ("softmax", "rmsnorm", "layernorm", "cross_entropy")
SYMBOLS = {"softmax": ["ktune_softmax"], "softmax_bwd": ["ktune_softmax_backward"],
           "rmsnorm": ["ktune_rmsnorm"], "rmsnorm_residual": ["ktune_rmsnorm"],
           "rmsnorm_bwd": ["ktune_rmsnorm_backward"],
           "layernorm": ["ktune_layernorm"], "layernorm_bwd": ["ktune_layernorm_backward"],
           "cross_entropy": ["ktune_cross_entropy"], "cross_entropy_fused": ["ktune_cross_entropy_fused"]}
EPS = 1e-6

# the elementwise bench's ctypes wrapper and header check take these ops too
ew.KTUNE_SIGS.update(SIGS)
ew.OP_SYMBOLS.update(SYMBOLS)
ew.C_TYPES["float*"] = c_vp
ew.C_TYPES["int64_t*"] = c_vp
ew.C_TYPES["ktune_reduction"] = c_int


def shapes(args):
    if args.quick:
        return dict(softmax=[(4096, 4096), (1024, 32768)], rmsnorm=[(4096, 4096), (1024, 32768)],
                    layernorm=[(4096, 4096), (1024, 32768)], cross_entropy=[(4096, 32000), (4096, 128256)])
    return dict(softmax=[(4096, 1024), (4096, 4096), (4096, 16384), (1024, 32768), (1024, 131072), (256, 262144)],
                rmsnorm=[(4096, 1024), (4096, 4096), (4096, 8192), (1024, 32768), (16384, 4096)],
                layernorm=[(4096, 1024), (4096, 4096), (4096, 8192), (1024, 32768), (16384, 4096)],
                cross_entropy=[(4096, 32000), (8192, 32000), (8192, 50257), (8192, 128256), (4096, 262144)])


def plan(args):
    cases = []
    sz = shapes(args)

    def case(op, shape, matrices, vectors, libs, stats=0):
        r, c = shape
        cases.append(dict(op=op, variant="-", dtype="bf16", shape=shape, shape_str=f"{r}x{c}", elements=r * c,
                          bytes=matrices * r * c * 2 + vectors * c * 2 + stats * r,
                          libs=libs))

    if "softmax" in args.ops:
        for op, mats in (("softmax", 2), ("softmax_bwd", 3)):
            for shape in sz["softmax"]:
                # Liger's softmax refuses rows over 65536 ("exceeds the recommended Triton blocksize")
                case(op, shape, mats, 0, ["ktune", "torch"] + (["liger"] if shape[1] <= 65536 else []))
    if "rmsnorm" in args.ops:
        for op, mats, vecs, libs in (("rmsnorm", 2, 1, ["ktune", "torch", "liger"]),
                                     ("rmsnorm_residual", 4, 1, ["ktune", "torch"]),
                                     ("rmsnorm_bwd", 3, 2, ["ktune", "torch", "liger"])):
            for shape in sz["rmsnorm"]:
                case(op, shape, mats, vecs, libs, stats=4)
    if "layernorm" in args.ops:
        for op, mats, vecs in (("layernorm", 2, 2), ("layernorm_bwd", 3, 3)):
            for shape in sz["layernorm"]:
                # Liger's layer norm refuses rows over 65536 (calculate_settings' block size)
                case(op, shape, mats, vecs, ["ktune", "torch"] + (["liger"] if shape[1] <= 65536 else []), stats=8)
    if "cross_entropy" in args.ops:
        # stats: the targets (8 bytes a row); Liger's loss computes the gradient in its forward:
        # it is timed fused only
        for op, mats, libs in (("cross_entropy", 1, ["ktune", "torch", "compile"]),
                               ("cross_entropy_fused", 2, ["ktune", "torch", "compile", "liger"])):
            for shape in sz["cross_entropy"]:
                case(op, shape, mats, 0, libs, stats=8)
    return cases


class RowBench(ew.Bench):
    def grad_check(self, outs, refs, tol):
        """close_check for dx, and dw (and db: sums over the rows, whose elements near 0 carry the
        rounding of rows-many terms) against max(1, rms(ref)) rather than max(1, |ref|)."""
        got, want = [outs[0]], [refs[0]]
        for o, r in zip(outs[1:], refs[1:]):
            scale = max(1.0, float(r.float().pow(2).mean().sqrt()))
            got.append(o.float() / scale)
            want.append(r / scale)
        return self.close_check(got, want, tol)

    def run_impl(self, c, lib, impl):
        """elementwise.py's, with graph mode left out for an impl marked eager_only."""
        if not impl.get("eager_only") or self.args.no_graph:
            return super().run_impl(c, lib, impl)
        self.args.no_graph = True
        try:
            return super().run_impl(c, lib, impl)
        finally:
            self.args.no_graph = False

    def build(self, c, gen):
        torch = self.torch
        F = torch.nn.functional
        op, (rows, cols) = c["op"], c["shape"]
        tol = ew.TOL["bf16"]
        kt, st, kdt = self.kt, self.stream, ew.KTUNE_DTYPE["bf16"]
        impls = {}
        have_kt = kt is not None and kt.has(op)
        if kt is None:
            impls["ktune"] = "no library"
        elif not have_kt:
            impls["ktune"] = "symbol missing"
        lig = self.row_liger
        if lig is None:
            impls["liger"] = self.row_liger_why
        if op.startswith("cross_entropy"):
            return self.build_cross_entropy(c, gen, impls, have_kt)
        x = self.randn((rows, cols), "bf16", gen)

        if op in ("softmax", "softmax_bwd"):
            ref_y = torch.softmax(x.float(), -1)
            if op == "softmax":
                yt = torch.empty_like(x)
                impls["torch"] = dict(fn=lambda: torch.ops.aten._softmax.out(x, -1, False, out=yt), outs=[yt],
                                      api="aten._softmax.out", check=lambda f: self.close_check([yt], [ref_y], tol * f))
                if lig is not None and "liger" in c["libs"]:
                    impls["liger"] = dict(fn=lambda: lig["softmax_fwd"](x), api="_softmax_forward",
                                          check=lambda f: self.close_check([lig["softmax_fwd"](x)[0]], [ref_y], tol * f))
                if have_kt:
                    yk = torch.empty_like(x)
                    impls["ktune"] = dict(fn=lambda: kt.call("ktune_softmax", rows, cols, x.data_ptr(), cols,
                                                             yk.data_ptr(), cols, kdt, st()),
                                          outs=[yk], check=lambda f: self.close_check([yk], [ref_y], tol * f))
                return impls
            y = ref_y.to(torch.bfloat16)
            dy = self.randn((rows, cols), "bf16", gen)
            yf, dyf = y.float(), dy.float()
            ref = yf * (dyf - (yf * dyf).sum(-1, keepdim=True))
            dxt = torch.empty_like(x)
            impls["torch"] = dict(fn=lambda: torch.ops.aten._softmax_backward_data.out(dy, y, -1, torch.bfloat16,
                                                                                      grad_input=dxt),
                                  outs=[dxt], api="aten._softmax_backward_data.out",
                                  check=lambda f: self.close_check([dxt], [ref], tol * f))
            if lig is not None and "liger" in c["libs"]:
                _, block, warps, multi = lig["softmax_fwd"](x)
                run = lambda: lig["softmax_bwd"](dy, y, block, warps, multi)
                impls["liger"] = dict(fn=run, api="_softmax_backward",
                                      check=lambda f: self.close_check([run()], [ref], tol * f))
            if have_kt:
                dxk = torch.empty_like(x)
                impls["ktune"] = dict(fn=lambda: kt.call("ktune_softmax_backward", rows, cols, y.data_ptr(), cols,
                                                         dy.data_ptr(), cols, dxk.data_ptr(), cols, kdt, st()),
                                      outs=[dxk], check=lambda f: self.close_check([dxk], [ref], tol * f))
            return impls

        w = (torch.rand(cols, device=self.dev, generator=gen) + 0.5).to(torch.bfloat16)
        wf = w.float()
        if op in ("layernorm", "layernorm_bwd"):
            return self.build_layernorm(c, gen, impls, x, w, have_kt)
        if op in ("rmsnorm", "rmsnorm_residual"):
            res = self.randn((rows, cols), "bf16", gen) if op == "rmsnorm_residual" else None
            h = (x + res) if res is not None else x  # rounded to bf16, as every library stores it
            hf = h.float()
            rstd = torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + EPS)
            ref_y = hf * rstd * wf
            if res is None:
                impls["torch"] = dict(fn=lambda: F.rms_norm(x, (cols,), w, EPS), api="F.rms_norm",
                                      check=lambda f: self.close_check([F.rms_norm(x, (cols,), w, EPS)], [ref_y],
                                                                       tol * f))
                if lig is not None:
                    run = lambda: lig["rms_fwd"](x, w, EPS, 0.0, "llama", False)
                    impls["liger"] = dict(fn=run, api="rms_norm_forward(llama)",
                                          check=lambda f: self.close_check([run()[0]], [ref_y], tol * f))
            else:
                def torch_res():
                    s = x + res
                    return s, F.rms_norm(s, (cols,), w, EPS)
                impls["torch"] = dict(fn=torch_res, api="x + res; F.rms_norm",
                                      check=lambda f: self.close_check(list(torch_res()), [hf, ref_y], tol * f))
            if have_kt:
                yk, rk = torch.empty_like(x), torch.empty(rows, dtype=torch.float32, device=self.dev)
                hk = torch.empty_like(x) if res is not None else None
                impls["ktune"] = dict(
                    fn=lambda: kt.call("ktune_rmsnorm", rows, cols, x.data_ptr(), cols,
                                       res.data_ptr() if res is not None else None, cols, w.data_ptr(),
                                       ctypes.c_float(EPS), yk.data_ptr(), cols, rk.data_ptr(),
                                       hk.data_ptr() if hk is not None else None, cols, kdt, st()),
                    outs=[t for t in (yk, rk, hk) if t is not None],
                    check=lambda f: self.close_check([yk, rk] + ([hk] if hk is not None else []),
                                                     [ref_y, rstd.squeeze(-1)] + ([hf] if hk is not None else []),
                                                     tol * f))
            return impls

        # rmsnorm_bwd: from x (h), w, rstd and dy
        dy = self.randn((rows, cols), "bf16", gen)
        xf, dyf = x.float(), dy.float()
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
        g = dyf * wf
        ref_dx = rstd * (g - xf * rstd * rstd * (g * xf).mean(-1, keepdim=True))
        ref_dw = (dyf * xf * rstd).sum(0)
        xr, wr = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
        yr = F.rms_norm(xr, (cols,), wr, EPS)
        run_t = lambda: torch.autograd.grad(yr, (xr, wr), dy, retain_graph=True)
        # eager only: capturing torch.autograd.grad in a CUDA graph failed on the H100 (torch 2.11)
        impls["torch"] = dict(fn=run_t, api="autograd of F.rms_norm (eager)", eager_only=True,
                              check=lambda f: self.grad_check(list(run_t()), [ref_dx, ref_dw], tol * f))
        if lig is not None:
            _, xl, rl, block, warps, mode = lig["rms_fwd"](x, w, EPS, 0.0, "llama", False)
            run_l = lambda: lig["rms_bwd"](dy, xl, w, rl, 0.0, mode, block, warps, False, False)
            impls["liger"] = dict(fn=run_l, api="rms_norm_backward(llama)",
                                  check=lambda f: self.grad_check(list(run_l()), [ref_dx, ref_dw], tol * f))
        if have_kt:
            rk = rstd.squeeze(-1).contiguous()
            dxk, dwk = torch.empty_like(x), torch.empty_like(w)
            impls["ktune"] = dict(
                fn=lambda: kt.call("ktune_rmsnorm_backward", rows, cols, x.data_ptr(), cols, w.data_ptr(),
                                   rk.data_ptr(), dy.data_ptr(), cols, dxk.data_ptr(), cols, dwk.data_ptr(), kdt,
                                   st()),
                outs=[dxk, dwk], check=lambda f: self.grad_check([dxk, dwk], [ref_dx, ref_dw], tol * f))
        return impls

    def build_layernorm(self, c, gen, impls, x, w, have_kt):
        torch = self.torch
        F = torch.nn.functional
        op, (rows, cols) = c["op"], c["shape"]
        tol = ew.TOL["bf16"]
        kt, st, kdt = self.kt, self.stream, ew.KTUNE_DTYPE["bf16"]
        lig = self.row_liger if "liger" in c["libs"] else None
        b = (torch.rand(cols, device=self.dev, generator=gen) - 0.5).to(torch.bfloat16)
        xf, wf, bf = x.float(), w.float(), b.float()
        mean = xf.mean(-1, keepdim=True)
        rstd = torch.rsqrt((xf - mean).pow(2).mean(-1, keepdim=True) + EPS)
        xhat = (xf - mean) * rstd
        if op == "layernorm":
            ref_y = xhat * wf + bf
            impls["torch"] = dict(fn=lambda: F.layer_norm(x, (cols,), w, b, EPS), api="F.layer_norm",
                                  check=lambda f: self.close_check([F.layer_norm(x, (cols,), w, b, EPS)], [ref_y],
                                                                   tol * f))
            if lig is not None:
                run = lambda: lig["ln_fwd"](x, w, b, EPS)
                impls["liger"] = dict(fn=run, api="layer_norm_forward",
                                      check=lambda f: self.close_check([run()[0]], [ref_y], tol * f))
            if have_kt:
                yk = torch.empty_like(x)
                mk, rk = (torch.empty(rows, dtype=torch.float32, device=self.dev) for _ in range(2))
                impls["ktune"] = dict(
                    fn=lambda: kt.call("ktune_layernorm", rows, cols, x.data_ptr(), cols, w.data_ptr(), b.data_ptr(),
                                       ctypes.c_float(EPS), yk.data_ptr(), cols, mk.data_ptr(), rk.data_ptr(), kdt,
                                       st()),
                    outs=[yk, mk, rk],
                    check=lambda f: self.close_check([yk, mk, rk], [ref_y, mean.squeeze(-1), rstd.squeeze(-1)],
                                                     tol * f))
            return impls

        # layernorm_bwd: from x, w, mean, rstd and dy
        dy = self.randn((rows, cols), "bf16", gen)
        dyf = dy.float()
        g = dyf * wf
        ref_dx = rstd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
        ref_dw, ref_db = (dyf * xhat).sum(0), dyf.sum(0)
        xr, wr, br = (t.detach().clone().requires_grad_(True) for t in (x, w, b))
        yr = F.layer_norm(xr, (cols,), wr, br, EPS)
        run_t = lambda: torch.autograd.grad(yr, (xr, wr, br), dy, retain_graph=True)
        # eager only, as rmsnorm_bwd's
        impls["torch"] = dict(fn=run_t, api="autograd of F.layer_norm (eager)", eager_only=True,
                              check=lambda f: self.grad_check(list(run_t()), [ref_dx, ref_dw, ref_db], tol * f))
        mean_s, rstd_s = mean.squeeze(-1).contiguous(), rstd.squeeze(-1).contiguous()
        if lig is not None:
            run_l = lambda: lig["ln_bwd"](dy, x, w, b, mean_s, rstd_s)
            impls["liger"] = dict(fn=run_l, api="layer_norm_backward",
                                  check=lambda f: self.grad_check(list(run_l()), [ref_dx, ref_dw, ref_db], tol * f))
        if have_kt:
            dxk, dwk, dbk = torch.empty_like(x), torch.empty_like(w), torch.empty_like(b)
            impls["ktune"] = dict(
                fn=lambda: kt.call("ktune_layernorm_backward", rows, cols, x.data_ptr(), cols, w.data_ptr(),
                                   mean_s.data_ptr(), rstd_s.data_ptr(), dy.data_ptr(), cols, dxk.data_ptr(), cols,
                                   dwk.data_ptr(), dbk.data_ptr(), kdt, st()),
                outs=[dxk, dwk, dbk],
                check=lambda f: self.grad_check([dxk, dwk, dbk], [ref_dx, ref_dw, ref_db], tol * f))
        return impls

    def build_cross_entropy(self, c, gen, impls, have_kt):
        """The mean loss (cross_entropy), and the mean loss with dlogits (cross_entropy_fused)."""
        torch = self.torch
        F = torch.nn.functional
        op, (rows, vocab) = c["op"], c["shape"]
        tol = ew.TOL["bf16"]
        kt, st, kdt = self.kt, self.stream, ew.KTUNE_DTYPE["bf16"]
        x = self.randn((rows, vocab), "bf16", gen)
        t = torch.randint(0, vocab, (rows,), device=self.dev, generator=gen)
        xf = x.float()
        lse = torch.logsumexp(xf, -1)
        ref_loss = (lse - xf.gather(1, t[:, None]).squeeze(1)).mean()
        lk = torch.empty((), dtype=torch.float32, device=self.dev)
        if op == "cross_entropy":
            del xf
            impls["torch"] = dict(fn=lambda: F.cross_entropy(x, t), api="F.cross_entropy",
                                  check=lambda f: self.close_check([F.cross_entropy(x, t)], [ref_loss], tol * f))
            impls["compile"] = self.compiled(lambda a, b: F.cross_entropy(a, b), (x, t), ref_loss, None, tol)
            if have_kt:
                lsek = torch.empty(rows, dtype=torch.float32, device=self.dev)
                impls["ktune"] = dict(
                    fn=lambda: kt.call("ktune_cross_entropy", rows, vocab, x.data_ptr(), vocab, t.data_ptr(), -100,
                                       0.0, 0.0, 0, lk.data_ptr(), lsek.data_ptr(), kdt, st()),
                    outs=[lk, lsek], check=lambda f: self.close_check([lk, lsek], [ref_loss, lse], tol * f))
            return impls

        # dlogits of the mean: (softmax - onehot) / rows; checked times rows x vocab (of order 1)
        scale = float(rows) * vocab
        ref_dx = torch.softmax(xf, -1)
        del xf
        ref_dx.scatter_add_(1, t[:, None], torch.full((rows, 1), -1.0, device=self.dev))
        ref_dx.mul_(vocab)  # = ref_dx / rows * scale

        def ce_check(loss, dx, f):
            # dlogits within twice the tolerance: PyTorch's bf16 backward takes p from its bf16
            # log_softmax, whose rounding (2^-9 |log p|, |log p| ~ log vocab) is 3-5% of p
            check = self.close_check([loss.detach()], [ref_loss], tol * f)
            return check if check != "ok" else self.close_check([dx.float().mul_(scale)], [ref_dx], 2 * tol * f)

        xr = x.detach().clone().requires_grad_(True)

        def run_t():
            loss = F.cross_entropy(xr, t)
            return loss, torch.autograd.grad(loss, xr)[0]
        # eager only: capturing torch.autograd.grad in a graph failed on the H100 (rmsnorm_bwd's note)
        impls["torch"] = dict(fn=run_t, api="F.cross_entropy + autograd.grad (eager)", eager_only=True,
                              check=lambda f: ce_check(*run_t(), f))
        impls["compile"] = self.compiled(lambda a, b: F.cross_entropy(a, b), (xr, t), ref_loss, ce_check, tol)
        if "liger" in c["libs"]:
            lig = self.row_liger
            if lig is None or "ce" not in lig:
                impls["liger"] = self.row_liger_why if lig is None else "no LigerCrossEntropyLoss"
            else:
                ce = lig["ce"]()
                xw = x.detach().clone().requires_grad_(True)

                def run_l():
                    loss = ce(xw, t)
                    return loss, torch.autograd.grad(loss, xw)[0]

                def restore():  # Liger's forward writes the gradient into the logits' memory
                    with torch.no_grad():
                        xw.copy_(x)
                impls["liger"] = dict(fn=run_l, before=restore, eager_only=True,
                                      api="LigerCrossEntropyLoss + autograd.grad (in place; restored untimed)",
                                      check=lambda f: (restore(), ce_check(*run_l(), f))[1])
        if have_kt:
            dxk = torch.empty_like(x)
            impls["ktune"] = dict(
                fn=lambda: kt.call("ktune_cross_entropy_fused", rows, vocab, x.data_ptr(), vocab, t.data_ptr(), -100,
                                   0.0, 0.0, 0, 1.0, lk.data_ptr(), dxk.data_ptr(), vocab, kdt, st()),
                outs=[lk, dxk], check=lambda f: ce_check(lk, dxk, f))
        return impls

    def compiled(self, fn, inputs, ref_loss, grad_check, tol):
        """torch.compile of fn (the loss), with autograd.grad of its first input when grad_check is given:
        an impl, or why it is skipped (the compile is tried here, untimed)."""
        torch = self.torch
        if self.args.no_compile:
            return "--no-compile"
        try:
            cf = torch.compile(fn)

            def run():
                loss = cf(*inputs)
                return (loss, torch.autograd.grad(loss, inputs[0])[0]) if grad_check else loss
            run()
            self.sync()
        except Exception as e:
            return f"torch.compile failed: {type(e).__name__}: {str(e).strip().splitlines()[0][:120] if str(e).strip() else ''}"
        if grad_check:
            return dict(fn=run, api="torch.compile(F.cross_entropy) + autograd.grad", eager_only=True,
                        check=lambda f: grad_check(*run(), f))
        return dict(fn=run, api="torch.compile(F.cross_entropy)", eager_only=True,
                    check=lambda f: self.close_check([run()], [ref_loss], tol * f))

    def run(self, cases):
        self.row_liger, self.row_liger_why = None, "--no-liger"
        if not self.args.no_liger:
            try:
                import importlib
                sm = importlib.import_module("liger_kernel.ops.softmax")
                rn = importlib.import_module("liger_kernel.ops.rms_norm")
                ln = importlib.import_module("liger_kernel.ops.layer_norm")
                self.row_liger = dict(softmax_fwd=sm._softmax_forward, softmax_bwd=sm._softmax_backward,
                                      rms_fwd=rn.rms_norm_forward, rms_bwd=rn.rms_norm_backward,
                                      ln_fwd=ln.layer_norm_forward, ln_bwd=ln.layer_norm_backward)
                try:
                    lt = importlib.import_module("liger_kernel.transformers")
                    self.row_liger["ce"] = lt.LigerCrossEntropyLoss
                except Exception as e:  # an older Liger: the other ops still run
                    ew.log(f"liger: no LigerCrossEntropyLoss ({type(e).__name__}: {e}): cross-entropy's column skipped")
            except Exception as e:
                self.row_liger_why = f"not importable: {type(e).__name__}: {e}"
                ew.log(f"liger: {self.row_liger_why}: its column is skipped")
        return super().run(cases)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="build-device/libktune.so", help="libktune.so (default %(default)s)")
    ap.add_argument("--db", default=None, help="tuning database for ktune_open (default: the default database)")
    ap.add_argument("--csv", default="bench-rowwise.csv", help="output CSV (default %(default)s)")
    ap.add_argument("--ops", default=",".join(OPS), help="subset of " + ",".join(OPS))
    ap.add_argument("--quick", action="store_true", help="fewer shapes and reps (a smoke test)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan of cases and exit (no GPU, no torch)")
    ap.add_argument("--budget", type=float, default=None, help="seconds per timed batch (default 0.15)")
    ap.add_argument("--no-graph", action="store_true", help="eager mode only")
    ap.add_argument("--no-liger", action="store_true", help="skip Liger")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (cross-entropy: a compile a case)")
    ap.add_argument("--no-ktune", action="store_true", help="skip ktune (baselines only)")
    args = ap.parse_args(argv)
    args.cpu_test = False
    args.ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    if not args.ops or any(o not in OPS for o in args.ops):
        ap.error(f"--ops: choose from {','.join(OPS)}")
    header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include", "ktune.h")
    hmsgs = [m for m in ew.header_check(header) if m[0] in SIGS] if os.path.exists(header) else []
    cases = plan(args)
    if args.dry_run:
        print(f"# plan: {len(cases)} cases; ops {','.join(args.ops)}")
        for c in cases:
            print(f"{c['op']:<17} {c['shape_str']:>12} {c['bytes'] / ew.MiB:>9.1f} MiB  {','.join(c['libs'])}")
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
    b = RowBench(args, torch)
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
