#!/usr/bin/env python3
"""A/B of two deepinfer binaries on the same models: prefill and decode tokens/s of `generate`.

For a refactor that must not slow anything down (issue 35: the architectures rebuilt from shared
blocks): each round runs `deepinfer generate --random-prompt-tokens P --max-tokens G
--ignore-eos --json` with binary A then binary B (alternating which goes first) on every model,
and the table gives the medians of --rounds rounds, B / A, and the load average before and after.
With --bandwidth (DeepSeek-V4 / V4.1 checkpoints) each round also measures the read bandwidth
(bench/membw.cc, the higher of 1 and --threads threads) and a second table gives each binary's
active weight bytes per decode token (deepseek_speed.active_bytes, from the safetensors headers)
times its decode tokens/s, over the median of those bandwidths.
With --serving C (e.g. 8,16) each binary also serves the first model (`deepinfer serve` driven by
`deepinfer bench`: 256-token random prompts, 64 output tokens, 32 requests per level) in the
order A, B, B, A; with --llama-bin and --llama-gguf, llama.cpp's `llama-server --parallel 16`
serves the GGUF between the two halves (deepseek_v4_speed.llama_serve_and_bench). The table gives
output tokens/s (median of the binary's two runs) and TTFT / TPOT p50.

Usage: .venv/bin/python bench/binary_ab.py --a OLD/deepinfer --b build/deepinfer
           --model /tmp/ds41-bench/v41 [--model ...] [--rounds 5] [--prompt-tokens 512]
           [--gen-tokens 32] [--threads 2] [--bandwidth] [--serving 8,16 [--llama-bin DIR
           --llama-gguf FILE]] [--json FILE] > bench/results/arch_blocks_ab.md
"""

import argparse
import json
import os
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from deepseek_speed import active_bytes, generate, measure_bandwidth, serve_and_bench  # noqa: E402
from deepseek_v4_speed import llama_serve_and_bench  # noqa: E402


def decode_bytes(model: pathlib.Path) -> float:
    """Active weight bytes per decode token of a DeepSeek-V4 / V4.1 checkpoint."""
    config = json.loads((model / "config.json").read_text())
    tc = config.get("text_config", config)
    engram = ((tc["engram_max_ngram_size"] - 1) * tc["engram_n_heads"]
              if tc.get("engram_layer_ids") else 0)
    return active_bytes(model, tc["num_experts_per_tok"], tc["n_routed_experts"],
                        engram)["per_token"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, help="the binary before the change")
    ap.add_argument("--b", required=True, help="the binary after the change")
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--gen-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bandwidth", action="store_true",
                    help="measure the read bandwidth every round; decode GB/s and its fraction")
    ap.add_argument("--serving", help="stream counts at which both binaries also serve, e.g. 8,16")
    ap.add_argument("--llama-bin", help="llama.cpp's build/bin: llama-server serves too")
    ap.add_argument("--llama-gguf", help="the first model converted by llama.cpp")
    ap.add_argument("--json", help="raw results")
    args = ap.parse_args()
    bandwidths = []
    load_before = os.getloadavg()
    runs = {(m, k): [] for m in args.model for k in "ab"}
    for r in range(args.rounds):
        for m in args.model:
            for k in ("ab" if r % 2 == 0 else "ba"):
                a = argparse.Namespace(deepinfer=getattr(args, k), prompt_tokens=args.prompt_tokens,
                                       gen_tokens=args.gen_tokens, threads=args.threads)
                runs[(m, k)].append(generate(a, pathlib.Path(m)))
        if args.bandwidth:
            bw = measure_bandwidth(argparse.Namespace(deepinfer=args.b, threads=args.threads))
            bandwidths.append(max(bw["read_gbps"].values()))
    serving = serve_all(args) if args.serving else None
    load_after = os.getloadavg()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {"generate": {f"{m} {k}": v for (m, k), v in runs.items()}, "bandwidths": bandwidths,
             "serving": serving, "load_before": load_before, "load_after": load_after},
            indent=1, default=str) + "\n")
    print(f"# A/B: {args.a} (A) vs {args.b} (B)\n")
    print(f"`generate`, {args.prompt_tokens}-token random prompt, {args.gen_tokens} new tokens, "
          f"{args.threads} threads, median of {args.rounds} interleaved rounds. Load average "
          f"before {load_before[0]:.2f}, after {load_after[0]:.2f}.\n")
    print("| model | prefill A | prefill B | B/A | decode A | decode B | B/A |")
    print("|---|---|---|---|---|---|---|")
    for m in args.model:
        med = {k: {q: statistics.median(x[f"{q}_tokens_per_s"] for x in runs[(m, k)])
                   for q in ("prefill", "decode")} for k in "ab"}
        print(f"| {pathlib.Path(m).name} | {med['a']['prefill']:.1f} | {med['b']['prefill']:.1f} | "
              f"{med['b']['prefill'] / med['a']['prefill']:.3f} | {med['a']['decode']:.2f} | "
              f"{med['b']['decode']:.2f} | {med['b']['decode'] / med['a']['decode']:.3f} |")
        lo_hi = {(k, q): (min(x[f"{q}_tokens_per_s"] for x in runs[(m, k)]),
                          max(x[f"{q}_tokens_per_s"] for x in runs[(m, k)]))
                 for k in "ab" for q in ("prefill", "decode")}
        cells = [f"{lo_hi[(k, q)][0]:.1f}-{lo_hi[(k, q)][1]:.1f}" for q in ("prefill", "decode")
                 for k in "ab"]
        print(f"|   range | {cells[0]} | {cells[1]} | | {cells[2]} | {cells[3]} | |")
    if args.bandwidth:
        bw = statistics.median(bandwidths)
        print(f"\nRead bandwidth by round (GB/s): {', '.join(f'{b:.1f}' for b in bandwidths)}; "
              f"median {bw:.1f}.\n")
        print("| model | active MB per token | decode GB/s A | of bandwidth | decode GB/s B | "
              "of bandwidth |")
        print("|---|---|---|---|---|---|")
        for m in args.model:
            per_token = decode_bytes(pathlib.Path(m))
            gbps = {k: statistics.median(x["decode_tokens_per_s"] for x in runs[(m, k)]) *
                    per_token / 1e9 for k in "ab"}
            print(f"| {pathlib.Path(m).name} | {per_token / 1e6:.0f} | {gbps['a']:.1f} | "
                  f"{100 * gbps['a'] / bw:.0f}% | {gbps['b']:.1f} | {100 * gbps['b'] / bw:.0f}% |")
    if serving:
        print_serving(args, serving)


