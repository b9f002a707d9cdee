#!/usr/bin/env python3
"""Greedy continuations and per-position top logits from llama.cpp (llama-cpp-python) on the
default SmolLM2 GGUF: the reference for deepinfer's forward pass on quantized weights.

llama.cpp runs with an f32 KV cache (type_k = type_v = GGML_TYPE_F32) so that both engines store
K and V at full precision; the comparison then measures the matmul and attention math alone.
deepinfer's Numerics::kGgml mode reproduces this exact configuration bit for bit (llama-cpp-python
0.3.36 built on an AVX-512 machine, flash attention off as llama-cpp-python defaults); a different
version or setting needs a new golden and a check with dump_llama_cpp_tensors.py (docs/parity.md).

Usage: make_llama_cpp_golden.py MODEL.gguf OUT.json
"""
import json
import sys

import llama_cpp
import numpy as np

PLAIN = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):\n    ",
    "The three primary colors are",
    "1, 2, 3, 4, 5,",
    "Water boils at a temperature of",
    "Le président de la République française",
]
CHAT = [
    [{"role": "user", "content": "What is the capital of Japan?"}],
    [{"role": "system", "content": "You are a terse assistant."},
     {"role": "user", "content": "Name three fruits."}],
    [{"role": "user", "content": "Write a haiku about the sea."}],
    [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Explain what a CPU does in one sentence."}],
]
STEPS = 64
TOP = 16


def chat_text(messages):
    # The GGUF's ChatML template, rendered by hand here; the chat-template golden checks the
    # C++ renderer against jinja2 separately.
    out = ""
    if messages[0]["role"] != "system":
        out += "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    for m in messages:
        out += "<|im_start|>" + m["role"] + "\n" + m["content"] + "<|im_end|>\n"
    return out + "<|im_start|>assistant\n"


def main():
    model_path, out_path = sys.argv[1], sys.argv[2]
    llm = llama_cpp.Llama(model_path, n_ctx=512, n_threads=2, n_batch=512, logits_all=True,
                          type_k=0, type_v=0, verbose=False)
    cases = []
    prompts = [(p, False) for p in PLAIN] + [(chat_text(c), True) for c in CHAT]
    for text, special in prompts:
        ids = llm.tokenize(text.encode(), add_bos=False, special=special)
        llm.reset()
        llm.eval(ids)
        generated, tops = [], []
        for _ in range(STEPS):
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            order = np.argsort(-logits, kind="stable")[:TOP]
            tops.append([[int(i), float(logits[i])] for i in order])
            nxt = int(order[0])
            generated.append(nxt)
            llm.eval([nxt])
        cases.append({"text": text, "special": special, "prompt_ids": ids,
                      "greedy_ids": generated, "top_logits": tops})
    # llama.cpp's own sensitivity: the same greedy sequences, teacher-forced, with its default
    # f16 KV cache. The spread between its two settings is the yardstick for our differences.
    llm16 = llama_cpp.Llama(model_path, n_ctx=512, n_threads=2, n_batch=512, logits_all=True,
                            verbose=False)
    for case in cases:
        llm16.reset()
        llm16.eval(case["prompt_ids"] + case["greedy_ids"][:-1])
        n0 = len(case["prompt_ids"]) - 1
        spread, flips = 0.0, 0
        for i, top in enumerate(case["top_logits"]):
            row = np.array(llm16.scores[n0 + i], dtype=np.float32)
            spread = max(spread, max(abs(float(row[t]) - v) for t, v in top))
            flips += int(np.argmax(row)) != case["greedy_ids"][i]
        case["f16_kv_max_abs_diff"] = spread
        case["f16_kv_top1_flips"] = flips
    with open(out_path, "w") as f:
        json.dump({"reference": f"llama-cpp-python {llama_cpp.__version__}, f32 KV cache, greedy",
                   "model_sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                   "steps": STEPS, "cases": cases}, f)


if __name__ == "__main__":
    main()
