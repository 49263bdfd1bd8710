#!/usr/bin/env bash
# scripts/test.sh - build and run every test: unit and CLI tests everywhere,
# GPU tests where a GPU is present (reported as skipped elsewhere), then the
# Python package's tests (scripts/test-python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
(cd build && ctest --output-on-failure -j"$(nproc)" "$@")
bash scripts/test-python.sh
