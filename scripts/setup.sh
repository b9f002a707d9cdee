#!/usr/bin/env bash
# Idempotent set-up: Debian packages, the Python venv for tests, and the default model.
# Safe to run again; does only what is missing. Usage: scripts/setup.sh [--no-model]
set -euo pipefail
cd "$(dirname "$0")/.."

want_model=1
for arg in "$@"; do
  case "$arg" in
    --no-model) want_model=0 ;;
    *) echo "setup.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

APT_PACKAGES=(
  build-essential cmake ninja-build clang pkg-config git unzip curl ca-certificates
  python3 python3-venv python3-pip
  libabsl-dev libboost1.81-dev nlohmann-json3-dev libsimdjson-dev libspdlog-dev libfmt-dev libcli11-dev
  libpcre2-dev libicu-dev libxxhash-dev libssl-dev zlib1g-dev libopenblas-dev libedit-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  prometheus shellcheck redis-server libhiredis-dev caddy
)

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

# Python venv for the e2e tests and golden scripts (pinned versions).
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.requirements.sha256
req_hash=$(sha256sum tests/requirements.txt | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$req_hash" ]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r tests/requirements.txt
  echo "$req_hash" > "$stamp"
fi

# The structured-output backend's source (xgrammar, built with the project).
scripts/fetch_xgrammar.sh > /dev/null

if ((want_model)); then
  scripts/fetch_model.sh
fi
