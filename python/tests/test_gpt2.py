"""The GPT-2 example's short run: stock and patched from the same seed, and
their loss curves agree (tiny on the host double; GPT-2 small, 3 steps, on a
GPU)."""
import json
import os
import re
import subprocess
import sys

from conftest import REPO

TRAIN = os.path.join(REPO, "examples", "gpt2", "train.py")
DATA = os.path.join(REPO, "python", "tests", "data", "gpt2-corpus.txt")


def test_gpt2_short_run(torch, dev, tmp_path):
    # the data is a fixed text (a copy of docs/architecture.md as it was), not the repository's,
    # whose every edit changed the batches and once took the curves 0.052 apart; the tiny model
    # takes a learning rate at which 4 steps learn (3 at 6e-4 once went up); its heads are 64
    # wide, so that ktune's attention serves them
    size = (["--batch", "2", "--seq", "32", "--n-layer", "2", "--n-head", "2", "--n-embd", "128", "--vocab", "256",
             "--lr", "1e-2", "--steps", "4"] if dev == "cpu" else ["--batch", "4", "--seq", "256", "--steps", "3"])
    steps = int(size[size.index("--steps") + 1])
    out, misses = tmp_path / "gpt2.json", tmp_path / "misses.yaml"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(REPO, "python"),
                                                      os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, TRAIN, "--device", dev, "--warmup", "1", "--json", str(out), "--data", DATA,
                        "--record", str(misses), "--profile", "--profile-top", "5"]
                       + size, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["agree"] and res["max_loss_diff"] <= 0.05
    stock, kt = res["runs"]["stock"], res["runs"]["ktune"]
    assert len(stock["losses"]) == len(kt["losses"]) == steps
    assert kt["losses"][-1] < kt["losses"][0]  # it learns
    served = {how for _, how in kt["served"].values()}
    assert served == {"ktune"}, kt["served"]  # every Linear, LayerNorm, GELU, attention and the loss ran on ktune
    classes = {cls for cls, _ in kt["served"].values()}
    assert {"ScaledDotProductAttention", "LinearCrossEntropy"} <= classes, classes
    assert kt["not_run"] == ["lm_head"]  # its GEMM is inside LinearCrossEntropy
    assert "served by ktune" in p.stdout and "ScaledDotProductAttention" in p.stdout
    assert "torch throughout: token and position embeddings, residual adds, AdamW" in p.stdout
    # what served its calls: the Python layer's count agrees with the context's own, where
    # each linear_cross_entropy call is four inside libktune (at these sizes one chunk of
    # rows: the logits' GEMM, the fused cross-entropy, the two gradients' GEMMs)
    dispatch, stats = kt["dispatch"], kt["stats"]
    assert {op for op, _, _ in dispatch} >= {"gemm", "layernorm", "layernorm_backward", "gelu", "gelu_backward",
                                             "attention_fwd", "attention_bwd", "linear_cross_entropy"}
    lce = sum(n for op, _, n in dispatch if op == "linear_cross_entropy")
    assert lce == steps
    outer = sum(n for op, _, n in dispatch if op != "linear_cross_entropy")
    assert outer + 4 * lce == stats["calls"]
    missed = sum(n for op, src, n in dispatch if src not in ("exact", "arch", "shipped")
                 and op != "linear_cross_entropy")
    assert missed <= stats["missed_calls"] <= missed + 4 * lce
    assert "served by tuned entries" in p.stdout
    # --record: the missed keys saved once (not again at exit), ready for ktune sweep --misses
    if stats["missed_keys"]:
        text = misses.read_text()
        assert text.count("  - {op:") == stats["missed_keys"]
        assert sum(int(c) for c in re.findall(r"calls: (\d+)\}", text)) == stats["missed_calls"]
    # --profile: one step of each run, its time and what took it
    for run in (stock, kt):
        prof = run["profile"]
        assert prof["wall_us"] > 0 and prof["rows"] and prof["device_us"] > 0
    assert p.stdout.count("one step") == 2
