#!/usr/bin/env bash
# test-share.sh - ktune export, import and merge, no GPU needed: round trips
# (YAML and SQLite), each policy on conflicting entries, dry runs, stale
# entries, and untrusted files (malformed, newer, truncated, binary, empty,
# nested, SQL-looking) refused with file:line: field: and nothing written.
#
# usage: bash test-share.sh /path/to/ktune
# Exits 0 when every case passes, 1 with a message at the first failure.
set -u

NAME=test-share
SRC=$(cd "$(dirname "$0")/../.." && pwd)
HASH=$(sha256sum "$SRC/kernels/templates/gemm.cu" | cut -d' ' -f1)
. "$SRC/tests/cli/lib.sh"

# entry DEVICE M TIME [PROTOCOL]: one export entry for the current template.
entry() {
	cat <<EOF
  - device: {name: "$1", arch: "sm_90", sms: 132}
    key: {op: "gemm", dtype: "f16", layout: "nt", m: $2, n: 4096, k: 4096, aligned: 1}
    family: "gemm"
    config: "BLOCK_M=16,BLOCK_N=128,BLOCK_K=64,WARPS_M=1,WARPS_N=4,STAGES=3,GROUP_SIZE=1,SPLIT_K=1"
    template_hash: "$HASH"
    protocol: "${4:-events;l2flush;median}"
    time_us: $3
    p20_us: $3
    p80_us: $3
    tflops: 10
    cublas_us: 0
    err_fro: 1.000e-04
    err_max: 1.000e-03
    candidates: 10
    tune_s: 1
    nvrtc_version: "12.4"
    driver_version: "550"
    ktune_version: "0.1.0"
    created_at: "2024-05-01T12:00:00Z"
EOF
}
header() { printf 'format: ktune-export\nversion: %s\nktune: "0.1.0"\nentries:\n' "${1:-1}"; }

{ header; entry "GPU A" 1 10; entry "GPU A" 2 20; entry "GPU B" 1 30; } >a.yaml
{ header; entry "GPU A" 1 5; entry "GPU A" 2 40; entry "GPU A" 3 7 "other"; } >faster.yaml
{ header; entry "GPU A" 1 50 "other"; } >otherproto.yaml

# ------------------------------------------------------------------ help

run help
out_has "^  export "
out_has "^  import "
out_has "^  merge "
for cmd in export import merge; do
	run $cmd --help
	expect_rc 0
	out_has "usage: ktune $cmd"
	run $cmd --frobnicate
	expect_rc 2
	err_has "unknown option '--frobnicate'"
done
run import
expect_rc 2
err_has "missing FILE"
run import a.yaml --policy slowest
expect_rc 2
err_has "'slowest' is not one of faster, ours, theirs"
run merge a.yaml
expect_rc 2
run merge a.yaml a.yaml
expect_rc 2
err_has "missing -o OUT"
run export --format sqlite
expect_rc 2
err_has "needs -o FILE"
run export
expect_rc 1
err_has "no database"

# ------------------------------------------------- round trips and reports

run import a.yaml --dry-run
expect_rc 0
out_has "3 added, 0 replaced, 0 kept, 0 skipped (nothing written)"
[ ! -e "$KTUNE_DB" ] || fail "a dry run created the database"

run import a.yaml
expect_rc 0
out_has "^added  *GPU A (sm_90, 132 SMs) gemm f16 nt 1x4096x4096"
out_has "3 added, 0 replaced, 0 kept, 0 skipped"

run export
expect_rc 0
cp "$OUT" e1.yaml
run export -o e1-file.yaml
expect_rc 0
same e1.yaml e1-file.yaml
KTUNE_DB="$TMP/second.db" "$KTUNE" import e1.yaml >/dev/null 2>&1 || fail "import into a new database failed"
KTUNE_DB="$TMP/second.db" "$KTUNE" export >e2.yaml 2>/dev/null || fail "second export failed"
same e1.yaml e2.yaml

run import e1.yaml
expect_rc 0
out_has "0 added, 0 replaced, 3 kept, 0 skipped"
out_has "the same as ours"

run export --op gemm -o op.yaml
expect_rc 0
same e1.yaml op.yaml
run export --arch sm_80
expect_rc 0
out_has "^entries: \[\]$"

run export --device "GPU B"
expect_rc 0
out_has 'name: "GPU B"'
grep -q 'name: "GPU A"' "$OUT" && fail "--device did not filter"

