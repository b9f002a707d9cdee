#!/usr/bin/env python3
"""Makes tiny random DeepSeek-V4 checkpoint recipes and transformers logits for the tests.

Writes tests/golden/deepseek_v4/<case>/ (same files as the V3 goldens, see
make_deepseek_v3_golden.py): config.json, weights.json (the recipe; no weights are committed),
golden.json (prompts, sha256 of the generated weights, 16 greedy tokens after the 64-token
prompt decoded through transformers' cache, per-case notes) and logits.json.gz
(transformers' float32 logits at every position of 1-, 7-, 64- and 300-token prompts).

Reference: transformers 5.24.0 `models/deepseek_v4` (PyPI), float32, eager attention, one forward
of the whole prompt with the default cache. The checkpoints reach every V4 path: mHC streams with
Sinkhorn mixing and the hc head, the sliding window (prompts longer than it), CSA layers (overlapped
ratio-4 compressor, lightning indexer with top-k smaller than the visible entries) and HCA layers
(non-overlapped compressor; ratio 128 in the release-style case, 16 elsewhere so that 64-token
prompts already emit entries), the attention sink, the inverse rotary on the output, the grouped
low-rank output projection, sqrt(softplus) routing with the selection-only bias, hash-routed
layers (`tid2eid`, int64), the clamped SwiGLU and the shared expert, YaRN on the compress rope.

Cases:
  v4_flash_tiny   release layout and config keys (`compress_ratios` [0, 4, 128, 4],
                  `num_hash_layers`, `rope_scaling` yarn), native tensor names, one MTP module
                  (`mtp.0.*`; transformers has none, so it adds no logits here).
  v4_rates        `layer_types` + `compress_rates` (CSA 4 / HCA 16), `mlp_layer_types`, plain
                  compress rope, wider model with head_dim 96, two safetensors shards.
  v4_flash_tiny_fp8  the v4_flash_tiny weights in the release formats: attention and shared
                  experts FP8 e4m3 with E8M0 128x128 block scales, routed experts FP4 e2m1
                  packed with E8M0 1x32 scales (the recipe's "quant" section); transformers runs
                  on the exactly dequantized values (it cannot load these formats itself).
  v4_hf_names     as v4_flash_tiny but stored under transformers' own module names
                  (`model.layers.N.self_attn.q_a_proj.weight`, fused `mlp.experts.gate_up_proj`
                  [E, 2I, H] and `down_proj` [E, H, I], ...), loaded with load_state_dict.

Ties: the indexer and router top-k are checked for exact ties at the selection boundary on every
prompt (a tie would make the selected set implementation-defined); the script fails if it finds one.

Run: /tmp/refvenv/bin/python tests/reference/make_deepseek_v4_golden.py   (~30 s on 2 cores)
Needs (PyPI): torch==2.15.0 transformers==5.24.0 safetensors numpy. Deterministic.
"""

import copy
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import save_file
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as mv4
from transformers.models.deepseek_v4.configuration_deepseek_v4 import DeepseekV4Config

import synthetic_weights
from make_deepseek_v3_golden import make_weights, write_config, write_logits

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "golden", "deepseek_v4")
PROMPT_LENGTHS = [1, 7, 64, 300]
GREEDY_STEPS = 16

BASE = dict(
    architectures=["DeepseekV4ForCausalLM"],
    model_type="deepseek_v4",
    vocab_size=320,
    hidden_size=64,
    moe_intermediate_size=32,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=1,
    head_dim=64,
    qk_rope_head_dim=16,
    q_lora_rank=32,
    o_lora_rank=16,
    o_groups=2,
    n_routed_experts=8,
    n_shared_experts=1,
    num_experts_per_tok=2,
    scoring_func="sqrtsoftplus",
    topk_method="noaux_tc",
    norm_topk_prob=True,
    routed_scaling_factor=1.5,
    swiglu_limit=1.0,
    hidden_act="silu",
    sliding_window=8,
    index_n_heads=16,
    index_head_dim=32,
    index_topk=4,
    hc_mult=4,
    hc_sinkhorn_iters=20,
    hc_eps=1e-6,
    rope_theta=10000.0,
    compress_rope_theta=160000.0,
    max_position_embeddings=512,
    rms_norm_eps=1e-6,
    num_nextn_predict_layers=0,
    tie_word_embeddings=False,
    bos_token_id=0,
    eos_token_id=1,
)

