#!/usr/bin/env bash
# test-cli.sh - the ktune command on a machine without a GPU: help and usage
# errors, exit codes, GPU commands failing fast and cleanly, bad sweep specs
# refused with file:line: and the field before anything is written, and show
# on a missing or broken database.
#
# usage: bash test-cli.sh /path/to/ktune
# Exits 0 when every case passes, 1 with a message at the first failure.
# Where a CUDA driver is present, the cases that need its absence are left out.
set -u

NAME=test-cli
. "$(dirname "$0")/lib.sh"

no_db() {
	[ ! -e "$KTUNE_DB" ] || fail "a database was created at $KTUNE_DB"
	[ ! -e "$TMP/db" ] || fail "the database directory was created"
}

# Most cases hold anywhere; those about GPU commands failing need a machine
# without a CUDA driver (with one, 'ktune sweep' would start tuning).
NO_DRIVER=1
if [ -e /dev/nvidiactl ] || ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
	NO_DRIVER=0
fi
for d in ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }}; do
	[ -e "$d/libcuda.so.1" ] && NO_DRIVER=0
done
[ "$NO_DRIVER" = 1 ] || echo "test-cli: a CUDA driver is present: skipping the no-GPU cases" >&2

# ------------------------------------------------------------------ help

run
expect_rc 2
out_empty
err_has "usage: ktune <command>"
err_has "sweep"

for args in "--help" "-h" "help"; do
	run $args
	expect_rc 0
	out_has "usage: ktune <command>"
	for cmd in bench compile info show sweep tune verify; do out_has "^  $cmd "; done
	err_empty
done

run help sweep
expect_rc 0
out_has "usage: ktune sweep"
out_has "Spec format:"
out_has "--budget N"
err_empty
cp "$OUT" "$TMP/help-sweep"

run sweep --help
expect_rc 0
cmp -s "$OUT" "$TMP/help-sweep" || fail "'sweep --help' differs from 'help sweep'"
err_empty
no_db

for cmd in bench compile info show tune verify; do
	run help $cmd
	expect_rc 0
	out_has "usage: ktune $cmd"
	run $cmd --help
	expect_rc 0
	out_has "usage: ktune $cmd"
done

run --version
expect_rc 0
out_has "^ktune [0-9][0-9.]*$"

# ---------------------------------------------------------- usage errors

run frobnicate
expect_rc 2
err_has "'frobnicate' is not a ktune command"
out_empty

run help frobnicate
expect_rc 2
err_has "'frobnicate' is not a ktune command"

for cmd in info show sweep tune verify compile bench; do
	run $cmd --frobnicate
	expect_rc 2
	err_has "ktune $cmd: unknown option '--frobnicate'"
	err_has "Try 'ktune $cmd --help'"
	out_empty
done

run show -x
expect_rc 2
err_has "unknown option '-x'"

run info extra
expect_rc 2
err_has "unexpected argument 'extra'"

for args in "info --device abc" "show --device -1" "tune gemm -m 1 -n 1 -k 1 --device 1x" "sweep --device abc" "verify --device abc" "bench --device abc"; do
	run $args
	expect_rc 2
	err_has "--device '"
	err_has "is not an integer"
done

run show --format xml
expect_rc 2
err_has "--format 'xml' is not one of table, csv, json, yaml"

run show --dtype f64
expect_rc 2
err_has "--dtype 'f64'"

run show --layout nx
expect_rc 2
err_has "--layout 'nx'"

run show -m 0
expect_rc 2
err_has "-m '0' is not an integer"

no_db

# ------------------------------------------------------------------ info

run info
expect_rc 0
out_has "^gpu: "
[ "$NO_DRIVER" = 0 ] || out_has "^gpu: .*none (no CUDA driver"
out_has "^nvrtc: "
out_has "^database: .*$KTUNE_DB"
out_has "not created yet"
out_has "^cache: .*$XDG_CACHE_HOME/ktune"
no_db

run info --db "$TMP/elsewhere.db"
expect_rc 0
out_has "$TMP/elsewhere.db"
[ ! -e "$TMP/elsewhere.db" ] || fail "info created the database"

# --------------------------------------------------- GPU commands, no GPU

if [ "$NO_DRIVER" = 1 ]; then
	start=$(date +%s%N)
	run sweep
	elapsed_ms=$((($(date +%s%N) - start) / 1000000))
	expect_rc 2
	err_has "needs an NVIDIA GPU"
	err_has "libcuda"
	[ "$elapsed_ms" -lt 5000 ] || fail "took $elapsed_ms ms to fail"
	no_db
	[ ! -e "$XDG_CACHE_HOME/ktune/cubin" ] || fail "sweep wrote to the cubin cache"

	run tune gemm -m 16 -n 4096 -k 4096
	expect_rc 2
	err_has "needs an NVIDIA GPU"
	no_db

	run tune gemm -m 16 -n 4096 -k 4096 --dtype bf16 --layout nn --budget 4
	expect_rc 2
	err_has "needs an NVIDIA GPU"

	run verify
	expect_rc 2
	err_has "needs an NVIDIA GPU"
	no_db

	run bench --rounds 3
	expect_rc 2
	err_has "needs an NVIDIA GPU"
	no_db
