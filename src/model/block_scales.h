#pragma once

// DeepSeek-V4's release weight formats, used as they are: FP8 E4M3 matrices with E8M0
// (power-of-two) scales per weight_block_size block (128 x 128 in V4, 32 x 32 in V4.1), and
// routed experts in FP4 E2M1, packed two per byte along the input dimension (low nibble first,
// on disk as I8 [out, in / 2]) with E8M0 scales per 1 x 32 block. The scales stay in the mapped
// file and the matmul kernels read both (kernels/cpu/matmul.h); nothing is dequantized at load.

#include <cstdint>

#include "absl/status/status.h"
#include "model/fp8.h"
#include "model/model.h"
#include "tensor/tensor.h"

namespace deepinfer::model {

// For every "<p>.weight" with an E8M0 "<p>.scale" beside it: an F8_E4M3 weight [out, in] takes
// scales [ceil(out / blocks.rows), ceil(in / blocks.cols)]; an I8 weight [out, in / 2] becomes
// kFp4E2M1 [out, in] with scales [out, in / 32]. The scale tensors leave the name map (their
// bytes stay mapped, referenced by the weights). DeepSeek-V4.1's Engram tables
// ("*.engram.embed.weight" / ".scale") are left to the architecture.
// Errors: InvalidArgument "shape_mismatch" (a scale grid that does not fit its weight, FP4 data
//   of the wrong length, a scale that is not E8M0, a scaled weight of another dtype); DataLoss
//   "nan_in_weights" (an E8M0 NaN scale). Messages name the tensor.
// Cost: one pass over the scale bytes (1/1024 to 1/32 of the weights).
absl::Status AttachBlockScales(Model& m, const Fp8Blocks& blocks);

}  // namespace deepinfer::model
