#!/usr/bin/env python3
"""Data-parallel ranks (`serve --data-parallel-size N`) on this machine.

1. Throughput: `deepinfer bench` (random 256-token prompts, 128 output tokens, EOS ignored,
   greedy, streamed) at 16 and 32 streams against a fresh server per setting: 1 rank, and 2 and
   4 ranks with the cores split between the ranks (`--data-parallel-cores split`) or given to one
   rank at a time (`turns`).
2. Prefix affinity: 8 clients, each a conversation of --turns turns (a ~1,000-token system prompt
   of its own, short user turns, greedy replies of 16 tokens), against 2 ranks: without headers
   (the router keeps each conversation on the rank holding its prefix) and, as the control,
   round-robin (X-data-parallel-rank = turn number mod 2). Reported: TTFT p50 of the later turns
   and their mean cached tokens.
3. Telemetry on vs off (one rank): output tokens/s and TPOT p50 at 16 streams with and without
   DEEPINFER_BATCH_TELEMETRY_DIR, and the step time p50 the telemetry itself recorded.
Settings alternate order between repeats; medians; load average recorded.

Usage: python3 bench/data_parallel.py [--deepinfer build/deepinfer] [--parts throughput,affinity,telemetry]
       [--json out.json] > out.md
"""

import argparse
import concurrent.futures
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from runtime_vs_llamacpp import load_average  # noqa: E402
from serve_vs_llamacpp import free_port  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
CACHE = pathlib.Path(os.environ.get("DEEPINFER_CACHE", pathlib.Path.home() / ".cache/deepinfer"))