# --defaults: one entry per key and arch, named for the GPUs it averages
run export --defaults
expect_rc 0
out_has 'name: "ktune defaults (2 sm_90 GPUs)"'
out_has 'name: "ktune defaults (1 sm_90 GPU)"'
grep -q 'name: "GPU A"' "$OUT" && fail "--defaults kept a device's own entry"
[ "$(grep -c '^  - device:' "$OUT")" = 2 ] || fail "--defaults: expected 2 entries (keys m=1 and m=2)"

run export --format sqlite -o e.sqlite
expect_rc 0
[ "$(head -c 15 e.sqlite)" = "SQLite format 3" ] || fail "not an SQLite file"
run export --format sqlite -o e.sqlite
expect_rc 1
err_has "exists"
KTUNE_DB="$TMP/third.db" "$KTUNE" import e.sqlite >/dev/null 2>&1 || fail "import of the SQLite form failed"
KTUNE_DB="$TMP/third.db" "$KTUNE" export >e3.yaml 2>/dev/null
same e1.yaml e3.yaml

# ------------------------------------------------------------ policies

"$KTUNE" export >before.yaml
run import faster.yaml --dry-run
expect_rc 0
out_has "1 added, 1 replaced, 1 kept, 0 skipped (nothing written)"
"$KTUNE" export >after.yaml
same before.yaml after.yaml

run import otherproto.yaml
expect_rc 0
out_has "^kept .*theirs measured with another protocol: kept ours"

run import faster.yaml --policy ours
expect_rc 0
out_has "1 added, 0 replaced, 2 kept, 0 skipped"

run import faster.yaml
expect_rc 0
out_has "^replaced .*1x4096x4096.*theirs is faster: 5 us vs 10 us"
out_has "^kept .*2x4096x4096.*ours is faster: 20 us vs 40 us"

run import faster.yaml --policy theirs
expect_rc 0
out_has "^replaced .*2x4096x4096.*policy 'theirs'"
"$KTUNE" export >now.yaml
grep -q "time_us: 40" now.yaml || fail "policy theirs did not replace"

run merge a.yaml faster.yaml -o merged.yaml
expect_rc 0
err_has "merged 2 files into 'merged.yaml'"
grep -c "time_us: 5$" merged.yaml | grep -q 1 || fail "merge did not take the faster entry"
grep -q "time_us: 20$" merged.yaml || fail "merge did not keep the faster ours"
run merge a.yaml faster.yaml e.sqlite -o merged2.yaml --policy ours
expect_rc 0
grep -q "time_us: 10$" merged2.yaml || fail "merge --policy ours did not keep ours"

# --------------------------------------------------- untrusted input

"$KTUNE" export >before.yaml
expect_refused() { # FILE MESSAGE
	run import "$1"
	expect_rc 1
	err_has "$2"
	out_empty
	"$KTUNE" export >after.yaml
	same before.yaml after.yaml
}
sed 's/m: 2,/m: 0,/' a.yaml >bad-m.yaml
expect_refused bad-m.yaml "entries\[1\].key: gemm: m = 0 is not in 1.."
sed 's/BLOCK_M=16,/BLOCK_M=48,/' a.yaml >bad-config.yaml
expect_refused bad-config.yaml "bad-config.yaml:8: entries\[0\].config: 'BLOCK_M=48"
sed 's/version: 1/version: 3/' a.yaml >newer.yaml
expect_refused newer.yaml "newer.yaml:2: version: was written by a newer ktune (format 3, this ktune reads 2)"
head -c 900 a.yaml >truncated.yaml
expect_refused truncated.yaml "truncated.yaml:"
head -c 5000 /dev/urandom >binary.yaml
expect_refused binary.yaml "binary.yaml"
: >empty.yaml
expect_refused empty.yaml "empty.yaml: empty file"
{ header; printf '  - '; head -c 100000 /dev/zero | tr '\0' '['; echo; } >nested.yaml
expect_refused nested.yaml "nested.yaml:5: entries\[0\]: expected a mapping"
sed 's/family: "gemm"/family: "gemm"\n    exec: "sh -c evil"/' a.yaml >extra.yaml
expect_refused extra.yaml "unknown key 'exec'"
sed "s/$HASH/$(printf '0%.0s' $(seq 64))/" a.yaml >stale.yaml
run import stale.yaml
expect_rc 0
out_has "0 added, 0 replaced, 0 kept, 3 skipped"
out_has "tuned for another template source"
run import "$TMP/none.yaml"
expect_rc 1
err_has "cannot open"
truncate -s 70M huge.yaml
expect_refused huge.yaml "larger than the limit"

