#!/usr/bin/env python3
"""DeepSeek-V4-shaped speed in the released weight formats: decode at 1 and 8 streams, prefill at
512 and 4,096 tokens, active weight bytes per decode token over the measured bandwidth, resident
memory next to the bytes on disk, and decode at 512 vs 16,384 tokens of context.

The checkpoint (made on first use under --models by build/synthetic_checkpoint from a recipe of
tests/reference/deepseek_v4_shapes.py): about 1.9B parameters, 8 layers with V4-Flash's schedule
(two window-only layers, then CSA ratio 4 and HCA ratio 128 alternating, a window-only last
layer), hidden 2048, 16 heads of 512 (rotary 64), q LoRA 512, 4 output groups of 512, window 128,
indexer 64 heads x 128 keeping 512, 48 routed experts of 512 top-6 + 1 shared (2 hash layers), hc
4, V4's 129,280-token vocabulary (DeepSeek-V3's tokenizer from ../shared stands in for serving).
Attention and shared experts are FP8 E4M3 with E8M0 128x128 scales, routed experts FP4 E2M1 with
1x32 scales, embeddings, head, router and compressors BF16, as released.

Measured:
  1 stream   `deepinfer generate --random-prompt-tokens P --max-tokens G --ignore-eos --json`
             (median of --repeats for P = 512): prefill and decode tokens/s, peak RSS.
  bandwidth  active weight bytes per decode token (as stored: FP8 1 byte, FP4 0.5 + 1/32 scale,
             BF16 2, F32 4; attention, compressors, indexer, hc mixers, router, 6 + 1 experts,
             head) x decode tokens/s, over bench/membw.cc's measured read bandwidth.
  8 streams  `deepinfer serve` + `deepinfer bench` (random prompts of 256 tokens, 64 output
             tokens, 16 requests): output tokens/s, TPOT.
  llama.cpp  with --llama-bin DIR and --llama-gguf FILE (the same checkpoint converted by the
             convert_hf_to_gguf.py that llama-cpp-python's sdist vendors: FP8 becomes Q8_0, FP4
             becomes MXFP4), each of our runs is followed by the same one on llama.cpp:
             `llama-bench` for prefill (pp) and decode at the same depth (tg with -d), and
             `llama-server --parallel 8` driven by the same `deepinfer bench`. Weight repacking is
             off (--repack 0): with it this build aborts in ggml_backend_sched_split_graph.

Usage: python bench/deepseek_v4_speed.py [--deepinfer build/deepinfer] [--models /tmp/ds4-bench]
           [--json bench/results/deepseek_v4.json] > bench/results/deepseek_v4.md
"""

import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests" / "reference"))
from deepseek_v4_shapes import fp8_targets, make_recipe, native_tensors  # noqa: E402
from deepseek_speed import (active_bytes, finish, level, measure_bandwidth,  # noqa: E402
                            run_generate, serve_and_bench)
from runtime_vs_llamacpp import load_average, run_timed  # noqa: E402
from serve_vs_llamacpp import Engine, free_port  # noqa: E402

TOKENIZER = REPO.parent / "shared" / "models" / "deepseek-v3-tokenizer"

CONFIG = dict(
    architectures=["DeepseekV4ForCausalLM"], model_type="deepseek_v4", vocab_size=129280,
    hidden_size=2048, moe_intermediate_size=512, num_hidden_layers=8, num_attention_heads=16,
    num_key_value_heads=1, head_dim=512, qk_rope_head_dim=64, q_lora_rank=512, o_lora_rank=512,
    o_groups=4, n_routed_experts=48, n_shared_experts=1, num_experts_per_tok=6,
    num_hash_layers=2, scoring_func="sqrtsoftplus", norm_topk_prob=True,
    routed_scaling_factor=1.5, swiglu_limit=10.0, hidden_act="silu", sliding_window=128,
    index_n_heads=64, index_head_dim=128, index_topk=512, hc_mult=4, hc_sinkhorn_iters=20,
    hc_eps=1e-6, rope_theta=10000.0, compress_rope_theta=160000.0,
    rope_scaling=dict(type="yarn", factor=16, original_max_position_embeddings=65536,
                      beta_fast=32, beta_slow=1),
    compress_ratios=[0, 0, 4, 128, 4, 128, 4, 0], max_position_embeddings=32768,
    rms_norm_eps=1e-6, num_nextn_predict_layers=0, tie_word_embeddings=False, bos_token_id=0,
    eos_token_id=1,
    quantization_config=dict(quant_method="fp8", fmt="e4m3", scale_fmt="ue8m0",
                             activation_scheme="dynamic", weight_block_size=[128, 128],
                             expert_dtype="fp4"),
)


