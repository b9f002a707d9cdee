#!/usr/bin/env python3
"""DeepSeek's released weight formats on every x86 kernel level: scalar, AVX2, AVX-512.

What an AVX2-only host (AMD Zen 2/3) gets, measured on one AVX-512 machine with the same binary
and `DEEPINFER_ISA=avx2` (issue 37; targets: AVX2 decode >= 0.9x and prefill >= 0.7x of
AVX-512 on the V4.1-shaped checkpoint). Two parts, each interleaved by ISA within every round
(the machine is shared, so the load average is recorded next to every run and medians are
reported):

  kernels    `matmul_bench` on V4.1-sized layers: a 4096 x 4096 attention projection in FP8 E4M3
             with 32 x 32 E8M0 scales, an expert's 2048 x 4096 and 4096 x 2048 in FP4 E2M1 with
             1 x 32 scales, and the checkpoint's BF16 head (129,280 x 2048). Decode is one token
             on weights that cycle through 256 MiB ("cold", GB/s of weights and scales read;
             "hot": the same copy again); prefill is 512 tokens (GFLOP/s, 2 x out x in x tokens).
  model      `deepinfer generate --random-prompt-tokens 512 --max-tokens 64 --ignore-eos` on
             bench/deepseek_v41_speed.py's checkpoint (made on first use under --models): prefill
             and decode tokens/s.

Every CPU kernel follows DEEPINFER_ISA: the matmuls and the small vector loops of kernels/cpu
(ops.cc: dot, axpy, RMSNorm, argmax; attention.cc: the paged and MLA attention ranges;
ggml_numerics.cc), which run one copy per ISA chosen from the active level (isa_dispatch.h).
Results from before that change (bench/results/isa.md of 2026-12-06) ran those loops' AVX-512
target_clones at every level, as the binary picked them from CPUID when it loaded. The loops in
src/arch (V4/V4.1 indexer scoring, Engram, MoE combine, mHC) are plain C++ for baseline x86-64 at
every level.

Usage: .venv/bin/python bench/isa_speed.py [--deepinfer build/deepinfer]
           [--matmul-bench build/src/kernels/cpu/matmul_bench] [--models /tmp/ds41-bench]
           [--rounds 3] [--json bench/results/isa.json] > bench/results/isa.md
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from deepseek_v41_speed import ensure_checkpoint  # noqa: E402
from runtime_vs_llamacpp import load_average  # noqa: E402

ISAS = ("avx512", "avx2", "scalar")
KERNELS = ("Fp8_4096x4096_DecodeCold", "Fp8_4096x4096_DecodeHot", "Fp4_2048x4096_DecodeCold",
           "Fp4_4096x2048_DecodeCold", "Fp4_2048x4096_DecodeHot",
           "Bf16_Head129280x2048_DecodeCold", "Fp8_4096x4096_Prefill512",
           "Fp4_2048x4096_Prefill512")


def run_kernels(exe: str, isa: str) -> dict:
    """One pass of matmul_bench's DeepSeek shapes under `isa`: name/threads -> (value, unit)."""
    pattern = "|".join(KERNELS)
    out = subprocess.run([exe, f"--benchmark_filter=BM_({pattern})/", "--benchmark_format=json"],
                         env=dict(os.environ, DEEPINFER_ISA=isa), capture_output=True, text=True,
                         check=True).stdout
    got = {}
    for b in json.loads(out)["benchmarks"]:
        name = b["name"].removeprefix("BM_").replace("/real_time", "")
        if "bytes_per_second" in b:
            got[name] = (b["bytes_per_second"] / 1e9, "GB/s")
        else:
            got[name] = (b["GFLOP/s"] / 1e9, "GFLOP/s")
    return got


