#pragma once

#include <cstdint>

#include "model/dtype.h"

namespace deepinfer::kernels {

// Converts `n` elements of type `t` starting at `src` (a whole number of blocks) to f32.
// Bit-exact with the reference dequantization of ggml (and the `gguf` Python package).
//
// Shapes: src holds n / BlockSize(t) blocks; dst [n] f32.
// Source: ggml/src/ggml-quants.c dequantize_row_*.
void DequantizeRow(model::DType t, const void* src, float* dst, int64_t n);

// Quantizes `n` f32 values (a multiple of 32, or 256 for Q8_K) to Q8_0 / Q8_1 / Q8_K blocks,
// matching ggml's reference quantize_row_q8_*.
void QuantizeRowQ8_0(const float* x, model::BlockQ8_0* y, int64_t n);
void QuantizeRowQ8_1(const float* x, model::BlockQ8_1* y, int64_t n);
void QuantizeRowQ8_K(const float* x, model::BlockQ8_K* y, int64_t n);

}  // namespace deepinfer::kernels
