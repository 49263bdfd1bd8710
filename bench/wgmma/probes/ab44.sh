# Probe 44: as probe 43 (ab43.sh), the old binary built at aaa08d6 against the template with the split-K vote (barrier_or), one round each
set -u
B=build-device
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export XDG_CACHE_HOME=/tmp/ktune-cache
TEST_TIMEOUT=250 bash bench/gpu-check.sh tests > /dev/null 2>&1; grep -E "exit|PASSED|FAILED" $OUT/tests.log
rm -f /tmp/ab.db*; $B/ktune-old import --db /tmp/ab.db db/sm_90/h100.yaml > /dev/null
i=0
for k in ktune-old ktune ktune ktune-old; do
	i=$((i+1))
	$B/$k bench --db /tmp/ab.db --rounds 1 > $OUT/ab44-$i-$k.log 2>&1
	echo "$i $k: $(grep 'over 96 keys' $OUT/ab44-$i-$k.log)"
done
