#!/usr/bin/env python3
"""DSpark speculative decoding on DeepSeek-V4.1-shaped checkpoints: decode speed with and without
the drafter, acceptance, the cost of a rejected block, and the break-even acceptance.

Two checkpoints of the same shape (made on first use under --models by build/synthetic_checkpoint
from recipes of tests/reference/deepseek_v41_shapes.py, in the released formats): `agree`, whose
drafter is made to agree with its model (tests/reference/make_deepseek_v41_dspark.py's agree():
main layers' outputs shrunk so the model is close to a bigram, the Markov head a scaled copy of
it), and `random`, every tensor drawn at random (its drafts are almost never accepted, so it
measures what a rejected block costs). Shape: 12 V4.1 layers (window, ratio 2 and ratio 1 with
their KV / index / candidate sources), hidden 768, 8 heads of 512, 32 experts of 512 top-4 + 1
shared, vocab 320 (the V4.1 goldens' byte-level toy tokenizer from ../shared: the head and the
Markov head, which the release's 129,280-token vocabulary makes about 15% and 4% of a step, are
negligible here), three DSpark stages (16 experts top-2), block 5, taps at layers 9-11, Markov
rank 768 (the agreeing construction needs rank = hidden).

Each engine is `deepinfer serve` driven by `deepinfer bench` (random prompts of 128 tokens, 64
output tokens, 16 requests per level, concurrency 1 and 8, greedy), in turns: none, dspark for
`agree` then `random`, --repeats times; medians. Per-step costs come from the 1-stream TPOT:
a plain step is TPOT(none); a DSpark step with everything rejected is TPOT(dspark, random) (one
token per step); so one rejected block costs their difference, and DSpark breaks even when a
step's accepted drafts make up for it: E = TPOT(dspark, random) / TPOT(none) - 1 accepted tokens
per step (1 + E tokens per step), or per draft the acceptance rate a with a(1 - a^5)/(1 - a) = E
(drafts accepted as a prefix, independently). No plain MTP row: V4.1 checkpoints have no MTP
module besides the DSpark stages (`--no-dspark` serves them without drafts). No llama.cpp peer:
it does not run V4.1's sparse attention.

Usage: .venv/bin/python bench/dspark.py [--deepinfer build/deepinfer] [--models /tmp/dspark-bench]
           [--repeats 3] [--json bench/results/dspark.json] > bench/results/dspark.md
"""

import argparse
import copy
import json
import pathlib
import statistics
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests" / "reference"))
from deepseek_v41_shapes import (config_json, make_recipe, native_tensors,  # noqa: E402
                                 quant_section)
from make_deepseek_v41_dspark import agree  # noqa: E402
from deepseek_speed import finish, level, measure_bandwidth, serve_and_bench  # noqa: E402
from runtime_vs_llamacpp import load_average  # noqa: E402

H = 768
TEXT_CONFIG = dict(
    vocab_size=320, hidden_size=H, moe_intermediate_size=512, num_hidden_layers=12,
    num_attention_heads=8, num_key_value_heads=1, head_dim=512, qk_rope_head_dim=64,
    q_lora_rank=512, o_lora_rank=512, o_groups=4, hidden_act="silu", swiglu_limit=10.0,
    rms_norm_eps=1e-20, tie_word_embeddings=False, max_position_embeddings=65536,
    rope_theta=10000.0, compress_rope_theta=160000.0,
    rope_scaling=dict(rope_type="yarn", factor=16, beta_fast=32, beta_slow=1,
                      original_max_position_embeddings=4096),
    n_routed_experts=32, n_shared_experts=1, num_experts_per_tok=4, scoring_func="sqrtsoftplus",
    topk_method="noaux_tc", norm_topk_prob=True, routed_scaling_factor=1.5, gate_temp=1.0,
    sliding_window=128, compress_ratios=[0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0, 0],
    kv_source_layer_ids=[2, 6], index_source_layer_ids=[2, 6, 9], candidate_source_layer_id=6,
    candidate_topk_blocks=2048, candidate_block_size=8, index_n_heads=16, index_head_dim=128,
    index_topk=512, hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, engram_layer_ids=[],
    num_nextn_predict_layers=3, dspark_block_size=5, dspark_noise_token_id=319,
    dspark_target_layer_ids=[9, 10, 11], dspark_markov_rank=H, dspark_n_routed_experts=16,
    dspark_num_experts_per_tok=2, bos_token_id=0, eos_token_id=1, pad_token_id=2)
BLOCK = TEXT_CONFIG["dspark_block_size"]
TOKENIZER = REPO.parent / "shared" / "goldens" / "deepseek_v41" / "v41_full"


def ensure_checkpoint(models: pathlib.Path, tool: pathlib.Path, case: str) -> pathlib.Path:
    d = models / case
    if (d / "model.safetensors.index.json").exists():
        return d
    d.mkdir(parents=True, exist_ok=True)
    tc = copy.deepcopy(TEXT_CONFIG)
    tensors = native_tensors(tc)
    if case == "agree":
        recipe = agree(tc, seed=4101, main_scale=0.01, markov_scale=64.0, shards=4)
    else:
        recipe = make_recipe(tensors, seed=4102, shards=4)
    recipe["quant"] = quant_section(tensors)
    (d / "config.json").write_text(json.dumps(config_json(tc, quant=True), indent=1))
    (d / "weights.json").write_text(json.dumps(recipe))
    # Serving needs a tokenizer: the V4.1 goldens' byte-level toy one (320 ids).
    (d / "tokenizer.json").write_bytes((TOKENIZER / "tokenizer.json").read_bytes())
    print(f"making the {case} checkpoint in {d}", file=sys.stderr, flush=True)
    subprocess.run([str(tool), str(d), str(d)], check=True, stdout=subprocess.DEVNULL)
    return d


