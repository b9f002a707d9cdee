#!/usr/bin/env python3
"""Prefill/decode disaggregation (`serve --pd-role`): TTFT, TPOT and output throughput of a P/D
pair (a prefill and a decode process sharing a checkpoint folder, clients on the decode side)
against one combined server, at 1 and 8 streams, on this machine.

Each run is `deepinfer bench` (random token prompts of --input-len, --output-len tokens out,
ignore_eos) against a fresh server or pair; the combined server and the pair alternate within a
repeat, and their order flips between repeats. One machine hosts both sides of the pair, so they
share its cores (--threads for the combined server, --pd-threads for prefill and decode): this
measures what the split costs or saves here, not two machines. Medians of --repeats, load
average recorded.

Usage: python3 bench/pd.py [--deepinfer build/deepinfer] [--model M] [--json out.json] > out.md
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import data_parallel  # noqa: E402
from runtime_vs_llamacpp import load_average  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
CACHE = pathlib.Path(os.environ.get("DEEPINFER_CACHE", pathlib.Path.home() / ".cache/deepinfer"))
KEY = "bench-pd-key"


def serve(args, threads: int, extra) -> data_parallel.Serve:
    env = dict(os.environ, DEEPINFER_PD_API_KEY=KEY)
    a = argparse.Namespace(**vars(args))
    a.threads = threads
    return data_parallel.Serve(a, ["--max-model-len", str(args.max_model_len), "--kv-cache-memory",
                                   "1GiB", "--served-model-name", "m", *extra], env)


def bench(args, base: str, streams: int, seed: int) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([args.deepinfer, "bench", "--base", base, "--input-len",
                        str(args.input_len), "--output-len", str(args.output_len),
                        "--concurrency", str(streams), "--num-prompts",
                        str(max(2, 2 * streams)), "--seed", str(seed), "--no-progress", "--json",
                        out.name], check=True, capture_output=True)
        m = json.loads(pathlib.Path(out.name).read_text())["runs"][0]["metrics"]
    return {"tput": m["output_throughput"], "ttft50": m["ttft_ms"]["p50"],
            "tpot50": m["tpot_ms"]["p50"], "failed": m["failed"]}


def run_combined(args, streams: int, seed: int) -> dict:
    s = serve(args, args.threads, [])
    try:
        return bench(args, s.base, streams, seed)
    finally:
        s.stop()


def run_pd(args, streams: int, seed: int) -> dict:
    prefill_threads, decode_threads = (int(x) for x in args.pd_threads.split(","))
    with tempfile.TemporaryDirectory(prefix="pd-bench-") as folder:
        common = ["--pd-checkpoint-dir", folder, "--model-revision", "bench"]
        p = serve(args, prefill_threads, ["--pd-role", "prefill", *common])
        try:
            d = serve(args, decode_threads, ["--pd-role", "decode", "--pd-prefill-url", p.base,
                                             *common])
            try:
                return bench(args, d.base, streams, seed)
            finally:
                d.stop()
        finally:
            p.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "deepinfer"))
    ap.add_argument("--model", default=str(CACHE / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2, help="the combined server's")
    ap.add_argument("--pd-threads", default="1,1", help="prefill,decode threads of the pair")
    ap.add_argument("--input-len", type=int, default=512)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--streams", default="1,8")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    levels = [int(x) for x in args.streams.split(",")]
    rows = {(mode, c): [] for mode in ("combined", "pd") for c in levels}
    loads = [load_average()]
    for rep in range(args.repeats):
        modes = ["combined", "pd"] if rep % 2 == 0 else ["pd", "combined"]
        for c in levels:
            for mode in modes:
                run = run_combined if mode == "combined" else run_pd
                rows[(mode, c)].append(run(args, c, 1000 * rep + c))
        loads.append(load_average())
        print(f"[{rep + 1}/{args.repeats}] load {loads[-1]}", file=sys.stderr)

    def med(rs, key):
        return statistics.median(r[key] for r in rs)

    print(f"Model `{pathlib.Path(args.model).name}`, prompts of {args.input_len} random tokens, "
          f"{args.output_len} out; combined --threads {args.threads}, P/D pair --threads "
          f"{args.pd_threads} (prefill, decode) on the same host; median of {args.repeats}; "
          f"load average at start and after each repeat: {' | '.join(loads)}.\n")
    print("| streams | setup | out tok/s | TTFT p50 ms | TPOT p50 ms | failed |")
    print("|---:|---|---:|---:|---:|---:|")
    for c in levels:
        for mode in ("combined", "pd"):
            rs = rows[(mode, c)]
            print(f"| {c} | {'P/D pair' if mode == 'pd' else 'combined'} | {med(rs, 'tput'):.1f} | "
                  f"{med(rs, 'ttft50'):.0f} | {med(rs, 'tpot50'):.1f} | "
                  f"{sum(r['failed'] for r in rs)} |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {"loads": loads, "rows": {f"{m}-{c}": v for (m, c), v in rows.items()}},
            indent=1) + "\n")


if __name__ == "__main__":
    main()
