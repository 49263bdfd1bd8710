#!/usr/bin/env bash
# concurrent-sweeps.sh - two `ktune sweep` processes on one database and one
# GPU at the same time.  Both must finish; the database must pass PRAGMA
# integrity_check, hold one result per key, and each key's trials must be
# one tuning's (no key tuned twice).  Needs a GPU and python3.
#
# usage: bash tests/gpu/concurrent-sweeps.sh /path/to/ktune [SPEC] [DB]
set -u
KTUNE=${1:?usage: concurrent-sweeps.sh /path/to/ktune [SPEC] [DB]}
SPEC=${2:-$(dirname "$0")/kill-spec.yaml}
DB=${3:-/tmp/ktune-concurrent/ktune.db}
export KTUNE_DB=$DB
mkdir -p "$(dirname "$DB")"
rm -f "$DB" "$DB-wal" "$DB-shm"

t0=$SECONDS
"$KTUNE" sweep "$SPEC" --progress >/tmp/ktune-concurrent-a.log 2>&1 &
a=$!
"$KTUNE" sweep "$SPEC" --progress >/tmp/ktune-concurrent-b.log 2>&1 &
b=$!
wait $a; ra=$?
wait $b; rb=$?
echo "two sweeps finished in $((SECONDS - t0)) s, exit $ra and $rb"
echo "re-measured after NVML saw a disturbance: $(cat /tmp/ktune-concurrent-[ab].log | grep -c 'measurement disturbed') times"
echo "sweep a: $(tail -1 /tmp/ktune-concurrent-a.log)"
echo "sweep b: $(tail -1 /tmp/ktune-concurrent-b.log)"
python3 "$(dirname "$0")/check-sweep-db.py" "$DB" "$(grep -c '^gemm ' /tmp/ktune-concurrent-a.log)"
rd=$?
# the two sweeps share the GPU: NVML should see each in the other's measurements
python3 - "$DB" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
results = c.execute("select count(*) from results").fetchone()[0]
notes = c.execute("select count(*) from results where measure_note != ''").fetchone()[0]
print(f"{notes} of {results} results stored with a measurement note, e.g.:")
for (note,) in c.execute("select measure_note from results where measure_note != '' limit 2"):
    print("  " + note)
PY
ok=0
[ $rd = 0 ] && [ $ra = 0 ] && [ $rb = 0 ] && ok=1
echo "concurrent-sweeps: $([ $ok = 1 ] && echo passed || echo FAIL)"
[ $ok = 1 ]
