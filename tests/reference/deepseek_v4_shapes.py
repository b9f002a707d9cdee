"""DeepSeek-V4 checkpoint layout: the per-layer schedule of a config, the release's native tensor
names and shapes, transformers' names for them, which tensors the release stores in FP8 / FP4,
and a weight recipe for them (synthetic_weights.py).

Shared by make_deepseek_v4_golden.py (tiny parity checkpoints, torch) and
bench/deepseek_v4_speed.py (a larger random checkpoint for speed), so it imports nothing beyond
numpy. `c` is a flat dict of config.json keys.
"""

import math

import synthetic_weights


def layer_kinds(c):
    """Per layer: (kind, ratio) with kind in sliding / csa / hca; and per layer hash or not."""
    n = c["num_hidden_layers"]
    if "compress_ratios" in c:
        names = {0: "sliding", 4: "csa", 128: "hca"}
        kinds = [(names[r], r) for r in c["compress_ratios"][:n]]
    else:
        rates = c["compress_rates"]
        short = {"sliding_attention": "sliding", "compressed_sparse_attention": "csa",
                 "heavily_compressed_attention": "hca"}
        kinds = [(short[t], rates.get(t, 0)) for t in c["layer_types"]]
    if "mlp_layer_types" in c:
        hashed = [t == "hash_moe" for t in c["mlp_layer_types"]]
    else:
        hashed = [i < c.get("num_hash_layers", 3) for i in range(n)]
    return kinds, hashed


