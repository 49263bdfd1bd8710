#!/usr/bin/env bash
# bench/gpu-check.sh - the whole GPU check in one go, on a machine with a GPU,
# over a build made by scripts/build-device.sh.  Logs go under $OUT.
#
#   bash bench/gpu-check.sh [tests] [compile] [tune] [sweep] [bench] [ops] [quant] ...  (default: tests compile tune sweep bench)
#
#   tests  the GPU tests and the example program
#   compile  the GEMM NVRTC compile test in full (KTUNE_TEST_FULL=1: every kernel of
#          both families in every variant; CI compiles a seeded sample and the
#          shipped configs' kernels), on this machine's cores
#   quick  the dispatch and planted-candidate tests alone
#   tune   'ktune tune' on a few keys
#   sweep  'ktune sweep' on the built-in default suite, then show, verify and bench
#   bench  host overhead of ktune_gemm, and the copy bandwidth (bench/copy: the
#          floor's memory ceiling)
#   ops    the elementwise ops: their GPU test, the default sweep over the shipped
#          GEMM tuning (so that it tunes the ops), verify, bench, and the ops
#          against PyTorch and Liger (bench/ops/elementwise.py; wheels in .whl/)
#   rowwise  the row-wise ops (softmax, rmsnorm, layernorm, cross_entropy): their GPU test, the default sweep
#          over the shipped tuning (so that it tunes what the file lacks), verify
#          and bench of each, and the ops against PyTorch and Liger
#          (bench/ops/rowwise.py, and the LM head's linear + cross-entropy:
#          bench/ops/linear_ce.py); ROWWISE_STEPS picks among test, sweep, peers
#   random GEMM keys nobody tuned (bench/random: 64 keys, seed 2026) against cuBLAS,
#          on a fresh database (the shipped tuning only); then each key tuned by
#          'ktune tune' (its default, --top 32) with an empty compile cache, each
#          tune timed; then the keys timed again.  About 15 minutes on an H100.
#          Its parts, for a limit of 10 minutes a command (on one machine: the
#          database is RANDOM_DB, default /tmp/ktune-random.db):
#            random-untuned  the first timing (fresh database), 2-4 minutes
#            random-tune     the tunes, resuming after those done, stopping by
#                            itself after RANDOM_BUDGET s (default 540): run it
#                            until it no longer says "keys left"
#            random-tuned    the timing after the tunes, 2-3 minutes
#            random-full     'ktune tune --top 0' of each key (every candidate),
#                            then a third timing (RANDOM_FULL=1 adds it to random)
#          RANDOM_KEYS sets the count.  Writes random-{untuned,tuned,full}.{md,csv},
#          random-tune-times.csv, random-tune.log, random.log
#          (bench/ops/rowwise.py); ROWWISE_STEPS picks among test, sweep, peers
#   quant  the weight-quantized GEMM: its GPU test (QUANT_TEST_TIMEOUT, default
#          1800 s: it compiles every candidate of three keys and a sample for
#          every format), a sweep of its suite keys (bench/suite-default.yaml's
#          gemm_quant section), verify and bench of them, and ktune against bf16
#          cuBLAS and gemlite (bench/ops/quant.py; gemlite's wheel in .whl/), with
#          a plot over M; QUANT_STEPS picks among test, sweep, peers
#   attention  flash attention: its GPU tests (every config, forward and
#          backward; up to 35 minutes), a sweep of the default suite's attention
#          keys alone, verify and bench of them, and both passes against SDPA's
#          cuDNN and flash backends (bench/ops/attention.py) with ktune plot's
#          figures over S; ATTENTION_STEPS
#          picks among test, sweep, peers
#   stored 'ktune bench' of the shipped tuning ($SHIPPED imported into a fresh
#          database): every key against cuBLAS again, ROUNDS rounds (default 3);
#          BENCH_ARGS adds bench's filters, e.g. "-m 4096"
#   record tune what is used and a cold start without NVRTC: the example program
#          records its miss (KTUNE_RECORD), 'ktune sweep --misses' tunes exactly it,
#          'ktune explain' tells the story, 'ktune warm' twice on a fresh cache (the
#          second compiles nothing), and tests/gpu/test-record-gpu (misses of real
#          calls from threads; a warmed first call with zero NVRTC compiles, a cold
#          one's figures)
#   kill   kill -9 a sweep's worker and the sweep, ten times at random moments
#          (tests/gpu/kill-sweep.sh)
#   concurrent  two sweeps on one database at once (tests/gpu/concurrent-sweeps.sh)
#   devices  one sweep over every GPU of the machine, --devices 0,1,...
#          (tests/gpu/devices-sweep.sh; needs two GPUs, skips on one)
#   python the Python package on this build's libktune (no install: PYTHONPATH=python,
#          KTUNE_LIBRARY, KTUNE_CLI): its tests on the GPU (python/tests: every op
#          against torch, gradients, opcheck, torch.compile, the GPT-2 short run),
#          then examples/gpt2 stock against ktune.patch, 20 steps, eager (with one
#          profiled step of each: the top CUDA kernels) and compiled (gpt2*.json);
#          PYTHON_STEPS picks among test, gpt2, compile and the tuning loop of GPT-2,
#          each part one command of under 10 minutes, its state in GPT2_DIR
#          (default /tmp/ktune-gpt2) between them:
#            gpt2-record  a ktune run of 3 steps on a fresh database recording the keys
#                         served without a tuned entry (--record: gpt2-misses.yaml)
#            gpt2-sweep   'ktune sweep --misses' of them, cut at GPT2_SWEEP_TIMEOUT
#                         (default 400 s; run it again to go on: tuned keys are skipped;
#                         GPT2_SWEEP_ARGS adds options, e.g. "--budget 64"); exports
#                         the tuning to gpt2-tuned.yaml
#            gpt2-tuned   examples/gpt2 again on the tuned database, profiled
#                         (gpt2-tuned.json, gpt2-tuned.log), recording what is still missed
#          On a fresh machine GPT2_RESUME_FROM=DIR (a former $OUT) brings back
#          gpt2-misses.yaml and gpt2-tuned.yaml first.  pytest must be importable
#          (wheels in .whl/: pip download -d .whl pytest)
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
steps=${*:-tests compile tune sweep bench}
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
		run tests.log timeout $T $B/tests/test-record-gpu
		run tests.log env KTUNE_DB=/tmp/example.db timeout $T $B/examples/gemm_example 16 4096 4096
		run tests.log env KTUNE_DB=/tmp/example.db timeout $T $B/examples/gemm_example 333 1000 77
		;;
	compile)
		run compile.log env KTUNE_TEST_FULL=1 timeout 1800 $B/tests/test-compile
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
				for op in softmax rmsnorm layernorm cross_entropy; do
					run rowwise-verify.log $B/ktune verify --op $op
					run rowwise-retime.log $B/ktune bench --op $op
				done
				;;
			peers)
				run rowwise-peers.log python3 bench/ops/rowwise.py --lib $B/install/lib/libktune.so \
					--db "$KTUNE_DB" --csv "$OUT/rowwise.csv"
				run rowwise-peers.log python3 bench/ops/linear_ce.py --lib $B/install/lib/libktune.so \
					--db "$KTUNE_DB" --csv "$OUT/linear_ce.csv"
				;;
			esac
		done
		;;
	random | random-untuned | random-tune | random-tuned | random-full)
		# the keys are fixed by the seed, so every part times the same ones
		RDB=${RANDOM_DB:-/tmp/ktune-random.db}
		NKEYS=${RANDOM_KEYS:-64}
		$B/bench/random --list --keys "$NKEYS" >"$OUT/random-keys.txt"
		case $step in random | random-untuned)
			rm -f "$RDB"* "$OUT/random-tune-times.csv" "$OUT/random-tune.log" # a fresh start
			run random.log $B/bench/random --keys "$NKEYS" --db "$RDB" --csv "$OUT/random-untuned.csv" \
				--md "$OUT/random-untuned.md" --title "untuned (a fresh database: the shipped tuning only)"
		esac
		case $step in random | random-tune)
			# each key tuned as a user would on a fresh machine, with an empty compile cache
			# of its own; resumes after the keys already tuned, stops after RANDOM_BUDGET s
			times=$OUT/random-tune-times.csv
			[ -s "$times" ] || echo "dtype,layout,m,n,k,class,exit,seconds" >"$times"
			echo "\$ ktune tune gemm ... (each of the $NKEYS keys, an empty compile cache each)" | tee -a "$OUT/random.log"
			started=$SECONDS left=0
			while read -r dtype layout m n k class _; do
				grep -q "^$dtype,$layout,$m,$n,$k,$class," "$times" && continue
				if [ $((SECONDS - started)) -ge "${RANDOM_BUDGET:-540}" ]; then
					left=$((left + 1))
					continue
				fi
				cache=$(mktemp -d /tmp/ktune-random-cache-XXXXXX)
				t0=$(date +%s.%N)
				XDG_CACHE_HOME=$cache $B/ktune tune gemm --db "$RDB" -m "$m" -n "$n" -k "$k" --dtype "$dtype" \
					--layout "$layout" --"$class" </dev/null >>"$OUT/random-tune.log" 2>&1
				rc=$?
				t1=$(date +%s.%N)
				[ "$rc" = 0 ] || status=1
				echo "$dtype,$layout,$m,$n,$k,$class,$rc,$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" \
					>>"$times"
				rm -rf "$cache"
			done <"$OUT/random-keys.txt"
			[ "$left" = 0 ] || echo "random-tune: $left keys left after ${RANDOM_BUDGET:-540} s: run the step again" |
				tee -a "$OUT/random.log"
			# the distribution of tune times (issue 25: each within 10 s on a 16-core machine)
			tail -n +2 "$times" | cut -d, -f8 | sort -n | awk -v cores="$(nproc)" '
				{ t[NR] = $1; sum += $1; if ($1 > 10) over++ }
				END { if (!NR) exit; printf "tune times, empty compile cache, %d keys, %d cores: min %.1f s, median %.1f s, " \
					"p90 %.1f s, max %.1f s, mean %.1f s; %d over 10 s\n", NR, cores, t[1], t[int((NR + 1) / 2)], \
					t[int(0.9 * NR + 0.999)], t[NR], sum / NR, over }' | tee -a "$OUT/random.log"
			awk -F, 'NR > 1 && $7 != 0 { bad++ } END { printf "tunes that failed: %d\n", bad }' "$times" |
				tee -a "$OUT/random.log"
		esac
		case $step in random | random-tuned)
			run random.log $B/bench/random --keys "$NKEYS" --db "$RDB" --csv "$OUT/random-tuned.csv" \
				--md "$OUT/random-tuned.md" --title "after 'ktune tune' of each key (--top 32, the default)"
		esac
		if [ "$step" = random-full ] || { [ "$step" = random ] && [ -n "${RANDOM_FULL:-}" ]; }; then
			while read -r dtype layout m n k class _; do
				$B/ktune tune gemm --db "$RDB" -m "$m" -n "$n" -k "$k" --dtype "$dtype" --layout "$layout" \
					--"$class" --top 0 </dev/null >>"$OUT/random-tune-full.log" 2>&1 || status=1
			done <"$OUT/random-keys.txt"
			run random.log $B/bench/random --keys "$NKEYS" --db "$RDB" --csv "$OUT/random-full.csv" \
				--md "$OUT/random-full.md" --title "after 'ktune tune --top 0' of each key (every candidate)"
		fi
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
					--db "$KTUNE_DB" --csv "$OUT/quant.csv" --plot "$OUT"
				;;
			esac
		done
		;;
	attention)
		for part in ${ATTENTION_STEPS:-test sweep peers}; do
			case $part in
			test)
				run attention.log timeout 900 $B/tests/test-attention-gpu
				run attention.log timeout 1200 $B/tests/test-attention-bwd-gpu
				;;
			sweep) # the default suite's attention section, as a spec of its own
				awk '/^attention:/ { p = 1 } /^[^ #]/ && !/^attention:/ { p = 0 } p' bench/suite-default.yaml \
					>"$OUT/attention-suite.yaml"
				run attention-sweep.log timeout "${SWEEP_TIMEOUT:-1800}" $B/ktune sweep "$OUT/attention-suite.yaml" \
					--progress
				run attention-verify.log $B/ktune verify --op attention
				run attention-retime.log $B/ktune bench --op attention
				;;
			peers)
				run attention-peers.log python3 bench/ops/attention.py --lib $B/install/lib/libktune.so \
					--db "$KTUNE_DB" --csv "$OUT/attention.csv"
				# the figures over S (ktune plot: python/ktune/plot.py), PNG only, where matplotlib is
				if python3 -c "import matplotlib" 2>/dev/null; then
					PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} run attention-plot.log \
						python3 -m ktune.plot "$OUT/attention.csv" -o "$OUT" --formats png
				fi
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
	record) # its own database and cache: what a new machine has
		R=/tmp/ktune-record
		rm -rf "$R" && mkdir -p "$R"
		run record.log env KTUNE_DB=$R/k.db XDG_CACHE_HOME=$R/cache KTUNE_RECORD=$R/misses.yaml \
			timeout $T $B/examples/gemm_example 333 1000 77
		cat "$R/misses.yaml" | tee -a "$OUT/record.log"
		cp "$R/misses.yaml" "$OUT/misses.yaml"
		run record.log env KTUNE_DB=$R/k.db XDG_CACHE_HOME=$R/cache $B/ktune sweep --misses $R/misses.yaml \
			--budget 48 --progress
		run record.log env KTUNE_DB=$R/k.db $B/ktune explain gemm -m 333 -n 1000 -k 77 --dtype f16 --aligned 0
		env KTUNE_DB=$R/k.db $B/ktune explain gemm -m 333 -n 1000 -k 77 --dtype f16 --aligned 0 --format json \
			>"$OUT/explain.json" 2>>"$OUT/record.log" || status=1
		# the same program again: served exactly now, and no miss left to record
		run record.log env KTUNE_DB=$R/k.db XDG_CACHE_HOME=$R/cache KTUNE_RECORD=$R/misses-after.yaml \
			timeout $T $B/examples/gemm_example 333 1000 77
		[ ! -e "$R/misses-after.yaml" ] || { echo "a miss is left after the sweep:" | tee -a "$OUT/record.log"
			cat "$R/misses-after.yaml" | tee -a "$OUT/record.log"; status=1; }
		run record.log env KTUNE_DB=$R/k.db XDG_CACHE_HOME=$R/cold $B/ktune warm
		run record.log env KTUNE_DB=$R/k.db XDG_CACHE_HOME=$R/cold $B/ktune warm
		run record.log env KTUNE_TEST_VERBOSE=1 timeout $T $B/tests/test-record-gpu
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
	python)
		export KTUNE_LIBRARY=$PWD/$B/install/lib/libktune.so KTUNE_CLI=$PWD/$B/ktune
		export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
		G=${GPT2_DIR:-/tmp/ktune-gpt2} # the GPT-2 tuning loop's database and misses file
		mkdir -p "$G"
		if [ -n "${GPT2_RESUME_FROM:-}" ]; then
			[ -f "$GPT2_RESUME_FROM/gpt2-misses.yaml" ] && cp "$GPT2_RESUME_FROM/gpt2-misses.yaml" "$G/"
			[ -f "$GPT2_RESUME_FROM/gpt2-tuned.yaml" ] && [ ! -e "$G/gpt2.db" ] &&
				KTUNE_DB=$G/gpt2.db $B/ktune import "$GPT2_RESUME_FROM/gpt2-tuned.yaml" | tail -n 1
		fi
		for part in ${PYTHON_STEPS:-test gpt2 compile}; do
			case $part in
			test) run python.log timeout 570 python3 -m pytest -p no:cacheprovider -v -rs python/tests \
				--junitxml="$OUT/python-junit.xml" ;;
			gpt2) run gpt2.log timeout 570 python3 examples/gpt2/train.py --profile --cprofile 25 --json "$OUT/gpt2.json" ;;
			compile) run gpt2.log timeout 570 python3 examples/gpt2/train.py --compile --json "$OUT/gpt2-compile.json" ;;
			gpt2-record) # a fresh database: what the shipped tuning and the fallbacks serve GPT-2 with
				rm -f "$G"/gpt2.db* "$G/gpt2-misses.yaml"
				run gpt2-tuned.log env KTUNE_DB="$G/gpt2.db" timeout 570 python3 examples/gpt2/train.py --mode ktune \
					--steps 3 --warmup 1 --record "$G/gpt2-misses.yaml" --json "$OUT/gpt2-record.json"
				cp "$G/gpt2-misses.yaml" "$OUT/" 2>/dev/null || echo "no misses recorded" | tee -a "$OUT/gpt2-tuned.log"
				;;
			gpt2-sweep)
				if [ ! -f "$G/gpt2-misses.yaml" ]; then
					echo "no $G/gpt2-misses.yaml: run PYTHON_STEPS=gpt2-record first (or GPT2_RESUME_FROM)" |
						tee -a "$OUT/gpt2-tuned.log"
					status=1
					continue
				fi
				# shellcheck disable=SC2086 # GPT2_SWEEP_ARGS is a list of options
				run gpt2-tuned.log env KTUNE_DB="$G/gpt2.db" timeout "${GPT2_SWEEP_TIMEOUT:-400}" $B/ktune sweep \
					--misses "$G/gpt2-misses.yaml" --progress ${GPT2_SWEEP_ARGS:-}
				KTUNE_DB=$G/gpt2.db $B/ktune show --format csv >"$OUT/gpt2-results.csv" 2>>"$OUT/gpt2-tuned.log"
				KTUNE_DB=$G/gpt2.db $B/ktune export -o "$OUT/gpt2-tuned.yaml" 2>>"$OUT/gpt2-tuned.log" || status=1
				cp "$G/gpt2-misses.yaml" "$OUT/"
				;;
			gpt2-tuned) # what is still missed after the sweep goes to gpt2-misses-after.yaml
				rm -f "$G/gpt2-misses-after.yaml"
				run gpt2-tuned.log env KTUNE_DB="$G/gpt2.db" timeout 570 python3 examples/gpt2/train.py --profile \
					--record "$G/gpt2-misses-after.yaml" --json "$OUT/gpt2-tuned.json"
				cp "$G/gpt2-misses-after.yaml" "$OUT/" 2>/dev/null || true
				;;
			*)
				echo "unknown PYTHON_STEPS part '$part'"
				exit 2
				;;
			esac
		done
		;;
	*)
		echo "unknown step '$step'"
		exit 2
		;;
	esac
done
exit $status
