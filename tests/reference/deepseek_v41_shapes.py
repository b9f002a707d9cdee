"""DeepSeek-V4.1 checkpoint layout: the Engram table sizes of a text config (the prime search),
the release's native tensor names, shapes and dtypes, which tensors the release stores in FP8 /
FP4, the composite config.json, and a weight recipe for them (synthetic_weights.py) with the
recipe's `quant` section in the release formats.

The layout is the one of ../shared/goldens/deepseek_v41/make_goldens.py (transformers'
deepseek_v41 at commit 0a2080b4): given a golden's text_config and seed, make_recipe() gives its
weights.json tensors and quant_section() its quantized tensor lists. Used by
bench/deepseek_v41_speed.py (a larger random checkpoint for speed); imports nothing beyond
numpy (through synthetic_weights). `tc` is a flat dict of text_config keys.
"""

import copy
import math

import synthetic_weights

QUANT_NOTE = ("Quantize the recipe's (bf16-rounded) tensors as described; store `<prefix>.weight` "
              "(quantized) and `<prefix>.scale` (F8_E8M0 bytes: value 2^(b-127)). Engram tables "
              "replace `engram.embed.scale` (recipe F32 ones) with the E8M0 scales.")


def _is_prime(n):
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def engram_primes(tc):
    """Per Engram layer: primes [ngram - 1][heads], drawn in order above engram_vocab_size - 1 and
    never reused across the model (transformers' EngramLayout; src/arch/engram_hash.h)."""
    seen = set()
    out = []
    for _ in tc["engram_layer_ids"]:
        layer = []
        for _ in range(tc["engram_max_ngram_size"] - 1):
            current, row = tc["engram_vocab_size"] - 1, []
            for _ in range(tc["engram_n_heads"]):
                current += 1
                while not _is_prime(current) or current in seen:
                    current += 1
                seen.add(current)
                row.append(current)
            layer.append(row)
        out.append(layer)
    return out


def with_engram_sizes(tc):
    """A copy of `tc` with engram_num_embeddings (each layer's table rows: its primes' sum)."""
    tc = copy.deepcopy(tc)
    tc["engram_num_embeddings"] = [sum(sum(row) for row in layer) for layer in engram_primes(tc)]
    return tc


def config_json(tc, quant=True, image_token_id=None):
    """The composite config.json as released: model_type deepseek_v41, text_config the backbone;
    `quant`: the release's quantization_config (FP8 E4M3 32x32 with E8M0 scales, FP4 experts).
    image_token_id: the last id unless given (the release: 129264)."""
    tc = dict(tc, model_type="deepseek_v41_text")
    j = dict(architectures=["DeepseekV41ForCausalLM"], model_type="deepseek_v41",
             bos_token_id=tc.get("bos_token_id", 0), eos_token_id=tc.get("eos_token_id", 1),
             pad_token_id=tc.get("pad_token_id", 2),
             image_token_id=tc["vocab_size"] - 1 if image_token_id is None else image_token_id,
             tie_word_embeddings=False, torch_dtype="bfloat16", text_config=tc)
    if quant:
        j["quantization_config"] = dict(quant_method="fp8", activation_scheme="dynamic",
                                        weight_block_size=[32, 32], scale_fmt="ue8m0",
                                        expert_dtype="fp4")
    return j


