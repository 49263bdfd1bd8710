"""The runtime's loop from Python (docs/runtime.md): the record of misses
(record_misses, save_misses, KTUNE_RECORD at exit), a context's counters
(stats), the cubin cache warm (warm) and which dispatch source served each
call (count_dispatch).  On the host double every key is served by
"default" and is a miss; on a GPU the same assertions hold for whatever
served the key."""
import os
import re
import subprocess
import sys

import pytest

import ktune
from ktune import contexts, tuning

from conftest import gpu_opens

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(ktune.__file__)))  # the ktune these tests import

TUNED = ("exact", "arch", "shipped")


@pytest.fixture
def fresh(dev):
    """Contexts opened anew (counts from zero), and the recording put back after."""
    ktune.close()
    yield dev
    ktune.close()
    contexts._record = contexts._ENV


def misses_of(path):
    """{(op, variant, sizes...): calls} of a misses file."""
    out = {}
    for line in open(path):
        m = re.match(r"  - \{op: (\w+), dtype: (\w+), variant: \"([^\"]*)\", (.*), aligned: (\w+), "
                     r"source: \"(\w+)\", calls: (\d+)\}", line)
        if m:
            out[(m.group(1), m.group(2), m.group(3), m.group(4), m.group(5))] = int(m.group(7))
    return out


def test_stats_count_calls_keys_and_misses(torch, fresh):
    x = torch.randn(5, 1000, device=fresh)
    with ktune.count_dispatch() as served:
        for _ in range(3):
            ktune.gelu(x)
    s = ktune.stats()
    assert isinstance(s, ktune.Stats)
    assert (s.calls, s.keys) == (3, 1)
    (op, source), = served  # one op, one source, three calls
    assert op == "gelu" and served[(op, source)] == 3
    # a key served by a tuned entry is no miss; any other source is
    assert (s.missed_keys, s.missed_calls) == ((0, 0) if source in TUNED else (1, 3))
    assert s.tuned_calls == s.calls - s.missed_calls
    assert s.warm_state in ("never", "running", "done")
    if ktune.library().host:
        assert source == "default" and (s.kernels, s.nvrtc_compiles, s.cache_loads) == (0, 0, 0)
    else:
        assert s.kernels >= 1 and s.nvrtc_compiles + s.cache_loads >= 1  # its kernel was loaded somehow


def test_count_dispatch_by_op_nested_and_off_outside(torch, fresh):
    x = torch.randn(4, 32, device=fresh)
    w = torch.ones(32, device=fresh, requires_grad=True)
    ktune.softmax(x)  # not counted: no block
    with ktune.count_dispatch() as outer:
        ktune.softmax(x)
        with ktune.count_dispatch() as inner:
            ktune.layer_norm(x, w).sum().backward()
    ktune.softmax(x)
    ops = lambda c: sorted({op for op, _ in c})  # noqa: E731
    assert ops(inner) == ["layernorm", "layernorm_backward"]
    assert ops(outer) == ["layernorm", "layernorm_backward", "softmax"]
    assert sum(outer.values()) == 3 and sum(inner.values()) == 2
    assert all(src in TUNED + ("nearest", "default") for _, src in outer)


def test_record_misses_saves_at_close_adding_up(torch, fresh, tmp_path):
    path = tmp_path / "misses.yaml"
    ktune.record_misses(path)
    assert ktune.recording() == str(path)
    x = torch.randn(3, 77, device=fresh)
    with ktune.count_dispatch() as served:
        ktune.gelu(x)
        ktune.gelu(x)
    missed = not any(src in TUNED for _, src in served)
    ktune.close()  # saves, as ktune_close does
    if not missed:
        assert not path.exists()  # nothing served without a tuned entry: nothing written
        pytest.skip("gelu of 231 elements is tuned on this GPU")
    first = misses_of(path)
    assert list(first.values()) == [2] and next(iter(first))[0] == "gelu"
    ktune.gelu(x)  # a new context: its own count, added to the file's at its close
    ktune.close()
    assert list(misses_of(path).values()) == [3]
    ktune.record_misses(None)  # counted, not saved
    ktune.gelu(x)
    ktune.close()
    assert list(misses_of(path).values()) == [3]


def test_save_misses_now_and_its_errors(torch, fresh, tmp_path):
    x = torch.randn(2, 8, device=fresh)
    assert ktune.save_misses(tmp_path / "none.yaml") == 0  # no context open: nothing to save
    ktune.add(x, x)
    with pytest.raises(ValueError, match="nowhere"):
        ktune.save_misses()  # no recording asked, no path given
    path = tmp_path / "now.yaml"
    assert ktune.save_misses(path) == 1
    assert path.exists() or ktune.stats().missed_keys == 0
    with pytest.raises(ValueError, match="does not exist"):
        ktune.save_misses(tmp_path / "no" / "such" / "dir.yaml")
    with pytest.raises(ValueError, match="does not exist"):
        ktune.record_misses(tmp_path / "missing" / "m.yaml")
    assert ktune.recording() == os.environ.get("KTUNE_RECORD", "")  # a refused target changes nothing


