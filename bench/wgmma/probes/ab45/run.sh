#!/usr/bin/env bash
# Probe 45: split-K of the last wave at 4096x28672x4096 (3584 tiles of 128 x 256
# or 256 x 128 on 132 SMs: 27 waves and 20 tiles).  The four keys of the
# shipped tuning with one config each (variant-db.py), each tile with and
# without SPLIT_K=4, timed by 'ktune bench' in turns, two passes.
#   bash bench/wgmma/probes/ab45/run.sh      (on the GPU machine; logs in $OUT)
set -u
B=${BUILD:-build-device}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/ktune-cache}
d=bench/wgmma/probes/ab45
for pass in 1 2; do
	for v in 128x256c1s1 128x256c1s4 256x128c1s1 256x128c1s4 128x256c2s1; do
		rm -f /tmp/ab45.db*
		$B/ktune import --db /tmp/ab45.db "$d/$v.yaml" >/dev/null || exit 1
		echo "pass $pass $v" | tee -a "$OUT/ab45.log"
		$B/ktune bench --db /tmp/ab45.db -m 4096 -n 28672 --rounds 3 >"$OUT/ab45-$pass-$v.log" 2>&1
		grep -E "^gemm|^geometric mean" "$OUT/ab45-$pass-$v.log" | cut -c1-100 | tee -a "$OUT/ab45.log"
	done
done
