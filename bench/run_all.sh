#!/usr/bin/env bash
# `make bench`: the benchmarks of docs/benchmarks.md: deepinfer vs llama.cpp on the default model
# (runtime through llama-cpp-python; serving against llama.cpp's own `llama-server`, built by
# bench/build_llama_server.sh from the same sdist on first use, ~12 minutes on 2 cores), and the
# DeepSeek-V3-shaped checkpoints (made on first use, ~3 GB under $DEEPINFER_BENCH_MODELS, default
# /tmp/ds-bench). Writes bench/results/{runtime,serve,fairness,deepseek*,dspark,images}.{md,json}.
# Usage: bench/run_all.sh [BUILD_DIR]   (PYTHON=... picks an interpreter with llama-cpp-python;
#   LLAMA_BIN=DIR uses an existing llama-server build instead of building one)
# Run it on a quiet machine: both engines share the cores with everything else; the scripts
# record the load average next to the numbers.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
PY=${PYTHON:-.venv-reference/bin/python}
CACHE=${DEEPINFER_CACHE:-$HOME/.cache/deepinfer}
MODEL="$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf"
THREADS=${THREADS:-2}

[ -x "$BUILD/deepinfer" ] || { echo "run_all.sh: $BUILD/deepinfer not built" >&2; exit 2; }
[ -f "$MODEL" ] || scripts/fetch_model.sh > /dev/null
if [ ! -x "$PY" ]; then
  python3 -m venv .venv-reference
fi
# llama-cpp-python compiles llama.cpp on first install (minutes); the server extras are quick.
"$PY" -m pip install -q -r bench/requirements.txt gguf numpy httpx
# The serving peer: llama-server and llama-bench from the same llama.cpp (prints its bin folder).
LLAMA_BIN=$(bench/build_llama_server.sh)

mkdir -p bench/results
echo "== runtime: generate vs llama.cpp (prefill 512, decode 128, $THREADS threads)"
"$PY" bench/runtime_vs_llamacpp.py --deepinfer "$BUILD/deepinfer" --model "$MODEL" \
  --threads "$THREADS" --json bench/results/runtime.json | tee bench/results/runtime.md
echo "== prefill at every prompt length, decode against context: generate vs llama-bench"
"$PY" bench/runtime_vs_llama_bench.py --deepinfer "$BUILD/deepinfer" --llama-bin "$LLAMA_BIN" \
  --model "$MODEL" --threads "$THREADS" --json bench/results/runtime_llama_bench.json \
  --plot docs/images/decode_vs_context.png | tee bench/results/runtime_llama_bench.md
echo "== serving: serve (f32 and f16 KV) vs llama-server --parallel C (1/4/8/16 streams, shared prefix)"
"$PY" bench/serve_vs_llamacpp.py --deepinfer "$BUILD/deepinfer" --llama-bin "$LLAMA_BIN" \
  --python "$PY" --model "$MODEL" --threads "$THREADS" --out-dir bench/results/serve \
  --engines deepinfer,deepinfer-f16,llama-server --plot docs/images/serve_throughput.png \
  | tee bench/results/serve.md
echo "== data-parallel ranks: throughput by ranks and cores, prefix affinity vs round-robin"
"$PY" bench/data_parallel.py --deepinfer "$BUILD/deepinfer" --model "$MODEL" \
  --threads "$THREADS" --json bench/results/data_parallel.json | tee bench/results/data_parallel.md
echo "== fairness: short chats during an 8,000-token prefill, vs llama-server --parallel 4"
"$PY" bench/fairness.py --deepinfer "$BUILD/deepinfer" --model "$MODEL" --llama-bin "$LLAMA_BIN" \
  --threads "$THREADS" --repeats 2 --json bench/results/fairness.json \
  | tee bench/results/fairness.md
echo "== DeepSeek-V3-shaped checkpoints: BF16 / FP8 decode and prefill, 8 streams, MTP"
"$PY" bench/deepseek_speed.py --deepinfer "$BUILD/deepinfer" --threads "$THREADS" \
  --models "${DEEPINFER_BENCH_MODELS:-/tmp/ds-bench}" --json bench/results/deepseek.json \
  | tee bench/results/deepseek.md
echo "== DeepSeek-V4-shaped checkpoint in the released formats: decode, prefill, long context"
"$PY" bench/deepseek_v4_speed.py --deepinfer "$BUILD/deepinfer" --threads "$THREADS" \
  --models "${DEEPINFER_BENCH_MODELS:-/tmp/ds4-bench}" --json bench/results/deepseek_v4.json \
  | tee bench/results/deepseek_v4.md
echo "== DeepSeek-V4.1-shaped checkpoint (Engram, CSA2, compact cache): decode, prefill, 65,536 context"
"$PY" bench/deepseek_v41_speed.py --deepinfer "$BUILD/deepinfer" --threads "$THREADS" \
  --models "${DEEPINFER_BENCH_MODELS:-/tmp/ds41-bench}" --json bench/results/deepseek_v41.json \
  | tee bench/results/deepseek_v41.md
echo "== DSpark speculative decoding on V4.1-shaped checkpoints (agreeing and random drafters)"
"$PY" bench/dspark.py --deepinfer "$BUILD/deepinfer" --threads "$THREADS" \
  --models "${DEEPINFER_BENCH_MODELS:-/tmp/dspark-bench}" --json bench/results/dspark.json \
  | tee bench/results/dspark.md
echo "== Images on DeepSeek-V4.1 (vision tower): encode by size, TTFT with 1-16 images, images/s, caches"
if [ -d ../shared/goldens/deepseek_v41_vision ]; then
  "$PY" bench/images.py --binary "$BUILD/deepinfer" --threads "$THREADS" \
    --models "${DEEPINFER_BENCH_MODELS:-/tmp/images-bench}" --json bench/results/images.json \
    | tee bench/results/images.md
else
  echo "skipped: ../shared/goldens/deepseek_v41_vision (the checkpoints' recipe) is absent"
fi
