# lib.sh - what the CLI test scripts share.  Sourced after setting NAME (the
# script's name for messages); takes the ktune path as $1 of the script.
#
# Sets KTUNE (absolute), TMP (a temp dir, removed on exit, the working dir),
# KTUNE_DB and XDG_CACHE_HOME inside it, and gives:
#   run ARGS...        run ktune (time-limited), keeping stdout, stderr, exit code
#   expect_rc N, out_has RE, err_has RE, err_has_e ERE, out_empty, err_empty,
#   same FILE FILE, fail MESSAGE
# Each 'run' is a case; the first failure prints the case and exits 1.

KTUNE=${1:?usage: $NAME.sh /path/to/ktune}
[ -x "$KTUNE" ] || { echo "$NAME: '$KTUNE' is not an executable" >&2; exit 1; }
KTUNE=$(cd "$(dirname "$KTUNE")" && pwd)/$(basename "$KTUNE") # the cases run in a temp dir

mkdir -p "${TMPDIR:-/tmp}" || exit 1
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ktune-$NAME-XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
export KTUNE_DB="$TMP/db/ktune.db"
export XDG_CACHE_HOME="$TMP/cache"
cd "$TMP" || exit 1

CASES=0
OUT="$TMP/stdout"
ERR="$TMP/stderr"
RC=0

fail() {
	echo "$NAME: FAIL: case $CASES: $CURRENT: $*" >&2
	echo "--- exit code: $RC" >&2
	echo "--- stdout:" >&2
	head -c 2000 "$OUT" >&2
	echo "--- stderr:" >&2
	head -c 2000 "$ERR" >&2
	exit 1
}

run() {
	CASES=$((CASES + 1))
	CURRENT="ktune $*"
	timeout 60 "$KTUNE" "$@" >"$OUT" 2>"$ERR"
	RC=$?
}

expect_rc() { [ "$RC" -eq "$1" ] || fail "exit code $RC, expected $1"; }
out_has() { grep -q -- "$1" "$OUT" || fail "stdout lacks '$1'"; }
err_has() { grep -q -- "$1" "$ERR" || fail "stderr lacks '$1'"; }
err_has_e() { grep -qE -- "$1" "$ERR" || fail "stderr does not match /$1/"; }
out_empty() { [ ! -s "$OUT" ] || fail "stdout is not empty"; }
err_empty() { [ ! -s "$ERR" ] || fail "stderr is not empty"; }
same() { cmp -s "$1" "$2" || fail "'$1' and '$2' differ"; }
