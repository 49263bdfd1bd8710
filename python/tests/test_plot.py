"""ktune plot on the committed H100 CSVs, and its refusal of a CSV it does not know."""
import os
import subprocess
import sys

import pytest

from conftest import REPO

RESULTS = os.path.join(REPO, "bench", "results")


@pytest.fixture
def matplotlib():
    return pytest.importorskip("matplotlib")


def test_plots_of_every_kind_of_csv(matplotlib, tmp_path):
    from ktune import plot
    files = ["h100-elementwise.csv", "h100-rowwise.csv", "h100.csv"]
    written = plot.plot_files([os.path.join(RESULTS, f) for f in files], str(tmp_path), "H100", ["png", "svg"])
    names = {os.path.basename(p) for p in written}
    for want in ("swiglu.png", "swiglu.svg", "softmax_bwd.png", "gemm-square.png", "gemm-llm-bf16-nt.svg"):
        assert want in names
    png = (tmp_path / "swiglu.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10000
    assert b"ktune" in (tmp_path / "swiglu.svg").read_bytes()  # the legend, as text


def test_plot_of_ktune_show_csv(matplotlib, tmp_path):
    from ktune import plot
    csv = tmp_path / "show.csv"
    csv.write_text("device,arch,sms,op,dtype,variant,m,n,k,aligned,time_us,p20_us,p80_us,tflops,gbps,baseline_us,"
                   "ratio,err_fro,err_max,candidates,tune_s,config,template_hash,created_at\n"
                   "H100,sm_90,132,gelu,bf16,\"tanh,fwd\",1048576,0,0,1,6.25,6.1,6.4,0,671.3,6.1,0.97,1e-3,3e-3,"
                   "738,1.6,\"VEC=8\",abc,2026\n"
                   "H100,sm_90,132,gelu,bf16,\"tanh,fwd\",16777216,0,0,1,27.6,27,28,0,2430.8,27.5,1.0,1e-3,3e-3,"
                   "738,1.6,\"VEC=8\",abc,2026\n")
    written = plot.plot_files([str(csv)], str(tmp_path / "out"), "", ["png"])
    assert [os.path.basename(p) for p in written] == ["gelu-stored.png"]


def test_unknown_csv_is_refused(matplotlib, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    p = subprocess.run([sys.executable, "-m", "ktune.cli", "plot", str(bad), "-o", str(tmp_path)], env=env,
                       capture_output=True, text=True)
    assert p.returncode == 1 and "not a CSV of bench/ops" in p.stderr
