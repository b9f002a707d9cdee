#!/usr/bin/env bash
# The aarch64 stage of `make test`: cross-compiles deepinfer for 64-bit Arm Linux with Debian's
# cross toolchain and the multiarch :arm64 -dev packages (cmake/aarch64-linux-gnu.cmake), runs
# the kernel, tokenizer and architecture-parity (goldens) tests under qemu-user, TEST_JOBS
# binaries at a time (default nproc), then the `serve` smoke (scripts/arm_serve_smoke.py): the
# cross-built deepinfer serves stories260K under qemu and answers a greedy chat completion and a
# streamed one, with the native build's greedy text where that build is there ($DEEPINFER_BIN,
# else build/deepinfer). Each test binary's log is BUILD/<name>.log, the server's
# BUILD/serve-smoke.log; a failing one's tail is printed. Skips, with a message and exit status
# 0, where the cross toolchain, qemu or an :arm64 package is missing (scripts/setup.sh installs
# them; DEEPINFER_ARM64=0 skips both).
# Usage: scripts/run_arm_tests.sh [BUILD_DIR]   (default build-arm64)
#        scripts/run_arm_tests.sh --packages    (the Debian packages the stage needs, one a line)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
. scripts/job_pool.sh

# The cross compiler, qemu, and the :arm64 packages of what deepinfer and the tests link: the
# layers below the engine (absl, spdlog + fmt, OpenSSL, zlib, PCRE2, ICU, GoogleTest), and the
# server's (xxHash, libedit, the image decoders, simdjson's library). Header-only ones come
# with the native build's packages, their headers being the same for every architecture:
# nlohmann-json3-dev and libcli11-dev are architecture-independent, Boost.Asio / Beast are
# headers only (libboost1.81-dev:arm64 would add 150 MB of libraries the build does not link),
# and libsimdjson-dev cannot be installed for two architectures at once
# (cmake/aarch64-linux-gnu/simdjson-config.cmake). xgrammar is compiled from the same .deps/
# source as the native build's.
PACKAGES=(crossbuild-essential-arm64 qemu-user
  libabsl-dev:arm64 libspdlog-dev:arm64 libfmt-dev:arm64 libssl-dev:arm64 zlib1g-dev:arm64
  libpcre2-dev:arm64 libicu-dev:arm64 libgtest-dev:arm64
  libxxhash-dev:arm64 libedit-dev:arm64 libpng-dev:arm64 libjpeg62-turbo-dev:arm64
  libwebp-dev:arm64 libgif-dev:arm64 libsimdjson14:arm64)
if [ "${1:-}" = "--packages" ]; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi

BUILD=${1:-build-arm64}
JOBS=${TEST_JOBS:-$(nproc)}
# qemu's CPU ("max": dotprod, i8mm and SVE) with 256-bit SVE vectors instead of its default 512,
# so MatMul runs the integer kernels' sve+i8mm copy, and IsaTest.NeonIntegerCopiesGiveTheSameBits
# compares all five copies (NeonIntDot); a few seconds more than the default. QEMU_CPU overrides
# it (e.g. QEMU_CPU=neoverse-n1 or cortex-a53 for the dotprod or the baseline copy).
export QEMU_CPU=${QEMU_CPU:-max,sve-default-vector-length=32}

# BINARY [GTEST_FILTER]: what runs under qemu, chosen to keep the stage to a few minutes (qemu
# runs the portable kernels some 5-20x slower than this host runs its SIMD ones): every kernel,
# tensor and tokenizer test, and of each architecture the tests that compare logits with the
# goldens and the reference implementations (llama on stories260K; DeepSeek-V2/V3, V4, V4.1 and
# one V4.1 image prompt on the small test checkpoints) and its loader and schema checks.
# Left to the native ctest: the tokenizer's speed test (a time limit qemu cannot meet), the
# consistency tests (chunking, batching and prefix-cache invariance, 2-4x the parity tests' time
# under qemu), llama's GGUF parity on SmolLM2-135M (about 9 minutes per test under qemu) and
# vision_tower_test, whose kernels the V4.1 image prompt runs.
TESTS=(
  "src/tensor/tensor_test"
  "src/kernels/cpu/kernels_cpu_test"
  "src/tokenizer/tokenizer_test -*InUnderASecond"
  "src/arch/arch_test LlamaSchemaTest.*:LlamaStoriesTest.*-*LogitsDoNotDependOnTheRestOfTheBatch*"
  "src/arch/deepseek_v3_test -*ConsistencyTest.*"
  "src/arch/deepseek_v4_test -*ConsistencyTest.*:*QatMovesLogitsSlightlyAndKeepsChunkingExact"
  "src/arch/deepseek_v41_test -*ConsistencyTest.*"
  "src/arch/deepseek_v41_vision_test *EngramThreeImagePrompt*:*EngramTest.*:*LoadTest.*"
)

