#!/usr/bin/env bash
# Builds the libFuzzer targets with clang, replays every committed seed (ctest -L fuzz), then
# fuzzes each target for a bounded time on a scratch copy of its seed corpus, FUZZ_JOBS targets
# at a time (default 2). Each target's log is build-fuzz/<name>.log; a failing target's tail is
# printed once all have finished.
# FUZZ_XGRAMMAR_FROM=DIR (scripts/run_tests.sh: its native build): link DIR's libxgrammar.a,
# built from the same .deps/ source, rather than compiling xgrammar a second time; the fuzzers
# link it uninstrumented either way.
# Usage: scripts/run_fuzz.sh SECONDS_PER_TARGET
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/job_pool.sh
SECONDS_PER_TARGET=${1:-30}
JOBS=${FUZZ_JOBS:-2}
BUILD=build-fuzz
xgrammar_lib=""
if [ -n "${FUZZ_XGRAMMAR_FROM:-}" ] && [ -f "$FUZZ_XGRAMMAR_FROM/build.ninja" ]; then
  # Up to date with the sources (a no-op after that build).
  ninja -C "$FUZZ_XGRAMMAR_FROM" xgrammar > /dev/null
  xgrammar_lib="$(cd "$FUZZ_XGRAMMAR_FROM" && pwd)/libxgrammar.a"
fi
if [ ! -f "$BUILD/build.ninja" ]; then
  # -O1, as libFuzzer's documentation builds its targets: half the compile time of -O2, and the
  # fuzzers still run fast; line tables come from tests/fuzz/CMakeLists.txt.
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
    -DDI_BUILD_FUZZ=ON -DDI_BUILD_TESTS=OFF -DDI_XGRAMMAR_LIB="$xgrammar_lib" > /dev/null
elif ! grep -qxF "DI_XGRAMMAR_LIB:FILEPATH=$xgrammar_lib" "$BUILD/CMakeCache.txt"; then
  cmake -DDI_XGRAMMAR_LIB="$xgrammar_lib" "$BUILD" > /dev/null
fi
# Regenerate first when a CMakeLists.txt changed, so the target list below includes new targets.
ninja -C "$BUILD" build.ninja > /dev/null
# Build only the fuzz targets (and what they link), not the whole project a second time.
echo "fuzz: building the fuzz targets with clang (a few minutes; log $BUILD/build.log)"
targets=$(ninja -C "$BUILD" -t targets all | sed -n 's/^\([a-z0-9_]*_fuzz\): .*/\1/p' | grep -v '^cmake_' | sort -u)
[ -n "$targets" ] || { echo "fuzz: no fuzz targets defined"; exit 1; }
# shellcheck disable=SC2086
ninja -C "$BUILD" -j "$(nproc)" $targets make_gguf_seeds > "$BUILD/build.log" 2>&1 ||
  { cat "$BUILD/build.log"; exit 1; }
# The GGUF seeds are generated, not committed (they are model files in form).
mkdir -p "$BUILD/corpus/gguf" && "$BUILD/tests/fuzz/make_gguf_seeds" "$BUILD/corpus/gguf" > /dev/null

echo "fuzz: replaying the seed corpora"
ctest --test-dir "$BUILD/tests/fuzz" -L fuzz -j "$JOBS" --output-on-failure > "$BUILD/seeds.log" 2>&1 ||
  { cat "$BUILD/seeds.log"; exit 1; }
grep -E 'tests passed' "$BUILD/seeds.log" || true

# Fuzzes one target; prints one line when it is done.
fuzz_one() {
  local fuzzer=$1 name corpus rc=0
  name=$(basename "$fuzzer" _fuzz)
  corpus=$(mktemp -d)
  [ -d "tests/fuzz/corpus/$name" ] && cp -r "tests/fuzz/corpus/$name/." "$corpus/"
  [ -d "$BUILD/corpus/$name" ] && cp -r "$BUILD/corpus/$name/." "$corpus/"
  "$fuzzer" -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -print_final_stats=0 \
    -artifact_prefix="$BUILD/$name-" "$corpus" > "$BUILD/$name.log" 2>&1 || rc=$?
  rm -rf "$corpus"
  if [ $rc -eq 0 ]; then
    echo "fuzz: $name ok: $(grep -E '^#[0-9]+\s+DONE' "$BUILD/$name.log" | tail -1 | tr -s ' ')"
  else
    echo "fuzz: $name FAILED (exit $rc, log $BUILD/$name.log)"
  fi
  return $rc
}

echo "fuzz: ${SECONDS_PER_TARGET}s per target, $JOBS at a time"
fuzzers=()
for fuzzer in "$BUILD"/tests/fuzz/*_fuzz; do
  [ -x "$fuzzer" ] && fuzzers+=("$fuzzer")
done
[ ${#fuzzers[@]} -gt 0 ] || { echo "fuzz: no fuzz targets built"; exit 1; }
fuzz_name() { basename "$1" _fuzz; }
run_pool "$JOBS" fuzz "$BUILD" fuzz_one fuzz_name "${fuzzers[@]}"
