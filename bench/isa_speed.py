#!/usr/bin/env python3
"""DeepSeek's released weight formats and SmolLM2 on every x86 kernel level: scalar, AVX2, AVX-512.

What an AVX2-only host (AMD Zen 2/3) gets, measured on one AVX-512 machine with the same binary
and `DEEPINFER_ISA=avx2` (issue 37; targets: AVX2 decode >= 0.9x and prefill >= 0.7x of
AVX-512 on the V4.1-shaped checkpoint; on SmolLM2, AVX2 >= 1.0x llama.cpp built for AVX2).
Three parts, each interleaved by ISA within every round (the machine is shared, so the load
average is recorded next to every run and medians are reported):

  kernels    `matmul_bench` on V4.1-sized layers: a 4096 x 4096 attention projection in FP8 E4M3
             with 32 x 32 E8M0 scales, an expert's 2048 x 4096 and 4096 x 2048 in FP4 E2M1 with
             1 x 32 scales, and the checkpoint's BF16 head (129,280 x 2048). Decode is one token
             on weights that cycle through 256 MiB ("cold", GB/s of weights and scales read;
             "hot": the same copy again); prefill is 512 tokens (GFLOP/s, 2 x out x in x tokens).
  model      `deepinfer generate --random-prompt-tokens 512 --max-tokens 64 --ignore-eos` on
             bench/deepseek_v41_speed.py's checkpoint (made on first use under --models): prefill
             and decode tokens/s.
  smollm2    SmolLM2-135M Q4_1 (the GGUF bench/runtime_vs_llama_bench.py uses): prefill of a
             512-token prompt and 64 decode steps after a 512-token context, deepinfer at each
             level (`deepinfer generate`, fresh process per run) next to llama.cpp's `llama-bench`
             from the AVX2 build (`LLAMA_AVX2=1 bench/build_llama_server.sh`: GGML_NATIVE=OFF,
             AVX-512 / AVX-VNNI / AMX off) in the same round, the engines' order rotating by
             round. Skipped, with a message, where that build or the GGUF is missing.

Every CPU kernel follows DEEPINFER_ISA: the matmuls and the small vector loops of kernels/cpu
(ops.cc: dot, axpy, RMSNorm, argmax; attention.cc: the paged and MLA attention ranges;
ggml_numerics.cc), which run one copy per ISA chosen from the active level (isa_dispatch.h).
Results from before that change (bench/results/isa.md of 2026-12-06) ran those loops' AVX-512
target_clones at every level, as the binary picked them from CPUID when it loaded. The loops in
src/arch (V4/V4.1 indexer scoring, Engram, MoE combine, mHC) are plain C++ for baseline x86-64 at
every level.

Usage: .venv/bin/python bench/isa_speed.py [--deepinfer build/deepinfer]
           [--matmul-bench build/src/kernels/cpu/matmul_bench] [--models /tmp/ds41-bench]
           [--llama-avx2-bin ~/.cache/deepinfer/llama.cpp/build-avx2/bin]
           [--parts kernels,model,smollm2] [--rounds 3] [--json bench/results/isa.json]
           > bench/results/isa.md
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

CACHE = pathlib.Path(os.environ.get("DEEPINFER_CACHE", pathlib.Path.home() / ".cache/deepinfer"))
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


def run_smollm2(args, engine: str, prompt: int, gen: int) -> dict:
    """Prefill of `prompt` tokens (gen == 0) or `gen` decode steps after a `prompt`-token
    context, in tokens/s, by deepinfer under DEEPINFER_ISA=engine or by the AVX2 llama-bench
    (engine "llama.cpp-avx2", its own warm-up run, f16 KV cache, its defaults otherwise)."""
    if engine == "llama.cpp-avx2":
        extra = ["-p", str(prompt), "-n", "0"] if gen == 0 else ["-p", "0", "-n", str(gen), "-d",
                                                                   str(prompt)]
        cmd = [str(pathlib.Path(args.llama_avx2_bin) / "llama-bench"), "-m", args.smollm2, "-t",
               str(args.threads), "-r", "1", "-o", "json", *extra]
        out = subprocess.run(cmd, env=dict(os.environ, LD_LIBRARY_PATH=args.llama_avx2_bin),
                             capture_output=True, text=True, check=True).stdout
        return {"tok_s": json.loads(out)[0]["avg_ts"]}
    cmd = [args.deepinfer, "generate", "--model", args.smollm2, "--random-prompt-tokens",
           str(prompt), "--max-tokens", str(max(gen, 1)), "--ignore-eos", "--json", "--threads",
           str(args.threads)]
    out = subprocess.run(cmd, env=dict(os.environ, DEEPINFER_ISA=engine), capture_output=True,
                         text=True, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return {"tok_s": r["prefill_tokens_per_s"] if gen == 0 else r["decode_tokens_per_s"]}


def smollm2_part(args, results: dict) -> None:
    """The SmolLM2 rows: every engine's prefill and decode per round, engines rotating."""
    bench = pathlib.Path(args.llama_avx2_bin) / "llama-bench"
    missing = [str(p) for p in (pathlib.Path(args.smollm2), bench) if not p.exists()]
    if missing:
        print(f"smollm2 part skipped: missing {', '.join(missing)} (bench/build_llama_server.sh "
              "with LLAMA_AVX2=1 builds the peer; bench/run_all.sh fetches the GGUF)",
              file=sys.stderr)
        results["smollm2_skipped"] = missing
        return
    engines = [*ISAS, "llama.cpp-avx2"]
    for rnd in range(args.rounds):
        shift = rnd % len(engines)
        for engine in engines[shift:] + engines[:shift]:
            for what, prompt, gen in (("prefill", 512, 0), ("decode", 512, 64)):
                load = load_average()
                r = run_smollm2(args, engine, prompt, gen)
                results["smollm2"].append({"round": rnd, "engine": engine, "what": what,
                                           "load": load, **r})
                print(f"smollm2 round {rnd} {engine} {what} (load {load}): {r['tok_s']:.1f}",
                      file=sys.stderr, flush=True)


