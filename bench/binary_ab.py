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

Usage: .venv/bin/python bench/binary_ab.py --a OLD/deepinfer --b build/deepinfer
           --model /tmp/ds41-bench/v41 [--model ...] [--rounds 5] [--prompt-tokens 512]
           [--gen-tokens 32] [--threads 2] [--bandwidth] > bench/results/arch_blocks_ab.md
"""

import argparse
import json
import os
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from deepseek_speed import active_bytes, generate, measure_bandwidth  # noqa: E402


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
    load_after = os.getloadavg()
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


if __name__ == "__main__":
    main()