def run_model(deepinfer: str, model: pathlib.Path, isa: str, threads: int, gen: int) -> dict:
    out = subprocess.run([deepinfer, "generate", "--model", str(model), "--random-prompt-tokens",
                          "512", "--max-tokens", str(gen), "--ignore-eos", "--threads",
                          str(threads), "--json"], env=dict(os.environ, DEEPINFER_ISA=isa),
                         capture_output=True, text=True, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return {"prefill": r["prefill_tokens_per_s"], "decode": r["decode_tokens_per_s"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "deepinfer"))
    ap.add_argument("--matmul-bench", default=str(REPO / "build/src/kernels/cpu/matmul_bench"))
    ap.add_argument("--models", default="/tmp/ds41-bench", help="where the checkpoint is made")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scalar-decode-tokens", type=int, default=8,
                    help="decode tokens of the (slow) scalar model runs")
    ap.add_argument("--json", help="write raw results here")
    args = ap.parse_args()
    tool = pathlib.Path(args.deepinfer).parent / "synthetic_checkpoint"
    model = ensure_checkpoint(pathlib.Path(args.models), tool)
    results = {"load_before": load_average(), "kernels": [], "model": []}

    for rnd in range(args.rounds):
        for isa in ISAS:
            load = load_average()
            results["kernels"].append({"round": rnd, "isa": isa, "load": load,
                                       "results": run_kernels(args.matmul_bench, isa)})
            print(f"kernels round {rnd} {isa} (load {load})", file=sys.stderr, flush=True)
    for rnd in range(args.rounds):
        for isa in ISAS:
            if isa == "scalar" and rnd > 0:
                continue  # one slow run says enough
            gen = args.scalar_decode_tokens if isa == "scalar" else 64
            load = load_average()
            r = run_model(args.deepinfer, model, isa, args.threads, gen)
            results["model"].append({"round": rnd, "isa": isa, "load": load, **r})
            print(f"model round {rnd} {isa} (load {load}): {r}", file=sys.stderr, flush=True)
    results["load_after"] = load_average()

    def median(isa, name):
        vals = [k["results"][name][0] for k in results["kernels"]
                if k["isa"] == isa and name in k["results"]]
        return statistics.median(vals) if vals else float("nan")

    loads = {isa: ", ".join(k["load"].split()[0] for k in results["kernels"] if k["isa"] == isa)
             for isa in ISAS}
    print(f"DeepSeek's released formats on each kernel level, one AVX-512 machine "
          f"(`DEEPINFER_ISA`), {args.rounds} rounds interleaved by ISA, medians. Load average "
          f"before: {results['load_before']}; after: {results['load_after']}.\n")
    print("Kernels (`matmul_bench`; decode in GB/s of weights and scales read, prefill in "
          f"GFLOP/s; 1-minute load at each ISA's runs: avx512 {loads['avx512']}; avx2 "
          f"{loads['avx2']}; scalar {loads['scalar']}):\n")
    print("| shape | threads | unit | avx512 | avx2 | scalar | avx2 / avx512 |")
    print("|---|---|---|---|---|---|---|")
    names = sorted({n for k in results["kernels"] for n in k["results"]},
                   key=lambda n: (KERNELS.index(n.split("/")[0]), n))
    for name in names:
        shape, threads = name.split("/")
        unit = results["kernels"][0]["results"].get(name, (0, "?"))[1]
        v = {isa: median(isa, name) for isa in ISAS}
        print(f"| {shape} | {threads} | {unit} | {v['avx512']:.1f} | {v['avx2']:.1f} | "
              f"{v['scalar']:.2f} | {v['avx2'] / v['avx512']:.2f}x |")

    print(f"\nModel (bench/deepseek_v41_speed.py's checkpoint: FP8 32 x 32 attention, FP4 "
          f"experts, BF16 head; prompt 512, 64 decode tokens ({args.scalar_decode_tokens} for "
          f"scalar), {args.threads} threads):\n")
    print("| round | ISA | 1-min load | prefill tok/s | decode tok/s |")
    print("|---|---|---|---|---|")
    for m in results["model"]:
        print(f"| {m['round']} | {m['isa']} | {m['load'].split()[0]} | {m['prefill']:.1f} | "
              f"{m['decode']:.2f} |")
    med = {isa: {k: statistics.median(m[k] for m in results["model"] if m["isa"] == isa)
                 for k in ("prefill", "decode")} for isa in ISAS}
    results["model_medians"] = med
    a2, a5 = med["avx2"], med["avx512"]
    print(f"\nMedians: AVX-512 prefill {a5['prefill']:.1f}, decode {a5['decode']:.2f} tok/s; AVX2 "
          f"prefill {a2['prefill']:.1f} ({a2['prefill'] / a5['prefill']:.2f}x, target >= 0.7x), "
          f"decode {a2['decode']:.2f} ({a2['decode'] / a5['decode']:.2f}x, target >= 0.9x); "
          f"scalar prefill {med['scalar']['prefill']:.1f} "
          f"({med['scalar']['prefill'] / a5['prefill']:.2f}x), decode "
          f"{med['scalar']['decode']:.2f} ({med['scalar']['decode'] / a5['decode']:.2f}x).")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
