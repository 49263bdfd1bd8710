#!/usr/bin/env bash
# test-misses.sh - tune what is used, from the command line: 'ktune sweep
# --misses FILE' tunes exactly the keys a misses file lists (each in its
# alignment class, any op), again finds them tuned, refuses a malformed
# file with its line, and '--from-db' says when the database holds none.
# The tuner runs the tests' fake GPU worker (KTUNE_WORKER), so no GPU is
# needed.
NAME=test-misses
. "$(dirname "$0")/lib.sh"
FAKE=${KTUNE_TEST_FAKE_WORKER:-}
[ -x "$FAKE" ] || { echo "$NAME: skipped: no fake worker (KTUNE_TEST_FAKE_WORKER)"; exit 77; }
export KTUNE_WORKER="$FAKE"

# What a program's ktune_close writes (db/misses.h): GEMM aligned with an odd N (padded by the
# caller), GEMM unaligned, an elementwise op and a row-wise op unaligned.
cat >m.yaml <<'YAML'
# ktune misses: the keys this GPU served without a tuned entry, with their calls.
format: ktune-misses
version: 1
device: {name: "NVIDIA H100 80GB HBM3", arch: sm_90, sm_count: 132}
keys:
  - {op: gemm, dtype: bf16, variant: "nt", m: 1, n: 50257, k: 768, aligned: true, source: "default", calls: 120}
  - {op: gemm, dtype: f16, variant: "tn", m: 33, n: 100, k: 200, aligned: false, source: "nearest", calls: 3}
  - {op: gelu, dtype: bf16, variant: "tanh,fwd", n: 1048576, aligned: true, source: "default", calls: 8}
  - {op: softmax, dtype: bf16, variant: "fwd", rows: 4096, cols: 1000, aligned: false, source: "default", calls: 1}
YAML

run sweep --misses m.yaml --budget 4 --no-group-pick
expect_rc 0
out_has "^4 keys: 4 tuned, 0 already tuned"

# exactly those keys, each in its class: nothing else was tuned
run show --format csv
expect_rc 0
[ "$(grep -c '^"Fake H100' "$OUT")" = 4 ] || fail "the database holds other keys than the recorded ones"
out_has ',gemm,bf16,"nt",1,50257,768,1,'
out_has ',gemm,f16,"tn",33,100,200,0,'
out_has ',gelu,bf16,"tanh,fwd",1048576,0,0,1,'
out_has ',softmax,bf16,"fwd",4096,1000,0,0,'

# a second sweep finds them tuned
run sweep --misses m.yaml --budget 4 --no-group-pick
expect_rc 0
out_has "^4 keys: 0 tuned, 4 already tuned"

# a malformed file: its line and field, nothing tuned
sed 's/variant: "tn"/variant: "tx"/' m.yaml >bad.yaml
run sweep --misses bad.yaml
expect_rc 2
err_has "bad.yaml:7: keys\[1\]: gemm: layout in variant 'tx' is not one of"
out_empty
cat >dup.yaml <<'YAML'
format: ktune-misses
version: 1
device: {name: "X", arch: sm_90, sm_count: 132}
keys:
  - {op: add, dtype: f16, n: 4096, aligned: true}
  - {op: add, dtype: f16, n: 4096, aligned: true}
YAML
run sweep --misses dup.yaml
expect_rc 2
err_has "dup.yaml:6: keys\[1\]: the same key as keys\[0\]"
run sweep --misses no-such-file.yaml
expect_rc 2
err_has "no-such-file.yaml"
run show --format csv
[ "$(grep -c '^"Fake H100' "$OUT")" = 4 ] || fail "a refused file changed the database"

# one source of keys at a time
run sweep m.yaml --misses m.yaml
expect_rc 2
err_has "give one of a spec file, --misses FILE and --from-db"
run sweep --misses m.yaml --from-db
expect_rc 2
err_has "give one of"

# nothing to tune: said, and not an error
printf 'format: ktune-misses\nversion: 1\ndevice: {name: "X", arch: sm_90, sm_count: 1}\nkeys: []\n' >empty.yaml
run sweep --misses empty.yaml
expect_rc 0
err_has "lists no key: nothing to tune"
run sweep --from-db
expect_rc 0
err_has "holds no recorded misses of Fake H100"

# the help says it
run help sweep
out_has "--misses FILE"
out_has "--from-db"
echo "$NAME: $CASES cases passed"
