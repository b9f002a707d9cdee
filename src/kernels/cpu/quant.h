#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace deepinfer::kernels {

// Converts `n` elements of type `t` starting at `src` (a whole number of blocks) to f32.
// Bit-exact with the reference dequantization of ggml (and the `gguf` Python package) for F32,
// F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K and Q6_K; each product and sum is rounded separately (no
// fused multiply-add), as numpy does.
//
// Shapes: src holds n / BlockSize(t) blocks; dst [n] f32.
// Errors: other types and partial blocks are programming errors (DI_CHECK aborts).
// Source: ggml/src/ggml-quants.c dequantize_row_*.
void DequantizeRow(tensor::DType t, const void* src, float* dst, int64_t n);

// Quantizes `n` f32 values (a multiple of 32, or 256 for Q8_K) to Q8_0 / Q8_1 / Q8_K blocks,
// matching ggml's reference quantize_row_q8_*.
void QuantizeRowQ8_0(const float* x, tensor::BlockQ8_0* y, int64_t n);
void QuantizeRowQ8_1(const float* x, tensor::BlockQ8_1* y, int64_t n);
void QuantizeRowQ8_K(const float* x, tensor::BlockQ8_K* y, int64_t n);

// Quantizes activations the way ggml's x86 CPU backend does before a quantized dot product
// (its SIMD quantize_row_q8_0 / q8_1): multiply by 127 / amax (not 1 / d) and round half to even
// (not away from zero). They differ from the reference functions above only in rare elements
// (ties, or a last-bit difference of the inverse scale); MatMul uses them so results track
// llama.cpp.
// (For Q8_K the CPU backend uses the reference function, so there is no separate variant.)
//
// Source: ggml/src/ggml-cpu/arch/x86/quants.c quantize_row_q8_0 / quantize_row_q8_1.
void QuantizeRowQ8_0Cpu(const float* x, tensor::BlockQ8_0* y, int64_t n);
void QuantizeRowQ8_1Cpu(const float* x, tensor::BlockQ8_1* y, int64_t n);

// True when DequantizeRow and the matmul kernels handle `t` on its own: every type of
// tensor/dtype.h's table but the block-scaled ones (their rows need the tensor's scales), the
// activation formats (Q8_1, Q8_K) and the non-matrix types (I64, I8, E8M0). Block sizes and
// bytes come from that table (tensor::BlockSize, tensor::BlockBytes).
bool HasCpuKernel(tensor::DType t);

// F8_E4M3 and FP4_E2M1: weights whose values need the E8M0 block scales of TensorView::scale
// (model/block_scales.h). (A V3 checkpoint's F8_E4M3 weights are dequantized at load instead.)
bool IsBlockScaled(tensor::DType t);

// True when MatMul accepts `w`: HasCpuKernel(w.dtype), or a block-scaled weight with its scales.
bool HasCpuMatMul(const tensor::TensorView& w);

// Row r of a block-scaled weight as f32: value(code) * 2^(scale - 127), exact.
// Shapes: dst [w.cols()]. REQUIRES: HasCpuMatMul(w) and IsBlockScaled(w.dtype).
void DequantizeScaledRow(const tensor::TensorView& w, int64_t r, float* dst);

}  // namespace deepinfer::kernels