def print_smollm2(args, results: dict) -> None:
    rows = results["smollm2"]
    engines = [*ISAS, "llama.cpp-avx2"]
    med = {e: {w: statistics.median([r["tok_s"] for r in rows
                                     if r["engine"] == e and r["what"] == w])
               for w in ("prefill", "decode")} for e in engines}
    results["smollm2_medians"] = med
    loads = ", ".join(r["load"].split()[0] for r in rows)
    print(f"\nSmolLM2-135M Q4_1 (`{pathlib.Path(args.smollm2).name}`, {args.threads} threads): "
          f"prefill of 512 tokens and 64 decode steps after 512, tokens/s, median of "
          f"{args.rounds} rounds, engines rotating; llama.cpp-avx2 is `llama-bench` from the "
          f"AVX2 build (f16 KV; deepinfer's is f32). 1-minute load at each run: {loads}.\n")
    peer = med["llama.cpp-avx2"]
    print("| engine | prefill tok/s | decode tok/s | prefill / llama.cpp-avx2 | "
          "decode / llama.cpp-avx2 |")
    print("|---|---:|---:|---:|---:|")
    for e in engines:
        m = med[e]
        print(f"| {'deepinfer ' + e if e in ISAS else e} | {m['prefill']:.1f} | "
              f"{m['decode']:.1f} | {m['prefill'] / peer['prefill']:.2f}x | "
              f"{m['decode'] / peer['decode']:.2f}x |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "deepinfer"))
    ap.add_argument("--matmul-bench", default=str(REPO / "build/src/kernels/cpu/matmul_bench"))
    ap.add_argument("--models", default="/tmp/ds41-bench", help="where the checkpoint is made")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scalar-decode-tokens", type=int, default=8,
                    help="decode tokens of the (slow) scalar model runs")
    ap.add_argument("--smollm2", default=str(CACHE / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--llama-avx2-bin", default=str(CACHE / "llama.cpp/build-avx2/bin"),
                    help="llama.cpp built for AVX2 (LLAMA_AVX2=1 bench/build_llama_server.sh)")
    ap.add_argument("--parts", default="kernels,model,smollm2",
                    help="which parts to run, comma-separated")
    ap.add_argument("--json", help="write raw results here")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    results = {"load_before": load_average(), "kernels": [], "model": [], "smollm2": []}
    model = None
    if parts & {"kernels", "model"}:
        tool = pathlib.Path(args.deepinfer).parent / "synthetic_checkpoint"
        model = ensure_checkpoint(pathlib.Path(args.models), tool)

    for rnd in range(args.rounds if "kernels" in parts else 0):
        for isa in ISAS:
            load = load_average()
            results["kernels"].append({"round": rnd, "isa": isa, "load": load,
                                       "results": run_kernels(args.matmul_bench, isa)})
            print(f"kernels round {rnd} {isa} (load {load})", file=sys.stderr, flush=True)
    for rnd in range(args.rounds if "model" in parts else 0):
        for isa in ISAS:
            if isa == "scalar" and rnd > 0:
                continue  # one slow run says enough
            gen = args.scalar_decode_tokens if isa == "scalar" else 64
            load = load_average()
            r = run_model(args.deepinfer, model, isa, args.threads, gen)
            results["model"].append({"round": rnd, "isa": isa, "load": load, **r})
            print(f"model round {rnd} {isa} (load {load}): {r}", file=sys.stderr, flush=True)
    if "smollm2" in parts:
        smollm2_part(args, results)
    results["load_after"] = load_average()

    print(f"Each kernel level on one AVX-512 machine (`DEEPINFER_ISA`), {args.rounds} rounds "
          f"interleaved by ISA, medians. Load average before: {results['load_before']}; after: "
          f"{results['load_after']}.\n")
    if results["kernels"]:
        def median(isa, name):
            vals = [k["results"][name][0] for k in results["kernels"]
                    if k["isa"] == isa and name in k["results"]]
            return statistics.median(vals) if vals else float("nan")

        loads = {isa: ", ".join(k["load"].split()[0] for k in results["kernels"] if k["isa"] == isa)
                 for isa in ISAS}
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

    if results["model"]:
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
    if results["smollm2"]:
        print_smollm2(args, results)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
