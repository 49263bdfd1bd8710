#!/usr/bin/env bash
# Configs judged on the shipped tuning, with the build fixed: each variant
# (DIR/VARIANT.yaml, made by variant-db.py; "stored" is db/sm_90/h100.yaml
# itself) imported into a fresh database and timed by 'ktune bench --rounds 3'
# over the keys FILTER picks, the variants in turn, two passes.
#   TAG=NAME FILTER="bench filters" bash bench/wgmma/probes/ab-configs.sh DIR VARIANT...
# (on the GPU machine; logs in $OUT: NAME.log, NAME-PASS-VARIANT.log).  Probe 41:
#   TAG=ab41 FILTER="-m 4096" bash bench/wgmma/probes/ab-configs.sh bench/wgmma/probes/ab41 \
#       stored 128x256c2 256x128c2 128x256c1 256x128c1
# Probe 45:
#   TAG=ab45 FILTER="-m 4096 -n 28672" bash bench/wgmma/probes/ab-configs.sh bench/wgmma/probes/ab45 \
#       128x256c1s1 128x256c1s4 256x128c1s1 256x128c1s4 128x256c2s1
set -u
B=${BUILD:-build-device}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/ktune-cache}
d=$1
shift
for pass in 1 2; do
	for v in "$@"; do
		f=$d/$v.yaml
		[ "$v" = stored ] && f=db/sm_90/h100.yaml
		rm -f "/tmp/$TAG.db"*
		$B/ktune import --db "/tmp/$TAG.db" "$f" >/dev/null || exit 1
		echo "pass $pass $v: $f" | tee -a "$OUT/$TAG.log"
		# shellcheck disable=SC2086 # FILTER is a list of options
		$B/ktune bench --db "/tmp/$TAG.db" $FILTER --rounds 3 >"$OUT/$TAG-$pass-$v.log" 2>&1
		grep -E "^gemm|^geometric mean" "$OUT/$TAG-$pass-$v.log" | cut -c1-100 | tee -a "$OUT/$TAG.log"
	done
done
