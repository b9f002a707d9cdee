#!/usr/bin/env python3
"""Makes tiny random DeepSeek-V3 / V2 checkpoint recipes and transformers logits for the tests.

Writes tests/golden/deepseek_v3/<case>/ for each case and <case>_fp8/ for the FP8 variants
(the same weights block-quantized to FP8 E4M3 with 128x128 fp32 `weight_scale_inv`, as DeepSeek
ships them):

  <case>/config.json          the Hugging Face config (FP8: with quantization_config)
  <case>/weights.json         the weight recipe: seed, tensor names, shapes, dtypes and uniform
                              ranges (see synthetic_weights.py); FP8 cases list the quantized
                              tensors. No weights are committed: the C++ tests and the e2e tests
                              write the safetensors from this recipe at test time
                              (src/model/synthetic_checkpoint.h, bit-identical to this script).
  <case>/golden.json          prompts (token ids), sha256 of the generated weights, fp8
                              dequantization sha256s, MTP info
  <case>/logits.json.gz       F32 logits of transformers (float32 compute): "logits_<n>" for
                              every position of the n-token prompt, "mtp_logits" for the MTP
                              module; each {"shape": [rows, vocab], "data": [...]} with each
                              float32 written as its shortest round-trip decimal
  v3_direct_q/tokenizer.json  a toy byte-level BPE (320 ids) so `deepinfer generate` can run
  fp8_e4m3.json               float value of all 256 E4M3 codes according to torch.float8_e4m3fn

Nothing is downloaded. transformers computes in float32 on the exact bf16 weights (for FP8
cases: on the block dequantized weights bf16(fp8 * scale_inv)), so the C++ engine should agree
to ~1e-4.

Run: /tmp/refvenv/bin/python tests/reference/make_deepseek_v3_golden.py   (~10 s on 2 cores)
Needs (PyPI, as used for the committed goldens): torch==2.15.0 transformers==5.24.0
safetensors==0.8.0 tokenizers==0.23.3. The output is deterministic: rerunning rewrites
identical files.
"""

import copy
import gzip
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
from transformers import AutoModelForCausalLM
import synthetic_weights
from deepseek_v3_shapes import BASE, hf_config_json, tensor_shapes
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    DeepseekV3DecoderLayer,
    DeepseekV3RMSNorm,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "golden", "deepseek_v3")
PROMPT_LENGTHS = [1, 7, 64, 300]
BLOCK = 128
FP8_MAX = 448.0


CASES = [
    # (a) q LoRA, one expert group, 8 experts top-2; also shipped as FP8.
    dict(name="v3_qlora", seed=1, fp8=True),
    # (b) direct q_proj (q_lora_rank null), 16 experts top-4 in 2 groups keep 1; sharded files.
    # Ships a tiny byte-level BPE tokenizer.json so `deepinfer generate` can run on it.
    dict(name="v3_direct_q", seed=2, q_lora_rank=None, vocab_size=320, n_routed_experts=16,
         num_experts_per_tok=4, n_group=2, topk_group=1, shards=2, tokenizer=True),
    # (c)+(d) 3 layers, 12 experts top-3 in 4 groups keep 2, YaRN with mscale != mscale_all_dim,
    # hidden 160 so that FP8 128-blocks are partial in both directions, one MTP module.
    dict(name="v3_groups_yarn", seed=3, fp8=True, hidden_size=160, intermediate_size=192,
         num_hidden_layers=3, n_routed_experts=12, moe_intermediate_size=16,
         num_experts_per_tok=3, n_group=4,
         topk_group=2, max_position_embeddings=256, num_nextn_predict_layers=1,
         rope_scaling=dict(type="yarn", factor=4.0, original_max_position_embeddings=64,
                           beta_fast=32, beta_slow=1, mscale=0.8, mscale_all_dim=1.0)),
    # deepseek_v2 (V2-Lite style): direct q, softmax scores, group_limited_greedy, no renorm.
    dict(name="v2_lite", seed=4, model_type="deepseek_v2", q_lora_rank=None, n_routed_experts=8,
         num_experts_per_tok=2, n_group=2, topk_group=1, scoring_func="softmax",
         topk_method="group_limited_greedy", norm_topk_prob=False, routed_scaling_factor=2.0),
]


