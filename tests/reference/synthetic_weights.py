"""Synthetic checkpoint weights that C++ and Python draw identically ("splitmix64-uniform/1").

The tiny DeepSeek test checkpoints are not committed: the repository keeps a recipe
(tests/golden/deepseek_v3/<case>/weights.json: seed, tensor names, shapes, dtypes, and the
centre and half-width of each tensor's uniform distribution) and both this module (for the
transformers goldens) and src/model/synthetic_checkpoint.cc (for the C++ and e2e tests) turn it
into the same bytes.

Element i of tensor number t (0-based, recipe order) under seed s:
  key = mix64((s << 32) | t)
  z   = mix64(key + (i + 1) * 0x9E3779B97F4A7C15)            (all arithmetic mod 2^64)
  x   = ((z >> 40) - 2^23) / 2^23                             (exact, in [-1, 1))
  v   = float32(center + half_width * x)                      (float64 multiply, then add)
  BF16 tensors store v rounded to nearest even bfloat16, F32 tensors store v.
I64 tensors (integer tables such as DeepSeek-V4's hash-routing `tid2eid` [rows, k]) take no
centre or half-width but a "modulus" m: row r holds (b_r + j) mod m for j = 0..k-1, where
b_r = (z of element r*k) >> 40, so every row is k distinct values when k <= m.
mix64 is the splitmix64 finalizer (Steele, Lea, Flood, "Fast splittable pseudorandom number
generators", OOPSLA 2014; constants from Vigna's splitmix64.c).
A tensor with "draw_as": <name of an earlier tensor> takes that tensor's draws (its t) under its
own centre and half-width: a scaled copy.
"""

import math

import numpy as np

GENERATOR = "splitmix64-uniform/1"
GOLDEN_GAMMA = 0x9E3779B97F4A7C15
SQRT3 = math.sqrt(3.0)


def _mix64(z):
    z = z ^ (z >> np.uint64(30))
    z = z * np.uint64(0xBF58476D1CE4E5B9)
    z = z ^ (z >> np.uint64(27))
    z = z * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _draw_bits(seed, index, n):
    """The raw 64-bit draws z of one tensor."""
    with np.errstate(over="ignore"):
        key = _mix64(np.array([(seed << 32) | index], dtype=np.uint64))[0]
        i = np.arange(1, n + 1, dtype=np.uint64)
        return _mix64(key + i * np.uint64(GOLDEN_GAMMA))


def draw(seed, index, n, center, half_width):
    """float32 values of one tensor (before any bfloat16 rounding)."""
    z = _draw_bits(seed, index, n)
    x = ((z >> np.uint64(40)).astype(np.float64) - 2.0**23) / 2.0**23
    return (center + half_width * x).astype(np.float32)


def to_bf16_bits(v):
    """Round float32 to nearest-even bfloat16; returns the uint16 bit patterns."""
    b = v.view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def entry(name, shape, dtype="BF16", std=None, center=0.0, half_width=None):
    """A recipe entry; `std` gives the half-width of a uniform with that standard deviation."""
    if half_width is None:
        half_width = std * SQRT3
    return dict(name=name, shape=list(shape), dtype=dtype, center=float(center),
                half_width=float(half_width))


def int_entry(name, shape, modulus):
    """A recipe entry for an I64 table (see the module docstring)."""
    return dict(name=name, shape=list(shape), dtype="I64", modulus=int(modulus))


def tensors(recipe):
    """Yields (name, shape, dtype, numpy array) in recipe order: uint16 bits for BF16,
    float32 for F32, int64 for I64."""
    index_of = {}
    for i, e in enumerate(recipe["tensors"]):
        t = index_of[e["draw_as"]] if "draw_as" in e else i
        index_of[e["name"]] = i
        n = int(np.prod(e["shape"])) if e["shape"] else 1
        if e["dtype"] == "I64":
            rows, k = e["shape"]
            z = _draw_bits(recipe["seed"], t, n)
            base = (z[::k] >> np.uint64(40)).astype(np.int64)
            v = (base[:, None] + np.arange(k, dtype=np.int64)[None, :]) % e["modulus"]
            yield e["name"], tuple(e["shape"]), "I64", v.astype(np.int64)
            continue
        v = draw(recipe["seed"], t, n, e["center"], e["half_width"])
        if e["dtype"] == "BF16":
            v = to_bf16_bits(v)
        elif e["dtype"] != "F32":
            raise ValueError(f"unsupported dtype {e['dtype']}")
        yield e["name"], tuple(e["shape"]), e["dtype"], v.reshape(e["shape"])
