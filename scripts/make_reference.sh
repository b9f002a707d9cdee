#!/usr/bin/env bash
# Regenerates every golden file in tests/golden/ from the reference implementations (heavy:
# builds llama-cpp-python, installs tokenizers/transformers/torch). Not part of CI.
# Usage: scripts/make_reference.sh   (after scripts/setup.sh --reference)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv-reference/bin/python
CACHE=${DEEPINFER_CACHE:-$HOME/.cache/deepinfer}
MODEL="$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$MODEL" ] || scripts/fetch_model.sh > /dev/null

if [ ! -x "$PY" ]; then
  python3 -m venv .venv-reference
fi
.venv-reference/bin/pip install -q -r tests/requirements.txt -r tests/reference/requirements.txt

# transformers 4.x for the DeepSeek-V3 BOS cases (transformers 5 ignores add_bos_token there).
if [ ! -x .venv-reference4/bin/python ]; then
  python3 -m venv .venv-reference4
  .venv-reference4/bin/pip install -q "transformers==4.57.6"
fi

echo "reference: dequantization (gguf package)"
$PY tests/reference/make_dequant_golden.py
echo "reference: tokenizer and chat template (llama.cpp)"
$PY tests/reference/make_tokenizer_golden.py --model "$MODEL"
$PY tests/reference/make_chat_template_golden.py --model "$MODEL"
$PY tests/reference/make_chat_continue_golden.py --model "$MODEL"
echo "reference: greedy continuations and logits (llama.cpp)"
$PY tests/reference/make_llama_cpp_golden.py "$MODEL" tests/golden/llama_cpp/smollm2_greedy.json
echo "reference: DeepSeek tokenizers (Hugging Face tokenizers)"
$PY tests/reference/make_deepseek_tokenizer_golden.py \
  --transformers4-python .venv-reference4/bin/python
echo "reference: DeepSeek-V4.1 Engram token classes (Hugging Face tokenizers)"
$PY tests/reference/make_engram_token_map_golden.py
echo "reference: DeepSeek chat encodings"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
.venv-reference/bin/pip download -q --no-deps sglang==0.5.23 -d "$tmp"
(cd "$tmp" && unzip -o -q sglang-0.5.23-*.whl 'sglang/srt/entrypoints/openai/encoding_dsv32.py')
$PY tests/reference/make_deepseek_chat_golden.py \
  --encoding-dsv32 "$tmp/sglang/srt/entrypoints/openai/encoding_dsv32.py"
if [ -f tests/reference/make_deepseek_v3_golden.py ]; then
  echo "reference: DeepSeek-V3 tiny checkpoints (transformers)"
  $PY tests/reference/make_deepseek_v3_golden.py
fi
echo "reference: DeepSeek-V4.1 DSpark test checkpoints (recipes only)"
$PY tests/reference/make_deepseek_v41_dspark.py
echo "reference: done; review with git diff tests/golden"
