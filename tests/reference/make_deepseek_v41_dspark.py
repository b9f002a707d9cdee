"""Tiny DeepSeek-V4.1 checkpoints with DSpark stages (tests/golden/deepseek_v41_dspark/<case>/:
config.json, the weight recipe weights.json, from which synthetic_checkpoint writes the weights,
and golden.json with their sha256).

The reference modeling code behind ../shared/goldens/deepseek_v41 has no draft stages, so there
are no reference logits: these cases serve the greedy identity (DSpark on / off), rejection
sampling and the acceptance benchmark. Both are byte-level sized (vocab 320, as the v41_full
toy tokenizer) without Engram:
  dspark_random  every tensor drawn as the V4.1 goldens draw them (low acceptance);
  dspark_agree   a drafter made to agree: the main layers' outputs (wo_b, expert w2) shrunk by
                 --main-scale so the model is close to a bigram lm_head(norm(embed(x))), the
                 final norms exactly 1, the stages' outputs zero, and the Markov head a scaled
                 copy of the bigram (markov embed = --markov-scale x embed, head = lm_head;
                 dspark_markov_rank = hidden_size) so each block row predicts the bigram of the
                 row before.
Usage: python tests/reference/make_deepseek_v41_dspark.py   (numpy only)
"""

import argparse
import copy
import hashlib
import json
import pathlib

import deepseek_v41_shapes as shapes

REPO = pathlib.Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "golden" / "deepseek_v41_dspark"

BASE = dict(
    bos_token_id=0, eos_token_id=1, pad_token_id=2, vocab_size=320, hidden_size=96,
    num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=1, head_dim=40,
    qk_rope_head_dim=16, q_lora_rank=48, o_lora_rank=24, o_groups=2, hidden_act="silu",
    moe_intermediate_size=24, n_routed_experts=16, n_shared_experts=1, num_experts_per_tok=3,
    norm_topk_prob=True, routed_scaling_factor=1.5, scoring_func="sqrtsoftplus",
    topk_method="noaux_tc", gate_temp=1.0, swiglu_limit=10.0, rms_norm_eps=1e-20,
    max_position_embeddings=512, rope_theta=10000.0, compress_rope_theta=160000.0,
    rope_scaling=None, sliding_window=16, tie_word_embeddings=False,
    compress_ratios=[0, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0], kv_source_layer_ids=[1, 4],
    index_source_layer_ids=[1, 4, 6], index_n_heads=16, index_head_dim=24, index_topk=4,
    candidate_source_layer_id=4, candidate_topk_blocks=4, candidate_block_size=4,
    hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, engram_layer_ids=[],
    num_nextn_predict_layers=3, dspark_block_size=5, dspark_noise_token_id=319,
    dspark_target_layer_ids=[5, 6, 7], dspark_markov_rank=32, dspark_n_routed_experts=8,
    dspark_num_experts_per_tok=2)


def write(case, tc, recipe):
    """config.json, the recipe, and golden.json with the sha256 of the weights this Python
    generator draws (SyntheticCheckpointTest checks the C++ one against it, draw_as included)."""
    d = OUT / case
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(
        json.dumps(shapes.config_json(tc, quant=False), indent=1) + "\n")
    (d / "weights.json").write_text(json.dumps(recipe, indent=0) + "\n")
    h = hashlib.sha256()
    for _, _, _, v in shapes.synthetic_weights.tensors(recipe):
        h.update(v.tobytes())
    (d / "golden.json").write_text(json.dumps(dict(weights_sha256=h.hexdigest()), indent=1) + "\n")


def agree(tc, seed, main_scale, markov_scale, shards=1):
    """The recipe of a drafter made to agree with its model (module docstring); tc's
    dspark_markov_rank must be its hidden_size."""
    assert tc["dspark_markov_rank"] == tc["hidden_size"]
    recipe = shapes.make_recipe(shapes.native_tensors(tc), seed=seed, shards=shards)
    by_name = {t["name"]: t for t in recipe["tensors"]}
    last = f"mtp.{tc['num_nextn_predict_layers'] - 1}."
    for t in recipe["tensors"]:
        n = t["name"]
        output = n.endswith("attn.wo_b.weight") or n.endswith("w2.weight")
        if output and n.startswith("layers."):
            t["half_width"] *= main_scale
        elif output and n.startswith("mtp."):
            t["half_width"] = 0.0
        elif n in ("norm.weight", last + "norm.weight"):
            t.update(center=1.0, half_width=0.0)
        elif n == last + "markov_head.embed.weight":
            t.update(draw_as="embed.weight",
                     half_width=markov_scale * by_name["embed.weight"]["half_width"])
        elif n == last + "markov_head.head.weight":
            t.update(draw_as="lm_head.weight", half_width=by_name["lm_head.weight"]["half_width"])
    recipe["note"] = (f"agreeing drafter: main outputs x{main_scale}, markov embed = "
                      f"{markov_scale} x embed draws, markov head = lm_head draws")
    return recipe


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--main-scale", type=float, default=0.01)
    ap.add_argument("--markov-scale", type=float, default=64.0)
    args = ap.parse_args()

    tc = copy.deepcopy(BASE)
    write("dspark_random", tc, shapes.make_recipe(shapes.native_tensors(tc), seed=2101))
    tc = dict(copy.deepcopy(BASE), dspark_markov_rank=BASE["hidden_size"])
    write("dspark_agree", tc, agree(tc, 2102, args.main_scale, args.markov_scale))


if __name__ == "__main__":
    main()
