#!/usr/bin/env bash
# scripts/deps.sh - install what building ktune needs, if it is missing:
# CMake, a C compiler, SQLite, libyaml and cmocka from the distribution.
# The CUDA Toolkit (NVRTC, headers) must already be installed; the driver
# is only needed to run on a GPU.
set -euo pipefail
need=()
for pkg in cmake gcc make pkg-config libsqlite3-dev libyaml-dev libcmocka-dev; do
	dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "ktune needs: ${need[*]}; install them (e.g. sudo apt-get install ${need[*]})" >&2
		exit 2
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! [ -e /usr/local/cuda/include/nvrtc.h ] && ! command -v nvcc >/dev/null; then
	echo "ktune needs the CUDA Toolkit (NVRTC and headers) in /usr/local/cuda" >&2
	exit 2
fi
