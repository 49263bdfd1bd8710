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
python3 - "$DB" "$(grep -c '^gemm ' /tmp/ktune-concurrent-a.log)" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
want = int(sys.argv[2])
integrity = c.execute("pragma integrity_check").fetchone()[0]
results = c.execute("select count(*) from results").fetchone()[0]
claims = c.execute("select count(*) from claims").fetchone()[0]
# a key tuned once has one trial per candidate; tuned twice, two
twice = c.execute("""select count(*) from results r where r.candidates !=
    (select count(*) from trials t where t.device_id = r.device_id and t.op = r.op
     and t.dtype = r.dtype and t.layout = r.layout and t.m = r.m and t.n = r.n
     and t.k = r.k and t.aligned = r.aligned)""").fetchone()[0]
notes = c.execute("select count(*) from results where measure_note != ''").fetchone()[0]
print(f"integrity {integrity}, {results} results for {want} keys, {claims} claims left, "
      f"{twice} keys tuned more than once")
# the two sweeps share the GPU: NVML should see each in the other's measurements
print(f"{notes} of {results} results stored with a measurement note, e.g.:")
for (note,) in c.execute("select measure_note from results where measure_note != '' limit 2"):
    print("  " + note)
ok = integrity == "ok" and results == want and claims == 0 and twice == 0
print("concurrent-sweeps: " + ("passed" if ok and sys.argv[2] != "0" else "FAIL"))
sys.exit(0 if ok else 1)
PY
[ $? = 0 ] && [ $ra = 0 ] && [ $rb = 0 ]