CASES = [
    dict(name="v4_flash_tiny", seed=11, layout="native",
         config=dict(compress_ratios=[0, 4, 128, 4], num_hash_layers=2, num_nextn_predict_layers=1,
                     rope_scaling=dict(type="yarn", factor=4.0,
                                       original_max_position_embeddings=128,
                                       beta_fast=32, beta_slow=1))),
    dict(name="v4_rates", seed=12, layout="native", shards=2,
         config=dict(hidden_size=96, head_dim=96, num_attention_heads=2, o_groups=2, o_lora_rank=24,
                     q_lora_rank=48, num_hidden_layers=5, sliding_window=16, index_topk=8,
                     n_routed_experts=12, num_experts_per_tok=3, swiglu_limit=10.0,
                     layer_types=["compressed_sparse_attention", "heavily_compressed_attention",
                                  "sliding_attention", "compressed_sparse_attention",
                                  "heavily_compressed_attention"],
                     compress_rates={"compressed_sparse_attention": 4,
                                     "heavily_compressed_attention": 16},
                     mlp_layer_types=["hash_moe", "moe", "moe", "moe", "moe"])),
    dict(name="v4_flash_tiny_fp8", seed=11, layout="native", quant=True,
         config=dict(compress_ratios=[0, 4, 128, 4], num_hash_layers=2, num_nextn_predict_layers=1,
                     rope_scaling=dict(type="yarn", factor=4.0,
                                       original_max_position_embeddings=128,
                                       beta_fast=32, beta_slow=1))),
    dict(name="v4_hf_names", seed=13, layout="hf",
         config=dict(compress_ratios=[0, 4, 128, 4], num_hash_layers=2,
                     rope_scaling=dict(type="yarn", factor=4.0,
                                       original_max_position_embeddings=128,
                                       beta_fast=32, beta_slow=1))),
]


def case_config(case):
    c = copy.deepcopy(BASE)
    c.update(copy.deepcopy(case["config"]))
    return c


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


# ----------------------------------------------------------------------------------------------
# Release weight formats (FP8 e4m3 / FP4 e2m1 with E8M0 power-of-two scales), written out as the
# V4.1 goldens' recipes describe them (../shared/goldens/deepseek_v41/README.md); cross-checked
# against those goldens' sha256s when ../shared is there.
# ----------------------------------------------------------------------------------------------


def pow2_ceil_exponent(x):
    """Exponent of the power-of-two ceiling of positive normal float32 values, from their bits."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    return ((bits >> 23) & 0xFF).astype(np.int32) - 127 + ((bits & 0x7FFFFF) != 0)


def quant_fp8_blocks(w, br, bc):
    """Returns (e4m3 codes uint8 [R, C], E8M0 scales uint8 [ceil(R/br), ceil(C/bc)], dequant f32)."""
    R, C = w.shape
    nbr, nbc = -(-R // br), -(-C // bc)
    codes = np.zeros((R, C), np.uint8)
    scales = np.zeros((nbr, nbc), np.uint8)
    deq = np.zeros((R, C), np.float32)
    for i in range(nbr):
        for j in range(nbc):
            blk = w[i * br:(i + 1) * br, j * bc:(j + 1) * bc]
            amax = np.float32(max(np.abs(blk).max(), np.float32(2.0**-100)))
            e = int(pow2_ceil_exponent(amax * np.float32(1.0 / 448.0)))
            q = torch.from_numpy(np.ldexp(blk, -e).astype(np.float32)).to(torch.float8_e4m3fn)
            codes[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = q.view(torch.uint8).numpy()
            deq[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = np.ldexp(q.float().numpy(), e)
            scales[i, j] = e + 127
    return codes, scales, deq


# Code 8 (sign with magnitude 0) dequantizes to +0, as the V4.1 reference's table does.
FP4_VALUES = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, 0, -.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def e2m1_codes(v):
    """Round to nearest even on the e2m1 grid; sign in bit 3 for v < 0."""
    m = np.abs(v)
    code = np.select([m <= 0.25, m < 0.75, m <= 1.25, m < 1.75, m <= 2.5, m < 3.5, m <= 5.0],
                     [0, 1, 2, 3, 4, 5, 6], 7).astype(np.uint8)
    return code | np.where(v < 0, 8, 0).astype(np.uint8)


def quant_fp4_rows(w):
    """Returns (packed uint8 [R, C/2], E8M0 scales [R, C/32], dequant f32 [R, C])."""
    R, C = w.shape
    blk = w.reshape(R, C // 32, 32)
    amax = np.maximum(np.abs(blk).max(-1), np.float32(6.0 * 2.0**-126)).astype(np.float32)
    e = pow2_ceil_exponent(amax * np.float32(1.0 / 6.0))
    codes = e2m1_codes(np.clip(np.ldexp(blk, -e[..., None]), -6.0, 6.0).astype(np.float32))
    deq = np.ldexp(FP4_VALUES[codes], e[..., None]).astype(np.float32).reshape(R, C)
    codes = codes.reshape(R, C)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    return packed, (e + 127).astype(np.uint8), deq


def sha256(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def check_against_v41_goldens():
    """The quantizers above against the V4.1 goldens' sha256s (their 32x32 FP8 and FP4 tensors)."""
    case = os.path.join(ROOT, "..", "shared", "goldens", "deepseek_v41", "v41_full_fp8")
    if not os.path.isdir(case):
        print("(../shared/goldens/deepseek_v41 absent: quantizer cross-check skipped)")
        return
    recipe = json.load(open(os.path.join(case, "weights.json")))
    quant = recipe["quant"]
    fp8 = set(quant["fp8_e4m3_ue8m0_32x32"]["tensors"])
    fp4 = set(quant["fp4_e2m1_ue8m0_1x32"]["tensors"])
    checked = 0
    for name, _, dtype, v in synthetic_weights.tensors(recipe):
        if name not in fp8 and name not in fp4:
            continue
        w = (v.astype(np.uint32) << 16).view(np.float32) if dtype == "BF16" else v
        q, sc, d = quant_fp8_blocks(w, 32, 32) if name in fp8 else quant_fp4_rows(w)
        want = quant["sha256"][name]
        assert (sha256(q), sha256(sc), sha256(d)) == (want["q"], want["scale"],
                                                       want["dequant_f32"]), name
        checked += 1
    print(f"quantizers agree with the V4.1 goldens on {checked} tensors")


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


