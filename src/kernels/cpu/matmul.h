#pragma once

#include <cstdint>

#include "model/dtype.h"
#include "model/model.h"
#include "util/thread_pool.h"

namespace deepinfer::kernels {

// Instruction-set level chosen at run time from CPUID (and DEEPINFER_ISA=scalar|avx2|avx512 for
// tests and benchmarks).
enum class Isa { kScalar, kAvx2, kAvx512 };
Isa DetectIsa();
// The ISA the kernels use now; SetIsaForTest overrides it (tests compare paths).
Isa ActiveIsa();
void SetIsaForTest(Isa isa);
const char* IsaName(Isa isa);

// y = x W^T for a weight in any supported dtype, computed directly on quantized blocks.
//
// For quantized weights the activations are first quantized per 32-element block the way
// llama.cpp does (Q8_0 for Q4_0/Q8_0, Q8_1 for Q4_1, Q8_K for Q4_K/Q6_K), and the dot products
// are integer within a block, so results track llama.cpp's CPU backend closely.
// Shapes: w [out, in] (w.shape = {out, in}); x [num_tokens, in] f32 row-major;
//   y [num_tokens, out] f32 row-major. `in` must be a multiple of the weight's block size.
// Threads: parallel over output rows (and token tiles) on `pool`; call from the pool's owner.
// Cost: no heap allocation after the first call with a given size (thread-local scratch).
void MatMul(const model::TensorView& w, const float* x, int64_t num_tokens, float* y,
            util::ThreadPool& pool);

// Same as MatMul but only for output rows [row_begin, row_end) and single-threaded; y is still
// [num_tokens, out] with the full `out` stride. Used by callers that fuse several matmuls into
// one parallel region.
void MatMulRows(const model::TensorView& w, const float* x, int64_t num_tokens, float* y,
                int64_t row_begin, int64_t row_end);

}  // namespace deepinfer::kernels
