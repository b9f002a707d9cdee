#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets safetensors, llama2c, tokenizer_json,
prefix_checkpoint, chat_template, image and image_part into tests/fuzz/corpus/<target>/ (tiny synthetic files, no model weights; the input
layouts are described at the top of each tests/fuzz/<target>_fuzz.cc). Standard library only;
deterministic, so rerunning it rewrites the same bytes:
    python3 tests/fuzz/make_seeds.py
"""

import json
import os
import struct
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def write(target, name, data):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def compact(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


# ---------------------------------------------------------------- safetensors + config.json

def values(n, k):
    """n small finite floats, different per tensor index k."""
    return [((i * 7 + k * 3) % 11 - 5) / 16.0 for i in range(n)]


def encode(dtype, vals):
    if dtype == "F32":
        return struct.pack("<%df" % len(vals), *vals)
    if dtype == "BF16":
        return b"".join(struct.pack("<f", v)[2:] for v in vals)
    if dtype == "F16":
        return struct.pack("<%de" % len(vals), *vals)
    if dtype == "F8_E4M3":
        return bytes((0x30 + i) & 0x7E for i in range(len(vals)))  # finite codes only
    if dtype == "I8":  # packed FP4 e2m1, two codes per byte
        return bytes((i * 37) & 0xFF for i in range(len(vals)))
    if dtype == "F8_E8M0":  # power-of-two scales around 1 (never the 255 NaN)
        return bytes(120 + i % 12 for i in range(len(vals)))
    if dtype == "I64":  # expert ids
        return struct.pack("<%dq" % len(vals), *[i % 2 for i in range(len(vals))])
    raise ValueError(dtype)


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape)]; returns the file bytes."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for k, (name, dtype, shape) in enumerate(tensors):
        n = 1
        for d in shape:
            n *= d
        blob = encode(dtype, values(n, k))
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    h = compact(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def deepseek_tensors(cfg, dtype="F32", fp8=()):
    H, V, nh = cfg["hidden_size"], cfg["vocab_size"], cfg["num_attention_heads"]
    nope, rope, vh = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    kvr, qr = cfg["kv_lora_rank"], cfg["q_lora_rank"]
    E, moe = cfg.get("n_routed_experts", 0), cfg.get("moe_intermediate_size", 0)
    out = [("model.embed_tokens.weight", dtype, [V, H]), ("model.norm.weight", "F32", [H]),
           ("lm_head.weight", dtype, [V, H])]
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        a = p + "self_attn."
        out += [(p + "input_layernorm.weight", "F32", [H]),
                (p + "post_attention_layernorm.weight", "F32", [H])]
        if qr:
            out += [(a + "q_a_proj.weight", dtype, [qr, H]), (a + "q_a_layernorm.weight", "F32", [qr]),
                    (a + "q_b_proj.weight", dtype, [nh * (nope + rope), qr])]
        else:
            out += [(a + "q_proj.weight", dtype, [nh * (nope + rope), H])]
        out += [(a + "kv_a_proj_with_mqa.weight", dtype, [kvr + rope, H]),
                (a + "kv_a_layernorm.weight", "F32", [kvr]),
                (a + "kv_b_proj.weight", dtype, [nh * (nope + vh), kvr]),
                (a + "o_proj.weight", dtype, [H, nh * vh])]

        def swiglu(q, inner):
            return [(q + "gate_proj.weight", dtype, [inner, H]), (q + "up_proj.weight", dtype, [inner, H]),
                    (q + "down_proj.weight", dtype, [H, inner])]
        f = p + "mlp."
        if E and l >= cfg.get("first_k_dense_replace", 0):
            out += [(f + "gate.weight", dtype, [E, H]), (f + "gate.e_score_correction_bias", "F32", [E])]
            for e in range(E):
                out += swiglu(f + "experts.%d." % e, moe)
            if cfg.get("n_shared_experts", 0):
                out += swiglu(f + "shared_experts.", cfg["n_shared_experts"] * moe)
        else:
            out += swiglu(f, cfg["intermediate_size"])
    result = []
    for name, dt, shape in out:
        if name in fp8:
            result.append((name, "F8_E4M3", shape))
            block = cfg["quantization_config"]["weight_block_size"]
            result.append((name + "_scale_inv", "F32",
                           [-(-shape[0] // block[0]), -(-shape[1] // block[1])]))
        else:
            result.append((name, dt, shape))
    return result


TINY_V3 = {
    "model_type": "deepseek_v3", "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8,
    "num_hidden_layers": 2, "num_attention_heads": 2, "q_lora_rank": None, "kv_lora_rank": 4,
    "qk_nope_head_dim": 2, "qk_rope_head_dim": 2, "v_head_dim": 2, "n_routed_experts": 2,
    "n_shared_experts": 1, "moe_intermediate_size": 4, "first_k_dense_replace": 1, "n_group": 1,
    "topk_group": 1, "num_experts_per_tok": 1, "bos_token_id": 0, "eos_token_id": 1,
    "rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 16,
                     "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
    "max_position_embeddings": 64, "tie_word_embeddings": False,
}


TINY_V4 = {
    "model_type": "deepseek_v4", "vocab_size": 8, "hidden_size": 8, "num_hidden_layers": 2,
    "num_attention_heads": 2, "head_dim": 8, "qk_rope_head_dim": 2, "q_lora_rank": 4,
    "o_lora_rank": 4, "o_groups": 2, "moe_intermediate_size": 32, "n_routed_experts": 2,
    "num_experts_per_tok": 1, "num_hash_layers": 1, "index_n_heads": 2, "index_head_dim": 4,
    "index_topk": 2, "sliding_window": 4, "hc_mult": 2, "compress_ratios": [0, 4, 0],
    "num_nextn_predict_layers": 1,
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
                            "weight_block_size": [4, 4]},
    "rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 16},
}


def v4_tensors(hf_names=False):
    """A few tensors of each kind DeepSeek-V4 loads: FP8 with an E8M0 grid, FP4 experts with
    1x32 scales, the I64 hash table, and (hf_names) transformers' names with fused experts."""
    if hf_names:
        return [("model.embed_tokens.weight", "BF16", [8, 8]),
                ("model.layers.0.self_attn.q_a_proj.weight", "F8_E4M3", [4, 8]),
                ("model.layers.0.self_attn.q_a_proj.scale", "F8_E8M0", [1, 2]),
                ("model.layers.0.mlp.gate.tid2eid", "I64", [8, 1]),
                ("model.layers.1.mlp.experts.gate_up_proj", "BF16", [2, 64, 8]),
                ("model.layers.1.mlp.experts.down_proj", "BF16", [2, 8, 32]),
                ("model.hc_head.hc_fn", "F32", [2, 16]), ("lm_head.weight", "BF16", [8, 8])]
    return [("embed.weight", "BF16", [8, 8]),
            ("layers.0.attn.wq_a.weight", "F8_E4M3", [4, 8]),
            ("layers.0.attn.wq_a.scale", "F8_E8M0", [1, 2]),
            ("layers.0.ffn.gate.tid2eid", "I64", [8, 1]),
            ("layers.1.ffn.experts.0.w1.weight", "I8", [32, 16]),
            ("layers.1.ffn.experts.0.w1.scale", "F8_E8M0", [32, 1]),
            ("layers.1.hc_attn_fn", "F32", [8, 16]), ("head.weight", "BF16", [8, 8])]