def block_tensors(c, p, kind, ratio, hashed):
    """(name, shape, kind) of one block (a main layer "layers.N." or an MTP module "mtp.K.")."""
    H, V, hc = c["hidden_size"], c["vocab_size"], c["hc_mult"]
    nh, hd = c["num_attention_heads"], c["head_dim"]
    G, olr, qlr = c["o_groups"], c["o_lora_rank"], c["q_lora_rank"]
    E, I, K = c["n_routed_experts"], c["moe_intermediate_size"], c["num_experts_per_tok"]
    ih, ihd = c["index_n_heads"], c["index_head_dim"]
    mix = (2 + hc) * hc
    out = [(p + "attn_norm.weight", [H], "norm"), (p + "ffn_norm.weight", [H], "norm")]
    for site in ("attn", "ffn"):
        out += [(p + f"hc_{site}_fn", [mix, hc * H], "hc_fn"),
                (p + f"hc_{site}_base", [mix], "hc_base"),
                (p + f"hc_{site}_scale", [3], "hc_scale")]
    a = p + "attn."
    out += [(a + "attn_sink", [nh], "sink"),
            (a + "wq_a.weight", [qlr, H], "linear"), (a + "q_norm.weight", [qlr], "norm"),
            (a + "wq_b.weight", [nh * hd, qlr], "linear"),
            (a + "wkv.weight", [hd, H], "linear"), (a + "kv_norm.weight", [hd], "norm"),
            (a + "wo_a.weight", [G * olr, nh * hd // G], "linear"),
            (a + "wo_b.weight", [H, G * olr], "linear")]
    if kind != "sliding":
        coff = 2 if kind == "csa" else 1
        cp = a + "compressor."
        out += [(cp + "wkv.weight", [coff * hd, H], "linear"),
                (cp + "wgate.weight", [coff * hd, H], "gate"),
                (cp + "ape", [ratio, coff * hd], "ape"),
                (cp + "norm.weight", [hd], "norm")]
    if kind == "csa":
        ip = a + "indexer."
        out += [(ip + "wq_b.weight", [ih * ihd, qlr], "linear"),
                (ip + "weights_proj.weight", [ih, H], "linear"),
                (ip + "compressor.wkv.weight", [2 * ihd, H], "linear"),
                (ip + "compressor.wgate.weight", [2 * ihd, H], "gate"),
                (ip + "compressor.ape", [ratio, 2 * ihd], "ape"),
                (ip + "compressor.norm.weight", [ihd], "norm")]
    f = p + "ffn."
    out.append((f + "gate.weight", [E, H], "gate"))
    out.append((f + "gate.tid2eid", [V, K], "tid2eid") if hashed else (f + "gate.bias", [E], "bias"))
    for e in range(E):
        out += [(f + f"experts.{e}.w1.weight", [I, H], "linear"),
                (f + f"experts.{e}.w2.weight", [H, I], "linear"),
                (f + f"experts.{e}.w3.weight", [I, H], "linear")]
    out += [(f + "shared_experts.w1.weight", [I, H], "linear"),
            (f + "shared_experts.w2.weight", [H, I], "linear"),
            (f + "shared_experts.w3.weight", [I, H], "linear")]
    return out


def native_tensors(c):
    """(name, shape, kind) in the release's native names; kind picks the recipe's distribution.
    MTP modules ("mtp.K.*", window-only blocks plus e_proj / h_proj / enorm / hnorm / norm / hc
    head) come last, so they leave the other tensors' draws unchanged; transformers ignores them."""
    H, V, hc = c["hidden_size"], c["vocab_size"], c["hc_mult"]
    kinds, hashed = layer_kinds(c)
    out = [("embed.weight", [V, H], "embed")]
    for l in range(c["num_hidden_layers"]):
        out += block_tensors(c, f"layers.{l}.", kinds[l][0], kinds[l][1], hashed[l])
    head = [("hc_head_fn", [hc, hc * H], "hc_fn"), ("hc_head_base", [hc], "hc_base"),
            ("hc_head_scale", [1], "hc_scale")]
    out += [("norm.weight", [H], "norm"), ("head.weight", [V, H], "linear")] + head
    for k in range(c.get("num_nextn_predict_layers", 0)):
        p = f"mtp.{k}."
        out += block_tensors(c, p, "sliding", 0, False)
        out += [(p + "e_proj.weight", [H, H], "linear"), (p + "h_proj.weight", [H, H], "linear"),
                (p + "enorm.weight", [H], "norm"), (p + "hnorm.weight", [H], "norm"),
                (p + "norm.weight", [H], "norm")]
        out += [(p + n, shape, kind) for n, shape, kind in head]
    return out


def hf_name(name):
    """transformers' module name of a native tensor name (its conversion_mapping, inverted)."""
    fixed = {"embed.weight": "model.embed_tokens.weight", "head.weight": "lm_head.weight",
             "norm.weight": "model.norm.weight", "hc_head_fn": "model.hc_head.hc_fn",
             "hc_head_base": "model.hc_head.hc_base", "hc_head_scale": "model.hc_head.hc_scale"}
    if name in fixed:
        return fixed[name]
    parts = name.split(".")
    layer, rest = parts[1], ".".join(parts[2:])
    table = [
        ("attn_norm.weight", "input_layernorm.weight"),
        ("ffn_norm.weight", "post_attention_layernorm.weight"),
        ("hc_attn_fn", "attn_hc.fn"), ("hc_attn_base", "attn_hc.base"),
        ("hc_attn_scale", "attn_hc.scale"), ("hc_ffn_fn", "ffn_hc.fn"),
        ("hc_ffn_base", "ffn_hc.base"), ("hc_ffn_scale", "ffn_hc.scale"),
        ("attn.attn_sink", "self_attn.sinks"),
        ("attn.wq_a.weight", "self_attn.q_a_proj.weight"),
        ("attn.q_norm.weight", "self_attn.q_a_norm.weight"),
        ("attn.wq_b.weight", "self_attn.q_b_proj.weight"),
        ("attn.wkv.weight", "self_attn.kv_proj.weight"),
        ("attn.kv_norm.weight", "self_attn.kv_norm.weight"),
        ("attn.wo_a.weight", "self_attn.o_a_proj.weight"),
        ("attn.wo_b.weight", "self_attn.o_b_proj.weight"),
        ("attn.compressor.wkv.weight", "self_attn.compressor.kv_proj.weight"),
        ("attn.compressor.wgate.weight", "self_attn.compressor.gate_proj.weight"),
        ("attn.compressor.ape", "self_attn.compressor.position_bias"),
        ("attn.compressor.norm.weight", "self_attn.compressor.kv_norm.weight"),
        ("attn.indexer.wq_b.weight", "self_attn.compressor.indexer.q_b_proj.weight"),
        ("attn.indexer.weights_proj.weight",
         "self_attn.compressor.indexer.scorer.weights_proj.weight"),
        ("attn.indexer.compressor.wkv.weight", "self_attn.compressor.indexer.kv_proj.weight"),
        ("attn.indexer.compressor.wgate.weight", "self_attn.compressor.indexer.gate_proj.weight"),
        ("attn.indexer.compressor.ape", "self_attn.compressor.indexer.position_bias"),
        ("attn.indexer.compressor.norm.weight", "self_attn.compressor.indexer.kv_norm.weight"),
        ("ffn.gate.weight", "mlp.gate.weight"),
        ("ffn.gate.bias", "mlp.gate.e_score_correction_bias"),
        ("ffn.gate.tid2eid", "mlp.gate.tid2eid"),
        ("ffn.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"),
        ("ffn.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"),
        ("ffn.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"),
    ]
    for src, dst in table:
        if rest == src:
            return f"model.layers.{layer}.{dst}"
    raise KeyError(name)


def hf_tensors(c):
    """The same tensor set under transformers' names, routed experts fused per layer."""
    I, H, E = c["moe_intermediate_size"], c["hidden_size"], c["n_routed_experts"]
    out = []
    for name, shape, kind in native_tensors(c):
        if ".experts." in name and ".shared_experts." not in name:
            if name.endswith(".experts.0.w1.weight"):
                l = name.split(".")[1]
                out += [(f"model.layers.{l}.mlp.experts.gate_up_proj", [E, 2 * I, H], "linear"),
                        (f"model.layers.{l}.mlp.experts.down_proj", [E, H, I], "linear_t")]
            continue
        out.append((hf_name(name), shape, kind))
    return out


def make_recipe(c, tensors, seed, shards):
    """Uniform draws with the spreads of a usual random init (as the V4.1 goldens)."""
    E = c["n_routed_experts"]
    out = []
    for name, shape, kind in tensors:
        e = synthetic_weights.entry
        if kind == "tid2eid":
            out.append(synthetic_weights.int_entry(name, shape, E))
        elif kind == "norm":
            out.append(e(name, shape, "F32" if name.endswith(("kv_norm.weight", "q_norm.weight",
                                                               "q_a_norm.weight")) else "BF16",
                         center=1.0, std=0.2))
        elif kind == "embed":
            out.append(e(name, shape, std=1.0))
        elif kind == "hc_fn":
            out.append(e(name, shape, "F32", std=1.0 / math.sqrt(shape[1])))
        elif kind == "hc_base":
            out.append(e(name, shape, "F32", half_width=0.5))
        elif kind == "hc_scale":
            out.append(e(name, shape, "F32", center=0.75, half_width=0.25))
        elif kind == "sink":
            out.append(e(name, shape, "F32", half_width=1.0))
        elif kind == "bias":
            out.append(e(name, shape, "F32", half_width=0.1))
        elif kind == "ape":
            out.append(e(name, shape, "F32", half_width=0.5))
        elif kind == "gate":
            out.append(e(name, shape, std=2.0 / math.sqrt(shape[-1])))
        elif kind == "linear_t":  # down_proj [E, H, I]: fan-in is the last dim
            out.append(e(name, shape, std=1.0 / math.sqrt(shape[-1])))
        else:
            out.append(e(name, shape, std=1.0 / math.sqrt(shape[-1])))
    return dict(generator=synthetic_weights.GENERATOR, seed=seed, shards=shards, tensors=out)


def fp8_targets(names):
    """Which native tensors the release stores in FP8 (128x128) and FP4 (experts)."""
    fp8, fp4 = [], []
    for n in names:
        if ".ffn.experts." in n:
            fp4.append(n)
        elif n.endswith(("attn.wq_a.weight", "attn.wq_b.weight", "attn.wkv.weight",
                         "attn.wo_a.weight", "attn.wo_b.weight", "indexer.wq_b.weight")) or \
                ".shared_experts." in n:
            fp8.append(n)
    return fp8, fp4
