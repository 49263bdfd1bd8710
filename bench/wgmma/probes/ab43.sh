# Probe 43: the shipped tuning (configs fixed) timed by ktune bench with the old template (ktune-old, built at e7feb32) and the new one, old/new/new/old; imported by the old binary (the new one skips entries of another template source)
set -u
B=build-device
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export XDG_CACHE_HOME=/tmp/ktune-cache
TEST_TIMEOUT=250 bash bench/gpu-check.sh tests > /dev/null 2>&1; grep -E "exit|PASSED|FAILED" $OUT/tests.log
rm -f /tmp/ab.db*; $B/ktune-old import --db /tmp/ab.db db/sm_90/h100.yaml > /dev/null
i=0
for k in ktune-old ktune ktune ktune-old; do
	i=$((i+1))
	$B/$k bench --db /tmp/ab.db --rounds 2 > $OUT/ab43-$i-$k.log 2>&1
	echo "$i $k: $(grep 'over 96 keys' $OUT/ab43-$i-$k.log)"
done
