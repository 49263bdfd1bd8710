"""tune() and sweep() through the ktune command; without a GPU it refuses
with exit 2, after reading the spec (so a spec from a dict is parsed)."""
import os

import pytest

import ktune
from ktune import tuning


@pytest.fixture
def cli():
    try:
        return tuning.cli_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))


def test_fields_become_options():
    assert tuning._fields({"m": 16, "dtype": "bf16", "retry_failed": True, "budget": None}) == \
        ["--m", 16, "--dtype", "bf16", "--retry-failed"]


def test_report_lines_are_parsed():
    rep = tuning._parse("key:        gemm f16 nt 16x4096x4096 aligned\nconfig:     BLOCK_M=16\n"
                        "time:       20.50 us (p20 20.14, p80 20.83)\n")
    assert rep == {"key": "gemm f16 nt 16x4096x4096 aligned", "config": "BLOCK_M=16",
                   "time": "20.50 us (p20 20.14, p80 20.83)"}


def test_the_command_is_the_c_program(cli):
    assert tuning._is_elf(cli)
    assert "ktune" in tuning.run(["info"])


def test_tune_without_gpu_raises_command_error(cli, no_gpu, tmp_path):
    ktune.set_db_path(tmp_path / "t.db")
    try:
        with pytest.raises(tuning.CommandError) as e:
            ktune.tune("gemm", m=16, n=64, k=64, dtype="bf16", layout="nt")
        assert e.value.returncode == 2 and "GPU" in e.value.output
        assert "--db" in e.value.argv and str(tmp_path / "t.db") in e.value.argv
    finally:
        ktune.set_db_path(None)


def test_sweep_spec_from_a_dict_is_read(cli, no_gpu):
    good = {"gemm": {"dtypes": ["bf16"], "layouts": ["nt"], "shapes": [{"m": [16], "n": 4096, "k": 4096}]}}
    with pytest.raises(tuning.CommandError) as e:
        ktune.sweep(good)
    assert e.value.returncode == 2 and "GPU" in e.value.output  # parsed, then no GPU
    with pytest.raises(tuning.CommandError) as e:
        ktune.sweep({"gemm": {"dtypes": ["bf16"]}})
    assert "missing 'layouts'" in e.value.output


def test_cli_is_found_with_the_library(monkeypatch):
    """build/ktune beside build/libktune.so; ktune/bin/ktune of an installed
    package beside its ktune/lib/libktune.so."""
    monkeypatch.delenv("KTUNE_CLI", raising=False)
    libdir = os.path.dirname(os.path.abspath(ktune.library().path))
    places = [os.path.join(libdir, "ktune"), os.path.normpath(os.path.join(libdir, os.pardir, "bin", "ktune"))]
    places = [p for p in places if tuning._is_elf(p)]
    if not places:
        pytest.skip(f"no ktune command beside {libdir} (the host double's folder)")
    assert tuning.cli_path() in places
