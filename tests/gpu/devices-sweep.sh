#!/usr/bin/env bash
# devices-sweep.sh - one `ktune sweep --devices 0,1,...` over every GPU of the
# machine.  It must finish, every key must be tuned once, by one of the GPUs,
# every GPU must have tuned some of them, no claim may be left behind, and the
# stored results must verify on every GPU.  Needs two GPUs or more (with one
# it says it skipped and exits 0) and python3.
#
# usage: bash tests/gpu/devices-sweep.sh /path/to/ktune [SPEC] [DB]
set -u
KTUNE=${1:?usage: devices-sweep.sh /path/to/ktune [SPEC] [DB]}
SPEC=${2:-$(dirname "$0")/kill-spec.yaml}
DB=${3:-/tmp/ktune-devices/ktune.db}
LOG=/tmp/ktune-devices-sweep.log
export KTUNE_DB=$DB

n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "$n" -lt 2 ]; then
	echo "devices-sweep: skipped, this machine has $n GPU (--devices needs two)"
	exit 0
fi
devices=$(seq -s, 0 $((n - 1)))
mkdir -p "$(dirname "$DB")"
rm -f "$DB" "$DB-wal" "$DB-shm"

t0=$SECONDS
"$KTUNE" sweep "$SPEC" --devices "$devices" --progress >"$LOG" 2>&1
rs=$?
echo "sweep --devices $devices finished in $((SECONDS - t0)) s, exit $rs"
tail -n 3 "$LOG"
tuned=""
for d in $(seq 0 $((n - 1))); do
	# "[gpu D] key I/N KEY" starts a tuning; "...: already tuned" does not
	c=$(grep "^\[gpu $d\] key [0-9]*/[0-9]* " "$LOG" | grep -vc ': already tuned$')
	echo "gpu $d tuned $c keys"
	tuned="$tuned $c"
done
rv=0
for d in $(seq 0 $((n - 1))); do
	"$KTUNE" verify --device "$d" >/tmp/ktune-devices-verify-$d.log 2>&1 || rv=1
	echo "verify --device $d: $(tail -n 1 /tmp/ktune-devices-verify-$d.log)"
done
python3 - "$DB" "$(grep -c '^gemm ' "$LOG")" $tuned <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
want = int(sys.argv[2])
per_gpu = [int(x) for x in sys.argv[3:]]
integrity = c.execute("pragma integrity_check").fetchone()[0]
results = c.execute("select count(*) from results").fetchone()[0]
claims = c.execute("select count(*) from claims").fetchone()[0]
# a key tuned once has one trial per candidate; tuned twice, two
twice = c.execute("""select count(*) from results r where r.candidates !=
    (select count(*) from trials t where t.device_id = r.device_id and t.op = r.op
     and t.dtype = r.dtype and t.layout = r.layout and t.m = r.m and t.n = r.n
     and t.k = r.k and t.aligned = r.aligned)""").fetchone()[0]
print(f"integrity {integrity}, {results} results for {want} keys, {claims} claims left, "
      f"{twice} keys tuned more than once, tunings per GPU {per_gpu}")
ok = (integrity == "ok" and want > 0 and results == want and claims == 0 and twice == 0
      and sum(per_gpu) == want and min(per_gpu) > 0)
print("devices-sweep: " + ("passed" if ok else "FAIL"))
sys.exit(0 if ok else 1)
PY
rp=$?
[ $rs = 0 ] && [ $rv = 0 ] && [ $rp = 0 ]