skip() {
  echo "arm64: SKIPPED: $*"
  exit 0
}
[ "${DEEPINFER_ARM64:-1}" != 0 ] || skip "DEEPINFER_ARM64=0"
command -v aarch64-linux-gnu-g++ > /dev/null ||
  skip "no aarch64-linux-gnu-g++ (scripts/setup.sh installs crossbuild-essential-arm64)"
command -v qemu-aarch64 > /dev/null || skip "no qemu-aarch64 (scripts/setup.sh installs qemu-user)"
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]} == 0)) || skip "not installed: ${missing[*]} (scripts/setup.sh installs them)"

start=$(date +%s)
mkdir -p "$BUILD"
# xgrammar at -O1 (DI_XGRAMMAR_COPTS): the smoke sends no constrained request, and -O1 takes
# some 60 CPU-seconds off its compile. A build folder configured otherwise (one from before
# the smoke: DI_CORE_ONLY=ON, no server layers) is configured again, which keeps the objects
# whose flags do not change.
if [ ! -f "$BUILD/build.ninja" ] || ! grep -qsx 'DI_CORE_ONLY:BOOL=OFF' "$BUILD/CMakeCache.txt" ||
   ! grep -qsx 'DI_XGRAMMAR_COPTS:STRING=-O1' "$BUILD/CMakeCache.txt"; then
  # PRE_TEST: ctest lists each binary's tests when it runs them, so the build does not start
  # qemu once per test binary.
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DDI_CORE_ONLY=OFF \
    -DDI_XGRAMMAR_COPTS=-O1 -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST \
    > "$BUILD/configure.log" 2>&1 || { cat "$BUILD/configure.log"; exit 1; }
fi
# Only the binaries that run: the tests above and deepinfer for the smoke (not the server
# layers' own tests, which the native ctest runs).
targets=(deepinfer)
for t in "${TESTS[@]}"; do
  bin=${t%% *}
  targets+=("$(basename "$bin")")
done
echo "arm64: cross-building ${targets[*]} (log $BUILD/build.log)"
ninja -C "$BUILD" -j "${BUILD_JOBS:-$(nproc)}" "${targets[@]}" > "$BUILD/build.log" 2>&1 ||
  { tail -50 "$BUILD/build.log"; echo "arm64: cross build FAILED"; exit 1; }
built=$(date +%s)
echo "arm64: built in $((built - start)) s; running the tests under qemu-aarch64 -cpu $QEMU_CPU"

# Runs one entry of TESTS; prints one line when it is done.
run_one() {
  local bin=${1%% *} filter='*' name rc=0 t0 summary
  [ "$1" = "$bin" ] || filter=${1#* }
  name=$(basename "$bin")
  t0=$(date +%s)
  qemu-aarch64 "$BUILD/$bin" --gtest_filter="$filter" > "$BUILD/$name.log" 2>&1 || rc=$?
  summary=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ tests?' "$BUILD/$name.log" |
    cut -d, -f1 | tr -s ' ' | tr '\n' ' ')
  if [ $rc -eq 0 ]; then
    echo "arm64: $name ok ($(($(date +%s) - t0)) s): $summary"
  else
    echo "arm64: $name FAILED (exit $rc, $(($(date +%s) - t0)) s, log $BUILD/$name.log)"
  fi
  return $rc
}

test_name() { basename "${1%% *}"; }
pool_rc=0
run_pool "$JOBS" arm64 "$BUILD" run_one test_name "${TESTS[@]}" || pool_rc=1
tested=$(date +%s)
echo "arm64: the tests took $((tested - built)) s under qemu"

# The serve smoke, on the model the llama tests use (they skip where it is missing, and so does
# the smoke: a user's clone has no ../shared).
smoke_rc=0
model=../shared/models/stories260K/stories260K.bin
native=${DEEPINFER_BIN:-build/deepinfer}
if [ ! -f "$model" ]; then
  echo "arm64: serve smoke SKIPPED: stories260K not found at $model (../shared/models)"
else
  native_args=()
  if [ -x "$native" ]; then
    native_args=(--native "$native")
  else
    echo "arm64: no native deepinfer at $native: the smoke's greedy text is not compared with it"
  fi
  python3 scripts/arm_serve_smoke.py "$BUILD/deepinfer" "$model" --log-dir "$BUILD" \
    "${native_args[@]}" || smoke_rc=1
  echo "arm64: the serve smoke took $(($(date +%s) - tested)) s"
fi
[ $pool_rc -eq 0 ] && [ $smoke_rc -eq 0 ]
