#!/usr/bin/env python3
"""One-stream prefill at every prompt length and decode against context length: deepinfer vs
llama.cpp's own `llama-bench`, same GGUF, same run.

The peer is llama-bench from the llama.cpp tree that bench/build_llama_server.sh builds (the
llama-cpp-python 0.3.36 sdist), at its defaults (flash attention auto, f16 KV cache, n_batch
2048 / n_ubatch 512), `-t THREADS`, with `--repack 0` where its repacked (AMX) weights crash on
this machine (probed once; the output says which ran). It reports the mean of `-r` runs after a
warm-up run of its own.
  prefill: `llama-bench -p N -n 0`: one forward pass over N tokens;
  decode:  `llama-bench -p 0 -n G -d D`: G single-token steps after a context of D tokens.
deepinfer runs `deepinfer generate` per measurement, in a fresh process (its engine runs one
warm-up step before the request):
  prefill: `--random-prompt-tokens N --max-tokens 1`: the request's prefill time;
  decode:  `--random-prompt-tokens D --max-tokens G --ignore-eos`: its G - 1 decode steps;
once per --kv-dtypes value (`--kv-cache-dtype`: f32 is the default, f16 the type llama.cpp
stores).
Every repeat runs all measurements of both engines, the engines' order alternating; medians
over --repeats are reported, with the load average before and after, and bench/membw.cc's read
bandwidth once at the start.

Usage (from the repo root; bench/run_all.sh does this):
  python3 bench/runtime_vs_llama_bench.py --deepinfer build/deepinfer \
      --llama-bin "$(bench/build_llama_server.sh)" --json bench/results/runtime_llama_bench.json \
      --plot docs/images/decode_vs_context.png > bench/results/runtime_llama_bench.md
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from deepseek_speed import measure_bandwidth  # noqa: E402
from runtime_vs_llamacpp import load_average  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
CACHE = pathlib.Path(os.environ.get("DEEPINFER_CACHE", pathlib.Path.home() / ".cache/deepinfer"))


def llama_bench(args, extra: list) -> list:
    cmd = [str(pathlib.Path(args.llama_bin) / "llama-bench"), "-m", args.model, "-t",
           str(args.threads), "-r", "1", "-o", "json", *extra]
    if args.no_repack:
        cmd += ["--repack", "0"]
    env = dict(os.environ, LD_LIBRARY_PATH=args.llama_bin)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"llama-bench failed ({p.returncode}): {' '.join(cmd)}\n"
                           f"{p.stderr[-1500:]}")
    return json.loads(p.stdout)


def probe_repack(args) -> str:
    """llama-bench with its default repacked weights, once on a tiny test; '' when it runs,
    else why it did not (and args.no_repack is set)."""
    args.no_repack = False
    try:
        llama_bench(args, ["-p", "8", "-n", "0"])
        return ""
    except RuntimeError as e:
        args.no_repack = True
        return str(e).splitlines()[0]


def deepinfer(args, prompt: int, gen: int, dtype: str) -> dict:
    cmd = [args.deepinfer, "generate", "--model", args.model, "--random-prompt-tokens",
           str(prompt), "--max-tokens", str(gen), "--ignore-eos", "--json", "--threads",
           str(args.threads), "--kv-cache-dtype", dtype]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"deepinfer failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-1500:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "deepinfer"))
    ap.add_argument("--llama-bin", default=os.environ.get("LLAMA_BIN",
                                                          str(CACHE / "llama.cpp/build/bin")))
    ap.add_argument("--model", default=str(CACHE / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", default="1,4,16,64,256,512,2048",
                    help="prefill prompt lengths")
    ap.add_argument("--depths", default="16,512,2048,4096",
                    help="context lengths before the decode steps")
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--kv-dtypes", default="f32,f16", help="deepinfer --kv-cache-dtype values")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="write raw results here")
    ap.add_argument("--plot", help="write a PNG of both curves here (bench/plots.py)")
    args = ap.parse_args()
    prompts = [int(x) for x in args.prompts.split(",")]
    depths = [int(x) for x in args.depths.split(",")]
    dtypes = [d.strip() for d in args.kv_dtypes.split(",") if d.strip()]
    if not (pathlib.Path(args.llama_bin) / "llama-bench").exists():
        sys.exit(f"no llama-bench in {args.llama_bin}: run bench/build_llama_server.sh")

    load_before = load_average()
    membw = ", ".join(f"{k} thread(s) {v:.1f} GB/s"
                      for k, v in measure_bandwidth(args)["read_gbps"].items())
    repack_failure = probe_repack(args)
    peer = "llama.cpp (llama-bench)"
    ours = [f"deepinfer kv {d}" for d in dtypes]
    prefill = {e: {n: [] for n in prompts} for e in [*ours, peer]}
    decode = {e: {d: [] for d in depths} for e in [*ours, peer]}
    loads = []
    for rep in range(args.repeats):
        before = load_average()

        def run_peer():
            for row in llama_bench(args, ["-p", ",".join(map(str, prompts)), "-n", "0"]):
                prefill[peer][row["n_prompt"]].append(row["avg_ts"])
            for row in llama_bench(args, ["-p", "0", "-n", str(args.gen_tokens), "-d",
                                          ",".join(map(str, depths))]):
                decode[peer][row["n_depth"]].append(row["avg_ts"])

        def run_ours():
            for n in prompts:
                # Prefill is the same arithmetic whatever the cache type beyond the stores;
                # measured with the first type only.
                prefill[ours[0]][n].append(deepinfer(args, n, 1, dtypes[0])["prefill_tokens_per_s"])
            for d in depths:
                for name, dtype in zip(ours, dtypes):
                    decode[name][d].append(
                        deepinfer(args, d, args.gen_tokens, dtype)["decode_tokens_per_s"])

        for step in ((run_ours, run_peer) if rep % 2 == 0 else (run_peer, run_ours)):
            step()
        loads.append(f"{before} -> {load_average()}")
        print(f"[{rep + 1}/{args.repeats}] load {loads[-1]}", file=sys.stderr)

    def med(vals):
        return statistics.median(vals) if vals else float("nan")

    result = {
        "model": pathlib.Path(args.model).name, "threads": args.threads,
        "gen_tokens": args.gen_tokens, "load_before": load_before, "loads": loads,
        "membw": membw, "llama_repack": "off (" + repack_failure + ")" if repack_failure else "on",
        "prefill": {e: {str(n): {"median": med(v), "runs": v} for n, v in rows.items() if v}
                    for e, rows in prefill.items()},
        "decode": {e: {str(d): {"median": med(v), "runs": v} for d, v in rows.items() if v}
                   for e, rows in decode.items()},
    }
    print(f"Model `{result['model']}`, {args.threads} threads, median of {args.repeats} "
          f"repeats (engines alternating). Load average before: {load_before}; per repeat: "
          f"{'; '.join(loads)}. Read bandwidth (bench/membw.cc): {membw}. llama-bench "
          f"repacked weights: {result['llama_repack']}.\n")
    print("| prompt tokens | deepinfer prefill tok/s | llama.cpp prefill tok/s | ratio |")
    print("|---:|---:|---:|---:|")
    for n in prompts:
        a, b = med(prefill[ours[0]][n]), med(prefill[peer][n])
        print(f"| {n:,} | {a:.1f} | {b:.1f} | **{a / b:.2f}x** |")
    print(f"\n| context tokens | " + " | ".join(f"{e} decode tok/s" for e in ours)
          + " | llama.cpp decode tok/s (f16 KV) | " + " | ".join(f"ratio ({d})" for d in dtypes)
          + " |")
    print("|---:|" + "---:|" * (2 * len(ours) + 1))
    for d in depths:
        peer_v = med(decode[peer][d])
        vals = [med(decode[e][d]) for e in ours]
        print(f"| {d:,} | " + " | ".join(f"{v:.1f}" for v in vals) + f" | {peer_v:.1f} | "
              + " | ".join(f"**{v / peer_v:.2f}x**" for v in vals) + " |")
    print(f"\nDecode = {args.gen_tokens} greedy single-token steps after the context (deepinfer: "
          f"its {args.gen_tokens - 1} steps after the first token). Ratios above 1 favour "
          f"deepinfer.")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    if args.plot:
        from plots import runtime

        runtime(result, pathlib.Path(args.plot))


if __name__ == "__main__":
    main()
