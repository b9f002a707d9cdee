#pragma once

// FP8 E4M3 weights with block scales (DeepSeek-V3's checkpoint format) and their dequantization
// to BF16 at load.

#include <cstdint>

#include "absl/status/status.h"
#include "model/model.h"
#include "tensor/tensor.h"

namespace deepinfer::model {

// Dequantizes a block-scaled FP8 weight to BF16: out[i][j] = bf16(fp8(w[i][j]) * scale[i/br][j/bc])
// with round-to-nearest-even, as DeepSeek's fp8_cast_bf16 weight_dequant does.
//
// Shapes: w [rows, cols] E4M3 bytes; scale_inv [ceil(rows/br), ceil(cols/bc)] f32 (the "inverse"
//   of the quantization scale, i.e. the dequantization multiplier); out [rows, cols] BF16 bits.
// Threads: pure; callers may split rows across threads ([row_begin, row_end)).
void DequantizeFp8BlockToBf16(const uint8_t* w, int64_t rows, int64_t cols, const float* scale_inv,
                              int64_t block_rows, int64_t block_cols, int64_t row_begin,
                              int64_t row_end, uint16_t* out);

// The block a scale covers (config.json quantization_config.weight_block_size). Units: elements.
struct Fp8Blocks {
  int64_t rows = 128;
  int64_t cols = 128;
};

// Replaces every F8_E4M3 tensor `name` of `m` by its BF16 dequantization with the scales of
// `name + "_scale_inv"` (F32 or BF16, shape [ceil(rows/br), ceil(cols/bc)]), kept in m.owned,
// then drops every "*_scale_inv" tensor. A model without FP8 tensors is left as it is.
//
// Why at load: the matmul kernels have BF16 paths but no FP8 one, so this trades memory (2 bytes
//   per weight instead of ~1) for using the existing kernels unchanged; bf16(fp8 * scale_inv) is
//   bit-identical to DeepSeek's fp8_cast_bf16.
// `release_pages`: the FP8 bytes are a read-only file mapping (not memory the caller owns); their
//   resident pages are dropped once copied, so they stop counting in RSS.
// Errors: Unimplemented "unsupported_dtype" (an FP8 tensor that is not a matrix, a scale neither
//   F32 nor BF16); NotFound "missing_tensor" (no scale); InvalidArgument "shape_mismatch" (the
//   scale grid does not fit the weight); DataLoss "nan_in_weights" (a scale, or a sampled row of
//   a weight). Messages name the tensor.
// Threads: runs the dequantization on one thread per core.
// Cost: 2 bytes of RAM per FP8 weight; one pass over every FP8 byte.
// `unread` (model.h): the FP8 tensors it names are left as they are (F8_E4M3, unchecked); their
// scales are dropped like the others'.
absl::Status DequantizeFp8Weights(Model& m, const Fp8Blocks& blocks, bool release_pages,
                                  const UnreadTensors& unread = nullptr);

}  // namespace deepinfer::model