def prefix_acceptance(e: float) -> float:
    """The per-draft acceptance a with a (1 - a^BLOCK) / (1 - a) = e (bisection)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        a = (lo + hi) / 2
        if sum(a ** k for k in range(1, BLOCK + 1)) < e:
            lo = a
        else:
            hi = a
    return (lo + hi) / 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "deepinfer"))
    ap.add_argument("--models", default="/tmp/dspark-bench")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="write raw results here")
    args = ap.parse_args()
    if not (TOKENIZER / "tokenizer.json").exists():
        sys.exit(f"{TOKENIZER}/tokenizer.json is missing (../shared): serving needs a tokenizer")
    tool = pathlib.Path(args.deepinfer).parent / "synthetic_checkpoint"
    models = {c: ensure_checkpoint(pathlib.Path(args.models), tool, c) for c in ("agree", "random")}
    load_before = load_average()
    membw = measure_bandwidth(args)
    results = {"load_before": load_before, "membw": membw, "config": TEXT_CONFIG, "runs": []}
    engines = [("none", "agree", ["--speculative-method", "none"]),
               ("dspark", "agree", []), ("dspark", "random", [])]
    for rep in range(args.repeats):
        for method, case, flags in engines:
            r = serve_and_bench(args, models[case], "1,8", flags, 128, 64, 16)
            r.update(method=method, case=case, repeat=rep)
            results["runs"].append(r)
            print(f"run {rep}: {method} on {case}: "
                  f"{level(r, 1)['output_throughput']:.1f} / {level(r, 8)['output_throughput']:.1f} "
                  "tok/s at 1 / 8 streams", file=sys.stderr, flush=True)

    def med(method, case, c, key):
        vals = []
        for r in results["runs"]:
            if r["method"] == method and r["case"] == case:
                m = level(r, c)
                vals.append(m[key]["p50"] if key == "tpot_ms" else m[key])
        return statistics.median(vals)

    def acceptance(case):
        rs = [r for r in results["runs"] if r["method"] == "dspark" and r["case"] == case]
        drafts = sum(r["drafts"] for r in rs)
        tokens = sum(r["draft_tokens"] for r in rs)
        accepted = sum(r["accepted"] for r in rs)
        return (1 + accepted / drafts if drafts else 0.0, accepted / tokens if tokens else 0.0)

    print(f"DeepSeek-V4.1-shaped checkpoints with DSpark stages (hidden {H}, 12 layers, vocab "
          f"320, block {BLOCK}), {args.threads} threads, greedy, prompts of 128 tokens, 64 "
          f"output tokens, 16 requests per level, medians of {args.repeats} interleaved runs. "
          f"Load average before: {load_before}. Measured read bandwidth: "
          + ", ".join(f"{k} thread(s) {v:.1f} GB/s" for k, v in membw["read_gbps"].items())
          + ".\n")
    print("| drafter | checkpoint | 1 stream tok/s | TPOT p50 ms | 8 streams tok/s "
          "| acceptance length | acceptance rate | vs none (1 / 8 streams) |")
    print("|---|---|---|---|---|---|---|---|")
    base1, base8 = med("none", "agree", 1, "output_throughput"), med("none", "agree", 8,
                                                                    "output_throughput")
    summary = {}
    for method, case, _ in engines:
        t1, t8 = med(method, case, 1, "output_throughput"), med(method, case, 8,
                                                                "output_throughput")
        tpot = med(method, case, 1, "tpot_ms")
        length, rate = acceptance(case) if method == "dspark" else (None, None)
        summary[f"{method}/{case}"] = dict(tok_s_1=t1, tok_s_8=t8, tpot_ms=tpot,
                                           acceptance_length=length, acceptance_rate=rate)
        acc = f"{length:.2f} | {100 * rate:.0f}%" if length is not None else "- | -"
        print(f"| {method} | {case} | {t1:.1f} | {tpot:.1f} | {t8:.1f} | {acc} | "
              f"{t1 / base1:.2f}x / {t8 / base8:.2f}x |")
    plain, rejected = summary["none/agree"]["tpot_ms"], summary["dspark/random"]["tpot_ms"]
    e = rejected / plain - 1
    results["summary"] = summary
    results["break_even"] = {"rejected_block_ms": rejected - plain, "accepted_per_step": e,
                             "acceptance_rate": prefix_acceptance(e) if e > 0 else 0.0}
    print(f"\nA rejected block costs {rejected - plain:.1f} ms per step at 1 stream "
          f"({rejected:.1f} ms with DSpark and every draft rejected against {plain:.1f} ms "
          f"without). Break-even: {e:.2f} accepted drafts per step (acceptance length "
          f"{1 + e:.2f}), a per-draft acceptance rate of "
          f"{100 * results['break_even']['acceptance_rate']:.0f}% for drafts accepted as a "
          "prefix.")
    finish(results, args.json)


if __name__ == "__main__":
    main()
