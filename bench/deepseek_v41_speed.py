#!/usr/bin/env python3
"""DeepSeek-V4.1-shaped speed (released weight formats): decode, prefill, long context, KV size.

Decode at 1 and 8 streams, prefill at 512 and 4,096 tokens, active weight bytes per decode token
over the measured bandwidth, decode at 512 vs 65,536 tokens of context, and KV bytes per token
next to what full attention would need.

The checkpoint (made on first use under --models by build/synthetic_checkpoint from a recipe of
tests/reference/deepseek_v41_shapes.py): about 1.9B parameters, V4.1-Flash's structure scaled
down. 8 layers: two window-only (layer 1 with Engram), ratio 2 (KV and index sources 2 and 4, 4
with Engram as the release's 14; 3 reads 2), ratio 1 (5 the KV source and candidate source, 6
reads it, 7 a "Reindex" index source inside 5's candidate blocks); hidden 2048, 16 heads of 512
(rotary 64), q LoRA 512, 4 output groups of 512, window 128, indexer 32 heads x 128 keeping 512,
candidates 2,048 blocks of 8, 48 routed experts of 512 top-6 + 1 shared (no hash layers), hc 4,
rms_norm_eps 1e-20, YaRN x16 on the compressed rope, Engram 4-grams with 8 heads of 128 and
small tables (engram_vocab_size 4,000: about 98,000 rows per layer, where the release has 384M),
V4.1's 129,280-token vocabulary with DeepSeek-V3's tokenizer from ../shared beside it (Engram's
token classes come from it: 98,627, where the release's tokenizer gives 99,092). Attention,
indexer queries, shared experts and Engram wkv FP8 E4M3 with E8M0 32x32 scales, routed experts
FP4 E2M1 with 1x32 scales, Engram tables FP8 with 1x32 scales; embeddings, head, router,
compressors and indexer keys BF16 / F32.

Measured:
  1 stream   `deepinfer generate --random-prompt-tokens P --max-tokens G --ignore-eos --json`
             (median of --repeats for P = 512; once for 4,096 and --long-context): prefill and
             decode tokens/s, peak RSS.
  bandwidth  active weight bytes per decode token (as stored: FP8 1 byte + 1/1024 scale, FP4
             0.5 + 1/32, BF16 2, F32 4; attention with compressors and indexers, hc mixers,
             router, 6 + 1 experts, Engram wkv and its 24 table rows per layer, head) x decode
             tokens/s, over bench/membw.cc's measured read bandwidth (target: >= 60%).
  8 streams  `deepinfer serve` + `deepinfer bench` (random prompts of 256 tokens, 64 output
             tokens, 16 requests, concurrency 1 and 8): output tokens/s, TPOT; serve's start-up
             lines give the KV cache's bytes per token and its window cache.
  KV         bytes per token of the compact cache (serve's line, and from the layout: each KV
             source's entry + index key / ratio, F32, + 1 float of Engram class) next to full
             attention's (layers x head_dim x 4 bytes: one shared K=V vector per layer, F32).
No llama.cpp peer: its deepseek41 loads V4.1 tensors but does not run CSA2 attention (it throws
"DeepSeek-V4.1 sparse attention is not implemented yet"), so speed is reported against bandwidth.

Usage: .venv/bin/python bench/deepseek_v41_speed.py [--deepinfer build/deepinfer]
           [--models /tmp/ds41-bench] [--long-context 65536]
           [--json bench/results/deepseek_v41.json] > bench/results/deepseek_v41.md
"""

import argparse
import json
import math
import pathlib
import re
import shutil
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests" / "reference"))
from deepseek_v41_shapes import (config_json, full_attention_kv_bytes_per_token,  # noqa: E402
                                 kv_bytes_per_token, make_recipe, native_tensors, quant_section,
                                 with_engram_sizes)
from deepseek_speed import (active_bytes, finish, level, measure_bandwidth,  # noqa: E402
                            run_generate, serve_and_bench)
from runtime_vs_llamacpp import load_average  # noqa: E402

TOKENIZER = REPO.parent / "shared" / "models" / "deepseek-v3-tokenizer"

