#!/usr/bin/env python3
"""bf16 activations on and off (DEEPINFER_BF16_ACTIVATIONS: AMX tiles on a Xeon with AMX,
AVX512-BF16 dot products on AMD Zen 4 and later) on a DeepSeek-V4-shaped checkpoint in the released
formats, next to llama.cpp's llama-server in the same run. (It was bench/bf16_activations_ab.py before the
AVX512-BF16 kernels.)

Two parts, both with the same `deepinfer` binary, the environment variable the only difference:
  generate  `deepinfer generate --random-prompt-tokens P --max-tokens G --ignore-eos --json`,
            --rounds rounds alternating which setting goes first: prefill and decode tokens/s,
            medians; after them llama.cpp's `llama-bench` on the GGUF (prefill P, decode G after
            P, --rounds repetitions, --repack 0).
  serving   `deepinfer serve` (bf16 on, bf16 off) and `llama-server --parallel 16 -c 8192
            --no-repack` (deepseek_v4_speed.llama_serve_and_bench) on the same checkpoint converted by llama.cpp (FP8 -> Q8_0, FP4 ->
            MXFP4; bench/deepseek_v4_speed.py says why --no-repack), each driven by
            `deepinfer bench`: random prompts of 256 tokens, 64 output tokens, 32 requests at
            8 and 16 streams; output tokens/s, TTFT p50 and TPOT p50, the load average after
            each engine.
Markdown on stdout; raw results to --json.

Usage: .venv/bin/python bench/bf16_activations_ab.py [--deepinfer build/deepinfer] [--model /tmp/ds4-bench/v4]
           --llama-bin LLAMA_CPP/build/bin --llama-gguf /tmp/ds4-bench/v4.gguf
           [--rounds 3] [--json bench/results/bf16_activations_ab.json] > bench/results/bf16_activations_ab.md
"""

import argparse
import json
import os
import pathlib
import statistics
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from deepseek_speed import generate, serve_and_bench  # noqa: E402
from deepseek_v4_speed import llama_bench, llama_serve_and_bench  # noqa: E402
from runtime_vs_llamacpp import load_average  # noqa: E402

SETTINGS = {"bf16 on": "1", "bf16 off": "0"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "deepinfer"))
    ap.add_argument("--model", default="/tmp/ds4-bench/v4")
    ap.add_argument("--llama-bin", required=True, help="llama.cpp's build/bin")
    ap.add_argument("--llama-gguf", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--gen-tokens", type=int, default=32)
    ap.add_argument("--json")
    args = ap.parse_args()
    model = pathlib.Path(args.model)
    results = {"load_before": load_average(), "generate": {k: [] for k in SETTINGS},
               "serving": {}}
    for r in range(args.rounds):
        for name in (list(SETTINGS) if r % 2 == 0 else list(SETTINGS)[::-1]):
            os.environ["DEEPINFER_BF16_ACTIVATIONS"] = SETTINGS[name]
            results["generate"][name].append(generate(args, model))
    results["llama_bench"] = llama_bench(args, args.prompt_tokens, args.gen_tokens, args.rounds)
    for name in SETTINGS:
        os.environ["DEEPINFER_BF16_ACTIVATIONS"] = SETTINGS[name]
        results["serving"][name] = serve_and_bench(args, model, "8,16", [], 256, 64, 32)
        results["serving"][name]["load_after"] = load_average()
    results["serving"]["llama-server"] = llama_serve_and_bench(args, 256, 64, 32, parallel=16,
                                                                concurrency="8,16")
    results["serving"]["llama-server"]["load_after"] = load_average()
    results["load_after"] = load_average()

    print(f"Load average before: {results['load_before']}; after: {results['load_after']}.\n")
    print(f"`deepinfer generate`, {args.prompt_tokens}-token prompt, {args.gen_tokens} tokens, "
          f"{args.threads} threads, medians of {args.rounds}:\n")
    print("| setting | prefill tok/s | decode tok/s |\n|---|---|---|")
    for name, runs in results["generate"].items():
        print(f"| {name} | {statistics.median(r['prefill_tokens_per_s'] for r in runs):.1f} | "
              f"{statistics.median(r['decode_tokens_per_s'] for r in runs):.2f} |")
    lb = results["llama_bench"]
    print(f"| llama.cpp (llama-bench) | {lb['prefill']:.1f} | {lb['decode']:.2f} |")
    print("\nServing, 256-token prompts, 64 output tokens, 32 requests:\n")
    print("| streams | engine | out tok/s | TTFT p50 ms | TPOT p50 ms | load after |")
    print("|---|---|---|---|---|---|")
    for c in (8, 16):
        for name, res in results["serving"].items():
            m = next(x["metrics"] for x in res["runs"] if x["concurrency"] == c)
            print(f"| {c} | {name} | {m['output_throughput']:.1f} | {m['ttft_ms']['p50']:.0f} | "
                  f"{m['tpot_ms']['p50']:.0f} | {res['load_after'].split()[0]} |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
