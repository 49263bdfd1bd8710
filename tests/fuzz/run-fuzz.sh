#!/usr/bin/env bash
# run-fuzz.sh - builds the importer's libFuzzer harness (clang,
# -fsanitize=fuzzer,address,undefined) and runs it on a copy of the corpus:
# YAML exports and standalone SQLite exports (corpus-import/*.sqlite).
#
# usage: bash tests/fuzz/run-fuzz.sh [SECONDS] [BUILD_DIR]
#   SECONDS    how long to fuzz (default 600)
#   BUILD_DIR  where to build (default build-fuzz)
# Crashes are written to BUILD_DIR/crashes/; exits non-zero if one is found.
set -eu

SECONDS_TO_RUN=${1:-600}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${2:-$ROOT/build-fuzz}
CC=${CC:-clang}
FLAGS="-g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"

mkdir -p "$BUILD/obj" "$BUILD/crashes" "$BUILD/corpus"
# The embedded files, as the library's build (CMakeLists.txt) makes them.
cmake -DOUT="$BUILD/templates_data.c" -DARRAY=ktune__template_files \
	"-DFILES=$(ls "$ROOT"/kernels/templates/*.cu "$ROOT"/kernels/templates/*.yaml | sort | paste -sd '|')" \
	-P "$ROOT/cmake/embed.cmake"
EMBEDDED="$BUILD/templates_data.c"
if grep -q ktune__shipped_files "$ROOT/src/templates.h"; then
	cmake -DOUT="$BUILD/shipped_data.c" -DARRAY=ktune__shipped_files -DBASE="$ROOT/db" \
		"-DFILES=$(ls "$ROOT"/db/*/*.yaml 2>/dev/null | sort | paste -sd '|')" \
		-P "$ROOT/cmake/embed.cmake"
	EMBEDDED="$EMBEDDED $BUILD/shipped_data.c"
fi
sed -e 's/@PROJECT_VERSION_MAJOR@/0/; s/@PROJECT_VERSION_MINOR@/1/; s/@PROJECT_VERSION_PATCH@/0/' \
	-e 's/@PROJECT_VERSION@/0.1.0/' "$ROOT/include/ktune_version.h.in" >"$BUILD/ktune_version.h"
mkdir -p "$BUILD/include" && mv "$BUILD/ktune_version.h" "$BUILD/include/"

# Only the sources the importer needs: no CUDA.
# Every op of the registry (src/ops/*.c): the harness stubs their CUDA entry points.
SOURCES="src/common.c src/key.c src/status.c src/version.c src/db/db.c src/db/results.c
	src/db/import.c src/db/share.c src/db/share-read.c $(cd "$ROOT" && ls src/ops/*.c)
	src/search/space.c src/search/expr.c src/search/spec.c src/yaml-read.c src/templates.c"
objs=()
for src in $SOURCES $EMBEDDED; do
	case $src in /*) path=$src ;; *) path=$ROOT/$src ;; esac
	obj=$BUILD/obj/$(basename "$src" .c).o
	$CC $FLAGS -fsanitize=fuzzer-no-link -std=c11 -D_GNU_SOURCE -I"$ROOT/include" \
		-I"$BUILD/include" -I"$ROOT/src" -c "$path" -o "$obj"
	objs+=("$obj")
done
$CC $FLAGS -fsanitize=fuzzer -std=c11 -D_GNU_SOURCE -I"$ROOT/include" -I"$BUILD/include" \
	-I"$ROOT/src" "$ROOT/tests/fuzz/fuzz-import.c" "${objs[@]}" -lyaml -lsqlite3 -lm -lpthread \
	-o "$BUILD/fuzz-import"

cp "$ROOT"/tests/fuzz/corpus-import/* "$BUILD/corpus/"
cd "$BUILD"
exec ./fuzz-import -max_total_time="$SECONDS_TO_RUN" -max_len=65536 -timeout=10 \
	-rss_limit_mb=2048 -artifact_prefix="$BUILD/crashes/" -print_final_stats=1 \
	corpus "$ROOT/tests/fuzz/corpus-import"