TEXT_CONFIG = with_engram_sizes(dict(
    vocab_size=129280, hidden_size=2048, moe_intermediate_size=512, num_hidden_layers=8,
    num_attention_heads=16, num_key_value_heads=1, head_dim=512, qk_rope_head_dim=64,
    q_lora_rank=512, o_lora_rank=512, o_groups=4, hidden_act="silu", swiglu_limit=10.0,
    rms_norm_eps=1e-20, tie_word_embeddings=False, max_position_embeddings=1048576,
    rope_theta=10000.0, compress_rope_theta=160000.0,
    rope_scaling=dict(rope_type="yarn", factor=16, beta_fast=32, beta_slow=1,
                      original_max_position_embeddings=65536),
    n_routed_experts=48, n_shared_experts=1, num_experts_per_tok=6, scoring_func="sqrtsoftplus",
    topk_method="noaux_tc", norm_topk_prob=True, routed_scaling_factor=1.5, gate_temp=1.0,
    sliding_window=128, compress_ratios=[0, 0, 2, 2, 2, 1, 1, 1], kv_source_layer_ids=[2, 4, 5],
    index_source_layer_ids=[2, 4, 5, 7], candidate_source_layer_id=5,
    candidate_topk_blocks=2048, candidate_block_size=8, index_n_heads=32, index_head_dim=128,
    index_topk=512, hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, engram_layer_ids=[1, 4],
    engram_max_ngram_size=4, engram_vocab_size=4000, engram_n_heads=8, engram_head_dim=128,
    engram_pad_id=2, engram_compressed_vocab_size=98627, num_nextn_predict_layers=0,
    dspark_noise_token_id=128799, bos_token_id=0, eos_token_id=1, pad_token_id=2))
CONFIG = config_json(TEXT_CONFIG, quant=True, image_token_id=129264)
TENSORS = native_tensors(TEXT_CONFIG)
PARAMETERS = sum(math.prod(shape) for _, shape, _, _ in TENSORS)


def ensure_checkpoint(models: pathlib.Path, tool: pathlib.Path) -> pathlib.Path:
    d = models / "v41"
    if (d / "model.safetensors.index.json").exists():
        return d
    if not (TOKENIZER / "tokenizer.json").exists():
        sys.exit(f"{TOKENIZER}/tokenizer.json is missing: the Engram layers hash token classes "
                 "made from the tokenizer, so the checkpoint needs one beside it")
    d.mkdir(parents=True, exist_ok=True)
    recipe = make_recipe(TENSORS, seed=41, shards=8)
    recipe["quant"] = quant_section(TENSORS)
    (d / "config.json").write_text(json.dumps(CONFIG, indent=1))
    (d / "weights.json").write_text(json.dumps(recipe))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if (TOKENIZER / f).exists():
            shutil.copy(TOKENIZER / f, d / f)
    print(f"making the checkpoint in {d} ({PARAMETERS / 1e9:.2f}B parameters; minutes)",
          file=sys.stderr, flush=True)
    subprocess.run([str(tool), str(d), str(d)], check=True, stdout=subprocess.DEVNULL)
    return d


