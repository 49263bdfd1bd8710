#!/usr/bin/env bash
# scripts/sweep.sh - build, then tune the built-in default suite on GPU 0
# ('ktune sweep'); extra arguments go to ktune sweep.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec build/ktune sweep "$@"
