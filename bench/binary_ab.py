#!/usr/bin/env python3
"""A/B of two deepinfer binaries on the same models: prefill and decode tokens/s of `generate`.

For a refactor that must not slow anything down (issue 35: the architectures rebuilt from shared
blocks): each round runs `deepinfer generate --random-prompt-tokens P --max-tokens G
--ignore-eos --json` with binary A then binary B (alternating which goes first) on every model,
and the table gives the medians of --rounds rounds, B / A, and the load average before and after.

Usage: .venv/bin/python bench/binary_ab.py --a OLD/deepinfer --b build/deepinfer
           --model /tmp/ds41-bench/v41 [--model ...] [--rounds 5] [--prompt-tokens 512]
           [--gen-tokens 32] [--threads 2] > bench/results/arch_blocks_ab.md
"""

import argparse
import os
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from deepseek_speed import generate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, help="the binary before the change")
    ap.add_argument("--b", required=True, help="the binary after the change")
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--gen-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    load_before = os.getloadavg()
    runs = {(m, k): [] for m in args.model for k in "ab"}
    for r in range(args.rounds):
        for m in args.model:
            for k in ("ab" if r % 2 == 0 else "ba"):
                a = argparse.Namespace(deepinfer=getattr(args, k), prompt_tokens=args.prompt_tokens,
                                       gen_tokens=args.gen_tokens, threads=args.threads)
                runs[(m, k)].append(generate(a, pathlib.Path(m)))
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


if __name__ == "__main__":
    main()
