#!/usr/bin/env python3
"""Makes the goldens for src/kernels/cpu (dequantization and activation quantization).

Run with the reference venv:  /tmp/refvenv/bin/python tests/reference/make_dequant_golden.py

Writes tests/golden/dequant/:
  smollm2_q4_1.json  every tensor of SmolLM2-135M-Instruct.Q4_1.gguf dequantized by the gguf
                     package: name, ggml type, shape (outermost first), file offset, byte count,
                     sha256 of the little-endian f32 values and the first 8 values.
  synthetic.json     raw blocks for F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K (8 rows x 256) with
                     the sha256 of their dequantization by the gguf package, plus every finite
                     fp16 value.
  ggml_matmul.json   y = W x computed by llama.cpp's CPU backend itself (its from_float and
                     vec_dot, through ctypes) for Q4_0, Q4_1, Q8_0, Q4_K, Q6_K weights; only when
                     the llama-cpp-python wheel is installed.
  quantize_q8.json   inputs and expected blocks of ggml's quantize_row_q8_0/q8_1/q8_K reference
                     functions and of the x86 CPU backend's quantize_row_q8_0/q8_1 (numpy
                     re-implementations below; checked against libggml through ctypes when the
                     llama-cpp-python wheel is installed).
"""

import ctypes
import hashlib
import json
import os
import pathlib
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import quants

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "golden" / "dequant"


def sha_f32(values: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(values, dtype="<f4").tobytes()).hexdigest()


def first8(values: np.ndarray) -> list:
    return [float(v) for v in np.asarray(values, dtype=np.float32).reshape(-1)[:8]]


def model_path() -> pathlib.Path:
    cache = os.environ.get("DEEPINFER_CACHE", os.path.expanduser("~/.cache/deepinfer"))
    return pathlib.Path(cache) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def make_model_golden():
    path = model_path()
    if not path.exists():
        print(f"skip model golden: {path} not found", file=sys.stderr)
        return
    reader = gguf.GGUFReader(str(path))
    tensors = []
    for t in reader.tensors:
        values = quants.dequantize(t.data, t.tensor_type)
        tensors.append({
            "name": t.name,
            "ggml_type": int(t.tensor_type),
            "shape": [int(d) for d in reversed(list(t.shape))],
            "offset": int(t.data_offset),
            "n_bytes": int(t.n_bytes),
            "sha256": sha_f32(values),
            "first8": first8(values),
        })
    golden = {"file": path.name, "file_size": path.stat().st_size, "tensors": tensors}
    (OUT / "smollm2_q4_1.json").write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {len(tensors)} tensors")


def random_q4_k(rng, nb):
    b = rng.integers(0, 256, size=(nb, 144), dtype=np.uint8)
    b[:, 0:2] = np.float16(rng.uniform(0.001, 0.01, nb)).view(np.uint8).reshape(nb, 2)
    b[:, 2:4] = np.float16(rng.uniform(0.001, 0.01, nb)).view(np.uint8).reshape(nb, 2)
    return b


def random_q6_k(rng, nb):
    b = rng.integers(0, 256, size=(nb, 210), dtype=np.uint8)
    b[:, 208:210] = np.float16(rng.uniform(-0.01, 0.01, nb)).view(np.uint8).reshape(nb, 2)
    return b