def ensure_checkpoint(models: pathlib.Path, tool: pathlib.Path) -> pathlib.Path:
    d = models / "v4"
    if (d / "model.safetensors.index.json").exists():
        return d
    d.mkdir(parents=True, exist_ok=True)
    tensors = native_tensors(CONFIG)
    recipe = make_recipe(CONFIG, tensors, seed=4, shards=8)
    fp8, fp4 = fp8_targets([t["name"] for t in recipe["tensors"]])
    recipe["quant"] = {"fp8_e4m3_ue8m0_128x128": {"tensors": fp8},
                       "fp4_e2m1_ue8m0_1x32": {"tensors": fp4}}
    (d / "config.json").write_text(json.dumps(CONFIG, indent=1))
    (d / "weights.json").write_text(json.dumps(recipe))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if (TOKENIZER / f).exists():
            shutil.copy(TOKENIZER / f, d / f)
    subprocess.run([str(tool), str(d), str(d)], check=True)
    return d


def llama_bench(args, prompt: int, gen: int, repeats: int) -> dict:
    """llama-bench prefill of `prompt` tokens and decode of `gen` tokens after `prompt` tokens."""
    base = [str(pathlib.Path(args.llama_bin) / "llama-bench"), "-m", args.llama_gguf, "-t",
            str(args.threads), "--repack", "0", "-r", str(repeats), "-o", "json"]
    if repeats == 1:
        base.append("--no-warmup")  # the long runs: a warm-up would prefill the depth again
    out_pp, rss_pp = run_timed(base + ["-p", str(prompt), "-n", "0"])
    out_tg, rss_tg = run_timed(base + ["-p", "0", "-n", str(gen), "-d", str(prompt)])
    pp, tg = json.loads(out_pp)[0], json.loads(out_tg)[0]
    return {"prefill": pp["avg_ts"], "decode": tg["avg_ts"], "peak_rss_mib": max(rss_pp, rss_tg),
            "runs": [pp, tg]}


