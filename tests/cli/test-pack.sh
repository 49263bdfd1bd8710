#!/usr/bin/env bash
# test-pack.sh - 'ktune pack' (no GPU): a weight already on a 4-bit grid
# packs and unpacks back to the same bytes; the packed file's header and
# size; a rounded weight unpacks to a weight of the same size; bad formats,
# sizes and files are refused with the reason, and nothing is written.
#
# usage: bash test-pack.sh /path/to/ktune
set -u

NAME=test-pack
. "$(dirname "$0")/lib.sh"

# bf16 bit patterns of the integers -8 .. 7, little-endian
bf16() {
	case $1 in
	-8) printf '\x00\xc1' ;; -7) printf '\xe0\xc0' ;; -6) printf '\xc0\xc0' ;; -5) printf '\xa0\xc0' ;;
	-4) printf '\x80\xc0' ;; -3) printf '\x40\xc0' ;; -2) printf '\x00\xc0' ;; -1) printf '\x80\xbf' ;;
	0) printf '\x00\x00' ;; 1) printf '\x80\x3f' ;; 2) printf '\x00\x40' ;; 3) printf '\x40\x40' ;;
	4) printf '\x80\x40' ;; 5) printf '\xa0\x40' ;; 6) printf '\xc0\x40' ;; 7) printf '\xe0\x40' ;;
	esac
}

# [3, 64]: every row holds -8 and 7, so per channel with fma the grid is
# -8 + q (scale 1, zero -8) and every weight is on it
for r in 0 1 2; do
	for c in $(seq 0 63); do
		bf16 $(( (c * 5 + r * 3) % 16 - 8 ))
	done
done >grid.bin
[ "$(stat -c %s grid.bin)" = 384 ] || fail "grid.bin is $(stat -c %s grid.bin) bytes"

run pack -n 3 -k 64 --bits 4 --group chan --mode fma grid.bin grid.ktq
expect_rc 0
err_has "packed \[3, 64\] bf16 into grid.ktq (4 bits, group chan, fma, zero per group)"
# 256 header bytes, 3 rows of 8 words (padded to a multiple of 4: 8), 3 scales, 3 zeros
[ "$(stat -c %s grid.ktq)" = $((256 + 3 * 8 * 4 + 3 * 2 + 3 * 2)) ] || fail "grid.ktq is $(stat -c %s grid.ktq) bytes"
head -c 256 grid.ktq | tr -d '\000' >header.txt
for line in "ktune-quant 1" "dtype bf16" "bits 4" "group chan" "mode fma" "zero group" "n 3" "k 64" \
	"words 24" "scales 3" "zeros 3"; do
	grep -qx "$line" header.txt || fail "the header lacks '$line'"
done
run pack --unpack grid.ktq back.bin
expect_rc 0
same grid.bin back.bin

# the same weight as 8 bits per channel, scale_shift, one zero: symmetric, rounded; the size holds
run pack -n 3 -k 64 --bits 8 --group 32 --mode scale_shift --zero scalar grid.bin s8.ktq
expect_rc 0
grep -qa "^zero scalar$" s8.ktq || fail "s8.ktq's header lacks 'zero scalar'"
run pack --unpack s8.ktq s8.bin
expect_rc 0
[ "$(stat -c %s s8.bin)" = 384 ] || fail "s8.bin is $(stat -c %s s8.bin) bytes"

# refusals: nothing written
run pack -n 3 -k 64 --group 48 grid.bin bad.ktq
expect_rc 2
err_has "--group '48' is not one of 32, 64, 128, chan"
run pack -n 3 -k 64 --group 128 grid.bin bad.ktq
expect_rc 2
err_has "k = 64 is not a multiple of the group size 128"
run pack -n 6 -k 32 --bits 3 grid.bin bad.ktq
expect_rc 2
err_has "bits 3 is not one of 8, 4, 2, 1"
run pack -n 4 -k 64 --group 32 grid.bin bad.ktq
expect_rc 1
err_has "holds 384 bytes, not n \* k \* 2 = 512"
run pack --mode round -n 3 -k 64 grid.bin bad.ktq
expect_rc 2
err_has "--mode 'round'"
run pack -n 3 grid.bin bad.ktq
expect_rc 2
err_has "-n and -k"
run pack --unpack grid.bin bad.bin
expect_rc 1
err_has "is not a packed weight"
head -c 300 grid.ktq >cut.ktq
run pack --unpack cut.ktq bad.bin
expect_rc 1
err_has "the format needs"
[ ! -e bad.ktq ] && [ ! -e bad.bin ] || fail "a refused command wrote its output"
run pack --help
expect_rc 0
out_has "usage: ktune pack"

echo "$NAME: $CASES cases passed"