def make_synthetic_golden():
    rng = np.random.default_rng(20240601)
    rows, cols = 8, 256
    x = (rng.standard_normal((rows, cols)) * rng.uniform(0.01, 3, (rows, 1))).astype(np.float32)
    x[0, :32] = 0.0  # an all-zero block
    cases = []
    for qtype in (T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q8_0, T.Q4_K, T.Q6_K):
        if qtype == T.Q4_K:
            raw = random_q4_k(rng, rows * cols // 256)
        elif qtype == T.Q6_K:
            raw = random_q6_k(rng, rows * cols // 256)
        else:
            raw = quants.quantize(x, qtype)
        raw = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
        values = quants.dequantize(raw, qtype)
        cases.append({
            "ggml_type": int(qtype),
            "type_name": qtype.name,
            "n": rows * cols,
            "blocks_hex": raw.tobytes().hex(),
            "sha256": sha_f32(values),
            "first8": first8(values),
        })
    halves = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    finite = halves[(halves & 0x7C00) != 0x7C00]
    golden = {
        "cases": cases,
        "all_finite_f16": {"count": int(finite.size),
                           "sha256": sha_f32(finite.view(np.float16).astype(np.float32))},
    }
    (OUT / "synthetic.json").write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {len(cases)} synthetic cases")


# --- numpy versions of ggml's activation quantizers -------------------------------------------

def f16_bytes(v: np.ndarray) -> np.ndarray:
    return np.asarray(v, dtype=np.float32).astype(np.float16).view(np.uint8).reshape(-1, 2)


def q8_0_or_1(x: np.ndarray, cpu: bool, with_sum: bool) -> bytes:
    blocks = x.reshape(-1, 32).astype(np.float32)
    amax = np.abs(blocks).max(axis=1, keepdims=True)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        if cpu:  # ggml-cpu x86: id = 127 / amax, round half to even
            idv = np.where(amax == 0, np.float32(0), np.float32(127) / amax).astype(np.float32)
            q = np.rint(blocks * idv)
        else:  # reference: id = 1 / d, roundf (half away from zero)
            idv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
            q = quants.np_roundf(blocks * idv)
    q = q.astype(np.int8)
    parts = [f16_bytes(d)]
    if with_sum:
        s = q.astype(np.int32).sum(axis=1, keepdims=True).astype(np.float32) * d
        parts.append(f16_bytes(s))
    parts.append(q.view(np.uint8))
    return np.concatenate(parts, axis=1).tobytes()


def q8_k(x: np.ndarray) -> bytes:
    out = bytearray()
    for blk in x.reshape(-1, 256).astype(np.float32):
        i = int(np.argmax(np.abs(blk)))  # first index of the largest magnitude, like ggml's '>'
        amax, mx = abs(blk[i]), blk[i]
        if amax == 0:
            out += bytes(292)
            continue
        iscale = np.float32(-127.0) / mx
        v = (iscale * blk).astype(np.float32)
        # ggml's nearest_int: add 1.5*2^23 in float, i.e. round half to even.
        q = np.minimum(np.rint(v), 127).astype(np.int8)
        bsums = q.astype(np.int32).reshape(16, 16).sum(axis=1).astype("<i2")
        d = np.float32(1.0) / iscale
        out += np.array([d], dtype="<f4").tobytes() + q.tobytes() + bsums.tobytes()
    return bytes(out)


def load_ggml():
    try:
        import llama_cpp  # noqa: F401  (only to find the wheel's libraries)
    except ImportError:
        return None
    lib = pathlib.Path(llama_cpp.__file__).parent / "lib"
    try:
        base = ctypes.CDLL(str(lib / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
        cpu = ctypes.CDLL(str(lib / "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return None
    return base, cpu


def ggml_quantize(fn, x: np.ndarray, nbytes: int) -> bytes:
    out = np.zeros(nbytes, dtype=np.uint8)
    xc = np.ascontiguousarray(x, dtype=np.float32)
    fn(xc.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p),
       ctypes.c_int64(xc.size))
    return out.tobytes()


def make_quantize_golden():
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(2048) * 2).astype(np.float32)
    # Exact ties: with amax 127 the scale is 1 and x.5 values sit on rounding boundaries.
    x[0] = 127.0
    x[1:32] = np.arange(31, dtype=np.float32) - 15.5
    x[32:64] = 0.0
    x[256] = -127.0
    x[257:512] = (np.arange(255) % 50 - 25 + 0.5).astype(np.float32)
    x[512:768] *= 1e-3
    x[768:1024] = 0.0  # an all-zero Q8_K block
    x[1024:1056] = np.float32(1e-30)  # tiny values
    n = x.size
    expected = {
        "q8_0_ref": q8_0_or_1(x, cpu=False, with_sum=False),
        "q8_1_ref": q8_0_or_1(x, cpu=False, with_sum=True),
        "q8_k_ref": q8_k(x),
        "q8_0_cpu": q8_0_or_1(x, cpu=True, with_sum=False),
        "q8_1_cpu": q8_0_or_1(x, cpu=True, with_sum=True),
    }
    # The gguf package's own Q8_0 is bit-exact with ggml's reference: check we agree with it.
    assert expected["q8_0_ref"] == quants.quantize(x.reshape(-1, 32), T.Q8_0).tobytes()
    libs = load_ggml()
    if libs is not None:
        base, cpu = libs
        checks = {
            "q8_0_ref": (base.quantize_row_q8_0_ref, n // 32 * 34),
            "q8_1_ref": (base.quantize_row_q8_1_ref, n // 32 * 36),
            "q8_k_ref": (base.quantize_row_q8_K_ref, n // 256 * 292),
            "q8_0_cpu": (cpu.quantize_row_q8_0, n // 32 * 34),
            "q8_1_cpu": (cpu.quantize_row_q8_1, n // 32 * 36),
        }
        for key, (fn, nbytes) in checks.items():
            got = ggml_quantize(fn, x, nbytes)
            assert got == expected[key], f"numpy {key} disagrees with libggml"
        # The CPU backend's Q8_K is the reference one.
        assert ggml_quantize(cpu.quantize_row_q8_K, x, n // 256 * 292) == expected["q8_k_ref"]
        print("numpy quantizers match libggml (ref and CPU backend)")
    else:
        print("llama_cpp not installed: numpy quantizers not cross-checked", file=sys.stderr)
    golden = {"input_f32_hex": x.astype("<f4").tobytes().hex(),
              "expected_hex": {k: v.hex() for k, v in expected.items()}}
    (OUT / "quantize_q8.json").write_text(json.dumps(golden, indent=1) + "\n")
    print("wrote quantize goldens")


class TypeTraitsCpu(ctypes.Structure):
    # ggml-cpu.h struct ggml_type_traits_cpu
    _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p),
                ("vec_dot_type", ctypes.c_int), ("nrows", ctypes.c_int64)]


VEC_DOT = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t,
                           ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                           ctypes.c_int)
FROM_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
BLOCK = {T.Q4_0: (32, 18), T.Q4_1: (32, 20), T.Q8_0: (32, 34), T.Q8_1: (32, 36),
         T.Q4_K: (256, 144), T.Q6_K: (256, 210), T.Q8_K: (256, 292)}


def make_ggml_matmul_golden():
    """y = W x from llama.cpp's CPU backend itself (from_float + vec_dot) for each quant type."""
    libs = load_ggml()
    if libs is None:
        print("llama_cpp not installed: no ggml matmul golden", file=sys.stderr)
        return
    base, cpu = libs
    cpu.ggml_cpu_init()
    cpu.ggml_get_type_traits_cpu.restype = ctypes.POINTER(TypeTraitsCpu)
    rng = np.random.default_rng(11)
    rows, cols, tokens = 16, 512, 3
    cases = []
    for qtype in (T.Q4_0, T.Q4_1, T.Q8_0, T.Q4_K, T.Q6_K):
        wf = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
        if qtype == T.Q4_K:
            raw = random_q4_k(rng, rows * cols // 256)
        elif qtype == T.Q6_K:
            raw = random_q6_k(rng, rows * cols // 256)
        else:
            raw = quants.quantize(wf, qtype)
        raw = np.ascontiguousarray(raw).view(np.uint8).reshape(rows, -1)
        wd = quants.dequantize(raw.reshape(-1), qtype).reshape(rows, cols).astype(np.float64)
        x = rng.standard_normal((tokens, cols)).astype(np.float32)
        tr = cpu.ggml_get_type_traits_cpu(int(qtype)).contents
        act_type = T(tr.vec_dot_type)
        vtr = cpu.ggml_get_type_traits_cpu(int(act_type)).contents
        from_float = FROM_FLOAT(vtr.from_float)
        vec_dot = VEC_DOT(tr.vec_dot)
        bs, bb = BLOCK[act_type]
        y = np.zeros((tokens, rows), dtype=np.float32)
        for t in range(tokens):
            xq = np.zeros(cols // bs * bb, dtype=np.uint8)
            xt = np.ascontiguousarray(x[t])
            from_float(xt.ctypes.data, xq.ctypes.data, cols)
            for r in range(rows):
                out = ctypes.c_float()
                wr = np.ascontiguousarray(raw[r])
                vec_dot(cols, ctypes.byref(out), 0, wr.ctypes.data, 0, xq.ctypes.data, 0, 1)
                y[t, r] = out.value
        mag = np.abs(x.astype(np.float64)) @ np.abs(wd).T
        cases.append({"ggml_type": int(qtype), "type_name": qtype.name, "rows": rows,
                      "cols": cols, "tokens": tokens, "act_type": act_type.name,
                      "weights_hex": raw.tobytes().hex(), "x_f32_hex": x.astype("<f4").tobytes().hex(),
                      "y": [float(v) for v in y.reshape(-1)], "mag": [float(v) for v in mag.reshape(-1)]})
    (OUT / "ggml_matmul.json").write_text(json.dumps({"cases": cases}, indent=1) + "\n")
    print(f"wrote {len(cases)} ggml matmul cases")


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    make_model_golden()
    make_synthetic_golden()
    make_quantize_golden()
    make_ggml_matmul_golden()


if __name__ == "__main__":
    main()
