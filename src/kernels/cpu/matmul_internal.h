#pragma once

// Internal interface between matmul.cc (dispatch, threading, scratch) and the per-ISA kernel
// files. The x86 SIMD files are compiled with -mavx2 / -mavx512* (matmul_neon.cc keeps its
// dotprod, i8mm and SVE copies under target pragmas); to keep their code from leaking
// into paths run on older CPUs they must not instantiate templates or inline functions shared
// with other files (only `static`/anonymous-namespace helpers and the plain types here).

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace deepinfer::model {
struct TensorView;
}
namespace deepinfer::util {
class ThreadPool;
}

namespace deepinfer::kernels::internal {

// y[t * y_stride + r] = dot(weight row r, activation row t) for r in [row_begin, row_end) and
// t in [0, num_tokens). Weight row r starts at w + r * w_row_bytes; activation row t at
// a + t * a_row_bytes, already in the weight's dot type (f32 for float weights, Q8_0 / Q8_1 /
// Q8_K blocks for quantized ones). k is the number of elements per row.
struct GemmArgs {
  const uint8_t* w;
  size_t w_row_bytes;
  const uint8_t* a;
  size_t a_row_bytes;
  int64_t k;
  int64_t num_tokens;
  float* y;
  int64_t y_stride;
  int64_t row_begin;
  int64_t row_end;
  // Block-scaled weights (F8_E4M3 / FP4_E2M1): E8M0 scales [ceil(rows / scale_block_rows),
  // scale_cols] row-major; element (r, c) is value(code) * 2^(scale - 127) of its block. Null for
  // other types.
  const uint8_t* scale = nullptr;
  int64_t scale_cols = 0;
  int64_t scale_block_rows = 0;
  int64_t scale_block_cols = 0;
};
using GemmFn = void (*)(const GemmArgs& args);
// Converts one token's `k` activations to the layout `gemm` reads (act_row_bytes(k) bytes).
using QuantizeFn = void (*)(const float* x, uint8_t* out, int64_t k);
using RowBytesFn = size_t (*)(int64_t k);

// How one weight type is multiplied: the activation format is private to each ISA's kernel, so
// the three entries always come from the same ISA.
struct TypeKernels {
  GemmFn gemm = nullptr;
  QuantizeFn quantize = nullptr;  // null: the gemm reads the f32 activations as they are
  RowBytesFn act_row_bytes = nullptr;
};

// Kernel table of one ISA; entries with a null gemm fall back to the next lower ISA's.
struct KernelTable {
  TypeKernels f32, f16, bf16, q4_0, q4_1, q8_0, q4_k, q6_k, fp8, fp4;
};
constexpr int kKernelTableEntries = sizeof(KernelTable) / sizeof(TypeKernels);
// The entry of `table` for weights of type `t`. REQUIRES: HasCpuKernel(t) or IsBlockScaled(t).
const TypeKernels& KernelsForType(const KernelTable& table, tensor::DType t);

// E8M0 byte b -> 2^(b - 127) as f32 (0 below the smallest denormal; b = 255, NaN, never reaches
// a kernel: the loader refuses it).
static inline float E8M0Value(uint8_t b) {
  const int e = static_cast<int>(b) - 127;
  if (e >= -126) {
    const uint32_t bits = static_cast<uint32_t>(e + 127) << 23;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
  }
  if (e < -149) return 0.0f;
  const uint32_t bits = 1u << (e + 149);  // denormal 2^e
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

void FillScalarKernels(KernelTable* t);
// The table MatMul uses for `isa_index` (0 scalar, 1 AVX2, 2 AVX-512, 3 NEON), after fallbacks;
// tests use it to check the per-ISA activation formats.
const KernelTable& KernelsForIsa(int isa_index);
void FillAvx2Kernels(KernelTable* t);    // defined in matmul_avx2.cc
// Q4_0 / Q4_1 / Q8_0 with AVX-VNNI (matmul_avx2_vnni.cc), over FillAvx2Kernels' entries: same
// activation formats, same bits. REQUIRES: the CPU has AVX-VNNI.
void FillAvx2VnniKernels(KernelTable* t);
void FillAvx512Kernels(KernelTable* t);  // defined in matmul_avx512.cc
// FP8 / FP4 on AMX-BF16 tiles with bf16 activations (matmul_amx.cc), over FillAvx512Kernels'
// entries. REQUIRES: Avx512UsesAmx().
void FillAmxKernels(KernelTable* t);
// FP8 / FP4 with bf16 activations on AVX512-BF16 dot products (matmul_avx512.cc), over
// FillAvx512Kernels' entries. REQUIRES: Avx512UsesBf16Dot().
void FillAvx512Bf16DotKernels(KernelTable* t);
// The copies of the NEON integer kernels (Q4_0 / Q4_1 / Q8_0 / Q4_K / Q6_K), by the dot
// instruction they use: VMULL + VPADAL (baseline armv8-a), SDOT (dotprod), or SDOT for single
// tokens and SMMLA for pairs of tokens (dotprod + i8mm). kSve is kDotProd with Q4_0 / Q4_1 /
// Q8_0 tiles using SVE's SDOT on 256-bit vectors (matmul_neon_sve.inc); kSveI8mm is kI8mm whose
// Q4_0 / Q4_1 / Q8_0 gemms take single tokens through kSve's. All five give the same bits.
enum class NeonIntDot { kBaseline, kDotProd, kI8mm, kSve, kSveI8mm };
// aarch64 only (matmul_neon.cc): every type, the integer ones from `copy`.
// REQUIRES: the CPU has what `copy` uses (kDotProd: HWCAP_ASIMDDP; kI8mm: that and HWCAP2_I8MM;
// kSve / kSveI8mm: kDotProd's / kI8mm's, HWCAP_SVE and SveVectorBytes() == 32);
// matmul_test.cc checks that the copies agree.
void FillNeonKernels(KernelTable* t, NeonIntDot copy);
// svcntb(): the SVE vector length in bytes of the calling thread (aarch64 only; the kernels
// assume no thread changes it with prctl(PR_SVE_SET_VL)). REQUIRES: HWCAP_SVE.
int SveVectorBytes();
// Q4_1 / Q8_0 kernels that keep ggml-cpu's float order (matmul_avx512.cc; used by MatMulGgml).
void FillAvx512GgmlKernels(KernelTable* t);

// MatMul / MatMulGroup (matmul.h) with the FillAvx512GgmlKernels kernels: bit-identical to
// ggml's vec_dot. REQUIRES: ActiveIsa() == Isa::kAvx512; every weight Q4_1 or Q8_0.
void MatMulGgmlOrderAvx512(const tensor::TensorView& w, const float* x, int64_t num_tokens,
                           float* y, util::ThreadPool& pool);
void MatMulGroupGgmlOrderAvx512(const tensor::TensorView* const* ws, float* const* ys, int count,
                                const float* x, int64_t num_tokens, util::ThreadPool& pool);

// Unpacks the 6-bit (scale, min) pair j of a Q4_K block's 12 scale bytes into 8 scales and 8 mins.
// Source: ggml/src/ggml-quants.c get_scale_min_k4.
static inline void UnpackQ4KScales(const uint8_t* q, uint8_t* sc, uint8_t* m) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = q[j] & 63;
    m[j] = q[j + 4] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
    m[j] = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace deepinfer::kernels::internal
