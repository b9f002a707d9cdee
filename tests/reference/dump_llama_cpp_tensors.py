#!/usr/bin/env python3
"""Dumps llama.cpp's intermediate tensors for one eval step and compares them with deepinfer's.

Runs a golden case the way make_llama_cpp_golden.py does (llama-cpp-python's low-level API:
n_ctx 512, n_batch 512, 2 threads, f32 KV cache, flash attention off): the prompt as one batch,
then single-token greedy steps. For eval step STEP (0 = the prompt) a ggml eval callback writes
every f32 graph tensor to OUT/NNN_name.bin (raw f32, NNN = order of evaluation) and lists them in
OUT/index.txt (tab-separated).

With --ours DIR (deepinfer's DEEPINFER_DUMP_DIR for the same case and DEEPINFER_DUMP_STEP, e.g.
from `arch_test --gtest_filter='*GgmlNumerics*'`, whose first case is the golden's case 0) it
then compares tensor by tensor and prints each one that is not bit-identical, in graph order.

Usage: dump_llama_cpp_tensors.py MODEL.gguf GOLDEN.json OUT [--case 0] [--step 0] [--ours DIR]
"""
import argparse
import ctypes
import json
import os
import re

import llama_cpp
import numpy as np


class GgmlTensor(ctypes.Structure):
    # struct ggml_tensor of the ggml bundled with llama-cpp-python 0.3.36 (ggml/include/ggml.h).
    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * 10),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * 64),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


def contiguous_f32(t):
    if t.type != llama_cpp.GGML_TYPE_F32 or not t.data:
        return False
    stride = 4
    for d in range(4):
        if t.ne[d] != 1 and t.nb[d] != stride:
            return False
        stride *= t.ne[d]
    return True


def dump(model_path, ids, steps, dump_step, out):
    os.makedirs(out, exist_ok=True)
    state = {"eval": 0, "seq": 0}
    index = open(os.path.join(out, "index.txt"), "w")

    def callback(ptr, ask, _):
        if state["eval"] != dump_step:
            return not ask
        t = GgmlTensor.from_address(ptr)
        if ask:
            return True
        if contiguous_f32(t):
            n = t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]
            name = t.name.decode()
            with open(os.path.join(out, "%03d_%s.bin" % (state["seq"], name)), "wb") as f:
                f.write(ctypes.string_at(t.data, 4 * n))
            index.write("%03d\t%s\t%s\n" % (state["seq"], name, ",".join(str(x) for x in t.ne)))
            state["seq"] += 1
        return True

    cb = llama_cpp.ggml_backend_sched_eval_callback(callback)
    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(model_path.encode(),
                                                 llama_cpp.llama_model_default_params())
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = 512, 512, 512
    cp.n_threads = cp.n_threads_batch = 2
    cp.type_k = cp.type_v = llama_cpp.GGML_TYPE_F32
    cp.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED  # llama-cpp-python's default
    cp.cb_eval = cb
    ctx = llama_cpp.llama_init_from_model(model, cp)
    vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    pos, cur, out_ids = 0, list(ids), []
    for _ in range(steps + 1):
        batch = llama_cpp.llama_batch_init(len(cur), 0, 1)
        for i, tok in enumerate(cur):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, pos + i, 1
            batch.seq_id[i][0], batch.logits[i] = 0, 1
        batch.n_tokens = len(cur)
        assert llama_cpp.llama_decode(ctx, batch) == 0
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, len(cur) - 1),
                                       shape=(vocab,))
        nxt = int(np.argmax(logits))
        out_ids.append(nxt)
        llama_cpp.llama_batch_free(batch)
        pos += len(cur)
        cur = [nxt]
        state["eval"] += 1
    index.close()
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(model)
    return out_ids


def compare(ref_dir, ours_dir):
    ref = {}
    for line in open(os.path.join(ref_dir, "index.txt")):
        seq, name, _ = line.rstrip("\n").split("\t")
        ref.setdefault(name, []).append(seq)
    # deepinfer names the matmul outputs before RoPE Qcur_mm / Kcur_mm; llama.cpp names both
    # Qcur (its second Qcur is a reshape of the first, its third the rotated one).
    pick = {"Qcur_mm": ("Qcur", 0), "Kcur_mm": ("Kcur", 0), "Qcur": ("Qcur", 2),
            "Kcur": ("Kcur", 2)}
    compared = differ = 0
    for f in sorted(os.listdir(ours_dir)):
        name = f[4:-4]
        base = re.sub(r"-\d+$", "", name)
        ref_base, k = pick.get(base, (base, -1))
        ref_name = ref_base + name[len(base):]
        if ref_name not in ref:
            print("no llama.cpp tensor for", name)
            continue
        a = np.fromfile(os.path.join(ours_dir, f), dtype=np.float32)
        b = np.fromfile(os.path.join(ref_dir, "%s_%s.bin" % (ref[ref_name][k], ref_name)),
                        dtype=np.float32)
        b = b[-a.size:]  # llama.cpp's logits_all computes the output rows of every token
        compared += 1
        if not np.array_equal(a, b):
            differ += 1
            print("differs: %-16s max|diff| %.3g, %d of %d elements" %
                  (name, np.abs(a - b).max(), int((a != b).sum()), a.size))
    print("%d tensors compared, %d differ" % (compared, differ))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("golden")
    ap.add_argument("out")
    ap.add_argument("--case", type=int, default=0)
    ap.add_argument("--step", type=int, default=0)
    ap.add_argument("--ours")
    args = ap.parse_args()
    case = json.load(open(args.golden))["cases"][args.case]
    ids = dump(args.model, case["prompt_ids"], args.step, args.step, args.out)
    assert ids == case["greedy_ids"][:len(ids)], "llama.cpp no longer reproduces the golden"
    if args.ours:
        compare(args.out, args.ours)


if __name__ == "__main__":
    main()
