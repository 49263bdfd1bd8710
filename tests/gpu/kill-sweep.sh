#!/usr/bin/env bash
# kill-sweep.sh - kill -9 a sweep at random moments, ten times: first its
# worker process (the sweep must carry on), then the sweep itself (its worker
# must die with it).  After each kill the database must pass PRAGMA
# integrity_check and still hold every key completed before; then one more
# sweep must finish the spec, taking over the dead sweeps' claims.  Needs a
# GPU and python3 (for its sqlite3 module).
#
# usage: bash tests/gpu/kill-sweep.sh /path/to/ktune [SPEC] [DB]
set -u
KTUNE=${1:?usage: kill-sweep.sh /path/to/ktune [SPEC] [DB]}
SPEC=${2:-$(dirname "$0")/kill-spec.yaml}
DB=${3:-/tmp/ktune-kill/ktune.db}
export KTUNE_DB=$DB
rm -f "$DB" "$DB-wal" "$DB-shm"

check() { # prints "<integrity> <results>"
	python3 - "$DB" <<'PY'
import os, sqlite3, sys
if not os.path.exists(sys.argv[1]):
    print("ok 0"); sys.exit()
c = sqlite3.connect(sys.argv[1])
tables = {r[0] for r in c.execute("select name from sqlite_master")}
n = c.execute("select count(*) from results").fetchone()[0] if "results" in tables else 0
print(c.execute("pragma integrity_check").fetchone()[0], n)
PY
}

prev=0
RANDOM=7
for i in $(seq 1 10); do
	"$KTUNE" sweep "$SPEC" >/dev/null 2>&1 &
	pid=$!
	delay=$(awk -v r=$RANDOM 'BEGIN { printf "%.1f", 0.5 + r % 60 / 10 }')
	sleep "$(awk -v d="$delay" 'BEGIN { print d / 2 }')"
	worker=$(pgrep -P "$pid" | head -1)
	[ -n "$worker" ] && kill -9 "$worker" 2>/dev/null
	sleep "$(awk -v d="$delay" 'BEGIN { print d / 2 }')"
	alive=$(kill -0 "$pid" 2>/dev/null && echo yes || echo no)
	kill -9 "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	sleep 0.5
	orphans=$(pgrep -f "$KTUNE __worker" | wc -l)
	read -r integrity n < <(check)
	echo "kill $i after ${delay} s (worker ${worker:-none} killed at half time, sweep alive after it: $alive): integrity $integrity, $n keys stored, $orphans workers left"
	[ "$orphans" = 0 ] || { echo "FAIL: a worker outlived its sweep"; exit 1; }
	[ "$integrity" = ok ] || { echo "FAIL: integrity_check says '$integrity'"; exit 1; }
	[ "$n" -ge "$prev" ] || { echo "FAIL: $prev keys before the kill, $n after"; exit 1; }
	prev=$n
done
"$KTUNE" sweep "$SPEC" >/tmp/ktune-kill-final.log 2>&1 || { echo "FAIL: the last sweep failed"; cat /tmp/ktune-kill-final.log; exit 1; }
tail -1 /tmp/ktune-kill-final.log
read -r integrity n < <(check)
want=$(grep -c "^gemm " /tmp/ktune-kill-final.log)
echo "after the last sweep: integrity $integrity, $n keys stored, $want in the spec"
[ "$integrity" = ok ] && [ "$n" = "$want" ] || { echo "FAIL"; exit 1; }
echo "kill-sweep: passed"
