#!/usr/bin/env bash
# Idempotent set-up: Debian packages, the Python venv for tests, and the default model.
# Safe to run again; does only what is missing. Usage: scripts/setup.sh [--no-model] [--serve]
# --serve (make serve): only what building and serving need, and the openai / anthropic SDKs
# in .venv; the test tools (clang, Caddy, Redis, Prometheus, the e2e packages) come with a
# later plain run (make test).
set -euo pipefail
cd "$(dirname "$0")/.."

want_model=1
serve_only=0
for arg in "$@"; do
  case "$arg" in
    --no-model) want_model=0 ;;
    --serve) serve_only=1 ;;
    *) echo "setup.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

# What building (tests are configured, so GoogleTest's headers are needed) and serving need.
APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config git unzip curl ca-certificates
  python3 python3-venv python3-pip
  libabsl-dev libboost1.81-dev nlohmann-json3-dev libsimdjson-dev libspdlog-dev libfmt-dev libcli11-dev
  libpcre2-dev libicu-dev libxxhash-dev libssl-dev zlib1g-dev libopenblas-dev libedit-dev
  libgtest-dev libgmock-dev libhiredis-dev
  libpng-dev libjpeg62-turbo-dev libwebp-dev libgif-dev
  openmpi-bin libopenmpi-dev
)
# What the tests add: the fuzzers' compiler, benchmarks, and the real components e2e tests run
# (openssl: the command that makes the https image tests' certificate; iproute2: `ip netns`, the
# two simulated hosts of the expert-parallel test).
if ((!serve_only)); then
  APT_PACKAGES+=(clang libbenchmark-dev prometheus shellcheck redis-server caddy openssl iproute2)
fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The aarch64 stage of the tests (scripts/run_arm_tests.sh): Debian's cross compiler, qemu-user
# and the :arm64 packages of what it cross-builds (the tests it runs and deepinfer). Multiarch installs each library
# for arm64 beside the native one at the same version, so apt may first upgrade a native -dev
# package to the archive's current version (a point release). Where that cannot be done (held
# packages, no arm64 in the archive) the stage is skipped with a message, and the rest of the
# set-up goes on. DEEPINFER_ARM64=0 skips it.
if ((!serve_only)) && [ "${DEEPINFER_ARM64:-1}" != 0 ] &&
   [ "$(dpkg --print-architecture)" = amd64 ]; then
  mapfile -t arm_packages < <(scripts/run_arm_tests.sh --packages)
  arm_missing=()
  for p in "${arm_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      arm_missing+=("$p")
  done
  if ((${#arm_missing[@]})); then
    echo "setup: installing the aarch64 cross toolchain and packages: ${arm_missing[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    if ! { dpkg --print-foreign-architectures | grep -qx arm64 ||
           $SUDO dpkg --add-architecture arm64; } ||
       ! $SUDO apt-get update -qq ||
       ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
         "${arm_missing[@]}"; then
      echo "setup: WARNING: could not install the aarch64 cross packages;" \
        "make test skips its arm64 stage"
    fi
  fi
fi

# Python venv for the e2e tests and golden scripts (pinned versions).
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.requirements.sha256
req_hash=$(cat tests/requirements.txt tests/requirements-nodeps.txt | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$req_hash" ]; then
  if ((serve_only)); then
    # The README's SDK examples: the two SDKs at the pins the tests use.
    if ! .venv/bin/python -c 'import openai, anthropic' 2>/dev/null; then
      grep -E '^(openai|anthropic)==' tests/requirements.txt > .venv/serve-requirements.txt
      .venv/bin/pip install -q -r .venv/serve-requirements.txt
    fi
  else
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -r tests/requirements.txt
    .venv/bin/pip install -q --no-deps -r tests/requirements-nodeps.txt
    echo "$req_hash" > "$stamp"
  fi
fi

# The structured-output backend's source (xgrammar, built with the project).
scripts/fetch_xgrammar.sh > /dev/null

if ((want_model)); then
  scripts/fetch_model.sh
fi