def case_config(case):
    c = copy.deepcopy(BASE)
    for k, v in case.items():
        if k in c:
            c[k] = v
    return c


def make_recipe(c, seed, shards=1):
    """The weight recipe: uniform draws with the spreads of a usual random init."""
    out = []
    for name, shape in tensor_shapes(c):
        if name.endswith("e_score_correction_bias"):
            # fp32 in real checkpoints; large enough to change some selections.
            out.append(synthetic_weights.entry(name, shape, "F32", half_width=0.1))
        elif len(shape) == 1:  # norms: near 1 so a missing norm shows up in the logits
            out.append(synthetic_weights.entry(name, shape, center=1.0, std=0.2))
        elif name == "model.embed_tokens.weight":
            out.append(synthetic_weights.entry(name, shape, std=1.0))
        else:
            gain = 2.0 if name.endswith("mlp.gate.weight") else 1.0
            out.append(synthetic_weights.entry(name, shape, std=gain / math.sqrt(shape[1])))
    return dict(generator=synthetic_weights.GENERATOR, seed=seed, shards=shards, tensors=out)


def make_weights(recipe):
    """torch tensors of the recipe plus the sha256 of all their bytes in recipe order."""
    w, h = {}, hashlib.sha256()
    for name, _, dtype, v in synthetic_weights.tensors(recipe):
        h.update(v.tobytes())
        if dtype == "BF16":
            w[name] = torch.from_numpy(v.view(np.int16).copy()).view(torch.bfloat16)
        else:
            w[name] = torch.from_numpy(v.copy())
    return w, h.hexdigest()


def quantize_fp8(w):
    """Reference 128x128 block quantization: scale = float32(amax / 448) (computed in float64),
    q = e4m3fn(w / scale) rounded to nearest even; src/model/synthetic_checkpoint.cc does the
    same and the dequantization sha256s in golden.json check that it does."""
    out, n = w.shape
    wf = w.float()
    nbo, nbi = (out + BLOCK - 1) // BLOCK, (n + BLOCK - 1) // BLOCK
    q = torch.empty((out, n), dtype=torch.float8_e4m3fn)
    s = torch.empty((nbo, nbi), dtype=torch.float32)
    for bo in range(nbo):
        for bi in range(nbi):
            blk = wf[bo * BLOCK:(bo + 1) * BLOCK, bi * BLOCK:(bi + 1) * BLOCK]
            scale = max(blk.abs().max().item(), 1e-12) / FP8_MAX
            s[bo, bi] = scale
            q[bo * BLOCK:(bo + 1) * BLOCK, bi * BLOCK:(bi + 1) * BLOCK] = (
                (blk / s[bo, bi]).to(torch.float8_e4m3fn))
    return q, s


def dequantize_fp8(q, s):
    """Reference block dequantization (DeepSeek fp8_cast_bf16 weight_dequant): bf16(q * s)."""
    out, n = q.shape
    full = s.repeat_interleave(BLOCK, 0)[:out].repeat_interleave(BLOCK, 1)[:, :n]
    return (q.float() * full).to(torch.bfloat16)


def is_fp8_target(name, shape):
    if len(shape) != 2 or not name.endswith(".weight"):
        return False
    return not (name in ("model.embed_tokens.weight", "lm_head.weight")
                or name.endswith("mlp.gate.weight") or "shared_head.head" in name)


def write_config(directory, config_json):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config_json, f, indent=2, sort_keys=True)
        f.write("\n")


def write_checkpoint(directory, config_json, tensors):
    """A loadable checkpoint for transformers (temporary; never written into the repo)."""
    write_config(directory, config_json)
    save_file({k: t.contiguous() for k, t in tensors.items()},
              os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})


TOKENIZER_CORPUS = [
    "Once upon a time there was a little model that could.",
    "The quick brown fox jumps over the lazy dog.",
    "Multi-head latent attention caches one small vector per token.",
    "Mixture of experts: each token visits a few experts and one shared expert.",
    "def forward(x):\n    return x + attention(norm(x))\n",
] * 4


