#!/usr/bin/env bash
# Probe 41: the M = 4096 keys of the shipped tuning against the same keys with
# one config each (variant-db.py), timed by 'ktune bench', two passes in turn.
#   bash bench/wgmma/probes/ab41/run.sh      (on the GPU machine; logs in $OUT)
set -u
B=${BUILD:-build-device}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/ktune-cache}
d=bench/wgmma/probes/ab41
for pass in 1 2; do
	for v in stored 128x256c2 256x128c2 128x256c1 256x128c1; do
		f=$d/$v.yaml
		[ "$v" = stored ] && f=db/sm_90/h100.yaml
		rm -f /tmp/ab41.db*
		$B/ktune import --db /tmp/ab41.db "$f" >/dev/null || exit 1
		echo "pass $pass $v: $f" | tee -a "$OUT/ab41.log"
		$B/ktune bench --db /tmp/ab41.db -m 4096 --rounds 3 >"$OUT/ab41-$pass-$v.log" 2>&1
		grep -A3 "^geometric mean" "$OUT/ab41-$pass-$v.log" | tee -a "$OUT/ab41.log"
	done
done
