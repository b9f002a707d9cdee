#!/usr/bin/env python3
"""Expert parallelism's communication on the DeepSeek-V4.1-shaped checkpoint (bench/dspark.py's
`random` one: 12 layers, hidden 768, 32 routed experts top-4 + 1 shared, release formats; made
on first use under --models): `mpirun -np R deepinfer serve --expert-parallel` with R = 1, 2, 4
ranks on this machine (shared memory between them), driven by `deepinfer bench` (random
16-token prompts, 128 output tokens, greedy: decode steps are 8 of every 9 tokens computed, so
the per-step numbers are close to a decode step's) at 1, 8 and 16 streams. Per level, from rank 0's
deepinfer_ep_* counters: forward calls (steps), the MoE collectives' bytes and seconds per step,
the experts' seconds per step, and the forward-call broadcasts' bytes per step; next to them
output tokens/s and TPOT p50.

Then what two hosts would give at 25 / 100 / 400 Gbit/s, from the measured numbers: a decode
step on two hosts computes what one rank computes minus half of its experts (the expert seconds
per step of the 1-rank run), and moves the 2-rank run's bytes per step over the link, plus a
latency per collective (two per MoE layer per step and the call's broadcast; --latency-us,
default 10 µs). Decode tok/s
= streams / step time. The model assumes each host has this machine's cores and memory
bandwidth for its ranks, and ignores overlap (there is none: the collectives block).

Usage: .venv/bin/python bench/ep_comm.py [--deepinfer build/deepinfer] [--models /tmp/dspark-bench]
           [--ranks 1,2,4] [--streams 1,8,16] [--json bench/results/ep_comm.json]
           > bench/results/ep_comm.md
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from deepseek_speed import metric_sum  # noqa: E402
from dspark import ensure_checkpoint  # noqa: E402
from runtime_vs_llamacpp import load_average  # noqa: E402
from serve_vs_llamacpp import Engine, free_port  # noqa: E402

MPI_ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
COUNTERS = ["deepinfer_ep_forward_calls_total", "deepinfer_ep_exchange_bytes_total",
            "deepinfer_ep_exchange_seconds_total", "deepinfer_ep_expert_seconds_total",
            "deepinfer_ep_broadcast_bytes_total", "deepinfer_ep_broadcast_seconds_total"]
MOE_LAYERS = 12  # the checkpoint's main layers; DSpark is off here (--speculative-method none)


def counters(base: str) -> dict:
    return {c: metric_sum(base, c) for c in COUNTERS}


def bench_level(args, engine: Engine, streams: int) -> dict:
    before = counters(engine.base)
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "bench.json"
        p = subprocess.run([args.deepinfer, "bench", "--base", engine.base, "--model", "ds",
                            "--input-len", "16", "--output-len", "128", "--concurrency",
                            str(streams), "--num-prompts", str(max(4, 2 * streams)),
                            "--no-progress", "--json", str(out)], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"deepinfer bench failed: {p.stderr[-2000:]}")
        metrics = json.loads(out.read_text())["runs"][0]["metrics"]
    after = counters(engine.base)
    delta = {c: after[c] - before[c] for c in COUNTERS}
    calls = max(1.0, delta["deepinfer_ep_forward_calls_total"])
    return {
        "streams": streams,
        "output_tok_s": metrics["output_throughput"],
        "tpot_p50_ms": metrics["tpot_ms"]["p50"],
        "forward_calls": calls,
        "exchange_kib_per_call": delta["deepinfer_ep_exchange_bytes_total"] / calls / 1024,
        "exchange_ms_per_call": 1000 * delta["deepinfer_ep_exchange_seconds_total"] / calls,
        "expert_ms_per_call": 1000 * delta["deepinfer_ep_expert_seconds_total"] / calls,
        "broadcast_bytes_per_call": delta["deepinfer_ep_broadcast_bytes_total"] / calls,
        "broadcast_ms_per_call": 1000 * delta["deepinfer_ep_broadcast_seconds_total"] / calls,
    }


def run_ranks(args, model: pathlib.Path, ranks: int) -> list:
    port = free_port()
    threads = max(1, args.cores // ranks)
    cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none", args.deepinfer,
           "serve", "--expert-parallel", "--model", str(model), "--threads", str(threads),
           "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "ds",
           "--max-model-len", "4096", "--speculative-method", "none", "--max-num-seqs", "16"]
    engine = Engine(f"ep{ranks}", cmd, port, "/health", env=MPI_ENV)
    try:
        return [bench_level(args, engine, s) for s in args.streams]
    finally:
        engine.stop()


def project(results: dict, streams: int, gbit: float, latency_us: float) -> float:
    """Decode tok/s of two hosts at `streams` (module docstring)."""
    one = next(r for r in results["1"] if r["streams"] == streams)
    two = next(r for r in results["2"] if r["streams"] == streams)
    compute_ms = one["tpot_p50_ms"] - one["expert_ms_per_call"] / 2
    wire_ms = two["exchange_kib_per_call"] * 1024 * 8 / (gbit * 1e9) * 1000
    wire_ms += (2 * MOE_LAYERS + 2) * latency_us / 1000
    return streams / ((compute_ms + wire_ms) / 1000)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "deepinfer"))
    ap.add_argument("--models", default="/tmp/dspark-bench")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--streams", default="1,8,16")
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--latency-us", type=float, default=10.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    args.streams = [int(s) for s in args.streams.split(",")]
    tool = pathlib.Path(args.deepinfer).parent / "synthetic_checkpoint"
    model = ensure_checkpoint(pathlib.Path(args.models), tool, "random")
    results = {"load_before": load_average(), "cores": args.cores}
    for r in [int(x) for x in args.ranks.split(",")]:
        results[str(r)] = run_ranks(args, model, r)
    results["load_after"] = load_average()

    print(f"Expert parallelism on the V4.1-shaped checkpoint, {args.cores} cores shared by the "
          f"ranks (threads per rank = cores / ranks), load {results['load_before']} before, "
          f"{results['load_after']} after.\n")
    print("| ranks | streams | out tok/s | TPOT p50 ms | exchange KiB/step | exchange ms/step | "
          "experts ms/step | broadcast B/step |")
    print("|---|---|---|---|---|---|---|---|")
    for r in [k for k in results if k.isdigit()]:
        for x in results[r]:
            print(f"| {r} | {x['streams']} | {x['output_tok_s']:.1f} | {x['tpot_p50_ms']:.1f} | "
                  f"{x['exchange_kib_per_call']:.1f} | {x['exchange_ms_per_call']:.2f} | "
                  f"{x['expert_ms_per_call']:.2f} | {x['broadcast_bytes_per_call']:.0f} |")
    if "1" in results and "2" in results:
        print(f"\nTwo hosts (one rank each, this machine's cores each), projected decode tok/s; "
              f"{args.latency_us:.0f} µs per collective, {2 * MOE_LAYERS + 2} collectives per step:\n")
        print("| streams | one host | 25 Gbit/s | 100 Gbit/s | 400 Gbit/s |")
        print("|---|---|---|---|---|")
        for s in args.streams:
            one = next(x for x in results["1"] if x["streams"] == s)
            cells = [f"{project(results, s, g, args.latency_us):.1f}" for g in (25, 100, 400)]
            print(f"| {s} | {s / (one['tpot_p50_ms'] / 1000):.1f} | " + " | ".join(cells) + " |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
