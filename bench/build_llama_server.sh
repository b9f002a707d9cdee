#!/usr/bin/env bash
# Builds the serving peer of bench/serve_vs_llamacpp.py: llama.cpp's own `llama-server` (and
# `llama-bench`) from the `vendor/llama.cpp` tree of the llama-cpp-python 0.3.36 sdist on PyPI, the
# same llama.cpp that bench/runtime_vs_llamacpp.py measures through the Python package.
# Prints the bin folder (the only line on stdout); everything else goes to stderr.
#
# Usage: bench/build_llama_server.sh
#   LLAMA_BIN=DIR     use an existing build (DIR holds llama-server and llama-bench): no download,
#                     no build; the folder is checked and printed
#   LLAMA_CPP_DIR=DIR where the sdist, its unpacked tree and the build go
#                     (default ${DEEPINFER_CACHE:-~/.cache/deepinfer}/llama.cpp)
#   JOBS=N            parallel compile jobs (default: nproc)
#   LLAMA_AVX2=1      the AVX2 peer (issue 37): AVX-512 and AVX-VNNI off, AVX2 + FMA + F16C on, as
#                     on an AVX2-only host (AMD Zen 2/3), in DIR/build-avx2
# Idempotent: when DIR/build/bin already holds both binaries it only prints the folder. The first
# build takes about 12 minutes on 2 cores (`nice -n 15 bench/build_llama_server.sh` to leave the
# machine usable meanwhile).
set -euo pipefail
VERSION=0.3.36
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e  # sdist from PyPI
TARGETS=(llama-server llama-bench)
REPO=$(cd "$(dirname "$0")/.." && pwd)

have_bins() {
  local t
  for t in "${TARGETS[@]}"; do [ -x "$1/$t" ] || return 1; done
}

if [ -n "${LLAMA_BIN:-}" ]; then
  if ! have_bins "$LLAMA_BIN"; then
    echo "build_llama_server: LLAMA_BIN=$LLAMA_BIN lacks ${TARGETS[*]}" >&2
    exit 2
  fi
  cd "$LLAMA_BIN" && pwd
  exit 0
fi

DIR=${LLAMA_CPP_DIR:-${DEEPINFER_CACHE:-$HOME/.cache/deepinfer}/llama.cpp}
BUILD="$DIR/build"
# GGML_NATIVE would take -march=native, AVX-512 included; the AVX2 peer names its ISA instead.
ISA_FLAGS=(-DGGML_NATIVE=ON)
if [ "${LLAMA_AVX2:-0}" = 1 ]; then
  BUILD="$DIR/build-avx2"
  ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
    -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF
    -DGGML_AVX512_BF16=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF)
fi
if have_bins "$BUILD/bin"; then
  echo "$BUILD/bin"
  exit 0
fi
mkdir -p "$DIR"
SDIST="$DIR/llama_cpp_python-$VERSION.tar.gz"
SRC="$DIR/llama_cpp_python-$VERSION/vendor/llama.cpp"

if [ ! -f "$SRC/CMakeLists.txt" ]; then
  if [ ! -f "$SDIST" ] || [ "$(sha256sum "$SDIST" | cut -d' ' -f1)" != "$SHA256" ]; then
    echo "build_llama_server: downloading the llama-cpp-python==$VERSION sdist from PyPI" >&2
    PIP="python3 -m pip"
    [ -x "$REPO/.venv/bin/pip" ] && PIP="$REPO/.venv/bin/pip"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    $PIP download -q --no-binary :all: --no-deps --dest "$tmp" "llama-cpp-python==$VERSION" >&2
    got=$(sha256sum "$tmp/llama_cpp_python-$VERSION.tar.gz" | cut -d' ' -f1)
    if [ "$got" != "$SHA256" ]; then
      echo "build_llama_server: sha256 mismatch for the sdist: got $got, want $SHA256" >&2
      exit 1
    fi
    mv "$tmp/llama_cpp_python-$VERSION.tar.gz" "$SDIST"
  fi
  rm -rf "$DIR/llama_cpp_python-$VERSION"
  tar -xzf "$SDIST" -C "$DIR"
fi

# Flags this tree needs: LLAMA_CURL is gone from it (deprecated and ignored; downloads go through
# cpp-httplib), so only LLAMA_OPENSSL=OFF keeps libssl out. LLAMA_USE_PREBUILT_UI=OFF skips the
# web UI download from Hugging Face at build time (the server works without it). GGML_NATIVE
# builds for this CPU (-march=native), as llama-cpp-python's own build does.
echo "build_llama_server: building ${TARGETS[*]} in $BUILD (about 12 minutes on 2 cores)" >&2
cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release "${ISA_FLAGS[@]}" \
  -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF > "$BUILD.cmake.log" 2>&1 ||
  { tail -30 "$BUILD.cmake.log" >&2; exit 1; }
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target "${TARGETS[@]}" > "$BUILD.log" 2>&1 ||
  { tail -30 "$BUILD.log" >&2; exit 1; }
have_bins "$BUILD/bin" || { echo "build_llama_server: no binaries in $BUILD/bin" >&2; exit 1; }
echo "$BUILD/bin"
