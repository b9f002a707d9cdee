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
from deepseek_v4_shapes import (fp8_targets, hf_name, hf_tensors, layer_kinds, make_recipe,
                                native_tensors)
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
