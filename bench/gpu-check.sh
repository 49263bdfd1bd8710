#!/usr/bin/env bash
# bench/gpu-check.sh - the whole GPU check in one go, on a machine with a GPU,
# over a build made by scripts/build-device.sh.  Logs go under $OUT.
#
#   bash bench/gpu-check.sh [tests] [tune] [sweep] [bench] [ops] [quant] ...  (default: tests tune sweep bench)
#
#   tests  the GPU tests and the example program
#   quick  the dispatch and planted-candidate tests alone
#   tune   'ktune tune' on a few keys
#   sweep  'ktune sweep' on the built-in default suite, then show, verify and bench
#   bench  host overhead of ktune_gemm, and the copy bandwidth (bench/copy: the
#          floor's memory ceiling)
#   ops    the elementwise ops: their GPU test, the default sweep over the shipped
#          GEMM tuning (so that it tunes the ops), verify, bench, and the ops
#          against PyTorch and Liger (bench/ops/elementwise.py; wheels in .whl/)
#   rowwise  the row-wise ops (softmax, rmsnorm, layernorm): their GPU test, the default sweep
#          over the shipped tuning (so that it tunes what the file lacks), verify
#          and bench of each, and the ops against PyTorch and Liger
#          (bench/ops/rowwise.py); ROWWISE_STEPS picks among test, sweep, peers
#   quant  the weight-quantized GEMM: its GPU test (QUANT_TEST_TIMEOUT, default
#          1800 s: it compiles every candidate of three keys and a sample for
#          every format), a sweep of its suite keys (bench/suite-default.yaml's
#          gemm_quant section), verify and bench of them, and ktune against bf16
#          cuBLAS and gemlite (bench/ops/quant.py; gemlite's wheel in .whl/), with
#          a plot over M; QUANT_STEPS picks among test, sweep, peers
#   stored 'ktune bench' of the shipped tuning ($SHIPPED imported into a fresh
#          database): every key against cuBLAS again, ROUNDS rounds (default 3);
#          BENCH_ARGS adds bench's filters, e.g. "-m 4096"
#   kill   kill -9 a sweep's worker and the sweep, ten times at random moments
#          (tests/gpu/kill-sweep.sh)
#   concurrent  two sweeps on one database at once (tests/gpu/concurrent-sweeps.sh)
#   devices  one sweep over every GPU of the machine, --devices 0,1,...
#          (tests/gpu/devices-sweep.sh; needs two GPUs, skips on one)
#
# RESUME_FROM=DIR copies DIR/ktune.db* into $OUT first, so a sweep cut short
# by SWEEP_TIMEOUT (seconds) carries on where it stopped.
# TEST_TIMEOUT (seconds, default 300) bounds each GPU test program of `tests`.
# SHIPPED (default db/sm_90/h100.yaml) is the shipped file of this GPU: `stored`
# benches it, and `sweep` exports its database under the same name into $OUT
# (db/sm_90/h200.yaml on an H200).
set -u
B=${BUILD:-build-device}
OUT=${OUT:-/tmp/ktune-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export KTUNE_DB=${KTUNE_DB:-$OUT/ktune.db}
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/ktune-cache}
steps=${*:-tests tune sweep bench}
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then # peer libraries for bench/ops, as wheels
	python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
		--target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
SHIPPED=${SHIPPED:-db/sm_90/h100.yaml}
T=${TEST_TIMEOUT:-300} # seconds per GPU test program (test-gemm-gpu takes about 70 on the H100)
status=0

run() { # run LOG CMD...: run a command, append its output to $OUT/LOG
	local log=$1
	shift
	echo "\$ $*" | tee -a "$OUT/$log"
	local t0=$SECONDS
	"$@" 2>&1 | tee -a "$OUT/$log"
	local rc=${PIPESTATUS[0]}
	echo "(exit $rc, $((SECONDS - t0)) s)" | tee -a "$OUT/$log"
	[ "$rc" = 0 ] || status=1
}

if [ -n "${RESUME_FROM:-}" ]; then
	cp "$RESUME_FROM"/ktune.db* "$OUT"/ 2>/dev/null || true