class Serve:
    """A `deepinfer serve` on a free port with `extra` flags, healthy when constructed (bench
    scripts share it: bench/prefix_checkpoint.py)."""

    def __init__(self, args, extra, env=None):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [args.deepinfer, "serve", "--model", args.model, "--port", str(self.port),
             "--threads", str(args.threads), "--log-stats-interval", "0", "--no-log-requests",
             *extra],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                sys.exit(f"serve exited:\n{self.log.read().decode()[-2000:]}")
            try:
                if httpx.get(self.base + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        sys.exit("serve did not become healthy")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def dp_serve(args, ranks: int, cores: str, env=None) -> Serve:
    return Serve(args, ["--max-model-len", "4096", "--served-model-name", "m",
                        "--data-parallel-size", str(ranks), "--data-parallel-cores", cores], env)


def throughput(args, server: Serve, streams: int, seed: int) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([args.deepinfer, "bench", "--base", server.base, "--input-len", "256",
                        "--output-len", "128", "--concurrency", str(streams), "--num-prompts",
                        str(2 * streams), "--seed", str(seed), "--no-progress", "--json",
                        out.name], check=True, capture_output=True)
        m = json.loads(pathlib.Path(out.name).read_text())["runs"][0]["metrics"]
    return {"tput": m["output_throughput"], "ttft50": m["ttft_ms"]["p50"],
            "tpot50": m["tpot_ms"]["p50"], "failed": m["failed"]}


def conversations(args, server: Serve, round_robin: bool, seed: int) -> dict:
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()

    def one(client: int):
        system = f"Client {client} seed {seed}. " + " ".join(
            words[(client * 7 + i * 3) % len(words)] for i in range(900))
        messages = [{"role": "system", "content": system}]
        ttfts, cached = [], []
        for turn in range(args.turns):
            messages.append({"role": "user", "content": f"Turn {turn}: say something."})
            headers = {"X-data-parallel-rank": str(turn % 2)} if round_robin else {}
            t0 = time.monotonic()
            first, text, usage = None, [], None
            with httpx.stream("POST", server.base + "/v1/chat/completions", headers=headers,
                              timeout=600, json={"messages": messages, "max_tokens": 16,
                                                 "temperature": 0, "stream": True,
                                                 "stream_options": {"include_usage": True}}) as r:
                for line in r.iter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    event = json.loads(line[6:])
                    if event.get("usage"):
                        usage = event["usage"]
                    for c in event.get("choices", []):
                        piece = c.get("delta", {}).get("content")
                        if piece:
                            first = first or time.monotonic()
                            text.append(piece)
            if turn > 0:
                ttfts.append(((first or time.monotonic()) - t0) * 1000)
                cached.append(usage["prompt_tokens_details"]["cached_tokens"])
            messages.append({"role": "assistant", "content": "".join(text)})
        return ttfts, cached

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))
    ttfts = [t for r in results for t in r[0]]
    cached = [c for r in results for c in r[1]]
    return {"ttft50": statistics.median(ttfts), "cached_mean": statistics.mean(cached)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "deepinfer"))
    ap.add_argument("--model", default=str(CACHE / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--parts", default="throughput,affinity,telemetry",
                    help="which of the three parts to run (comma separated)")
    ap.add_argument("--json")
    args = ap.parse_args()
    parts = set(args.parts.split(","))

    settings = [(1, "split"), (2, "split"), (2, "turns"), (4, "split"), (4, "turns")]
    tput = {s: {16: [], 32: []} for s in settings}
    affinity = {"affinity": [], "round-robin": []}
    telemetry = {"off": [], "on": []}
    tdir = tempfile.mkdtemp(prefix="dp-bench-telemetry-")
    loads = [load_average()]
    for rep in range(args.repeats):
        order = settings if rep % 2 == 0 else settings[::-1]
        for ranks, cores in (order if "throughput" in parts else []):
            server = dp_serve(args, ranks, cores)
            try:
                for streams in (16, 32):
                    # A seed per (repeat, streams): the 32-stream run must not find the
                    # 16-stream run's prompts in the prefix cache.
                    tput[(ranks, cores)][streams].append(
                        throughput(args, server, streams, 1000 * rep + streams))
            finally:
                server.stop()
        modes = ["affinity", "round-robin"] if rep % 2 == 0 else ["round-robin", "affinity"]
        for mode in (modes if "affinity" in parts else []):
            server = dp_serve(args, 2, "split")
            try:
                affinity[mode].append(conversations(args, server, mode == "round-robin", rep))
            finally:
                server.stop()
        for on in (([False, True] if rep % 2 == 0 else [True, False])
                   if "telemetry" in parts else []):
            env = dict(os.environ)
            run_id = f"dp-bench-{os.getpid()}-{rep}"
            if on:
                env.update(DEEPINFER_BATCH_TELEMETRY_DIR=tdir,
                           DEEPINFER_BATCH_TELEMETRY_RUN_ID=run_id)
            server = dp_serve(args, 1, "split", env)
            try:
                row = throughput(args, server, 16, 100 + rep)
            finally:
                server.stop()
            if on:
                steps = [json.loads(line) for line in
                         pathlib.Path(tdir, f"{run_id}.rank0.jsonl").read_text().splitlines()]
                row["step_ms_p50"] = statistics.median(
                    r["duration_ms"] for r in steps if r["type"] == "step" and r["decode_seqs"] >= 8)
                row["dropped"] = steps[-1]["dropped"]
            telemetry["on" if on else "off"].append(row)
        loads.append(load_average())
        print(f"[{rep + 1}/{args.repeats}] load {loads[-1]}", file=sys.stderr)

    def med(rows, key):
        return statistics.median(r[key] for r in rows)

    print(f"Model `{pathlib.Path(args.model).name}`, --threads {args.threads}, median of "
          f"{args.repeats} repeats; load average at start and after each repeat: "
          f"{' | '.join(loads)}.\n")
    if "throughput" in parts:
        print("| ranks | cores | streams | out tok/s | TTFT p50 ms | TPOT p50 ms | failed |")
        print("|---:|---|---:|---:|---:|---:|---:|")
        for s in settings:
            for streams in (16, 32):
                rows = tput[s][streams]
                print(f"| {s[0]} | {s[1]} | {streams} | {med(rows, 'tput'):.1f} | "
                      f"{med(rows, 'ttft50'):.0f} | {med(rows, 'tpot50'):.1f} | "
                      f"{sum(r['failed'] for r in rows)} |")
    if "affinity" in parts:
        print(f"\n8 conversations of {args.turns} turns at once, 2 ranks (`split`), turns 2..{args.turns}:\n")
        print("| routing | TTFT p50 ms | mean cached prompt tokens |")
        print("|---|---:|---:|")
        for mode in ("affinity", "round-robin"):
            rows = affinity[mode]
            print(f"| {mode} | {med(rows, 'ttft50'):.0f} | {med(rows, 'cached_mean'):.0f} |")
    if "telemetry" in parts:
        print("\nBatch telemetry, 1 rank, 16 streams:\n")
        print("| telemetry | out tok/s | TPOT p50 ms | step ms p50 (steps of >= 8 decodes) | dropped |")
        print("|---|---:|---:|---:|---:|")
        for mode in ("off", "on"):
            rows = telemetry[mode]
            step = f"{med(rows, 'step_ms_p50'):.2f}" if mode == "on" else "-"
            dropped = sum(r.get("dropped", 0) for r in rows) if mode == "on" else "-"
            print(f"| {mode} | {med(rows, 'tput'):.1f} | {med(rows, 'tpot50'):.1f} | {step} | "
                  f"{dropped} |")
        print(f"\nTPOT on / off: {med(telemetry['on'], 'tpot50') / med(telemetry['off'], 'tpot50'):.3f}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {"loads": loads, "throughput": {f"{k[0]}-{k[1]}": v for k, v in tput.items()},
             "affinity": affinity, "telemetry": telemetry}, indent=1) + "\n")


if __name__ == "__main__":
    main()