fi

# bench's own argument errors come before the GPU check
for rounds in 0 -1 x 1001; do
	run bench --rounds $rounds
	expect_rc 2
	err_has "--rounds '$rounds' is not an integer in 1..1000"
	out_empty
done
run bench extra
expect_rc 2
err_has "unexpected argument 'extra'"
no_db

# tune's own argument errors come before the GPU check
run tune gemm -n 4096 -k 4096
expect_rc 2
err_has "gemm needs --m"

run tune gelu --approx fast --n 1024
expect_rc 2
err_has "gelu: approx 'fast' is not one of erf, tanh"

run tune glu --rows 8
expect_rc 2
err_has "glu needs --cols"

run tune add --n 1024 --rows 8
expect_rc 2
err_has "unknown option '--rows'"

run help tune
expect_rc 0
out_has "--direction  fwd: y = gelu"
out_has "glu .*SwiGLU"

run tune
expect_rc 2
err_has "which op?"

run tune conv -m 16 -n 4096 -k 4096
expect_rc 2
err_has "'conv' is not a known op"

run tune gemm -m 16 -n 4096 -k 4096 extra
expect_rc 2
err_has "unexpected argument 'extra'"

# the model's order: --top takes 0 (every candidate) and up; the class options are GEMM's
run tune gemm -m 16 -n 4096 -k 4096 --top -1
expect_rc 2
err_has "--top '-1' is not an integer in 0..100000"

run tune add --n 1024 --aligned
expect_rc 2
err_has "--aligned and --unaligned are GEMM's"

run help tune
expect_rc 0
out_has "'--top 0' tries every candidate"
out_has "--aligned tunes the class of rows padded"

run sweep --top x
expect_rc 2
err_has "--top 'x' is not an integer"

# the tune's deadline: seconds, 0 for none
run tune gemm -m 16 -n 4096 -k 4096 --deadline -1
expect_rc 2
err_has "--deadline '-1' is not a number of seconds in \[0, 86400\]"
run sweep --deadline soon
expect_rc 2
err_has "--deadline 'soon' is not a number of seconds"
run help tune
out_has "past 7 seconds of compiling"

run tune gemm -m 16 -n 4096 -k 4096 --dtype f32
expect_rc 2
err_has "gemm: dtype 'f32' is not supported"

run tune add --n 1024 --dtype f64
expect_rc 2
err_has "--dtype 'f64' is not one of f16, bf16, f32"

run tune gemm -m 16 -n 4096 -k 4096 --budget -1
expect_rc 2
err_has "--budget '-1'"

run sweep a.yaml b.yaml
expect_rc 2
err_has "at most one spec file"
no_db

# ------------------------------------------------------------ sweep specs

# spec NAME: writes a spec from stdin to NAME.
spec() { cat >"$TMP/$1"; }

spec good.yaml <<'EOF'
gemm:
  dtypes: [f16]
  layouts: [nt]
  shapes:
    - {m: 16, n: 4096, k: 4096}
EOF
# A good spec gets as far as the GPU check.
if [ "$NO_DRIVER" = 1 ]; then
	run sweep good.yaml
	expect_rc 2
	err_has "needs an NVIDIA GPU"
	no_db
fi

spec unknown-key.yaml <<'EOF'
gemm:
  dtypes: [f16]
  layouts: [nt]
  shapes:
    - {m: 16, n: 4096, k: 4096}
  shapez: []
EOF
spec bad-dtype.yaml <<'EOF'
gemm:
  dtypes: [f16, f32]
  layouts: [nt]
  shapes:
    - {m: 16, n: 4096, k: 4096}
EOF
spec bad-layout.yaml <<'EOF'
gemm:
  dtypes: [f16]
  layouts: [nn, nx]
  shapes:
    - {m: 16, n: 4096, k: 4096}
EOF
spec negative-dim.yaml <<'EOF'
gemm:
  dtypes: [f16]
  layouts: [nt]
  shapes:
    - {m: 16, n: -4096, k: 4096}
EOF
spec backwards-range.yaml <<'EOF'
gemm:
  dtypes: [f16]
  layouts: [nt]
  shapes:
    - {m: 16, n: 4096, k: {from: 4096, to: 1024, mul: 2}}
EOF

# bad_spec FILE LINE FIELD TEXT: sweep refuses FILE, naming FILE:LINE:, the field and TEXT.
bad_spec() {
	run sweep "$1"
	expect_rc 2
	err_has "$1:$2: $3"
	err_has "$4"
	err_has_e "^ktune: "
	out_empty
	no_db
}
bad_spec unknown-key.yaml 6 "gemm" "unknown key 'shapez'"
bad_spec bad-dtype.yaml 2 "gemm.dtypes\[1\]" "'f32' is not one of f16, bf16"
bad_spec bad-layout.yaml 3 "gemm.layouts\[1\]" "'nx' is not one of nn, nt, tn, tt"
bad_spec negative-dim.yaml 5 "gemm.shapes\[0\].n" "'-4096'"
bad_spec backwards-range.yaml 5 "gemm.shapes\[0\].k" "'from' (4096) is greater than 'to' (1024)"