def model_seed(cfg, **kw):
    return compact(cfg).encode() + b"\0" + safetensors(deepseek_tensors(cfg, **kw), {"format": "pt"})


def make_safetensors():
    write("safetensors", "tiny_v3_moe", model_seed(TINY_V3))
    v2 = dict(TINY_V3, model_type="deepseek_v2", q_lora_rank=4, topk_method="greedy",
              scoring_func="softmax", n_routed_experts=0, num_hidden_layers=1)
    del v2["rope_scaling"]
    write("safetensors", "tiny_v2_qlora_bf16", model_seed(v2, dtype="BF16"))
    fp8 = dict(TINY_V3, num_hidden_layers=1, n_routed_experts=0,
               quantization_config={"quant_method": "fp8", "fmt": "e4m3",
                                    "weight_block_size": [4, 4]},
               rope_parameters={"rope_type": "yarn", "rope_theta": 50000.0, "factor": 2})
    del fp8["rope_scaling"]
    write("safetensors", "tiny_v3_fp8",
          model_seed(fp8, fp8=("model.layers.0.self_attn.q_proj.weight",
                               "model.layers.0.mlp.up_proj.weight")))
    v4 = compact(TINY_V4).encode() + b"\0"
    write("safetensors", "tiny_v4_release", v4 + safetensors(v4_tensors(), {"format": "pt"}))
    write("safetensors", "tiny_v4_hf_names",
          v4 + safetensors(v4_tensors(hf_names=True), {"format": "pt"}))
    hf_keys = dict(TINY_V4, layer_types=["sliding_attention", "heavily_compressed_attention"],
                   compress_rates={"heavily_compressed_attention": 8},
                   mlp_layer_types=["hash_moe", "moe"],
                   rope_parameters={"main": {"rope_type": "default", "rope_theta": 10000.0},
                                    "compress": {"rope_type": "yarn", "rope_theta": 160000.0,
                                                 "factor": 4,
                                                 "original_max_position_embeddings": 16}})
    for k in ("compress_ratios", "num_hash_layers", "rope_scaling"):
        del hf_keys[k]
    write("safetensors", "v4_transformers_keys.json", compact(hf_keys))
    # Only a config (no shard) and a header-only shard: the parsers on their own.
    write("safetensors", "config_only.json", compact(dict(TINY_V3, num_nextn_predict_layers=1)))
    write("safetensors", "plain_file",
          safetensors([("a", "F16", [2, 3]), ("scalar", "F32", []), ("b", "BF16", [1, 0, 4])],
                      {"format": "pt", "note": "x"}))