def write_tokenizer(directory, vocab_size):
    """A byte-level BPE tokenizer.json trained on a fixed toy corpus (ids 0/1 = BOS/EOS)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bos, eos = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[bos, eos],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(TOKENIZER_CORPUS, trainer)
    assert tok.token_to_id(bos) == 0 and tok.token_to_id(eos) == 1
    assert tok.get_vocab_size() <= vocab_size
    tok.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump(dict(bos_token=bos, eos_token=eos, add_bos_token=True, add_eos_token=False,
                       model_max_length=c_max_len(directory), tokenizer_class="LlamaTokenizerFast"),
                  f, indent=2, sort_keys=True, ensure_ascii=False)
        f.write("\n")


def c_max_len(directory):
    with open(os.path.join(directory, "config.json")) as f:
        return json.load(f)["max_position_embeddings"]


def load_hf(directory):
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    return model


def check_loaded(model, weights):
    """Every checkpoint tensor of the main layers must have reached the model unchanged."""
    sd = model.state_dict()
    for name, t in weights.items():
        if name in sd:
            assert torch.equal(sd[name], t.float()), name
    n = sum(1 for k in weights if k in sd)
    assert n > 10, "transformers renamed everything; cannot verify loading"


def run_mtp(model, c, weights, tokens):
    """MTP module 0 (vLLM deepseek_mtp convention), built from transformers' own layers.

    input at position i: token x_{i+1} and the main model's final (post-norm) hidden h_i;
    e = Emb(x_{i+1}) (zeroed at position 0); u = eh_proj(cat[enorm(e), hnorm(h_i)]);
    u = DecoderLayer(u); logits = lm_head(shared_head.norm(u)). Predicts x_{i+2}.
    """
    L = c["num_hidden_layers"]
    p = f"model.layers.{L}."
    cfg = model.config
    layer = DeepseekV3DecoderLayer(cfg, layer_idx=L).float().eval()
    sd = {}
    for k, t in weights.items():
        if k.startswith(p) and not k[len(p):].startswith(
                ("enorm", "hnorm", "eh_proj", "shared_head")):
            sd[k[len(p):]] = t.float()
    # transformers keeps experts fused: gate_up_proj [E, 2I, H], down_proj [E, H, I].
    E = c["n_routed_experts"]
    fused = {}
    gate_up, down = [], []
    for e in range(E):
        gate_up.append(torch.cat([sd.pop(f"mlp.experts.{e}.gate_proj.weight"),
                                  sd.pop(f"mlp.experts.{e}.up_proj.weight")], 0))
        down.append(sd.pop(f"mlp.experts.{e}.down_proj.weight"))
    fused["mlp.experts.gate_up_proj"] = torch.stack(gate_up)
    fused["mlp.experts.down_proj"] = torch.stack(down)
    sd.update(fused)
    missing, unexpected = layer.load_state_dict(sd, strict=False)
    assert not unexpected, unexpected
    assert all("rotary" in m for m in missing), missing
    H = c["hidden_size"]
    enorm = DeepseekV3RMSNorm(H, eps=1e-6)
    hnorm = DeepseekV3RMSNorm(H, eps=1e-6)
    fnorm = DeepseekV3RMSNorm(H, eps=1e-6)
    enorm.weight.data = weights[p + "enorm.weight"].float()
    hnorm.weight.data = weights[p + "hnorm.weight"].float()
    fnorm.weight.data = weights[p + "shared_head.norm.weight"].float()
    eh = weights[p + "eh_proj.weight"].float()
    with torch.no_grad():
        ids = torch.tensor([tokens])
        h = model.model(input_ids=ids).last_hidden_state  # post final norm
        n = len(tokens) - 1
        e = model.model.embed_tokens(torch.tensor([tokens[1:]]))
        e[:, 0] = 0
        u = torch.cat([enorm(e), hnorm(h[:, :n])], dim=-1) @ eh.T
        pos = torch.arange(n)[None]
        pe = model.model.rotary_emb(u, pos)
        mask = torch.full((n, n), float("-inf")).triu(1)[None, None]
        u = layer(u, attention_mask=mask, position_ids=pos, position_embeddings=pe)
        if isinstance(u, tuple):
            u = u[0]
        logits = fnorm(u) @ model.lm_head.weight.T
    return logits[0].float()


def make_case(case):
    c = case_config(case)
    name = case["name"]
    cfg_json = hf_config_json(c)
    recipe = make_recipe(c, case["seed"], case.get("shards", 1))
    weights, weights_sha = make_weights(recipe)
    rng = np.random.default_rng(case["seed"] + 100)
    prompts = [rng.integers(0, c["vocab_size"], size=n).tolist() for n in PROMPT_LENGTHS]

    variants = [(name, weights, None)]
    if case.get("fp8"):
        deq, sha = dict(weights), {}
        for k, t in weights.items():
            if is_fp8_target(k, tuple(t.shape)):
                deq[k] = dequantize_fp8(*quantize_fp8(t))
                sha[k] = hashlib.sha256(deq[k].view(torch.int16).numpy().tobytes()).hexdigest()
        variants.append((name + "_fp8", deq, sha))

    summary = []
    for vname, wts, fp8_sha in variants:
        d = os.path.join(OUT, vname)
        shutil.rmtree(d, ignore_errors=True)
        with tempfile.TemporaryDirectory() as tmp:
            write_checkpoint(tmp, cfg_json, wts)
            model = load_hf(tmp)
            check_loaded(model, wts)
            out = {}
            with torch.no_grad():
                for toks in prompts:
                    logits = model(input_ids=torch.tensor([toks])).logits[0].float()
                    out[f"logits_{len(toks)}"] = logits.contiguous()
            golden = dict(config=name, prompts=prompts, vocab=c["vocab_size"],
                          weights_sha256=weights_sha)
            if c["num_nextn_predict_layers"] > 0:
                mtp_prompt = prompts[2]
                out["mtp_logits"] = run_mtp(model, c, wts, mtp_prompt).contiguous()
                golden["mtp_prompt_index"] = 2
        rec = dict(recipe)
        if fp8_sha is None:
            write_config(d, cfg_json)
            if case.get("tokenizer"):
                write_tokenizer(d, c["vocab_size"])
        else:
            j = dict(cfg_json)
            j["quantization_config"] = dict(activation_scheme="dynamic", fmt="e4m3",
                                            quant_method="fp8", weight_block_size=[BLOCK, BLOCK])
            write_config(d, j)
            rec["fp8"] = dict(format="e4m3fn", block=BLOCK, tensors=sorted(fp8_sha))
            golden["dequant_bf16_sha256"] = fp8_sha
        with open(os.path.join(d, "weights.json"), "w") as f:
            json.dump(rec, f, indent=0)
            f.write("\n")
        write_logits(os.path.join(d, "logits.json.gz"), out)
        with open(os.path.join(d, "golden.json"), "w") as f:
            json.dump(golden, f, indent=1, sort_keys=True)
            f.write("\n")
        top1 = out["logits_300"].argmax(-1)
        summary.append(f"{vname}: {len(wts)} tensors, top-1 distinct over 300 positions: "
                       f"{len(set(top1.tolist()))}")
    return summary


def write_logits(path, tensors):
    """Text goldens (gzip, fixed mtime so reruns rewrite identical bytes): each float32 as the
    shortest decimal that reads back to the same float32."""
    parts = []
    for name, t in tensors.items():
        a = t.numpy().astype(np.float32)
        data = ",".join(np.format_float_positional(x, unique=True, trim="-") for x in a.ravel())
        parts.append(f'"{name}":{{"shape":{json.dumps(list(a.shape))},"data":[{data}]}}')
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0,
                                                filename="") as f:
        f.write(("{" + ",".join(parts) + "}\n").encode())


def fp8_table():
    codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    vals = [None if math.isnan(v) else v for v in codes.tolist()]
    with open(os.path.join(OUT, "fp8_e4m3.json"), "w") as f:
        json.dump({"source": "torch.float8_e4m3fn", "torch": torch.__version__, "values": vals},
                  f, indent=0)
        f.write("\n")


def main():
    torch.manual_seed(0)
    torch.set_num_threads(2)
    os.makedirs(OUT, exist_ok=True)
    fp8_table()
    for case in CASES:
        for line in make_case(case):
            print(line)
    total = 0
    for dp, _, fs in os.walk(OUT):
        total += sum(os.path.getsize(os.path.join(dp, f)) for f in fs)
    print(f"total {total / 1e6:.2f} MB in {OUT}")


if __name__ == "__main__":
    sys.exit(main())