fi
{ nvidia-smi; echo; $B/ktune info; } >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
for step in $steps; do
	case $step in
	tests) # each under a watchdog: a hanging kernel fails its test (exit 124) instead of the call
		run tests.log timeout $T $B/tests/test-gemm-gpu
		run tests.log timeout $T $B/tests/test-dispatch-gpu
		run tests.log timeout $T $B/tests/test-planted-gpu
		run tests.log timeout $T $B/tests/test-elementwise-gpu
		run tests.log env KTUNE_DB=/tmp/example.db timeout $T $B/examples/gemm_example 16 4096 4096
		run tests.log env KTUNE_DB=/tmp/example.db timeout $T $B/examples/gemm_example 333 1000 77
		;;
	quick)
		run tests.log timeout $T $B/tests/test-dispatch-gpu
		run tests.log env KTUNE_TEST_VERBOSE=1 timeout $T $B/tests/test-planted-gpu
		;;
	tune)
		run tune.log $B/ktune tune gemm -m 16 -n 4096 -k 4096 --dtype f16 --layout nt
		run tune.log $B/ktune tune gemm -m 4096 -n 4096 -k 4096 --dtype bf16 --layout nt
		run tune.log $B/ktune tune gelu --approx tanh --n 16777216
		;;
	sweep)
		if [ -n "${SWEEP_TIMEOUT:-}" ]; then
			run sweep.log timeout "$SWEEP_TIMEOUT" $B/ktune sweep --progress
		else
			run sweep.log $B/ktune sweep --progress
		fi
		$B/ktune show --format csv >"$OUT/results.csv"
		# the database with trials is too big to bring back; this is $SHIPPED's source
		$B/ktune export -o "$OUT/$(basename "$SHIPPED")"
		run verify.log $B/ktune verify
		# the winners timed again apart from the sweep: its figures were taken on a GPU hot from each key's candidates
		run retime.log $B/ktune bench --rounds 3
		;;
	bench)
		run bench.log $B/bench/overhead
		run bench.log $B/bench/copy
		;;
	ops) # the elementwise ops: their GPU test, then the default sweep on a database that
		# already holds the shipped GEMM tuning (so it tunes the ops alone), verify of
		# everything, the stored ops timed again, and the ops against PyTorch and Liger
		run ops.log timeout $T $B/tests/test-elementwise-gpu
		$B/ktune import "$SHIPPED" >"$OUT/ops-import.log" 2>&1 || status=1
		tail -n 1 "$OUT/ops-import.log" | tee -a "$OUT/ops.log"
		if [ -n "${SWEEP_TIMEOUT:-}" ]; then
			run ops-sweep.log timeout "$SWEEP_TIMEOUT" $B/ktune sweep --progress
		else
			run ops-sweep.log $B/ktune sweep --progress
		fi
		$B/ktune show --format csv >"$OUT/results.csv"
		run ops-verify.log $B/ktune verify
		for op in add gelu glu dropout; do
			run ops-retime.log $B/ktune bench --op $op
		done
		run ops-peers.log python3 bench/ops/elementwise.py --lib $B/install/lib/libktune.so \
			--db "$KTUNE_DB" --csv "$OUT/elementwise.csv"
		;;
	rowwise)
		for part in ${ROWWISE_STEPS:-test sweep peers}; do
			case $part in
			test) run rowwise.log timeout $T $B/tests/test-rowwise-gpu ;;
			sweep)
				$B/ktune import "$SHIPPED" >"$OUT/rowwise-import.log" 2>&1 || status=1
				tail -n 1 "$OUT/rowwise-import.log" | tee -a "$OUT/rowwise.log"
				run rowwise-sweep.log timeout "${SWEEP_TIMEOUT:-1800}" $B/ktune sweep --progress
				$B/ktune export -o "$OUT/$(basename "$SHIPPED")"
				for op in softmax rmsnorm layernorm; do
					run rowwise-verify.log $B/ktune verify --op $op
					run rowwise-retime.log $B/ktune bench --op $op
				done
				;;
			peers)
				run rowwise-peers.log python3 bench/ops/rowwise.py --lib $B/install/lib/libktune.so \
					--db "$KTUNE_DB" --csv "$OUT/rowwise.csv"
				;;
			esac
		done
		;;
	quant)
		for part in ${QUANT_STEPS:-test sweep peers}; do
			case $part in
			test) run quant.log timeout "${QUANT_TEST_TIMEOUT:-1800}" $B/tests/test-quant-gpu ;;
			sweep)
				# the suite's gemm_quant section alone, as a spec
				awk '/^gemm_quant:/ { on = 1 } on && /^[a-z]/ && !/^gemm_quant:/ { on = 0 } on' \
					bench/suite-default.yaml >"$OUT/quant-suite.yaml"
				run quant-sweep.log timeout "${SWEEP_TIMEOUT:-3600}" $B/ktune sweep "$OUT/quant-suite.yaml" --progress
				run quant-verify.log $B/ktune verify --op gemm_quant
				run quant-retime.log $B/ktune bench --op gemm_quant
				;;
			peers)
				run quant-peers.log python3 bench/ops/quant.py --lib $B/install/lib/libktune.so \
					--db "$KTUNE_DB" --csv "$OUT/quant.csv" --plot "$OUT/quant.png"
				;;
			esac
		done
		;;
	stored)
		rm -f /tmp/ktune-stored.db*
		$B/ktune import --db /tmp/ktune-stored.db "$SHIPPED" >"$OUT/stored-import.log" 2>&1 || status=1
		tail -n 1 "$OUT/stored-import.log" | tee -a "$OUT/stored.log"
		# shellcheck disable=SC2086 # BENCH_ARGS is a list of options
		run stored.log $B/ktune bench --db /tmp/ktune-stored.db --rounds "${ROUNDS:-3}" ${BENCH_ARGS:-}
		;;
	kill)
		run kill.log bash tests/gpu/kill-sweep.sh $B/ktune tests/gpu/kill-spec.yaml /tmp/ktune-kill/ktune.db
		;;
	concurrent)
		run concurrent.log bash tests/gpu/concurrent-sweeps.sh $B/ktune tests/gpu/kill-spec.yaml /tmp/ktune-concurrent/ktune.db
		;;
	devices)
		run devices.log bash tests/gpu/devices-sweep.sh $B/ktune tests/gpu/kill-spec.yaml /tmp/ktune-devices/ktune.db
		;;
	*)
		echo "unknown step '$step'"
		exit 2
		;;
	esac
done
exit $status