def quantize(weights, recipe):
    """Dequantized float32 weights for transformers, and the recipe's quant section."""
    fp8, fp4 = fp8_targets([t["name"] for t in recipe["tensors"]])
    deq, shas = dict(weights), {}
    for name in fp8 + fp4:
        w = weights[name].float().numpy()
        q, sc, d = quant_fp8_blocks(w, 128, 128) if name in fp8 else quant_fp4_rows(w)
        deq[name] = torch.from_numpy(d)
        shas[name] = dict(q=sha256(q), scale=sha256(sc), dequant_f32=sha256(d))
    section = {
        "note": "Quantize the recipe's (bf16-rounded) tensors as the V4 release stores them; "
                "store `<prefix>.weight` (quantized) and `<prefix>.scale` (F8_E8M0 bytes: value "
                "2^(b-127)). Algorithms as ../shared/goldens/deepseek_v41/README.md, with "
                "128x128 FP8 blocks.",
        "fp8_e4m3_ue8m0_128x128": dict(tensors=fp8, dtype="F8_E4M3", scale_dtype="F8_E8M0",
                                       scale_shape="[ceil(out/128), ceil(in/128)]"),
        "fp4_e2m1_ue8m0_1x32": dict(tensors=fp4, dtype="I8", packed_shape="[out, in/2]",
                                    scale_dtype="F8_E8M0", scale_shape="[out, in/32]"),
        "sha256": shas,
    }
    return deq, section


def hf_config_json(c):
    j = dict(c)
    return j