# SQL-looking strings are data: stored as they are, nothing else happens.
{ header; entry "x'); DROP TABLE results; --" 1 10 "\\\" OR 1=1; --"; } >sql.yaml
run import sql.yaml
expect_rc 0
out_has "1 added"
run export --device "DROP TABLE"
expect_rc 0
out_has "name: \"x'); DROP TABLE results; --\""
out_has 'protocol: "\\" OR 1=1; --"'
run show
expect_rc 0
out_has "GPU A"

# ------------------------------------------------ issue 30: hostile input

# An option missing its value is reported as such, not as unknown.
run import a.yaml --db
expect_rc 2
err_has "option '--db' needs a value"
run export -o
expect_rc 2
err_has "option '-o' needs a value"

# A path longer than the system allows is refused, never cut to the file
# its first PATH_MAX - 1 bytes name.
"$KTUNE" import a.yaml --db other.db >/dev/null || fail "cannot make other.db"
cp other.db other.before
long="$TMP/"
while [ $(( ${#long} + 10 )) -le 4095 ]; do long="$long./"; done
while [ $(( ${#long} + 8 )) -lt 4095 ]; do long="$long/"; done
long="${long}other.db"
[ ${#long} = 4095 ] || fail "the long path is ${#long} bytes"
[ -f "$long" ] || fail "the long path does not name other.db"
long="${long}-and-more-12"
run show --db "$long"
expect_rc 2
err_has "longer than the system allows"
run import faster.yaml --db "$long"
expect_rc 2
err_has "longer than the system allows"
same other.db other.before

# What is not a regular file is refused at once (a FIFO with no writer
# would block open() for good); 'run' gives up after 60 s.
mkfifo fifo
run import fifo
expect_rc 1
err_has "'fifo': is a FIFO, not a regular file"
run sweep fifo
expect_rc 2
err_has "'fifo': is a FIFO, not a regular file"
run show --db fifo
expect_rc 1
err_has "'fifo': it is a FIFO, not a regular file"
run import a.yaml --db fifo
expect_rc 1
err_has "it is a FIFO"
run show --db /dev/null
expect_rc 1
err_has "it is a character device"
run import a.yaml --db /dev/null
expect_rc 1
err_has "it is a character device"
[ ! -e /dev/null-journal ] || { rm -f /dev/null-journal; fail "a -journal beside /dev/null"; }

# -o replaces a regular file only: a symlink, a FIFO or a directory stays.
echo keep >kept.txt
ln -s kept.txt link.yaml
mkdir dir.yaml
for out in link.yaml fifo dir.yaml; do
	run export -o $out
	expect_rc 1
	err_has "only a regular file is replaced"
	run merge a.yaml faster.yaml -o $out
	expect_rc 1
	err_has "only a regular file is replaced"
	run export --format sqlite --force -o $out
	expect_rc 1
	err_has "only a regular file is replaced"
done
[ -L link.yaml ] && [ -p fifo ] && [ -d dir.yaml ] || fail "an -o target was replaced"
[ "$(cat kept.txt)" = keep ] || fail "the symlink's target was written"

# A killed export leaves no SQLite journal, and its temp file is removed by
# the next export of the same file.
: >.out.sqlite.tmp-AbC123
"$KTUNE" export --format sqlite -o out.sqlite & pid=$!
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
run export --format sqlite --force -o out.sqlite
expect_rc 0
leftovers=$(ls -A | grep -E '^\.out\.sqlite\.tmp-|^out\.sqlite-(wal|shm|journal)$|^out\.sqlite\.tmp-')
[ -z "$leftovers" ] || fail "left beside out.sqlite: $leftovers"
run import out.sqlite --dry-run
expect_rc 0

# Reading commands write nothing: no WAL switch, no migration.
cp out.sqlite plain.sqlite
run show --db plain.sqlite
expect_rc 0
run export --db plain.sqlite
expect_rc 0
run import a.yaml --db plain.sqlite --dry-run
expect_rc 0
same out.sqlite plain.sqlite
[ ! -e plain.sqlite-wal ] || fail "show or export left plain.sqlite-wal"
cp out.sqlite v4.sqlite
printf '\000\000\000\004' | dd of=v4.sqlite bs=1 seek=60 conv=notrunc 2>/dev/null
cp v4.sqlite v4.before
run export --db v4.sqlite
expect_rc 0
out_has "GPU A"
same v4.sqlite v4.before

# CSV per RFC 4180: a quote in a device name is doubled, the row keeps its fields.
sed 's/name: "GPU A"/name: "GPU \\"A\\", 2"/' a.yaml >quoted.yaml
run import quoted.yaml --db quoted.db
expect_rc 0
run show --db quoted.db --format csv
expect_rc 0
out_has '^"GPU ""A"", 2",sm_90,132,gemm,f16,"nt",'

# The default database folder gets the cache's ownership check.
mkdir -m 0777 shared
chmod 0777 shared
run_default() { (unset KTUNE_DB; XDG_CACHE_HOME="$TMP/shared" run "$@"; echo "$RC" >rc.txt); RC=$(cat rc.txt); }
run_default show
expect_rc 2
err_has "others may write to it"

# ------------------------------------------------------------------ the other ops

# Entries of the registry's other ops, format 2 (the key's variant): the
# README's quick start lists them with show; export and import keep them.
GELU_HASH=$("$KTUNE" info | awk '$1 == "family:" && $2 == "gelu" { print $3 }')
[ ${#GELU_HASH} = 64 ] || fail "ktune info names no gelu template hash"
op_entry() { # VARIANT N TIME
	cat <<EOF
  - device: {name: "GPU A", arch: "sm_90", sms: 132}
    key: {op: "gelu", dtype: "bf16", variant: "$1", m: $2, n: 0, k: 0, aligned: 1}
    family: "gelu"
    config: "VEC=8,UNROLL=1,THREADS=256,MIN_WARPS=0,CACHE=1,BLOCKS_PER_SM=0"
    template_hash: "$GELU_HASH"
    protocol: "events"
    time_us: $3
    p20_us: $3
    p80_us: $3
    tflops: 1
    cublas_us: $3
    err_fro: 1.000e-03
    err_max: 4.000e-03
    candidates: 738
    tune_s: 2
    nvrtc_version: "13.0"
    driver_version: "13.0"
    ktune_version: "0.1.0"
    created_at: "2026-11-26T00:00:00Z"
EOF
}
{ header 2; op_entry tanh,fwd 16777216 27.5; op_entry tanh,bwd 16777216 39.1; op_entry erf,fwd 1048576 6.2; } >ops.yaml
run import ops.yaml
expect_rc 0
out_has "3 added, 0 replaced, 0 kept, 0 skipped"
run show --op gelu --variant tanh,fwd
expect_rc 0
out_has "gelu    bf16 tanh,fwd     16777216"
out_has "2440.3 GB/s"
run show --op gelu --variant tanh,fwd --format csv
expect_rc 0
out_has '^"GPU A",sm_90,132,gelu,bf16,"tanh,fwd",16777216,0,0,1,'
run show --op gelu
expect_rc 0
out_has "tanh,bwd"
out_has "erf,fwd"
run export --op gelu -o gelu.yaml
expect_rc 0
grep -q '^version: 2$' gelu.yaml || fail "gelu.yaml is not format 2"
grep -q 'variant: "tanh,bwd"' gelu.yaml || fail "gelu.yaml lacks tanh,bwd"
run merge gelu.yaml ops.yaml -o merged.yaml
expect_rc 0
run show --op glu
expect_rc 0
err_has "no tuned entries match"
run show --op conv
expect_rc 2
err_has "--op 'conv' is not one of gemm, add, gelu, glu, dropout" # and the ops after them
# a bad variant, a size the op does not have: refused, nothing written
"$KTUNE" export >before.yaml
sed 's/variant: "tanh,fwd"/variant: "tanh,sideways"/' ops.yaml >bad-variant.yaml
expect_refused bad-variant.yaml "entries\[0\].key: gelu: direction in variant 'tanh,sideways' is not one of fwd, bwd"
sed '0,/n: 0, k: 0/s//n: 5, k: 0/' ops.yaml >bad-dim.yaml
expect_refused bad-dim.yaml "entries\[0\].key: gelu: size 1 is not one of its fields"
# the quick start's tune commands get as far as the GPU check (none here)
run tune gelu --approx tanh --n 16777216
if [ "$RC" = 2 ]; then err_has "needs an NVIDIA GPU"; fi
run tune gemm -m 16 -n 4096 -k 4096 --dtype f16 --layout nt
if [ "$RC" = 2 ]; then err_has "needs an NVIDIA GPU"; fi

echo "test-share: $CASES cases passed"