# ---------------------------------------------------------------- llama2.c

def llama2c_seed(vocab_sign=1):
    dim, hidden, layers, heads, kv_heads, vocab, seq = 4, 8, 1, 2, 1, 8, 4
    head, kv_dim = dim // heads, dim * kv_heads // heads
    n = (vocab * dim + layers * dim + layers * dim * dim + 2 * layers * kv_dim * dim +
         layers * dim * dim + layers * dim + 3 * layers * hidden * dim + dim + seq * head)
    if vocab_sign < 0:
        n += vocab * dim
    ckpt = struct.pack("<7i", dim, hidden, layers, heads, kv_heads, vocab_sign * vocab, seq)
    ckpt += struct.pack("<%df" % n, *values(n, 1))
    pieces = [b"<unk>", b"\n<s>\n", b"\n</s>\n", b"<0x41>", b" a", b"b", b" ab", b"\xe2\x96\x81"]
    tok = struct.pack("<I", 8)
    for i, p in enumerate(pieces):
        tok += struct.pack("<fi", -float(i), len(p)) + p
    return struct.pack("<I", len(ckpt)) + ckpt + tok


def make_llama2c():
    write("llama2c", "tiny_tied", llama2c_seed(1))
    write("llama2c", "tiny_untied", llama2c_seed(-1))


# ---------------------------------------------------------------- tokenizer.json