def to_state_dict(c, weights, layout):
    """transformers' state dict for the checkpoint tensors."""
    if layout == "hf":
        return {k: (v.float() if v.dtype != torch.int64 else v) for k, v in weights.items()}
    sd = {}
    E = c["n_routed_experts"]
    by_layer = {}
    for name, t in weights.items():
        if name.startswith("mtp."):
            continue  # transformers has no MTP module (its checkpoints' mtp.* are ignored)
        if ".experts." in name and ".shared_experts." not in name:
            parts = name.split(".")
            by_layer.setdefault(int(parts[1]), {})[(int(parts[4]), parts[5])] = t.float()
            continue
        sd[hf_name(name)] = t.float() if t.dtype != torch.int64 else t
    for l, ex in by_layer.items():
        sd[f"model.layers.{l}.mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([ex[(e, "w1")], ex[(e, "w3")]], 0) for e in range(E)])
        sd[f"model.layers.{l}.mlp.experts.down_proj"] = torch.stack(
            [ex[(e, "w2")] for e in range(E)])
    return sd


def build_model(cfg_json, sd):
    cfg = DeepseekV4Config(**{k: v for k, v in cfg_json.items()
                              if k not in ("architectures", "model_type", "topk_method")})
    cfg._attn_implementation = "eager"
    model = mv4.DeepseekV4ForCausalLM(cfg).float().eval()
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected, unexpected
    assert not missing, missing
    for k, v in sd.items():
        assert torch.equal(model.state_dict()[k], v), k
    return model


class TieProbe:
    """Records the smallest relative gap between the k-th and (k+1)-th values of every top-k the
    router and the indexer take, and counts exact ties there."""

    def __init__(self):
        self.ties = 0
        self.min_gap = math.inf
        self._orig = torch.topk

    def __enter__(self):
        probe = self

        def topk(x, k, dim=-1, largest=True, sorted=True):
            if x.dtype.is_floating_point and x.shape[dim] > k and k > 0:
                v = torch.sort(x, dim=dim, descending=True).values
                a, b = v.narrow(dim, k - 1, 1), v.narrow(dim, k, 1)
                finite = torch.isfinite(a) & torch.isfinite(b)
                if finite.any():
                    gap = ((a - b).abs() / (a.abs() + 1e-30))[finite]
                    probe.ties += int((gap == 0).sum())
                    probe.min_gap = min(probe.min_gap, float(gap.min()))
            return probe._orig(x, k, dim=dim, largest=largest, sorted=sorted)

        torch.topk = topk
        torch.Tensor.topk = lambda self_, k, dim=-1, largest=True, sorted=True: topk(
            self_, k, dim, largest, sorted)
        return self

    def __exit__(self, *a):
        torch.topk = self._orig
        del torch.Tensor.topk


def make_case(case):
    c = case_config(case)
    name = case["name"]
    tensors = native_tensors(c) if case["layout"] == "native" else hf_tensors(c)
    recipe = make_recipe(c, tensors, case["seed"], case.get("shards", 1))
    weights, weights_sha = make_weights(recipe)
    cfg_json = hf_config_json(c)
    if case.get("quant"):
        weights, recipe["quant"] = quantize(weights, recipe)
        cfg_json["quantization_config"] = dict(
            quant_method="fp8", fmt="e4m3", scale_fmt="ue8m0", activation_scheme="dynamic",
            weight_block_size=[128, 128], expert_dtype="fp4")
    rng = np.random.default_rng(case["seed"] + 100)
    prompts = [rng.integers(0, c["vocab_size"], size=n).tolist() for n in PROMPT_LENGTHS]
    model = build_model(cfg_json, to_state_dict(c, weights, case["layout"]))
    out = {}
    with TieProbe() as probe, torch.no_grad():
        for toks in prompts:
            logits = model(input_ids=torch.tensor([toks]), use_cache=True).logits[0].float()
            out[f"logits_{len(toks)}"] = logits.contiguous()
    assert probe.ties == 0, f"{name}: {probe.ties} exact top-k ties at the selection boundary"
    # Self-consistency of the reference: the same 300 tokens in chunks through the cache.
    with torch.no_grad():
        toks = prompts[-1]
        cache = None
        chunked = []
        for a, b in [(0, 37), (37, 38), (38, 200), (200, 300)]:
            r = model(input_ids=torch.tensor([toks[a:b]]), past_key_values=cache, use_cache=True)
            cache = r.past_key_values
            chunked.append(r.logits[0].float())
        chunk_diff = float((torch.cat(chunked) - out["logits_300"]).abs().max())
    # Greedy continuation of the 64-token prompt through the cache (prefill, then one token per
    # forward), with the smallest top-1 / top-2 margin on the way.
    with torch.no_grad():
        r = model(input_ids=torch.tensor([prompts[2]]), use_cache=True)
        cache, greedy, margin = r.past_key_values, [], math.inf
        last = r.logits[0, -1].float()
        for _ in range(GREEDY_STEPS):
            top2 = torch.topk(last, 2).values
            margin = min(margin, float(top2[0] - top2[1]))
            greedy.append(int(last.argmax()))
            r = model(input_ids=torch.tensor([[greedy[-1]]]), past_key_values=cache,
                      use_cache=True)
            cache, last = r.past_key_values, r.logits[0, -1].float()
    kinds, hashed = layer_kinds(c)
    golden = dict(greedy_prompt_index=2, greedy_tokens=greedy, greedy_min_top2_margin=margin,
                  config=name, prompts=prompts, vocab=c["vocab_size"], weights_sha256=weights_sha,
                  layout=case["layout"], layer_kinds=[k for k, _ in kinds],
                  compress_ratios=[r for _, r in kinds], hash_layers=hashed,
                  reference="transformers 5.24.0 models/deepseek_v4, float32, eager",
                  topk_min_relative_gap=probe.min_gap,
                  reference_chunked_vs_full_max_abs=chunk_diff)
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    write_config(d, cfg_json)
    with open(os.path.join(d, "weights.json"), "w") as f:
        json.dump(recipe, f, indent=0)
        f.write("\n")
    write_logits(os.path.join(d, "logits.json.gz"), out)
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1, sort_keys=True)
        f.write("\n")
    top1 = out["logits_300"].argmax(-1)
    return (f"{name}: {len(weights)} tensors, distinct top-1 over 300 positions "
            f"{len(set(top1.tolist()))}, min top-k gap {probe.min_gap:.2e}, "
            f"reference chunked-vs-full {chunk_diff:.2e}")


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    check_against_v41_goldens()
    for case in CASES:
        print(make_case(case), flush=True)


if __name__ == "__main__":
    sys.exit(main())
