#!/usr/bin/env python3
"""Decode speed after a long context against after a short one, for two deepinfer binaries.

Issue 38's long-context target (V4.1 decode after 65,536 tokens >= 80% of after 512) needs a
decode step at 65,536 tokens of context, and `generate` (bench/deepseek_v41_speed.py) prefills
that context again for every run: about 15 minutes on 2 cores. Here each binary serves the model
with a prefix checkpoint folder of its own (`serve --prefix-checkpoint-dir`), so the long prompt
is prefilled once per binary and cache layout and restored from the folder on later runs (keep
the folders between runs with --checkpoint-dirs). Then, for --rounds rounds, each binary in turn
(alternating which goes first) decodes --gen-tokens greedy tokens after the short prompt and
after the long one (--long + 1 tokens: a prefix-cache hit that computes the one token past the
checkpoint's blocks). Decode
tokens/s = (completion tokens - 1) / (time from the first streamed token to the last); the
table gives the medians, long / short per binary, and B / A, with the load average and the read
bandwidth (bench/membw.cc, 2 threads) before and after.

Prompts are random token ids (seeded, the same for both binaries), sent to /v1/completions.

Usage: .venv/bin/python bench/long_context_ab.py --a OLD/deepinfer --b build/deepinfer
           --model /tmp/ds41-bench/v41 [--long 65536] [--short 512] [--gen-tokens 128]
           [--rounds 3] [--threads 2] [--checkpoint-dirs DIR_A DIR_B] > out.md
"""

import argparse
import json
import pathlib
import random
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from deepseek_speed import measure_bandwidth  # noqa: E402
from runtime_vs_llamacpp import load_average  # noqa: E402
from serve_vs_llamacpp import free_port  # noqa: E402


def start(binary: str, model: str, threads: int, max_len: int, folder: str, log) -> tuple:
    """A server of `binary` on a free port: (process, url, its model id) once healthy."""
    port = free_port()
    proc = subprocess.Popen(
        [binary, "serve", "--model", model, "--threads", str(threads), "--port", str(port),
         "--max-model-len", str(max_len), "--prefix-checkpoint-dir", folder,
         "--checkpoint-min-tokens", "1024", "--max-num-seqs", "4"],
        stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url, httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            sys.exit(f"{binary} serve exited with {proc.returncode}")
        time.sleep(0.5)
    sys.exit(f"{binary} serve did not become healthy")


def complete(server: tuple, prompt: list, gen: int) -> dict:
    """One streamed greedy completion on server (proc, url, model id): time to first token and
    decode tokens/s."""
    _, url, model = server
    body = {"model": model, "prompt": prompt, "max_tokens": gen, "ignore_eos": True,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.monotonic()
    first = last = None
    tokens = 0
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=7200) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            if chunk.get("choices") and chunk["choices"][0].get("text"):
                last = time.monotonic()
                first = first or last
    if first is None or tokens < 2 or last <= first:
        return {"ttft_s": None, "decode": None, "tokens": tokens}
    return {"ttft_s": first - t0, "decode": (tokens - 1) / (last - first), "tokens": tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--long", type=int, default=65536)
    ap.add_argument("--short", type=int, default=512)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--checkpoint-dirs", nargs=2, metavar=("DIR_A", "DIR_B"),
                    help="existing folders for the two binaries' checkpoints (default: temporary)")
    ap.add_argument("--json", help="write raw results here")
    args = ap.parse_args()
    rng = random.Random(7)
    # One token past --long: a checkpoint holds whole blocks, and a resume needs at least one
    # token to compute, so a prompt of exactly the checkpoint's blocks would resume a block early,
    # where the window cache of V4 / V4.1 was not saved (the checkpoint keeps the last window).
    long_prompt = [rng.randrange(1000, 100000) for _ in range(args.long + 1)]
    short_prompt = long_prompt[-args.short:]  # not a prefix of the long one: no cache hit
    tmp = tempfile.TemporaryDirectory()
    dirs = args.checkpoint_dirs or [tmp.name + "/a", tmp.name + "/b"]
    for d in dirs:
        pathlib.Path(d).mkdir(parents=True, exist_ok=True)
    bw_args = argparse.Namespace(deepinfer=args.b, threads=args.threads)
    results = {"load_before": load_average(), "membw_before": measure_bandwidth(bw_args),
               "runs": {"a": [], "b": []}, "prime": {}}
    servers = {}
    logs = {k: open(pathlib.Path(tmp.name) / f"{k}.log", "w") for k in "ab"}
    try:
        for k, binary, d in (("a", args.a, dirs[0]), ("b", args.b, dirs[1])):
            servers[k] = start(binary, args.model, args.threads, args.long + args.gen_tokens + 65,
                               d, logs[k])
            # The long prompt once: prefilled (and checkpointed) or restored from the folder.
            t = time.monotonic()
            complete(servers[k], long_prompt, 2)
            results["prime"][k] = time.monotonic() - t
        for r in range(args.rounds):
            for k in ("ab" if r % 2 == 0 else "ba"):
                run = {"short": complete(servers[k], short_prompt, args.gen_tokens),
                       "long": complete(servers[k], long_prompt, args.gen_tokens)}
                results["runs"][k].append(run)
                print(f"round {r + 1} {k}: short {run['short']['decode']:.2f}, long "
                      f"{run['long']['decode']:.2f} tok/s", file=sys.stderr, flush=True)
    finally:
        for proc, _, _ in servers.values():
            proc.terminate()
            proc.wait()
    results["load_after"] = load_average()
    results["membw_after"] = measure_bandwidth(bw_args)
    med = {k: {w: statistics.median(run[w]["decode"] for run in results["runs"][k])
               for w in ("short", "long")} for k in "ab"}
    results["medians"] = med
    bw = [max(results[f"membw_{w}"]["read_gbps"].values()) for w in ("before", "after")]
    print(f"Decode after {args.long:,} vs {args.short:,} tokens of context, {args.model}, "
          f"{args.threads} threads, {args.gen_tokens} tokens per request, medians of "
          f"{args.rounds} interleaved rounds. Load average before {results['load_before']}, "
          f"after {results['load_after']}. Read bandwidth {bw[0]:.1f} GB/s before, {bw[1]:.1f} "
          f"after. Long prompt primed in {results['prime']['a']:.0f} s (A) and "
          f"{results['prime']['b']:.0f} s (B): prefilled, or restored from a checkpoint.\n")
    print(f"| binary | decode after {args.short:,} tok/s | decode after {args.long:,} tok/s "
          "| long / short |")
    print("|---|---|---|---|")
    for k, name in (("a", args.a), ("b", args.b)):
        print(f"| {k.upper()} `{name}` | {med[k]['short']:.2f} | {med[k]['long']:.2f} | "
              f"{100 * med[k]['long'] / med[k]['short']:.0f}% |")
    print(f"| B / A | {med['b']['short'] / med['a']['short']:.3f}x | "
          f"{med['b']['long'] / med['a']['long']:.3f}x | |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
