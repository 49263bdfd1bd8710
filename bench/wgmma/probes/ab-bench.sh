# A kernel change judged with its configs fixed: the shipped tuning timed by ktune bench with the
# old build (build-device/ktune-old) and the new one in turns, old/new/new/old, after the GPU tests.
# The old binary imports the file (the new one skips entries of another template source).
#   TAG=ab43 ROUNDS=2 bash bench/wgmma/probes/ab-bench.sh   (probe 43: ktune-old built at e7feb32)
#   TAG=ab44 ROUNDS=1 bash bench/wgmma/probes/ab-bench.sh   (probe 44: ktune-old built at aaa08d6)
set -u
B=build-device
TAG=${TAG:-ab}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export XDG_CACHE_HOME=/tmp/ktune-cache
TEST_TIMEOUT=250 bash bench/gpu-check.sh tests > /dev/null 2>&1; grep -E "exit|PASSED|FAILED" $OUT/tests.log
rm -f /tmp/ab.db*; $B/ktune-old import --db /tmp/ab.db db/sm_90/h100.yaml > /dev/null
i=0
for k in ktune-old ktune ktune ktune-old; do
	i=$((i+1))
	$B/$k bench --db /tmp/ab.db --rounds "${ROUNDS:-2}" > $OUT/$TAG-$i-$k.log 2>&1
	echo "$i $k: $(grep 'over 96 keys' $OUT/$TAG-$i-$k.log)"
done