# an absolute path is named as given
run sweep "$TMP/bad-dtype.yaml"
expect_rc 2
err_has "$TMP/bad-dtype.yaml:2: gemm.dtypes\[1\]"

head -c 200 /dev/urandom >"$TMP/garbage.yaml"
run sweep garbage.yaml
expect_rc 2
err_has_e "^ktune: garbage\.yaml:[0-9]+: "
out_empty
no_db

printf 'gemm:\n  dtypes: [f16\n  layouts: [nt]\n' >"$TMP/unclosed.yaml"
run sweep unclosed.yaml
expect_rc 2
err_has_e "^ktune: unclosed\.yaml:[0-9]+: "
no_db

printf 'just a sentence, not a spec\n' >"$TMP/prose.yaml"
run sweep prose.yaml
expect_rc 2
err_has_e "^ktune: prose\.yaml:1: "
no_db

: >"$TMP/empty.yaml"
run sweep empty.yaml
expect_rc 2
err_has "empty.yaml"
err_has "empty"
no_db

run sweep missing.yaml
expect_rc 2
err_has "cannot open 'missing.yaml'"
err_has "No such file"
no_db

mkdir "$TMP/dir.yaml"
run sweep dir.yaml
expect_rc 2
err_has "'dir.yaml'"
err_has "directory"
no_db

head -c $((2 * 1024 * 1024)) /dev/zero | tr '\0' '#' >"$TMP/huge.yaml"
run sweep huge.yaml
expect_rc 2
err_has "'huge.yaml'"
err_has "larger than the limit"
no_db

# ------------------------------------------------------------------ show

run show
expect_rc 0
out_empty
err_has "no database at '$KTUNE_DB'"
err_has "ktune sweep"
no_db

run show --format json
expect_rc 0
[ "$(cat "$OUT")" = "[]" ] || fail "stdout is not '[]'"
no_db

run show --format csv
expect_rc 0
no_db

run show --db "$TMP/nowhere/x.db" --format json
expect_rc 0
[ "$(cat "$OUT")" = "[]" ] || fail "stdout is not '[]'"
[ ! -e "$TMP/nowhere" ] || fail "show created a directory"

head -c 4096 /dev/urandom >"$TMP/garbage.db"
cp "$TMP/garbage.db" "$TMP/garbage.db.orig"
run show --db "$TMP/garbage.db"
expect_rc 1
err_has "cannot open database '$TMP/garbage.db'"
err_has "not a database"
out_empty
cmp -s "$TMP/garbage.db" "$TMP/garbage.db.orig" || fail "show changed the file"

printf 'hello, I am not SQLite\n' >"$TMP/text.db"
KTUNE_DB="$TMP/text.db" run show --format json
expect_rc 1
err_has "'$TMP/text.db'"
err_has "not a database"

run info --db "$TMP/garbage.db"
expect_rc 1
out_has "unusable"

mkdir "$TMP/dir.db"
run show --db "$TMP/dir.db"
expect_rc 1
err_has "is a directory"

# --------------------------------------------------------------- compile

run compile --arch sm_9x
expect_rc 2
err_has "--arch 'sm_9x' is not like sm_90"
out_empty

for args in "--arch 90" "--arch sm_" "--arch sm_90b" "--dtype f64" "--layout xx" "--aligned 2" \
	"--jobs 0" "--jobs many" "--format json" "extra"; do
	run compile $args
	expect_rc 2
	err_has "Try 'ktune compile --help'"
	out_empty
done
for args in "--op conv" "--op softmax --layout nt" "--op rmsnorm --family gemm" "--dtype f32"; do
	run compile $args
	expect_rc 2
	err_has "Try 'ktune compile --help'"
	out_empty
done
[ ! -e "$XDG_CACHE_HOME/ktune/cubin" ] || fail "a refused compile wrote to the cubin cache"

# another op: every admitted kernel of its suite keys (add in f32, unaligned: 66 of them)
run compile --op add --dtype f32 --aligned 0 --format csv
expect_rc 0
out_has '^key,config,status,registers'
out_has '^"add f32 1048576 unaligned","VEC=1,UNROLL=1,THREADS=128,'
[ "$(grep -c ',ok,' "$OUT")" -ge 60 ] || fail "compile --op add: fewer than 60 kernels ok"
err_has "compiled, 0 failed"

# --------------------------------------------------------------- linking

# The driver is dlopen'd, never linked: the command and the library start
# on machines without one (DESIGN.md, decision 1).
for bin in "$KTUNE" "$(dirname "$KTUNE")/libktune.so"; do
	[ -e "$bin" ] || continue
	CASES=$((CASES + 1))
	if ldd "$bin" | grep -q 'libcuda\.so'; then
		fail "$bin links the CUDA driver: $(ldd "$bin" | grep libcuda)"
	fi
done

# ----------------------------------------------------------------- done

no_db
echo "test-cli: $CASES cases passed"
exit 0
