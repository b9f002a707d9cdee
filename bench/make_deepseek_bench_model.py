#!/usr/bin/env python3
"""Writes a DeepSeek-V3-shaped random checkpoint for the speed benchmark (bench/deepseek_speed.sh).

Shape (about 0.9B parameters, 0.7B of them outside the embeddings): 4 layers (the first dense),
hidden 1024, 16 heads of MLA (q LoRA 384, KV latent 256, nope 64, rope 32, v 64), 64 routed
experts of 768, top-6 in 8 groups keeping 4, one shared expert, DeepSeek-V3's 129,280-token
vocabulary and tokenizer (copied from ../shared/models/deepseek-v3-tokenizer), and one MTP
module. Written as BF16 (`<out>/bf16`) and as FP8 E4M3 with 128x128 `weight_scale_inv` blocks
(`<out>/fp8`), the way DeepSeek ships its weights.

The weights are random but not arbitrary, so that speculative decoding has something to accept:
attention and MLP outputs are scaled down (x0.1), which leaves each layer's input dominated by
the token's own embedding, so the model's greedy next token depends mostly on the current token;
the MTP module is "copied" from that structure: its eh_proj passes the next token's normalized
embedding through (identity on the embedding half, zero on the hidden half), so its draft for
position t+2 is close to what the main model will predict from token t+1. Acceptance is
therefore high but not total (the scaled-down layers still perturb the choice).

Needs numpy only. Usage:
  python bench/make_deepseek_bench_model.py --out /tmp/ds-bench [--seed 0] [--vocab-size 129280]
      [--layers 4] [--dense-layers 1] [--kinds bf16,fp8] [--tokenizer-dir DIR] [--output-scale 0.1]
"""

import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
from deepseek_v3_shapes import BASE, hf_config_json, tensor_shapes  # noqa: E402

BLOCK = 128
FP8_MAX = 448.0
OUTPUT_SCALE = 0.1  # o_proj and down_proj (see the module docstring)

CONFIG = dict(
    BASE,
    vocab_size=129280,
    hidden_size=1024,
    intermediate_size=3072,
    moe_intermediate_size=768,
    num_hidden_layers=4,
    num_attention_heads=16,
    kv_lora_rank=256,
    q_lora_rank=384,
    qk_nope_head_dim=64,
    qk_rope_head_dim=32,
    v_head_dim=64,
    n_routed_experts=64,
    num_experts_per_tok=6,
    n_group=8,
    topk_group=4,
    max_position_embeddings=8192,
    num_nextn_predict_layers=1,
)


