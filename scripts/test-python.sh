#!/usr/bin/env bash
# scripts/test-python.sh - the Python package's tests (python/tests, pytest), after
# scripts/build.sh.  Installs the package as a user would, `pip install ./python`,
# into a virtual environment at build/venv (it sees the system's packages, so an
# installed torch is used), with pytest and matplotlib, then runs the tests twice:
#   1. on the installed package and the libktune inside it: import, load, the
#      header's signatures, argument checks, no GPU as a clear error, plots, the
#      ktune command (and every op, autograd, compile and GPT-2 on a GPU machine);
#   2. on the host double (build/python-host/libktune_host.so, tests/CMakeLists.txt):
#      the torch layer on CPU tensors (custom ops, opcheck, autograd, torch.compile,
#      ktune.nn, the GPT-2 example at a tiny size).
# Tests that need torch are reported as skipped where it is absent.
# KTUNE_TEST_TORCH=1 installs torch first (PyPI's build of the version the GPU
# machine has; .ci/run sets it); a failed install is said loudly, and the torch
# tests are then reported as skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=build/venv
[ -x $venv/bin/python ] || python3 -m venv --system-site-packages $venv
pip() { "$root/$venv/bin/python" -m pip -q --disable-pip-version-check "$@"; }
"$venv/bin/python" -c "import pytest, matplotlib" 2>/dev/null || pip install pytest matplotlib
if [ "${KTUNE_TEST_TORCH:-0}" = 1 ] && ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
	pip install --no-cache-dir "torch==2.11.*" ||
		echo "test-python.sh: WARNING: torch could not be installed: the torch tests will be SKIPPED" >&2
fi
pip install ./python
cd build # not python/: the tests must import the installed package, not the source tree
unset KTUNE_CLI KTUNE_LIBRARY
run() { "$root/$venv/bin/python" -m pytest -p no:cacheprovider -q -rs "$root/python/tests" "$@"; }
echo "== python tests: the installed package and its libktune"
run
echo "== python tests: the torch layer on the host double (CPU tensors)"
KTUNE_LIBRARY=$root/build/python-host/libktune_host.so run