def llama_serve_and_bench(args, input_len: int, output_len: int, num_prompts: int,
                          parallel: int = 8, concurrency: str = "1,8") -> dict:
    """`llama-server --parallel P` (512 tokens of context per slot) driven by `deepinfer bench`
    at `concurrency`."""
    port = free_port()
    engine = Engine("llama-server", [str(pathlib.Path(args.llama_bin) / "llama-server"), "-m",
                                     args.llama_gguf, "-t", str(args.threads), "-tb",
                                     str(args.threads), "--parallel", str(parallel), "-c",
                                     str(512 * parallel),
                                     "--no-repack", "--host", "127.0.0.1", "--port", str(port),
                                     "--alias", "ds"], port, "/health")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp) / "bench.json"
            p = subprocess.run([args.deepinfer, "bench", "--base", engine.base, "--model", "ds",
                                "--input-len", str(input_len), "--output-len", str(output_len),
                                "--concurrency", concurrency, "--num-prompts", str(num_prompts),
                                "--no-progress", "--json", str(out)], capture_output=True,
                               text=True)
            if p.returncode != 0:
                sys.exit(f"deepinfer bench against llama-server failed: {p.stderr[-2000:]}")
            return json.loads(out.read_text())
    finally:
        engine.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "deepinfer"))
    ap.add_argument("--models", default="/tmp/ds4-bench", help="where the checkpoint is made")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--long-context", type=int, default=16384)
    ap.add_argument("--json", help="write raw results here")
    ap.add_argument("--llama-bin", help="llama.cpp's build/bin (llama-bench, llama-server)")
    ap.add_argument("--llama-gguf", help="the checkpoint converted to GGUF by llama.cpp")
    args = ap.parse_args()
    tool = pathlib.Path(args.deepinfer).parent / "synthetic_checkpoint"
    model = ensure_checkpoint(pathlib.Path(args.models), tool)
    weights = active_bytes(model, CONFIG["num_experts_per_tok"], CONFIG["n_routed_experts"])

    load_before = load_average()
    membw = measure_bandwidth(args)
    bw_gbps = max(membw["read_gbps"].values())
    results = {"load_before": load_before, "membw": membw, "active_bytes": weights,
               "config": CONFIG}
    print(f"DeepSeek-V4-shaped random checkpoint in the released formats, {args.threads} threads. "
          f"Load average before: {load_before}. Measured read bandwidth: "
          + ", ".join(f"{k} thread(s) {v:.1f} GB/s" for k, v in membw["read_gbps"].items())
          + f". Bytes on disk: {weights['on_disk'] / 1e9:.2f} GB. Active bytes per decode token: "
          f"{weights['per_token'] / 1e6:.0f} MB (attention {weights['attention'] / 1e6:.0f}, "
          f"experts {weights['experts'] / 1e6:.0f}, shared + router "
          f"{weights['shared+router'] / 1e6:.0f}, head {weights['head'] / 1e6:.0f}, hc mixers and "
          f"norms {weights['mixers'] / 1e6:.0f}).\n")

    print("| run | prompt tokens | prefill tok/s | decode tok/s | active weight GB/s | of measured BW"
          " | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    for name, prompt, gen, repeats in (("decode, short context", 512, 64, args.repeats),
                                       ("prefill 4,096", 4096, 8, 1),
                                       ("decode, long context", args.long_context, 32, 1)):
        r = run_generate(args, model, prompt, gen, repeats)
        gbps = r["decode"] * weights["per_token"] / 1e9
        r["weight_gbps"], r["bw_fraction"] = gbps, gbps / bw_gbps
        results[name] = r
        print(f"| {name} | {prompt} | {r['prefill']:.1f} | {r['decode']:.2f} | {gbps:.1f} | "
              f"{100 * gbps / bw_gbps:.0f}% | {r['peak_rss_mib']:.0f} |", flush=True)
        if args.llama_gguf:
            r = llama_bench(args, prompt, gen, repeats)
            results["llama.cpp " + name] = r
            print(f"| llama.cpp: {name} | {prompt} | {r['prefill']:.1f} | {r['decode']:.2f} | "
                  f"- | - | {r['peak_rss_mib']:.0f} |", flush=True)

    if (model / "tokenizer.json").exists():
        print("\nServing: random prompts of 256 tokens, 64 output tokens, 16 requests per level:\n")
        print("| streams | out tok/s | TPOT p50 ms | TTFT p50 ms | peak RSS MiB |")
        print("|---|---|---|---|---|")
        r = serve_and_bench(args, model, "1,8", [], 256, 64, 16)
        results["streams"] = r
        peer = llama_serve_and_bench(args, 256, 64, 16) if args.llama_gguf else None
        results["llama.cpp streams"] = peer
        for c in (1, 8):
            for engine, res in (("deepinfer", r), ("llama-server", peer)):
                if res is None:
                    continue
                m = level(res, c)
                rss = f"{res['peak_rss_mib']:.0f}" if "peak_rss_mib" in res else "-"
                print(f"| {c} ({engine}) | {m['output_throughput']:.1f} | "
                      f"{m['tpot_ms']['p50']:.1f} | {m['ttft_ms']['p50']:.0f} | {rss} |",
                      flush=True)
    finish(results, args.json)


if __name__ == "__main__":
    main()
