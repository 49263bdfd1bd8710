#!/usr/bin/env bash
# scripts/build-device.sh - build, on this machine, everything the GPU
# machine runs, into build-device/ (ignored by git; carried by the device tool).
# The GPU machine has CUDA and libsqlite3.so.0 but no libyaml, libcmocka or
# headers: the ktune command and tests link SQLite and libyaml statically, and
# the shared libraries that remain are copied next to the binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
B=build-device
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DKTUNE_BUILD_TESTS=ON >/dev/null
cmake --build $B -j"$(nproc)"
cmake --install $B --prefix $B/install >/dev/null
cp -L /usr/lib/x86_64-linux-gnu/libyaml-0.so.2 $B/install/lib/
cp -L /usr/lib/x86_64-linux-gnu/libcmocka.so.0 $B/tests/
cmake -S examples -B $B/examples -DCMAKE_PREFIX_PATH="$PWD/$B/install" >/dev/null
cmake --build $B/examples
# what travels: binaries, not objects, and of the tests only those that need a
# GPU, and the GEMM compile test, which CI runs on a sample (the GPU check's
# `compile` step runs it in full) (the device tool carries 64 MiB; each test
# links SQLite statically)
find $B -name '*.o' -delete
find $B/tests -maxdepth 1 -type f -name 'test-*' ! -name '*-gpu' ! -name 'test-compile' -delete
du -sh $B