def byte_level_alphabet():
    """GPT-2's byte -> character map, as tokenizers' ByteLevel uses."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def small_tokenizer(pre_tokenizer, added, merges_as_pairs=False, post=None):
    vocab = {c: i for i, c in enumerate(byte_level_alphabet())}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("1", "2")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    tokens = []
    for i, (content, flags) in enumerate(added):
        tok = {"id": len(vocab) + i, "content": content, "single_word": False, "lstrip": False,
               "rstrip": False, "normalized": False, "special": True}
        tok.update(flags)
        tokens.append(tok)
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": tokens,
        "normalizer": None, "pre_tokenizer": pre_tokenizer, "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab,
                  "merges": [[a, b] for a, b in merges] if merges_as_pairs else
                            ["%s %s" % m for m in merges]},
    }


def make_tokenizer_json():
    text = "The theme 123\n<|im_start|>user\n<tool> the <｜User｜>\xe2\x96\x81 caf\u00e9"
    gpt2 = small_tokenizer(
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        [("<|im_start|>", {}), ("<|im_end|>", {}),
         ("<tool>", {"special": False, "lstrip": True, "rstrip": True, "single_word": True,
                     "normalized": True})],
        post={"type": "TemplateProcessing",
              "single": [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}},
                         {"Sequence": {"id": "A", "type_id": 0}}],
              "pair": [], "special_tokens": {"<|im_start|>": {"id": "<|im_start|>",
                                                               "ids": [260], "tokens": ["<|im_start|>"]}}})
    config = {"add_bos_token": False, "bos_token": {"content": "<|im_start|>"},
              "eos_token": "<|im_end|>", "chat_template": "{{ messages }}"}
    write("tokenizer_json", "bytelevel_added",
          compact(gpt2) + "\0" + compact(config) + "\0" + text)
    seq = small_tokenizer(
        {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated",
             "invert": False},
            {"type": "Split", "pattern": {"String": "\n"}, "behavior": "MergedWithNext",
             "invert": False},
            {"type": "Split", "pattern": {"Regex": "[\\r\\n]+|\\s+(?!\\S)|[^\\s\\p{L}]+"},
             "behavior": "Removed", "invert": True},
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
             "use_regex": False}]},
        [("<｜begin▁of▁sentence｜>", {}), ("<｜User｜>", {"special": False})], merges_as_pairs=True)
    seq["model"]["ignore_merges"] = True
    write("tokenizer_json", "sequence_split_digits",
          compact(seq) + "\0" + compact({"add_bos_token": True,
                                          "bos_token": "<｜begin▁of▁sentence｜>",
                                          "chat_template": [{"name": "default",
                                                             "template": "x"}]}) + "\0" + text)
    # The DeepSeek-V3 test tokenizer committed beside the goldens (made by tests/reference/).
    golden = os.path.join(ROOT, "tests", "golden", "deepseek_v3", "v3_direct_q")
    with open(os.path.join(golden, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    with open(os.path.join(golden, "tokenizer_config.json"), encoding="utf-8") as f:
        tc = json.load(f)
    write("tokenizer_json", "deepseek_v3_test",
          compact(tj) + "\0" + compact(tc) + "\0" + "Hello <｜end▁of▁sentence｜> 42")


# ---------------------------------------------------------------- chat templates

EFFORTS = ["", "low", "high", "xhigh", "max", "minimal", "medium", "ultra", "1", "100"]


def chat_seed(case):
    flags = (1 if case["add_generation_prompt"] else 0) | (2 if case["thinking"] else 0)
    effort = case.get("reasoning_effort") or ""
    flags |= (EFFORTS.index(effort) if effort in EFFORTS else 0) << 4
    records = ["\x1d".join(compact(t) for t in case["tools"])]
    for m in case["messages"]:
        content = m.get("content")
        fields = [m["role"], "\0" if content is None else content,
                  m.get("reasoning_content") or "", m.get("tool_call_id") or "", m.get("name") or ""]
        for c in m.get("tool_calls") or []:
            fields += [c["id"], c["function"]["name"], c["function"]["arguments"]]
        while len(fields) > 2 and fields[-1] == "" and len(fields) <= 5:
            fields.pop()
        records.append("\x1f".join(fields))
    return bytes([flags]) + "\x1e".join(records).encode("utf-8")


def make_chat_template():
    wanted = {
        "chat_v3.json": ["special-strings-in-content", "tool-call-then-answer", "two-tool-rounds"],
        "chat_v3.1.json": ["reasoning-history-thinking", "tool-call-then-answer-thinking"],
        "chat_v3.2.json": ["agentic-long-thinking", "bad-arguments-chat", "developer-message-chat"],
        "chat_v4.json": ["latest-reminder-chat", "results-out-of-order-thinking"],
        "chat_v4.1.json": ["tool-result-special-strings-thinking", "unicode-chat",
                           "consecutive-users-chat", "think-tags-in-content-thinking"],
    }
    written = 0
    for file, names in wanted.items():
        with open(os.path.join(ROOT, "tests", "golden", "deepseek", file), encoding="utf-8") as f:
            cases = {c["name"]: c for c in json.load(f)["cases"]}
        for name in names:
            case = cases.get(name)
            if case is None:
                continue
            write("chat_template", "%s_%s" % (file[len("chat_"):-len(".json")], name), chat_seed(case))
            written += 1
    # Hostile by hand: invalid UTF-8, DSML-looking text, an unknown role, null content with calls.
    write("chat_template", "hostile",
          b"\x13{\"type\":\"function\",\"function\":{\"name\":\"f\"}}\x1dnot json\x1e"
          b"system\x1f\xff\xfe<\xef\xbd\x9cDSML\xef\xbd\x9cinvoke name=\"x\">\x1e"
          b"wizard\x1fhi\x1e"
          b"assistant\x1f\x00\x1f</think>\x1f\x1f\x1fcall_1\x1ff\x1f[1,2]\x1fcall_2\x1fg\x1f{\"a\":\x1e"
          b"tool\x1f<tool_result>\x1f\x1fcall_9\x1ff")
    return written


# ---------------------------------------------------------------- prefix checkpoints

def checkpoint_seed(blocks, window_first, revision="fuzz-rev", block_size=2, images=None):
    """A prefix checkpoint file (engine/prefix_checkpoint.h) for the fuzzer's fixed layout:
    main layers of 8 and 4 bytes per token, one window layer of 4; `images` (position, length,
    hash) make it a version 2 file."""
    import hashlib
    tokens = struct.pack("<%di" % (blocks * block_size),
                         *[100 + i for i in range(blocks * block_size)])
    payload_len = (8 + 4) * block_size * blocks + 4 * block_size * (blocks - window_first)
    payload = bytes((i * 7) & 0xff for i in range(payload_len))
    fields = {
        "format": "deepinfer-prefix-checkpoint", "version": 2 if images else 1,
        "model_revision": revision,
        "layout": {"architecture": "llama", "kv_dtype": "f32", "numerics": "fast",
                   "block_size": block_size, "layer_bytes": [8, 4], "window_layer_bytes": [4],
                   "window_tokens": 3},
        "cache_salt": "7", "num_tokens": blocks * block_size,
        "window_first_block": window_first,
        "tokens_sha256": hashlib.sha256(tokens).hexdigest(),
        "payload_bytes": payload_len,
        "payload_sha256": hashlib.sha256(payload).hexdigest()}
    if images:
        fields["images"] = [{"position": p, "length": n, "content_hash": "%016x" % h}
                            for p, n, h in images]
    header = compact(fields).encode()
    return b"DIPFXCK1" + struct.pack("<I", len(header)) + header + tokens + payload


def make_prefix_checkpoint():
    write("prefix_checkpoint", "one_block", checkpoint_seed(1, 0))
    write("prefix_checkpoint", "three_blocks_window", checkpoint_seed(3, 1))
    write("prefix_checkpoint", "other_revision", checkpoint_seed(2, 1, revision="rev-2"))
    write("prefix_checkpoint", "truncated", checkpoint_seed(2, 0)[:-5])
    write("prefix_checkpoint", "two_images",
          checkpoint_seed(3, 1, images=[(1, 2, 0xabcdef0123456789), (4, 5, 42)]))


# ---------------------------------------------------------------- image

# image_fuzz options (4 bytes, see image_fuzz.cc): patch 14, downsample 3, 20 tokens, min_pixels
# 1024; the second set adds max_wh_ratio 1.5 and the planner on a size from the input.
IMAGE_OPTIONS = [bytes([0x2D, 0x40, 0x10, 0x20]), bytes([0xED, 0xF0, 0xFF, 0x20])]

# Made once with Pillow 13.0.0 (8x8 gradients); kept as bytes so this script needs no Pillow.
ENCODED = {
    "jpeg_baseline_8x8": bytes.fromhex(
        "ffd8ffe000104a46494600010100000100010000ffdb004300100b0c0e0c0a100e0d0e1211101318281a181616183123"
        "251d283a333d3c3933383740485c4e404457453738506d51575f626768673e4d71797064785c656763ffdb0043011112"
        "121815182f1a1a2f63423842636363636363636363636363636363636363636363636363636363636363636363636363"
        "6363636363636363636363636363ffc00011080008000803012200021101031101ffc4001f0000010501010101010100"
        "000000000000000102030405060708090a0bffc400b5100002010303020403050504040000017d010203000411051221"
        "31410613516107227114328191a1082342b1c11552d1f02433627282090a161718191a25262728292a3435363738393a"
        "434445464748494a535455565758595a636465666768696a737475767778797a838485868788898a9293949596979899"
        "9aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1"
        "f2f3f4f5f6f7f8f9faffc4001f0100030101010101010101010000000000000102030405060708090a0bffc400b51100"
        "020102040403040705040400010277000102031104052131061241510761711322328108144291a1b1c109233352f015"
        "6272d10a162434e125f11718191a262728292a35363738393a434445464748494a535455565758595a63646566676869"
        "6a737475767778797a82838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4"
        "c5c6c7c8c9cad2d3d4d5d6d7d8d9dae2e3e4e5e6e7e8e9eaf2f3f4f5f6f7f8f9faffda000c03010002110311003f00af"
        "a6681d3e4a28a288c9d8ac1632afb25a9fffd9"
    ),
    "jpeg_progressive_16x8": bytes.fromhex(
        "ffd8ffe000104a46494600010100000100010000ffdb0043000d090a0b0a080d0b0a0b0e0e0d0f13201513121213271c"
        "1e17202e2931302e292d2c333a4a3e333646372c2d405741464c4e525352323e5a615a50604a51524fffdb0043010e0e"
        "0e131113261515264f352d354f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f4f"
        "4f4f4f4f4f4f4f4f4f4f4f4f4f4fffc20011080008001003012200021101031101ffc400150001010000000000000000"
        "0000000000000003ffc4001501010100000000000000000000000000000103ffda000c030100021003100000019021ff"
        "c400161000030000000000000000000000000000000304ffda000801010001050254c3663fffc4001611010101000000"
        "00000000000000000000130002ffda0008010301013f017d85ffc4001611000300000000000000000000000000000011"
        "21ffda0008010201013f0170ffc4001510010100000000000000000000000000000031ffda0008010100063f0288ffc4"
        "001510010100000000000000000000000000000031ffda0008010100013f219973ffda000c0301000200030000001007"
        "ffc4001511010100000000000000000000000000000051ffda0008010301013f10b9ffc4001511010100000000000000"
        "000000000000000011ffda0008010201013f10b3ffc40015100101000000000000000000000000000000f1ffda000801"
        "0100013f109090ffd9"
    ),
    "jpeg_gray_8x8": bytes.fromhex(
        "ffd8ffe000104a46494600010100000100010000ffdb004300100b0c0e0c0a100e0d0e1211101318281a181616183123"
        "251d283a333d3c3933383740485c4e404457453738506d51575f626768673e4d71797064785c656763ffc0000b080008"
        "000801011100ffc4001f0000010501010101010100000000000000000102030405060708090a0bffc400b51000020103"
        "03020403050504040000017d01020300041105122131410613516107227114328191a1082342b1c11552d1f024336272"
        "82090a161718191a25262728292a3435363738393a434445464748494a535455565758595a636465666768696a737475"
        "767778797a838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9"
        "cad2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2f3f4f5f6f7f8f9faffda0008010100003f00afe0aff9675fffd9"
    ),
    "webp_lossless_rgba_4x4": bytes.fromhex(
        "5249464642000000574542505650384c360000002f03c000107f201020a4f8af122362400402c908f9538e30806d4085"
        "1024cb32729081200022ce8103073e1d38702025a2ffe16b2c02"
    ),
    "webp_lossy_8x8": bytes.fromhex(
        "5249464640000000574542505650382034000000d001009d012a0800080002c04c25a8027400f431ae280000fef4b800"
        "6a1c47a6fb6d1119b4d293ff6aeffebb7c8afb7f65000000"
    ),
}


def png_chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))


def png(width, height, color_type, bit_depth, rows, extra=(), interlace=0):
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, interlace)
    raw = b"".join(b"\0" + row for row in rows)
    chunks = [png_chunk(b"IHDR", ihdr)] + [png_chunk(k, v) for k, v in extra]
    chunks += [png_chunk(b"IDAT", zlib.compress(raw)), png_chunk(b"IEND", b"")]
    return b"\x89PNG\r\n\x1a\n" + b"".join(chunks)


def gif(screen_w, screen_h, palette, frame, indices, transparent=None):
    """A GIF whose LZW stream sends literals only (a clear code before every second one)."""
    bits = max(1, (len(palette) // 3 - 1).bit_length())
    table = palette + b"\0" * (3 * (1 << bits) - len(palette))
    out = b"GIF89a" + struct.pack("<HHBBB", screen_w, screen_h, 0x80 | (bits - 1), 0, 0) + table
    if transparent is not None:
        out += b"\x21\xf9\x04\x01\x00\x00" + bytes([transparent]) + b"\x00"
    out += b"\x2c" + struct.pack("<HHHHB", *frame, 0)
    codes, acc, nbits, packed = [], 0, 0, bytearray()
    for i, v in enumerate(indices):
        codes += ([4] if i % 2 == 0 else []) + [v]
    for code in codes + [5]:
        acc |= code << nbits
        nbits += 3
        while nbits >= 8:
            packed.append(acc & 255)
            acc >>= 8
            nbits -= 8
    if nbits:
        packed.append(acc & 255)
    blocks = b"".join(bytes([len(packed[i:i + 255])]) + packed[i:i + 255]
                      for i in range(0, len(packed), 255))
    return out + b"\x02" + blocks + b"\x00\x3b"


def make_image():
    rgb_rows = [bytes((x * 32 + c * 50 + y * 20) % 256 for x in range(8) for c in range(3))
                for y in range(6)]
    files = {
        "png_rgb_8x6": png(8, 6, 2, 8, rgb_rows),
        "png_rgba_4x2": png(4, 2, 6, 8, [bytes(range(16)), bytes(range(16, 32))]),
        "png_palette_trns_4x2": png(4, 2, 3, 2, [b"\x1b", b"\xe4"],
                                    [(b"PLTE", bytes(range(12))), (b"tRNS", b"\0\0")]),
        "png_gray16_3x1": png(3, 1, 0, 16, [b"\x00\x12\x01\x00\xff\xff"]),
        "png_interlaced_gray_9x9": png(9, 9, 0, 8, [bytes(range(y, y + 9)) for y in range(9)],
                                       interlace=1),
        "gif_transparent_4x3": gif(4, 3, bytes([10, 20, 30, 200, 0, 0, 0, 200, 0, 0, 0, 200]),
                                   (1, 1, 2, 2), [1, 2, 3, 0], transparent=2),
        "gif_frame_outside_2x2": gif(2, 2, bytes([10, 20, 30, 200, 0, 0]), (1, 0, 2, 3),
                                     [1, 3, 0, 1, 3, 2]),
    }
    files.update(ENCODED)
    for name, data in sorted(files.items()):
        for k, options in enumerate(IMAGE_OPTIONS):
            write("image", f"{name}_{k}", options + data)


def make_image_part():
    """image_part_fuzz: content parts of every API, with small images as data: URIs."""
    import base64
    tiny = png(2, 2, 2, 8, [bytes(range(6)), bytes(range(6, 12))])
    b64 = base64.b64encode(tiny).decode()
    gray = png(9, 9, 0, 8, [bytes(range(y, y + 9)) for y in range(9)], interlace=1)
    parts = {
        "openai_data": {"type": "image_url",
                        "image_url": {"url": "data:image/png;base64," + b64, "detail": "low"}},
        "openai_string_url": {"type": "image_url", "image_url": "http://example.com/a.png"},
        "openai_no_url": {"type": "image_url", "image_url": {"detail": "high"}},
        "responses_data": {"type": "input_image", "detail": "auto",
                           "image_url": "data:image/png;base64," +
                                        base64.b64encode(gray).decode()},
        "responses_file_id": {"type": "input_image", "file_id": "file-1"},
        "anthropic_base64": {"type": "image", "source": {"type": "base64",
                                                          "media_type": "image/png", "data": b64}},
        "anthropic_url": {"type": "image", "source": {"type": "url",
                                                       "url": "file:///tmp/a.png"}},
        "anthropic_webp": {"type": "image", "source": {
            "type": "base64", "media_type": "image/webp",
            "data": base64.b64encode(ENCODED["webp_lossy_8x8"]).decode()}},
        "anthropic_jpeg_unpadded": {"type": "image", "source": {
            "type": "base64", "media_type": "image/jpeg",
            "data": base64.b64encode(ENCODED["jpeg_gray_8x8"]).decode().rstrip("=")}},
    }
    for name, part in sorted(parts.items()):
        write("image_part", name, compact(part))
    write("image_part", "raw_base64", b64)


def main():
    make_safetensors()
    make_llama2c()
    make_tokenizer_json()
    make_prefix_checkpoint()
    make_image()
    make_image_part()
    n = make_chat_template()
    print("seeds written under", CORPUS, "(%d chat cases)" % n)


if __name__ == "__main__":
    main()
