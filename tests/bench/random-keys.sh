#!/usr/bin/env bash
# random-keys.sh - bench/random's keys (--list, no GPU): at least 60 by
# default, the same for a seed every time, other keys for another seed, the
# four layouts and both dtypes, sizes in 1..65536 with M*N*K <= 2^36, and
# leading dimensions packed, padded to multiples of 8 and padded by odd
# amounts, so that both alignment classes are there.
#   bash tests/bench/random-keys.sh build/bench/random
set -u
R=${1:?usage: random-keys.sh /path/to/bench/random}
fail() { echo "random-keys: FAIL: $*" >&2; exit 1; }

a=$("$R" --list) || fail "--list failed"
b=$("$R" --list) || fail "--list failed the second time"
[ "$a" = "$b" ] || fail "the same seed gave other keys"
c=$("$R" --list --seed 7) || fail "--seed 7 failed"
[ "$a" != "$c" ] || fail "another seed gave the same keys"
n=$(printf '%s\n' "$a" | wc -l)
[ "$n" -ge 60 ] || fail "$n keys, fewer than 60"
[ "$("$R" --list --keys 10 | wc -l)" = 10 ] || fail "--keys 10 did not give 10 keys"
"$R" --list --keys 0 >/dev/null 2>&1 && fail "--keys 0 was accepted"

printf '%s\n' "$a" | awk '
	function row(t, rows, cols) { return t == "t" ? cols : rows }
	{
		dt[$1]++; lay[$2]++; cls[$6]++
		m = $3; n = $4; k = $5; lda = $7; ldb = $8; ldc = $9
		if (m < 1 || n < 1 || k < 1 || m > 65536 || n > 65536 || k > 65536) bad = bad " size:" NR
		if (m * n * k > 2 ^ 36) bad = bad " mnk:" NR
		ra = substr($2, 1, 1) == "t" ? m : k; rb = substr($2, 2, 1) == "t" ? k : n
		if (lda < ra || ldb < rb || ldc < n) bad = bad " ld:" NR
		if (lda > ra || ldb > rb || ldc > n) padded++
		al = (lda % 8 == 0 && ldb % 8 == 0 && ldc % 8 == 0) ? "aligned" : "unaligned"
		if (al != $6) bad = bad " class:" NR
		if (lda > ra && lda % 8 == 0 && al == "aligned") pad8++
		if (lda > ra && lda % 8 != 0) padodd++
	}
	END {
		if (bad != "") { print "keys out of bounds or mislabelled at" bad; exit 1 }
		if (dt["f16"] == 0 || dt["bf16"] == 0) { print "a dtype is missing"; exit 1 }
		if (lay["nn"] == 0 || lay["nt"] == 0 || lay["tn"] == 0 || lay["tt"] == 0) { print "a layout is missing"; exit 1 }
		if (cls["aligned"] < 8 || cls["unaligned"] < 8) { print "too few keys of a class"; exit 1 }
		if (pad8 < 5 || padodd < 2) { print "too few padded leading dimensions: " pad8 ", " padodd; exit 1 }
	}' || fail "the keys break the rules"
echo "random-keys: ok ($n keys)"
