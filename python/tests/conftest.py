"""Shared fixtures.  Which library the tests run against is the process's:
KTUNE_LIBRARY (scripts/test-python.sh runs the suite against build/libktune.so,
then against the host double build/python-host/libktune_host.so), else the one
`pip install ./python` put in the package.

  torch    the torch module, or the test is skipped (reported) where torch is absent
  dev      the device ops run on: "cuda" with the real library on a GPU machine,
           "cpu" with the host double; skipped otherwise (no GPU)
  no_gpu   skips where a GPU can be opened (tests of what happens without one)
"""
import os

import pytest

import ktune

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))


def gpu_opens():
    """Whether device 0 opens (a GPU and its driver are here); the host double never counts."""
    if ktune.library().host:
        return False
    try:
        ktune.context(0)
        return True
    except ktune.Error:
        return False


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.fixture
def dev(torch):
    if ktune.library().host:
        return "cpu"
    if not torch.cuda.is_available() or not gpu_opens():
        pytest.skip("no GPU: the op tests need one, or KTUNE_LIBRARY set to the host double")
    return "cuda"


@pytest.fixture
def no_gpu():
    if ktune.library().host:
        pytest.skip("the host double stands in for a GPU")
    if gpu_opens():
        pytest.skip("a GPU is present")
