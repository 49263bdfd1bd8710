"""The GPT-2 example's short run: stock and patched from the same seed, and
their loss curves agree (tiny on the host double; GPT-2 small, 3 steps, on a
GPU)."""
import json
import os
import subprocess
import sys

from conftest import REPO

TRAIN = os.path.join(REPO, "examples", "gpt2", "train.py")


def test_gpt2_short_run(torch, dev, tmp_path):
    size = (["--batch", "2", "--seq", "32", "--n-layer", "2", "--n-head", "2", "--n-embd", "32", "--vocab", "256"]
            if dev == "cpu" else ["--batch", "4", "--seq", "256"])
    out = tmp_path / "gpt2.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(REPO, "python"),
                                                      os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, TRAIN, "--device", dev, "--steps", "3", "--warmup", "1", "--json", str(out)]
                       + size, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["agree"] and res["max_loss_diff"] <= 0.05
    stock, kt = res["runs"]["stock"], res["runs"]["ktune"]
    assert len(stock["losses"]) == len(kt["losses"]) == 3
    assert kt["losses"][-1] < kt["losses"][0]  # it learns
    served = {how for _, how in kt["served"].values()}
    assert served == {"ktune"}, kt["served"]  # every Linear, LayerNorm and GELU ran on ktune
    assert "served by ktune" in p.stdout