def engine_kv(startup_log: list) -> dict:
    """serve's start-up lines: KV cache tokens and bytes per token, window cache MiB and
    positions (None where a line is missing)."""
    out = {"tokens": None, "bytes_per_token": None, "window_mib": None, "window_positions": None}
    for line in startup_log:
        m = re.search(r"KV cache: (\d+) tokens, (\d+) bytes per token", line)
        if m:
            out["tokens"], out["bytes_per_token"] = int(m.group(1)), int(m.group(2))
        m = re.search(r"window cache: ([\d.]+) MiB .*?last (\d+) positions", line)
        if m:
            out["window_mib"], out["window_positions"] = float(m.group(1)), int(m.group(2))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "deepinfer"))
    ap.add_argument("--models", default="/tmp/ds41-bench", help="where the checkpoint is made")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--long-context", type=int, default=65536)
    ap.add_argument("--no-serve", action="store_true", help="skip the serving runs")
    ap.add_argument("--json", help="write raw results here")
    args = ap.parse_args()
    tool = pathlib.Path(args.deepinfer).parent / "synthetic_checkpoint"
    model = ensure_checkpoint(pathlib.Path(args.models), tool)
    tc = TEXT_CONFIG
    engram_columns = (tc["engram_max_ngram_size"] - 1) * tc["engram_n_heads"]
    weights = active_bytes(model, tc["num_experts_per_tok"], tc["n_routed_experts"],
                           engram_columns)
    kv_layout = kv_bytes_per_token(tc)
    kv_full = full_attention_kv_bytes_per_token(tc)

    load_before = load_average()
    membw = measure_bandwidth(args)
    bw_gbps = max(membw["read_gbps"].values())
    results = {"load_before": load_before, "membw": membw, "active_bytes": weights,
               "parameters": PARAMETERS, "config": CONFIG,
               "kv_bytes_per_token": {"layout": kv_layout, "full_attention": kv_full}}
    print(f"DeepSeek-V4.1-shaped random checkpoint in the released formats "
          f"({PARAMETERS / 1e9:.2f}B parameters), {args.threads} threads. Load average before: "
          f"{load_before}. Measured read bandwidth: "
          + ", ".join(f"{k} thread(s) {v:.1f} GB/s" for k, v in membw["read_gbps"].items())
          + f". Bytes on disk: {weights['on_disk'] / 1e9:.2f} GB. Active bytes per decode token: "
          f"{weights['per_token'] / 1e6:.0f} MB (attention with compressors and indexers "
          f"{weights['attention'] / 1e6:.0f}, experts {weights['experts'] / 1e6:.0f}, shared + "
          f"router {weights['shared+router'] / 1e6:.0f}, head {weights['head'] / 1e6:.0f}, Engram "
          f"{weights['engram'] / 1e6:.0f}, hc mixers and norms {weights['mixers'] / 1e6:.0f}). "
          "No llama.cpp peer: llama.cpp does not run DeepSeek-V4.1's sparse attention yet, so "
          "decode is reported against the measured bandwidth.\n")

    print("| run | prompt tokens | prefill tok/s | decode tok/s | active weight GB/s "
          "| of measured BW | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    runs = (("decode, short context", 512, 64, args.repeats),
            ("prefill 4,096", 4096, 8, 1),
            ("decode, long context", args.long_context, 32, 1))
    for name, prompt, gen, repeats in runs:
        r = run_generate(args, model, prompt, gen, repeats)
        gbps = r["decode"] * weights["per_token"] / 1e9
        r["prompt_tokens"], r["weight_gbps"], r["bw_fraction"] = prompt, gbps, gbps / bw_gbps
        results[name] = r
        print(f"| {name} | {prompt} | {r['prefill']:.1f} | {r['decode']:.2f} | {gbps:.1f} | "
              f"{100 * gbps / bw_gbps:.0f}% | {r['peak_rss_mib']:.0f} |", flush=True)
    short, long_ = results["decode, short context"], results["decode, long context"]
    results["long_vs_short"] = long_["decode"] / short["decode"]
    print(f"\nDecode after {args.long_context:,} tokens of context: {long_['decode']:.2f} tok/s, "
          f"{100 * results['long_vs_short']:.0f}% of after 512 ({short['decode']:.2f}). "
          f"1-stream decode at {100 * short['bw_fraction']:.0f}% of the measured bandwidth "
          f"(target >= 60%: {'met' if short['bw_fraction'] >= 0.6 else 'not met'}).")

    engine = {}
    if not args.no_serve:
        print("\nServing: random prompts of 256 tokens, 64 output tokens, 16 requests per level:\n")
        print("| streams | out tok/s | TPOT p50 ms | TTFT p50 ms | peak RSS MiB |")
        print("|---|---|---|---|---|")
        r = serve_and_bench(args, model, "1,8", [], 256, 64, 16)
        results["streams"] = r
        for c in (1, 8):
            m = level(r, c)
            print(f"| {c} | {m['output_throughput']:.1f} | {m['tpot_ms']['p50']:.1f} | "
                  f"{m['ttft_ms']['p50']:.0f} | {r['peak_rss_mib']:.0f} |", flush=True)
        engine = engine_kv(r.get("startup_log", []))
        results["kv_bytes_per_token"]["engine"] = engine

    print("\nKV cache per token of context (F32):\n")
    print(f"| layout | bytes per token | MiB for {args.long_context:,} tokens "
          "| vs full attention |")
    print("|---|---|---|---|")
    rows = []
    if engine.get("bytes_per_token"):
        rows.append(("compact cache, as serve prints it", engine["bytes_per_token"]))
    rows += [("compact cache, from the layout: KV sources' (head_dim + index_head_dim) / ratio "
              "+ 1 Engram class", kv_layout),
             (f"full attention: {tc['num_hidden_layers']} layers x head_dim {tc['head_dim']}, "
              "shared K=V", kv_full)]
    for label, b in rows:
        print(f"| {label} | {b:,.0f} | {b * args.long_context / 2**20:,.0f} | "
              f"{b / kv_full:.2f}x |")
    if engine.get("tokens"):
        print(f"\nserve (default --kv-cache-memory, --max-num-seqs): KV cache of "
              f"{engine['tokens']:,} tokens", end="")
        if engine.get("window_mib") is not None:
            print(f", plus a window cache of {engine['window_mib']:.1f} MiB shared by the "
                  f"running sequences (each keeps its last {engine['window_positions']} "
                  "positions whatever its length; the rest keeps finished windows for prefix "
                  "hits)", end="")
        print(".")
    finish(results, args.json)


if __name__ == "__main__":
    main()