def native_tensors(tc):
    """(name, shape, dtype, role) of every tensor in the release's native names, in the module
    order of transformers' DeepseekV41ForCausalLM. role: the recipe's distribution and, for
    fp8 / fp4 / engram_table, the release format."""
    H, hc, L = tc["hidden_size"], tc["hc_mult"], tc["num_hidden_layers"]
    hd, ql, E = tc["head_dim"], tc["q_lora_rank"], tc["n_routed_experts"]
    ih, idim = tc["index_n_heads"], tc["index_head_dim"]
    kv_sources, index_sources = tc["kv_source_layer_ids"], tc["index_source_layer_ids"]
    engram_layers = tc.get("engram_layer_ids", [])
    out = [("embed.weight", [tc["vocab_size"], H], "BF16", "embed")]
    for i in range(L):
        p = f"layers.{i}."
        r = tc["compress_ratios"][i]
        a = p + "attn."
        out += _hc_and_window_attention(tc, p)
        if i in kv_sources:
            # ratio > 1: the reference keeps the pooled projection in F32 (modeling comment)
            out.append((a + "compressor.wkv.weight", [hd, H], "F32" if r > 1 else "BF16",
                        "linear"))
            if r > 1:
                out.append((a + "compressor.wgate.weight", [hd, H], "BF16", "wgate"))
            out.append((a + "compressor.norm.weight", [hd], "BF16", "norm"))
        if i in index_sources:
            out += [(a + "indexer.wq_b.weight", [ih * idim, ql], "BF16", "fp8"),
                    (a + "indexer.weights_proj.weight", [ih, H], "BF16", "linear")]
            if i in kv_sources:
                out += [(a + "indexer.wk.weight", [idim, hd], "BF16", "linear"),
                        (a + "indexer.k_norm.weight", [idim], "BF16", "norm")]
        out += _moe_and_norms(tc, p, E, bias_vl=True)
        if i in engram_layers:
            k = engram_layers.index(i)
            rows, ehd = tc["engram_num_embeddings"][k], tc["engram_head_dim"]
            cols = (tc["engram_max_ngram_size"] - 1) * tc["engram_n_heads"]
            out += [(p + "engram.embed.weight", [rows, ehd], "BF16", "engram_table"),
                    (p + "engram.embed.scale", [rows, ehd // 32], "F32", "one"),
                    (p + "engram.wkv.weight", [H * (hc + 1), cols * ehd], "BF16", "fp8"),
                    (p + "engram.q_weight", [hc, H], "BF16", "norm"),
                    (p + "engram.k_weight", [hc, H], "BF16", "norm")]
    out += [("norm.weight", [H], "BF16", "norm"),
            ("lm_head.weight", [tc["vocab_size"], H], "BF16", "linear")]
    # DSpark stages last, so that a checkpoint with them draws its main tensors as one without.
    for s in range(tc.get("num_nextn_predict_layers", 0)):
        out += dspark_stage_tensors(tc, s)
    return out


def _hc_and_window_attention(tc, p):
    """A layer's two mHC sites and its window attention (q path, shared key/value, sink,
    grouped output), under the prefix `p`."""
    H, hc = tc["hidden_size"], tc["hc_mult"]
    nh, hd, ql = tc["num_attention_heads"], tc["head_dim"], tc["q_lora_rank"]
    og, ol = tc["o_groups"], tc["o_lora_rank"]
    mix = (2 + hc) * hc
    out = []
    for site in ("attn", "ffn"):
        out += [(p + f"hc_{site}_fn", [mix, hc * H], "F32", "hc_fn"),
                (p + f"hc_{site}_base", [mix], "F32", "hc_base"),
                (p + f"hc_{site}_scale", [3], "F32", "hc_scale")]
    a = p + "attn."
    return out + [(a + "attn_sink", [nh], "F32", "sink"),
                  (a + "wq_a.weight", [ql, H], "BF16", "fp8"),
                  (a + "q_norm.weight", [ql], "BF16", "norm"),
                  (a + "wq_b.weight", [nh * hd, ql], "BF16", "fp8"),
                  (a + "wkv.weight", [hd, H], "BF16", "fp8"),
                  (a + "kv_norm.weight", [hd], "BF16", "norm"),
                  (a + "wo_a.weight", [og * ol, nh * hd // og], "BF16", "fp8"),
                  (a + "wo_b.weight", [H, og * ol], "BF16", "fp8")]


def _moe_and_norms(tc, p, E, bias_vl):
    """A layer's router (E experts; bias_vl: the image-token bias too), routed and shared
    experts, and its attn / ffn norms, under the prefix `p`."""
    H, I = tc["hidden_size"], tc["moe_intermediate_size"]
    f = p + "ffn."
    out = [(f + "gate.weight", [E, H], "BF16", "gate"), (f + "gate.bias", [E], "F32", "bias")]
    if bias_vl:
        out.append((f + "gate.bias_vl", [E], "F32", "bias"))
    for e in range(E):
        out += [(f + f"experts.{e}.w1.weight", [I, H], "BF16", "fp4"),
                (f + f"experts.{e}.w2.weight", [H, I], "BF16", "fp4"),
                (f + f"experts.{e}.w3.weight", [I, H], "BF16", "fp4")]
    return out + [(f + "shared_experts.w1.weight", [I, H], "BF16", "fp8"),
                  (f + "shared_experts.w2.weight", [H, I], "BF16", "fp8"),
                  (f + "shared_experts.w3.weight", [I, H], "BF16", "fp8"),
                  (p + "attn_norm.weight", [H], "BF16", "norm"),
                  (p + "ffn_norm.weight", [H], "BF16", "norm")]


def dspark_stage_tensors(tc, s):
    """Stage `s` of the DSpark drafter (research notes 5.5): a window-only V4.1 layer under
    `mtp.<s>.` with its own MoE (dspark_n_routed_experts), stage 0 also main_proj (the taps of
    dspark_target_layer_ids, concatenated, to the width) and main_norm, the last stage the Markov
    head (embed, head [vocab, dspark_markov_rank]), the confidence head (proj [1, width + rank])
    and its final norm."""
    H, V, R = tc["hidden_size"], tc["vocab_size"], tc["dspark_markov_rank"]
    p = f"mtp.{s}."
    out = []
    if s == 0:
        taps = len(tc["dspark_target_layer_ids"])
        out += [(p + "main_proj.weight", [H, taps * H], "BF16", "fp8"),
                (p + "main_norm.weight", [H], "BF16", "norm")]
    out += _hc_and_window_attention(tc, p)
    out += _moe_and_norms(tc, p, tc["dspark_n_routed_experts"], bias_vl=False)
    if s == tc["num_nextn_predict_layers"] - 1:
        out += [(p + "markov_head.embed.weight", [V, R], "BF16", "embed"),
                (p + "markov_head.head.weight", [V, R], "BF16", "linear"),
                (p + "confidence_head.proj.weight", [1, H + R], "BF16", "linear"),
                (p + "norm.weight", [H], "BF16", "norm")]
    return out


def make_recipe(tensors, seed, shards=1):
    """Uniform draws with the spreads of a usual random init (as the V4.1 goldens): embeddings and
    Engram tables std 1, norms 1 +- U(std 0.2), linears std 1/sqrt(in), router and compressor
    gates 2/sqrt(in), hc mixers as V4's."""
    e = synthetic_weights.entry
    out = []
    for name, shape, dtype, role in tensors:
        if role in ("embed", "engram_table"):
            out.append(e(name, shape, dtype, std=1.0))
        elif role == "norm":
            out.append(e(name, shape, dtype, center=1.0, std=0.2))
        elif role == "one":
            out.append(e(name, shape, dtype, center=1.0, half_width=0.0))
        elif role == "hc_fn":
            out.append(e(name, shape, dtype, std=1.0 / math.sqrt(shape[1])))
        elif role == "hc_base":
            out.append(e(name, shape, dtype, half_width=0.5))
        elif role == "hc_scale":
            out.append(e(name, shape, dtype, center=0.75, half_width=0.25))
        elif role == "sink":
            out.append(e(name, shape, dtype, half_width=1.0))
        elif role == "bias":
            out.append(e(name, shape, dtype, half_width=0.1))
        elif role in ("gate", "wgate"):
            out.append(e(name, shape, dtype, std=2.0 / math.sqrt(shape[1])))
        else:
            out.append(e(name, shape, dtype, std=1.0 / math.sqrt(shape[1])))
    return dict(generator=synthetic_weights.GENERATOR, seed=seed, shards=shards, tensors=out)


def quant_section(tensors):
    """The recipe's `quant` section in the release formats (what synthetic_checkpoint reads):
    attention, indexer queries, shared experts and Engram wkv FP8 E4M3 with E8M0 32x32 scales,
    routed experts FP4 E2M1 with E8M0 1x32 scales, Engram tables FP8 with E8M0 1x32 scales;
    embeddings, head, router, compressors, indexer keys / weights and norms stay BF16 / F32."""
    by_role = {"fp8": [], "fp4": [], "engram_table": []}
    for name, _, _, role in tensors:
        if role in by_role:
            by_role[role].append(name)
    return {"note": QUANT_NOTE,
            "fp8_e4m3_ue8m0_32x32": {"tensors": by_role["fp8"]},
            "fp4_e2m1_ue8m0_1x32": {"tensors": by_role["fp4"]},
            "engram_fp8_e4m3_ue8m0_1x32": {"tensors": by_role["engram_table"]}}


def kv_bytes_per_token(tc):
    """Bytes per token of the compact cache's main part (F32): each KV source's entry and index key
    spread over its group's `ratio` slots, plus one float of Engram token class when there are
    Engram layers; the window cache (the last sliding_window positions) is apart."""
    floats = sum((tc["head_dim"] + tc["index_head_dim"]) / tc["compress_ratios"][l]
                 for l in tc["kv_source_layer_ids"])
    if tc.get("engram_layer_ids"):
        floats += 1
    return 4 * floats


def full_attention_kv_bytes_per_token(tc):
    """What full attention over every position would keep: one shared K=V vector of head_dim
    per layer and token, F32."""
    return 4 * tc["num_hidden_layers"] * tc["head_dim"]
