#!/usr/bin/env python3
"""Fairness under a long prefill: a short chat's time to first token while one long prompt is
being prefilled, next to the same short chat on an idle server, and the long prompt's own TTFT
with and without the short ones beside it.

For each engine (deepinfer `serve`; with --llama-bin also llama.cpp's `llama-server --parallel N`
on the same GGUF), started fresh and alternating over --repeats:
  idle       --shorts short requests one after another on the idle server: TTFT each (streamed
             /v1/completions, first token event), and the long prompt alone: its TTFT;
  contended  the long prompt (--long-len random words, max_tokens 1) sent, and short requests
             sent --gap, 2 x --gap, ... seconds later while it prefills (--shorts of them, each
             on its own connection): each short's TTFT and the long prompt's TTFT.
Reported: medians of the short TTFTs (idle vs contended, and their ratio; target <= 2), the long
TTFT (alone vs contended, ratio; target <= 1.10), and the load average. Prompts are text (each
engine tokenizes it; the lengths printed are the servers' own prompt token counts).

Usage: python bench/fairness.py [--deepinfer build/deepinfer] [--model GGUF]
           [--llama-bin DIR] [--json bench/results/fairness.json] > bench/results/fairness.md
"""

import argparse
import json
import pathlib
import random
import statistics
import sys
import threading
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from serve_vs_llamacpp import Engine, free_port, load_average  # noqa: E402

WORDS = ("time year people way day man thing woman life child world school state family "
         "student group country problem hand part place case week company system program "
         "question work government number night point home water room mother area money story "
         "fact month lot right study book eye job word business issue side kind head house").split()


def text(words: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words))


def model_id(base: str) -> str:
    with urllib.request.urlopen(base + "/v1/models", timeout=10) as r:
        return json.loads(r.read())["data"][0]["id"]


def ttft(base: str, prompt: str, max_tokens: int = 1) -> tuple:
    """Streams one completion; returns (seconds to the first token event, prompt tokens)."""
    body = json.dumps({"model": model_id(base), "prompt": prompt, "max_tokens": max_tokens, "stream": True,
                       "temperature": 0, "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(base + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    start = time.monotonic()
    first, prompt_tokens = None, None
    with urllib.request.urlopen(req, timeout=900) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            event = json.loads(line[5:])
            if first is None and event.get("choices"):
                first = time.monotonic() - start
            if event.get("usage"):
                prompt_tokens = event["usage"].get("prompt_tokens")
    return first, prompt_tokens


def start(name: str, args, slots: int) -> Engine:
    port = free_port()
    ctx = args.context
    if name == "deepinfer":
        cmd = [args.deepinfer, "serve", "--model", args.model, "--threads", str(args.threads),
               "--host", "127.0.0.1", "--port", str(port), "--max-model-len", str(ctx),
               *args.deepinfer_args.split()]
        return Engine(name, cmd, port, "/health")
    cmd = [str(pathlib.Path(args.llama_bin) / "llama-server"), "-m", args.model, "-t",
           str(args.threads), "--parallel", str(slots), "-c", str(ctx * slots), "--host",
           "127.0.0.1", "--port", str(port),
           # ggml's AMX kernels crash in the warm-up on this host (bench/serve_vs_llamacpp.py
           # probes for it); the AVX-512 path without repacked weights runs.
           "--no-repack"]
    return Engine(name, cmd, port, "/health")


def run_once(name: str, args, seed: int) -> dict:
    engine = start(name, args, slots=args.shorts + 1)
    try:
        base = engine.base
        ttft(base, text(8, seed))  # warm-up
        long_prompt = text(args.long_len, seed + 1)
        shorts = [text(args.short_len, seed + 10 + i) for i in range(args.shorts)]
        idle = [ttft(base, s) for s in shorts]
        long_alone, long_tokens = ttft(base, text(args.long_len, seed + 2))
        result = {}
        contended = [None] * len(shorts)

        def run_long():
            result["long"] = ttft(base, long_prompt)[0]

        def run_short(i):
            time.sleep(args.gap * (i + 1))
            contended[i] = ttft(base, shorts[i])[0]

        threads = [threading.Thread(target=run_long)]
        threads += [threading.Thread(target=run_short, args=(i,)) for i in range(len(shorts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return {"short_idle": [x[0] for x in idle], "short_tokens": idle[0][1],
                "short_contended": contended, "long_alone": long_alone,
                "long_contended": result["long"], "long_tokens": long_tokens}
    finally:
        engine.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "deepinfer"))
    ap.add_argument("--model", default=str(pathlib.Path.home() / ".cache" / "deepinfer" / "models"
                                           / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--llama-bin", help="llama.cpp's build/bin (llama-server)")
    ap.add_argument("--deepinfer-args", default="",
                    help="more `deepinfer serve` flags, e.g. '--long-prefill-token-threshold 0'")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--long-len", type=int, default=8000,
                    help="words in the long prompt (a token each for SmolLM2)")
    ap.add_argument("--context", type=int, default=8192, help="context per slot")
    ap.add_argument("--short-len", type=int, default=30, help="words in a short prompt")
    ap.add_argument("--shorts", type=int, default=3)
    ap.add_argument("--gap", type=float, default=5.0, help="seconds between short requests")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    engines = ["deepinfer"] + (["llama-server"] if args.llama_bin else [])
    runs = {e: [] for e in engines}
    loads = [load_average()]
    for rep in range(args.repeats):
        for e in engines:
            runs[e].append(run_once(e, args, seed=100 * rep))
            loads.append(load_average())
    rows = []
    for e in engines:
        idle = statistics.median(x for r in runs[e] for x in r["short_idle"])
        cont = statistics.median(x for r in runs[e] for x in r["short_contended"])
        worst = max(x for r in runs[e] for x in r["short_contended"])
        alone = statistics.median(r["long_alone"] for r in runs[e])
        with_shorts = statistics.median(r["long_contended"] for r in runs[e])
        rows.append((e, runs[e][0]["long_tokens"], runs[e][0]["short_tokens"], idle, cont, worst,
                     cont / idle, alone, with_shorts, with_shorts / alone))
    print(f"Fairness: {args.shorts} short prompts ({args.short_len} words) sent {args.gap} s "
          f"apart while one long prompt ({args.long_len} words) prefills; {args.threads} "
          f"threads, medians of {args.repeats} runs; load average {loads[0]} -> {loads[-1]}.\n")
    print("| engine | long prompt tokens | short prompt tokens | short TTFT idle (s) | "
          "short TTFT during the long prefill (s) | worst (s) | ratio (target <= 2) | "
          "long TTFT alone (s) | long TTFT with the shorts (s) | ratio (target <= 1.10) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for e, lt, st, idle, cont, worst, r1, alone, ws, r2 in rows:
        print(f"| {e} | {lt} | {st} | {idle:.3f} | {cont:.3f} | {worst:.3f} | {r1:.2f} | "
              f"{alone:.2f} | {ws:.2f} | {r2:.3f} |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"args": vars(args), "runs": runs,
                                                       "loads": loads}, indent=1))


if __name__ == "__main__":
    main()
