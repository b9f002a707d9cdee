"""Hugging Face DeepSeek-V3 / V2 checkpoint layout: config.json fields and tensor names and shapes.

Shared by make_deepseek_v3_golden.py (tiny parity checkpoints, torch) and
bench/make_deepseek_bench_model.py (a larger random checkpoint for speed, numpy only), so it
imports nothing beyond the standard library. `c` is a flat dict of the config keys listed in
BASE (the tiny checkpoints' defaults, which the bench overrides).
"""

# Defaults of the tiny parity checkpoints; every key hf_config_json and tensor_shapes read.
BASE = dict(
    model_type="deepseek_v3",
    vocab_size=256,
    hidden_size=64,
    intermediate_size=96,
    moe_intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    kv_lora_rank=32,
    q_lora_rank=48,
    qk_nope_head_dim=16,
    qk_rope_head_dim=8,
    v_head_dim=16,
    n_routed_experts=8,
    n_shared_experts=1,
    num_experts_per_tok=2,
    n_group=1,
    topk_group=1,
    first_k_dense_replace=1,
    routed_scaling_factor=2.5,
    norm_topk_prob=True,
    scoring_func="sigmoid",
    topk_method="noaux_tc",
    rope_theta=10000.0,
    rope_scaling=None,
    max_position_embeddings=512,
    num_nextn_predict_layers=0,
)



def hf_config_json(c):
    arch = "DeepseekV3ForCausalLM" if c["model_type"] == "deepseek_v3" else "DeepseekV2ForCausalLM"
    j = dict(
        architectures=[arch],
        model_type=c["model_type"],
        vocab_size=c["vocab_size"],
        hidden_size=c["hidden_size"],
        intermediate_size=c["intermediate_size"],
        moe_intermediate_size=c["moe_intermediate_size"],
        num_hidden_layers=c["num_hidden_layers"],
        num_attention_heads=c["num_attention_heads"],
        num_key_value_heads=c["num_attention_heads"],
        n_shared_experts=c["n_shared_experts"],
        n_routed_experts=c["n_routed_experts"],
        routed_scaling_factor=c["routed_scaling_factor"],
        kv_lora_rank=c["kv_lora_rank"],
        q_lora_rank=c["q_lora_rank"],
        qk_rope_head_dim=c["qk_rope_head_dim"],
        v_head_dim=c["v_head_dim"],
        qk_nope_head_dim=c["qk_nope_head_dim"],
        topk_method=c["topk_method"],
        n_group=c["n_group"],
        topk_group=c["topk_group"],
        num_experts_per_tok=c["num_experts_per_tok"],
        moe_layer_freq=1,
        first_k_dense_replace=c["first_k_dense_replace"],
        norm_topk_prob=c["norm_topk_prob"],
        scoring_func=c["scoring_func"],
        hidden_act="silu",
        max_position_embeddings=c["max_position_embeddings"],
        rms_norm_eps=1e-6,
        rope_theta=c["rope_theta"],
        rope_scaling=c["rope_scaling"],
        tie_word_embeddings=False,
        attention_bias=False,
        bos_token_id=0,
        eos_token_id=1,
        torch_dtype="bfloat16",
    )
    if c["model_type"] == "deepseek_v3":
        j["num_nextn_predict_layers"] = c["num_nextn_predict_layers"]
    return j


def tensor_shapes(c):
    """HF checkpoint tensor names and shapes, in a fixed order (the random draw order)."""
    H, V = c["hidden_size"], c["vocab_size"]
    nh, dn, dr, dv = (c["num_attention_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"],
                      c["v_head_dim"])
    rq, rkv = c["q_lora_rank"], c["kv_lora_rank"]
    I, Im, E = c["intermediate_size"], c["moe_intermediate_size"], c["n_routed_experts"]
    shapes = [("model.embed_tokens.weight", (V, H))]

    def layer(i):
        p = f"model.layers.{i}."
        s = [(p + "input_layernorm.weight", (H,)), (p + "post_attention_layernorm.weight", (H,))]
        if rq is None:
            s.append((p + "self_attn.q_proj.weight", (nh * (dn + dr), H)))
        else:
            s += [(p + "self_attn.q_a_proj.weight", (rq, H)),
                  (p + "self_attn.q_a_layernorm.weight", (rq,)),
                  (p + "self_attn.q_b_proj.weight", (nh * (dn + dr), rq))]
        s += [(p + "self_attn.kv_a_proj_with_mqa.weight", (rkv + dr, H)),
              (p + "self_attn.kv_a_layernorm.weight", (rkv,)),
              (p + "self_attn.kv_b_proj.weight", (nh * (dn + dv), rkv)),
              (p + "self_attn.o_proj.weight", (H, nh * dv))]
        if i < c["first_k_dense_replace"]:
            s += [(p + "mlp.gate_proj.weight", (I, H)), (p + "mlp.up_proj.weight", (I, H)),
                  (p + "mlp.down_proj.weight", (H, I))]
        else:
            s.append((p + "mlp.gate.weight", (E, H)))
            if c["topk_method"] == "noaux_tc":
                s.append((p + "mlp.gate.e_score_correction_bias", (E,)))
            for e in range(E):
                q = f"{p}mlp.experts.{e}."
                s += [(q + "gate_proj.weight", (Im, H)), (q + "up_proj.weight", (Im, H)),
                      (q + "down_proj.weight", (H, Im))]
            Is = Im * c["n_shared_experts"]
            s += [(p + "mlp.shared_experts.gate_proj.weight", (Is, H)),
                  (p + "mlp.shared_experts.up_proj.weight", (Is, H)),
                  (p + "mlp.shared_experts.down_proj.weight", (H, Is))]
        return s

    for i in range(c["num_hidden_layers"]):
        shapes += layer(i)
    for k in range(c["num_nextn_predict_layers"]):
        i = c["num_hidden_layers"] + k
        p = f"model.layers.{i}."
        shapes += [(p + "enorm.weight", (H,)), (p + "hnorm.weight", (H,)),
                   (p + "eh_proj.weight", (H, 2 * H)),
                   (p + "shared_head.norm.weight", (H,))]
        shapes += layer(i)
    shapes += [("model.norm.weight", (H,)), ("lm_head.weight", (V, H))]
    return shapes
