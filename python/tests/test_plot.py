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


def test_attention_and_quant_figures(matplotlib, tmp_path):
    from ktune import plot
    files = ["h100-attention-tuned.csv", "h100-quant.csv"]
    written = plot.plot_files([os.path.join(RESULTS, f) for f in files], str(tmp_path), "H100", ["png"])
    names = {os.path.basename(p) for p in written}
    assert {"attention-fwd-bf16.png", "attention-bwd-bf16.png", "gemm_quant-w4g128-bf16.png"} <= names
    assert not any(n.startswith("copy") for n in names)  # the copy is the floor, not an op
    # the same op twice in one call would draw over itself: refused
    with pytest.raises(ValueError, match="again"):
        plot.plot_files([os.path.join(RESULTS, "h100-attention-tuned.csv"),
                         os.path.join(RESULTS, "h100-attention-bwd-tuned.csv")], str(tmp_path / "twice"), "", ["png"])


ATTENTION = ("setting,direction,dtype,batch,heads,seqlen,head_dim,causal,flops,library,mode,time_us,p20_us,p80_us,"
             "tflops,check,dispatch\n")


def test_attention_series_takes_the_best_row_that_passed(tmp_path):
    from ktune import plot
    rows = [dict(zip(ATTENTION.strip().split(","), line.split(","))) for line in (
        "fa3,fwd,bf16,16,16,1024,128,0,1,ktune,eager,1,1,1,450.0,ok,exact",
        "fa3,fwd,bf16,16,16,1024,128,0,1,ktune,graph,1,1,1,500.0,ok,exact",
        "fa3,fwd,bf16,4,16,4096,128,0,1,ktune,eager,1,1,1,610.0,FAIL err 1,exact",
        "fa3,fwd,bf16,4,16,4096,128,0,1,ktune,graph,1,1,1,590.0,ok,exact",
        "fa3,fwd,bf16,4,16,4096,128,0,1,cudnn,graph,1,1,1,620.0,FAIL err 2,-",
        "fa3,bwd,bf16,4,16,4096,128,1,1,ktune-det,eager,1,1,1,190.0,ok,exact")]
    assert plot.kind(rows) == "attention"
    s = plot.attention_series(rows)
    fwd = s[("fwd", "bf16")][("fa3", 128, 0)]
    assert fwd["ktune"] == [(1024, 500.0, False), (4096, 590.0, False)]  # the failed 610 is not the best
    assert fwd["cudnn"] == [(4096, 620.0, True)]  # failed everywhere: kept, marked
    assert s[("bwd", "bf16")][("fa3", 128, 1)]["ktune-det"] == [(4096, 190.0, False)]


def test_quant_series_is_time_and_bandwidth_over_m(tmp_path):
    from ktune import plot
    head = "op,variant,dtype,shape,elements,bytes,library,mode,time_us,p20_us,p80_us,gbps,check,dispatch"
    rows = [dict(zip(head.split(","), line.split(","))) for line in (
        "copy,first,u8,1024,1024,2048,copy,eager,1,1,1,3000.0,ok,-",
        "gemm_quant,w4g128,bf16,16x4096x4096,1,8912896,ktune,eager,20.0,1,1,445.6,ok,exact",
        "gemm_quant,w4g128,bf16,16x4096x4096,1,8912896,ktune,graph,18.0,1,1,495.2,ok,exact",
        "gemm_quant,w4g128,bf16,1x4096x4096,1,8912896,ktune,graph,12.0,1,1,742.7,ok,exact",
        "gemm_quant,w4g128,bf16,16x4096x4096,1,33554432,cublas,graph,19.0,1,1,1766.0,ok,-")]
    s = plot.quant_series(rows)
    ktune = s[("w4g128", "bf16")][(4096, 4096)]["ktune"]
    assert ktune == [(1, 12.0, 742.7, False), (16, 18.0, 495.2, False)]  # sorted by M, the faster of the two
    assert plot.copy_floor(rows) == 3000.0
    assert "gemm_quant" not in plot.ops_series(rows)[0]  # its own figure, not a GB/s one


def test_quant_speedups_keep_failures_marked():
    from ktune import plot
    libs = {"cublas": [(1, 24.0, 1400.0, False), (4, 30.0, 1700.0, False), (16, 40.0, 1300.0, True)],
            "ktune": [(1, 12.0, 700.0, False), (4, 20.0, 500.0, False), (16, 20.0, 500.0, False)],
            "gemlite": [(1, 16.0, 600.0, True), (4, 60.0, 200.0, False)]}
    s = plot.quant_speedups(libs)
    assert set(s) == {"ktune", "gemlite"}  # cuBLAS is the 1.0 line
    assert s["ktune"] == [(1, 2.0, False), (4, 1.5, False)]  # none at M = 16: cuBLAS failed there
    assert s["gemlite"] == [(1, 1.5, True), (4, 0.5, False)]  # a failed 1.5x stays a failure


def test_h100_gemlite_failures_are_marked():
    from ktune import plot
    rows = plot._read(os.path.join(RESULTS, "h100-quant.csv"))
    s = plot.quant_speedups(plot.quant_series(rows)[("w4g128", "bf16")][(4096, 4096)])
    assert [m for m, _, failed in s["gemlite"] if failed] == [1]  # both of its M = 1 rows failed the check
    assert not any(failed for _, _, failed in s["ktune"])
    m1 = s["ktune"][0]
    assert m1[0] == 1 and 1.7 < m1[1] < 1.9  # 23.84 us (cuBLAS, graph) over 13.088 (ktune, graph)


def test_svg_drawn_again_is_the_same_file(matplotlib, tmp_path):
    from ktune import plot
    csv = os.path.join(RESULTS, "h200-quant.csv")
    a, b = (plot.plot_files([csv], str(tmp_path / d), "H200", ["svg"]) for d in ("a", "b"))
    assert [os.path.basename(p) for p in a] == ["gemm_quant-w4g128-bf16.svg"]
    with open(a[0], "rb") as fa, open(b[0], "rb") as fb:
        assert fa.read() == fb.read()
