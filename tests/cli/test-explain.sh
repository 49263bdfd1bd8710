#!/usr/bin/env bash
# test-explain.sh - 'ktune explain' from the command line, without a GPU:
# the dispatch chain of a key of the shipped tuning (a GPU named, or asked
# for when several match); then a key tuned on the fake GPU worker
# (KTUNE_WORKER) with a crash, a wrong result and a compile error planted
# (KTUNE_FAKE_PLAN, tests/unit/fake-worker.c): the text lists each with its
# fate, the JSON holds every trial and measurement; the candidates --top
# left untried are listed with the model's reason; bad arguments fail
# clearly.
NAME=test-explain
. "$(dirname "$0")/lib.sh"
FAKE=${KTUNE_TEST_FAKE_WORKER:-}
[ -x "$FAKE" ] || { echo "$NAME: skipped: no fake worker (KTUNE_TEST_FAKE_WORKER)"; exit 77; }
KEY="gemm -m 256 -n 256 -k 256 --dtype f16"

# no database, no GPU: the shipped tuning's GPUs; two of sm_90 match, so one must be named
run explain gemm -m 16 -n 4096 -k 4096
expect_rc 2
err_has "GPUs match; choose one with --gpu NAME"
err_has "NVIDIA H100"
run explain gemm -m 16 -n 4096 -k 4096 --gpu H100
expect_rc 0
out_has "^device .*H100.*from the shipped tuning"
out_has "^ *shipped .*<- serves"
out_has "^tuning  *none: no database"
# an arch no one knows needs its SM count
run explain add --n 4096 --arch sm_89
expect_rc 2
err_has "give --arch and --sm-count"
run explain add --n 4096 --arch sm_89 --sm-count 128
expect_rc 0
out_has "(sm_89, 128 SMs), from --arch"
out_has "default .*<- serves"

# tuned on the fake GPU, then again with three candidates planted
export KTUNE_WORKER="$FAKE"
run tune $KEY --budget 12 --timeout 1
expect_rc 0
run explain $KEY --format json
expect_rc 0
grep -o '"config": "[^"]*", "family": "gemm", "status": "ok"' "$OUT" | sed 's/"config": "\([^"]*\)".*/\1/' >ok.txt
[ "$(wc -l <ok.txt)" -ge 6 ] || fail "fewer than 6 candidates ran right"
C1=$(sed -n 2p ok.txt)
C2=$(sed -n 3p ok.txt)
C3=$(sed -n 4p ok.txt)
KTUNE_FAKE_PLAN="crash=$C1;wrong=$C2;compile_error=$C3" run tune $KEY --budget 12 --timeout 1
expect_rc 0
run explain $KEY
expect_rc 0
out_has "^device .*Fake H100 (no GPU).*from the database"
out_has "^dispatch *exact .*<- serves"
out_has "^tuning  *#2 "
out_has " crashed  *$C1"
out_has "ILLEGAL_ADDRESS"
out_has " wrong  *$C2"
out_has "error 1 (Frobenius), .*: tolerance"
out_has " compile_error  *$C3"
out_has "planted compile error"
out_has "^pruned "
out_has "^screened  *1 "
out_has "^finalists "
out_has "^turns "
out_has "baseline .* ratio "
out_has "^decided  *runoff: "
out_has "earlier tunings of this key are not shown"
lines=$(wc -l <"$OUT")
[ "$lines" -le 60 ] || fail "the text is $lines lines: not one screen"
run explain $KEY --format json
expect_rc 0
out_has "\"status\": \"crashed\""
out_has "\"status\": \"wrong\", \"screen_us\": null, \"time_us\": null, \"ratio\": null, \"err_fro\": 1,"
out_has "\"stage\": \"final_rev\""
out_has "\"serves\": \"exact\""
out_has "\"earlier_tunings\": 1}"
run explain $KEY --all
expect_rc 0
out_has "e.g. BLOCK_M="

# --top: the candidates the model's order left untried are listed, each with why
run tune gemm -m 64 -n 64 -k 64 --dtype f16 --top 2 --timeout 1
expect_rc 0
out_has "^untried: "
run explain gemm -m 64 -n 64 -k 64 --dtype f16
expect_rc 0
out_has "left untried by the model's order (--top): [0-9]* beyond its cut"
out_has "^untried  *beyond cut  *BLOCK_M="
run explain gemm -m 64 -n 64 -k 64 --dtype f16 --all
expect_rc 0
out_has "not in the model's top 2 kernels"
run explain gemm -m 64 -n 64 -k 64 --dtype f16 --format json
expect_rc 0
out_has "\"status\": \"pruned\", .*\"message\": \"not in the model's top 2 kernels"

# bad arguments
run explain
expect_rc 2
err_has "which op?"
run explain conv -m 1
expect_rc 2
err_has "'conv' is not a known op"
run explain $KEY --format xml
expect_rc 2
err_has "--format 'xml' is not one of text, json"
run explain gemm -m 16 -n 16
expect_rc 2
err_has "gemm needs --k"
run help explain
expect_rc 0
out_has "usage: ktune explain"
echo "$NAME: $CASES cases passed"