def serve_all(args) -> dict:
    """Serving runs in the order A, B, (llama-server), B, A; each with the load after it."""
    model = pathlib.Path(args.model[0])
    runs = {"a": [], "b": [], "llama-server": []}

    def one(key):
        if key == "llama-server":
            res = llama_serve_and_bench(args, 256, 64, 32, parallel=16, concurrency=args.serving)
        else:
            res = serve_and_bench(argparse.Namespace(deepinfer=getattr(args, key),
                                                     threads=args.threads),
                                  model, args.serving, [], 256, 64, 32)
        res["load_after"] = os.getloadavg()[0]
        runs[key].append(res)

    for key in ("a", "b"):
        one(key)
    if args.llama_bin and args.llama_gguf:
        args.deepinfer = args.b  # the bench client
        one("llama-server")
    for key in ("b", "a"):
        one(key)
    return runs


def print_serving(args, serving: dict) -> None:
    print(f"\nServing {pathlib.Path(args.model[0]).name}: 256-token prompts, 64 output tokens, "
          "32 requests per level; out tok/s is the median of each binary's runs (A, B, B, A).\n")
    print("| streams | engine | out tok/s | runs | TTFT p50 ms | TPOT p50 ms | load after |")
    print("|---|---|---|---|---|---|---|")
    for c in (int(x) for x in args.serving.split(",")):
        for key, res in serving.items():
            if not res:
                continue
            ms = [next(x["metrics"] for x in r["runs"] if x["concurrency"] == c) for r in res]
            name = {"a": "A", "b": "B"}.get(key, key)
            tps = [m["output_throughput"] for m in ms]
            each = ", ".join(f"{t:.1f}" for t in tps)
            loads = ", ".join(f"{r['load_after']:.1f}" for r in res)
            print(f"| {c} | {name} | {statistics.median(tps):.1f} | {each} | "
                  f"{statistics.median(m['ttft_ms']['p50'] for m in ms):.0f} | "
                  f"{statistics.median(m['tpot_ms']['p50'] for m in ms):.0f} | {loads} |")

if __name__ == "__main__":
    main()
