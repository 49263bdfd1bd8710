#!/usr/bin/env bash
# test-warm.sh - 'ktune warm' without a GPU: a key tuned on the fake GPU
# worker (KTUNE_WORKER) has its kernel compiled into the cubin cache by
# NVRTC; a second warm compiles nothing; filters narrow it; a GPU must be
# named when several are known; bad arguments fail clearly.
NAME=test-warm
. "$(dirname "$0")/lib.sh"
FAKE=${KTUNE_TEST_FAKE_WORKER:-}
[ -x "$FAKE" ] || { echo "$NAME: skipped: no fake worker (KTUNE_TEST_FAKE_WORKER)"; exit 77; }

KTUNE_WORKER="$FAKE" run tune gelu --approx tanh --n 1048576 --budget 3 --timeout 1
expect_rc 0
FILTER="--op gelu --variant tanh,fwd -m 1048576"

# the fake GPU is in the database beside the shipped tuning's GPUs: one must be named
run warm $FILTER
expect_rc 2
err_has "GPUs match; choose one with --gpu NAME"
run warm --gpu Fake $FILTER
expect_rc 0
out_has "^device: *Fake H100 (no GPU) (sm_90, 132 SMs), from the database"
out_has "^cache: *$XDG_CACHE_HOME/ktune/cubin"
out_has "^warmed: *1 kernels for 1 tuned and shipped keys: 1 compiled"
[ "$(find "$XDG_CACHE_HOME/ktune/cubin" -name '*.cubin' | wc -l)" = 1 ] || fail "not one cubin in the cache"
run warm --gpu Fake $FILTER
expect_rc 0
out_has "^warmed: *1 kernels for 1 tuned and shipped keys: 0 compiled (0.0 s of NVRTC), 1 already cached, 0 failed"
# a filter nothing matches: nothing to do, said
run warm --gpu Fake --op gelu -m 3
expect_rc 0
out_has "^warmed: *0 kernels for 0 tuned"

run warm --gpu Fake --jobs 0
expect_rc 2
err_has "--jobs '0' is not an integer in 1..256"
run warm extra
expect_rc 2
err_has "unexpected argument 'extra'"
run warm --arch sm_89
expect_rc 2
err_has "give --arch and --sm-count"
run help warm
expect_rc 0
out_has "usage: ktune warm"
run help
out_has "^  warm "
out_has "^  explain "
echo "$NAME: $CASES cases passed"
