#pragma once

// What the kernels read of a model, apart from the model itself: a tensor view (the bytes of one
// weight in a mapped file, with its element type and block scales), the rotary style, and the
// exact conversions of the FP8 E4M3, FP4 E2M1 and E8M0 elements of DeepSeek's released formats.
// Library di_tensor, below kernels/ and model/: kernels include this header, never model/model.h
// (configs, tokenizer data, loaders). Definitions: tensor/conversions.cc.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace deepinfer::tensor {

// A named view of one weight tensor inside a mapped file. Never owns its bytes.
//
// Shapes: `shape` is outermost first (row-major); a linear layer's weight is [out, in], so
//   GGUF's ne = {in, out} becomes shape {out, in}.
// Lifetime: valid while the owning Model (and its MappedFile) is alive.
struct TensorView {
  std::string name;
  DType dtype = DType::kInvalid;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t size_bytes = 0;
  // Block-scaled weights (kF8E4M3 / kFp4E2M1): E8M0 scales [ceil(rows / scale_block_rows),
  // ceil(cols / scale_block_cols)] row-major, element (r, c) multiplied by the scale of its block.
  // Null for every other tensor. Points into the model's mapped files like `data`.
  const uint8_t* scale = nullptr;
  int32_t scale_block_rows = 0;
  int32_t scale_block_cols = 0;

  int64_t num_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t rows() const { return shape.empty() ? 0 : num_elements() / shape.back(); }
  int64_t cols() const { return shape.empty() ? 0 : shape.back(); }
  size_t row_bytes() const { return RowBytes(dtype, cols()); }
  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes(); }
};

// How positions rotate query and key vectors.
enum class RopeStyle {
  kAdjacentPairs,  // (x[2i], x[2i+1]) rotate together: llama2.c and llama.cpp LLAMA_ROPE_TYPE_NORM.
  kHalfSplit,      // (x[i], x[i + d/2]) rotate together: HF "rotate_half", llama.cpp NEOX.
};

// Exact value of an FP8 E4M3 ("e4m3fn") byte: 1 sign, 4 exponent (bias 7), 3 mantissa bits;
// no infinities, 0x7F/0xFF are NaN, exponent 0 is subnormal (m * 2^-9). Max 448.
// Source: Micikevicius et al. 2022, "FP8 Formats for Deep Learning"; torch.float8_e4m3fn.
float Fp8E4M3ToFp32(uint8_t b);

// Rounds a float to the nearest-even FP8 E4M3 ("fn": no infinities, 0x7e = 448) code; values
// beyond 448 in magnitude clamp to +-448 (the recipe never produces them).
uint8_t Fp32ToFp8E4M3(float f);

// Value of an FP4 E2M1 code (bit 3 sign; magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6; code 8 is +0).
// Source: OCP Microscaling Formats (MX) v1.0, section 5.3.3.
float Fp4E2M1ToFp32(uint8_t code);
// 2^(b - 127); NaN for 255. Source: OCP MX v1.0, section 5.4.1 (E8M0).
float E8M0ToFp32(uint8_t b);

// The power-of-two ceiling's exponent of a positive normal float, from its bits (exponent - 127,
// plus 1 when the mantissa is not zero): the E8M0 scale rule of DeepSeek's quantizers.
int PowerOfTwoCeilExponent(float x);
// e2m1 code of v in [-6, 6], round to nearest even (ties at 0.25, 1.25, 2.5, 5 down, at 0.75,
// 1.75, 3.5 up); bit 3 is set for v < 0.
uint8_t Fp32ToFp4E2M1(float v);

}  // namespace deepinfer::tensor
