#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for a bounded time on its seed corpus.
# Usage: scripts/run_fuzz.sh SECONDS_PER_TARGET
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-30}
BUILD=build-fuzz
if [ ! -f "$BUILD/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDI_BUILD_FUZZ=ON -DDI_BUILD_TESTS=OFF > /dev/null
fi
# Build only the fuzz targets (and what they link), not the whole project a second time.
targets=$(ninja -C "$BUILD" -t targets all | sed -n 's/^\([a-z0-9_]*_fuzz\): .*/\1/p' | grep -v '^cmake_' | sort -u)
[ -n "$targets" ] || { echo "fuzz: no fuzz targets defined"; exit 1; }
# shellcheck disable=SC2086
ninja -C "$BUILD" -j "$(nproc)" $targets > "$BUILD/build.log" 2>&1 || { cat "$BUILD/build.log"; exit 1; }
found=0
for fuzzer in "$BUILD"/tests/fuzz/*_fuzz; do
  [ -x "$fuzzer" ] || continue
  found=1
  name=$(basename "$fuzzer" _fuzz)
  corpus=$(mktemp -d)
  [ -d "tests/fuzz/corpus/$name" ] && cp -r "tests/fuzz/corpus/$name/." "$corpus/"
  echo "fuzz: $name for ${SECONDS_PER_TARGET}s"
  "$fuzzer" -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -print_final_stats=0 \
    "$corpus" > "$BUILD/$name.log" 2>&1 || { tail -50 "$BUILD/$name.log"; rm -rf "$corpus"; exit 1; }
  grep -E '^(#[0-9]+\s+DONE|Done)' "$BUILD/$name.log" | tail -1 || true
  rm -rf "$corpus"
done
[ $found -eq 1 ] || echo "fuzz: no fuzz targets built"