def bf16_bits(x):
    """float32 array -> bfloat16 bit patterns (uint16), round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def e4m3_table():
    """Float value of each E4M3FN code 0..127 (positive half; 0x7f is NaN and never produced)."""
    vals = []
    for code in range(128):
        e, m = code >> 3, code & 7
        vals.append(m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(vals[:127], dtype=np.float32)


E4M3 = e4m3_table()


def to_e4m3(x):
    """Nearest E4M3FN code for |x| <= 448 (ties to the lower magnitude; fine for a benchmark)."""
    a = np.abs(x)
    hi = np.clip(np.searchsorted(E4M3, a), 1, len(E4M3) - 1)
    lo = hi - 1
    code = np.where(a - E4M3[lo] <= E4M3[hi] - a, lo, hi).astype(np.uint8)
    return code | (np.signbit(x).astype(np.uint8) << 7)


def quantize_fp8(w):
    out, n = w.shape
    nbo, nbi = (out + BLOCK - 1) // BLOCK, (n + BLOCK - 1) // BLOCK
    q = np.empty((out, n), dtype=np.uint8)
    s = np.empty((nbo, nbi), dtype=np.float32)
    for bo in range(nbo):
        for bi in range(nbi):
            blk = w[bo * BLOCK:(bo + 1) * BLOCK, bi * BLOCK:(bi + 1) * BLOCK]
            scale = max(float(np.abs(blk).max()), 1e-12) / FP8_MAX
            s[bo, bi] = scale
            q[bo * BLOCK:(bo + 1) * BLOCK, bi * BLOCK:(bi + 1) * BLOCK] = to_e4m3(blk / scale)
    return q, s


def is_fp8_target(name, shape):
    if len(shape) != 2 or not name.endswith(".weight"):
        return False
    return not (name in ("model.embed_tokens.weight", "lm_head.weight")
                or name.endswith("mlp.gate.weight"))


def make_tensor(rng, c, name, shape, output_scale):
    if name.endswith("e_score_correction_bias"):
        return rng.uniform(-0.1, 0.1, shape).astype(np.float32)
    if len(shape) == 1:
        return np.ones(shape, dtype=np.float32)
    if name.endswith("eh_proj.weight"):
        h = c["hidden_size"]
        w = np.zeros(shape, dtype=np.float32)
        w[:, :h] = np.eye(h, dtype=np.float32)
        return w
    if name == "model.embed_tokens.weight":
        return rng.standard_normal(shape, dtype=np.float32)
    w = rng.standard_normal(shape, dtype=np.float32) / np.sqrt(shape[1])
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        w *= output_scale
    if name.endswith("mlp.gate.weight"):
        w *= 2.0
    return w


class SafetensorsWriter:
    """Streams tensors into one .safetensors file (header first, sizes known up front)."""

    def __init__(self, path, entries):
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for name, dtype, shape, nbytes in entries:
            header[name] = {"dtype": dtype, "shape": list(shape),
                            "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
        blob = json.dumps(header, separators=(",", ":")).encode()
        blob += b" " * (-len(blob) % 8)
        self.f = open(path + ".tmp", "wb")
        self.path = path
        self.f.write(struct.pack("<Q", len(blob)) + blob)

    def write(self, array):
        self.f.write(np.ascontiguousarray(array).tobytes())

    def close(self):
        self.f.close()
        os.replace(self.path + ".tmp", self.path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vocab-size", type=int, default=CONFIG["vocab_size"])
    parser.add_argument("--layers", type=int, default=CONFIG["num_hidden_layers"])
    parser.add_argument("--dense-layers", type=int, default=CONFIG["first_k_dense_replace"],
                        help="first_k_dense_replace: layers with a dense MLP instead of MoE")
    parser.add_argument("--output-scale", type=float, default=OUTPUT_SCALE,
                        help="scale of o_proj / down_proj: smaller makes drafts easier to accept")
    parser.add_argument("--kinds", default="bf16,fp8", help="which checkpoints to write")
    parser.add_argument("--tokenizer-dir",
                        default=os.path.join(ROOT, "..", "shared", "models", "deepseek-v3-tokenizer"))
    args = parser.parse_args()
    c = dict(CONFIG, vocab_size=args.vocab_size, num_hidden_layers=args.layers,
             first_k_dense_replace=args.dense_layers)
    shapes = tensor_shapes(c)
    total = sum(int(np.prod(s)) for _, s in shapes)
    print(f"{total / 1e9:.3f}B parameters", file=sys.stderr)

    for kind in args.kinds.split(","):
        d = os.path.join(args.out, kind)
        os.makedirs(d, exist_ok=True)
        cfg = hf_config_json(c)
        if kind == "fp8":
            cfg["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                          "quant_method": "fp8", "weight_block_size": [BLOCK, BLOCK]}
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            src = os.path.join(args.tokenizer_dir, name)
            if os.path.exists(src):
                shutil.copyfile(src, os.path.join(d, name))
        entries = []
        for name, shape in shapes:
            if name.endswith("e_score_correction_bias"):
                entries.append((name, "F32", shape, 4 * int(np.prod(shape))))
            elif kind == "fp8" and is_fp8_target(name, shape):
                entries.append((name, "F8_E4M3", shape, int(np.prod(shape))))
                sb = ((shape[0] + BLOCK - 1) // BLOCK, (shape[1] + BLOCK - 1) // BLOCK)
                entries.append((name + "_scale_inv", "F32", sb, 4 * sb[0] * sb[1]))
            else:
                entries.append((name, "BF16", shape, 2 * int(np.prod(shape))))
        writer = SafetensorsWriter(os.path.join(d, "model.safetensors"), entries)
        rng = np.random.default_rng(args.seed)  # same weights in both files
        for name, shape in shapes:
            w = make_tensor(rng, c, name, shape, args.output_scale)
            if name.endswith("e_score_correction_bias"):
                writer.write(w)
            elif kind == "fp8" and is_fp8_target(name, shape):
                q, s = quantize_fp8(w)
                writer.write(q)
                writer.write(s)
            else:
                writer.write(bf16_bits(w))
        writer.close()
        print(f"wrote {d}", file=sys.stderr)


if __name__ == "__main__":
    main()