def test_record_into_the_database(torch, fresh, tmp_path):
    old = ktune.db_path()
    try:
        ktune.set_db_path("")
        with pytest.raises(ValueError, match="database"):
            ktune.record_misses("db")
        ktune.set_db_path(tmp_path / "k.db")
        x = torch.randn(2, 8, device=fresh)
        ktune.add(x, x)
        if ktune.library().host:  # no database here: said, not silently dropped
            with pytest.raises(ktune.Error) as e:
                ktune.record_misses("db")
            assert e.value.name == "ERR_UNSUPPORTED" and "misses file" in e.value.message
        else:
            ktune.record_misses("db")
            assert ktune.save_misses() == 1
            assert (tmp_path / "k.db").exists() or ktune.stats().missed_keys == 0
    finally:
        contexts._record = contexts._ENV
        ktune.set_db_path(old)


def test_recording_is_saved_at_exit(torch, dev, tmp_path):
    """A Python program never closes its contexts: the package does at exit,
    for KTUNE_RECORD as for record_misses."""
    code = f"""
import torch, ktune
x = torch.randn(3, 1000, device="{dev}")
ktune.gelu(x); ktune.gelu(x)
ktune.record_misses({str(tmp_path / "api.yaml")!r}) if __import__("sys").argv[1] == "api" else None
ktune.softmax(x)
print("tuned" if ktune.stats().missed_keys == 0 else "missed")
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PACKAGE_ROOT, os.environ.get("PYTHONPATH", "")]))
    for how, path in (("env", tmp_path / "env.yaml"), ("api", tmp_path / "api.yaml")):
        e = dict(env, KTUNE_RECORD=str(path)) if how == "env" else env
        p = subprocess.run([sys.executable, "-c", code, how], env=e, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        if "tuned" in p.stdout:
            assert not path.exists()
            continue
        got = misses_of(path)
        assert {k[0] for k in got} <= {"gelu", "softmax"} and sum(got.values()) >= 1, got


def test_misses_file_is_read_by_ktune_sweep(torch, fresh, tmp_path):
    """The file a run records is one `ktune sweep --misses` reads (without a
    GPU it stops after reading it; on a GPU, bench/gpu-check.sh's gpt2-tuned
    tunes a real run's)."""
    if gpu_opens():
        pytest.skip("with a GPU the sweep would tune: bench/gpu-check.sh python (PYTHON_STEPS=gpt2-tuned)")
    try:
        cli = tuning.cli_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    path = tmp_path / "m.yaml"
    x = torch.randn(3, 1000, device=fresh, dtype=torch.bfloat16)
    ktune.gelu(x)
    ktune.layer_norm(x)
    ktune.gemm(x[:, :64], x[:, :64].t())
    ktune.save_misses(path)
    if not path.exists():
        pytest.skip("every key was tuned on this GPU")
    n = len(misses_of(path))
    p = subprocess.run([cli, "sweep", "--misses", str(path), "--progress"], capture_output=True, text=True,
                       timeout=120)
    out = p.stdout + p.stderr
    assert f"{n} keys recorded on" in out, out  # read whole (a bad key fails with its line), then no GPU
    assert p.returncode == 2 and "GPU" in out, out


def test_warm(torch, fresh, monkeypatch):
    monkeypatch.setenv("KTUNE_NO_CACHE", "1")
    ktune.close()  # the real library reads the cache settings at open
    with pytest.raises(ktune.Error) as e:
        ktune.warm()
    assert e.value.name == "ERR_UNSUPPORTED" and "KTUNE_NO_CACHE" in e.value.message
    monkeypatch.delenv("KTUNE_NO_CACHE")
    ktune.close()
    if not ktune.library().host:
        pytest.skip("a real warm compiles every shipped kernel: bash bench/gpu-check.sh record times it")
    s = ktune.warm()
    assert s.warm_state == "done" and (s.warm_compiled, s.warm_failed) == (0, 0)  # nothing to compile here
    assert ktune.warm(wait=False).warm_state in ("running", "done")


def test_without_a_gpu_the_runtime_calls_raise_ktune_error(no_gpu, tmp_path):
    for call in (ktune.stats, ktune.warm):
        with pytest.raises(ktune.Error) as e:
            call()
        assert e.value.name in ("ERR_NO_DRIVER", "ERR_NO_DEVICE")
    try:
        ktune.record_misses(tmp_path / "m.yaml")  # a setting: no context needed
        assert ktune.save_misses() == 0
    finally:
        contexts._record = contexts._ENV
