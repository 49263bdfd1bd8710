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
python3 "$(dirname "$0")/check-sweep-db.py" "$DB" "$(grep -c '^gemm ' "$LOG")"
rd=$?
sum=0
least=
for c in $tuned; do
	sum=$((sum + c))
	[ -z "$least" ] || [ "$c" -lt "$least" ] && least=$c
done
echo "tunings per GPU:$tuned"
ok=0
[ $rs = 0 ] && [ $rv = 0 ] && [ $rd = 0 ] && [ "$sum" = "$(grep -c '^gemm ' "$LOG")" ] && [ "$least" -gt 0 ] && ok=1
echo "devices-sweep: $([ $ok = 1 ] && echo passed || echo FAIL)"
[ $ok = 1 ]
