// Portable kernels: one dot product per (row, token), integer within a block and float across
// blocks, in the order of ggml's generic ggml_vec_dot_* so results match its scalar path.

#include "kernels/cpu/half.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quant.h"
#include "tensor/tensor.h"

#include <vector>

namespace deepinfer::kernels::internal {
namespace {

using tensor::BlockQ4_0;
using tensor::BlockQ4_1;
using tensor::BlockQ4_K;
using tensor::BlockQ6_K;
using tensor::BlockQ8_0;
using tensor::BlockQ8_1;
using tensor::BlockQ8_K;
using tensor::kQK_K;

float DotF32(const void* wv, const void* av, int64_t k) {
  const auto* w = static_cast<const float*>(wv);
  const auto* a = static_cast<const float*>(av);
  // Eight partial sums: vectorizable without -ffast-math and closer to what the SIMD paths do.
  float s[8] = {};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    for (int l = 0; l < 8; ++l) s[l] += w[i + l] * a[i + l];
  for (; i < k; ++i) s[0] += w[i] * a[i];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

float DotF16(const void* wv, const void* av, int64_t k) {
  const auto* w = static_cast<const uint16_t*>(wv);
  const auto* a = static_cast<const float*>(av);
  float s[8] = {};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    for (int l = 0; l < 8; ++l) s[l] += HalfToFloat(w[i + l]) * a[i + l];
  for (; i < k; ++i) s[0] += HalfToFloat(w[i]) * a[i];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

float DotBF16(const void* wv, const void* av, int64_t k) {
  const auto* w = static_cast<const uint16_t*>(wv);
  const auto* a = static_cast<const float*>(av);
  float s[8] = {};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    for (int l = 0; l < 8; ++l) s[l] += BitsToFloat(static_cast<uint32_t>(w[i + l]) << 16) * a[i + l];
  for (; i < k; ++i) s[0] += BitsToFloat(static_cast<uint32_t>(w[i]) << 16) * a[i];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

float DotQ4_0(const void* wv, const void* av, int64_t k) {
  const auto* w = static_cast<const BlockQ4_0*>(wv);
  const auto* a = static_cast<const BlockQ8_0*>(av);
  float sum = 0.0f;
  for (int64_t b = 0; b < k / 32; ++b) {
    int sumi = 0;
    for (int j = 0; j < 16; ++j) {
      sumi += ((w[b].qs[j] & 0x0f) - 8) * a[b].qs[j];
      sumi += ((w[b].qs[j] >> 4) - 8) * a[b].qs[j + 16];
    }
    sum += static_cast<float>(sumi) * (HalfToFloat(w[b].d) * HalfToFloat(a[b].d));
  }
  return sum;
}

float DotQ4_1(const void* wv, const void* av, int64_t k) {
  const auto* w = static_cast<const BlockQ4_1*>(wv);
  const auto* a = static_cast<const BlockQ8_1*>(av);
  float sum = 0.0f;
  for (int64_t b = 0; b < k / 32; ++b) {
    int sumi = 0;
    for (int j = 0; j < 16; ++j) {
      sumi += (w[b].qs[j] & 0x0f) * a[b].qs[j];
      sumi += (w[b].qs[j] >> 4) * a[b].qs[j + 16];
    }
    sum += (HalfToFloat(w[b].d) * HalfToFloat(a[b].d)) * static_cast<float>(sumi) +
           HalfToFloat(w[b].m) * HalfToFloat(a[b].s);
  }
  return sum;
}

float DotQ8_0(const void* wv, const void* av, int64_t k) {
  const auto* w = static_cast<const BlockQ8_0*>(wv);
  const auto* a = static_cast<const BlockQ8_0*>(av);
  float sum = 0.0f;
  for (int64_t b = 0; b < k / 32; ++b) {
    int sumi = 0;
    for (int j = 0; j < 32; ++j) sumi += w[b].qs[j] * a[b].qs[j];
    sum += static_cast<float>(sumi) * (HalfToFloat(w[b].d) * HalfToFloat(a[b].d));
  }
  return sum;
}

float DotQ4_K(const void* wv, const void* av, int64_t k) {
  const auto* w = static_cast<const BlockQ4_K*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  float sum = 0.0f;
  for (int64_t b = 0; b < k / kQK_K; ++b) {
    uint8_t sc[8], mn[8];
    UnpackQ4KScales(w[b].scales, sc, mn);
    int sum_mins = 0;
    for (int j = 0; j < 16; ++j) sum_mins += a[b].bsums[j] * mn[j / 2];
    int sumi = 0;
    const uint8_t* q = w[b].qs;
    const int8_t* y = a[b].qs;
    for (int j = 0; j < 4; ++j, q += 32, y += 64) {
      int lo = 0, hi = 0;
      for (int l = 0; l < 32; ++l) {
        lo += (q[l] & 0x0f) * y[l];
        hi += (q[l] >> 4) * y[l + 32];
      }
      sumi += sc[2 * j] * lo + sc[2 * j + 1] * hi;
    }
    const float d = a[b].d * HalfToFloat(w[b].d);
    const float dmin = HalfToFloat(w[b].dmin) * a[b].d;
    sum += d * static_cast<float>(sumi) - dmin * static_cast<float>(sum_mins);
  }
  return sum;
}

float DotQ6_K(const void* wv, const void* av, int64_t k) {
  const auto* w = static_cast<const BlockQ6_K*>(wv);
  const auto* a = static_cast<const BlockQ8_K*>(av);
  float sum = 0.0f;
  for (int64_t b = 0; b < k / kQK_K; ++b) {
    int sumi = 0;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = w[b].ql + 64 * h;
      const uint8_t* qh = w[b].qh + 32 * h;
      const int8_t* y = a[b].qs + 128 * h;
      const int8_t* sc = w[b].scales + 8 * h;
      for (int g = 0; g < 8; ++g) {  // 16-element groups sharing one scale
        const int quarter = g / 2;
        int s = 0;
        for (int l = (g % 2) * 16; l < (g % 2) * 16 + 16; ++l) {
          const int lo = quarter & 1 ? ql[l + 32] : ql[l];
          const int low4 = quarter < 2 ? (lo & 0x0f) : (lo >> 4);
          const int q = (low4 | (((qh[l] >> (2 * quarter)) & 3) << 4)) - 32;
          s += q * y[32 * quarter + l];
        }
        sumi += sc[g] * s;
      }
    }
    sum += (a[b].d * HalfToFloat(w[b].d)) * static_cast<float>(sumi);
  }
  return sum;
}

// Block-scaled weights: each row decoded exactly (code value times its block's power of two) into
// a thread-local buffer, then DotF32 with every token.
template <bool kFp4>
void ScaledGemm(const GemmArgs& g) {
  static constexpr float kFp4Values[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6,
                                           0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  thread_local std::vector<float> row;
  if (static_cast<int64_t>(row.size()) < g.k) row.resize(g.k);
  for (int64_t r = g.row_begin; r < g.row_end; ++r) {
    const uint8_t* w = g.w + r * g.w_row_bytes;
    const uint8_t* sc = g.scale + (r / g.scale_block_rows) * g.scale_cols;
    for (int64_t c = 0; c < g.k; ++c) {
      const float s = E8M0Value(sc[c / g.scale_block_cols]);
      if constexpr (kFp4) {
        row[c] = kFp4Values[(c & 1) ? w[c >> 1] >> 4 : w[c >> 1] & 0x0f] * s;
      } else {
        row[c] = tensor::Fp8E4M3ToFp32(w[c]) * s;
      }
    }
    for (int64_t t = 0; t < g.num_tokens; ++t)
      g.y[t * g.y_stride + r] = DotF32(row.data(), g.a + t * g.a_row_bytes, g.k);
  }
}

template <float (*Dot)(const void*, const void*, int64_t)>
void Gemm(const GemmArgs& g) {
  for (int64_t r = g.row_begin; r < g.row_end; ++r) {
    const uint8_t* w = g.w + r * g.w_row_bytes;
    for (int64_t t = 0; t < g.num_tokens; ++t)
      g.y[t * g.y_stride + r] = Dot(w, g.a + t * g.a_row_bytes, g.k);
  }
}

void QuantQ8_0(const float* x, uint8_t* y, int64_t n) {
  QuantizeRowQ8_0Cpu(x, reinterpret_cast<BlockQ8_0*>(y), n);
}
void QuantQ8_1(const float* x, uint8_t* y, int64_t n) {
  QuantizeRowQ8_1Cpu(x, reinterpret_cast<BlockQ8_1*>(y), n);
}
void QuantQ8_K(const float* x, uint8_t* y, int64_t n) {
  QuantizeRowQ8_K(x, reinterpret_cast<BlockQ8_K*>(y), n);
}
size_t RowBytesF32(int64_t k) { return static_cast<size_t>(k) * 4; }
size_t RowBytesQ8_0(int64_t k) { return static_cast<size_t>(k / 32) * sizeof(BlockQ8_0); }
size_t RowBytesQ8_1(int64_t k) { return static_cast<size_t>(k / 32) * sizeof(BlockQ8_1); }
size_t RowBytesQ8_K(int64_t k) { return static_cast<size_t>(k / kQK_K) * sizeof(BlockQ8_K); }

}  // namespace

void FillScalarKernels(KernelTable* t) {
  t->f32 = {Gemm<DotF32>, nullptr, RowBytesF32};
  t->f16 = {Gemm<DotF16>, nullptr, RowBytesF32};
  t->bf16 = {Gemm<DotBF16>, nullptr, RowBytesF32};
  t->q4_0 = {Gemm<DotQ4_0>, QuantQ8_0, RowBytesQ8_0};
  t->q4_1 = {Gemm<DotQ4_1>, QuantQ8_1, RowBytesQ8_1};
  t->q8_0 = {Gemm<DotQ8_0>, QuantQ8_0, RowBytesQ8_0};
  t->q4_k = {Gemm<DotQ4_K>, QuantQ8_K, RowBytesQ8_K};
  t->q6_k = {Gemm<DotQ6_K>, QuantQ8_K, RowBytesQ8_K};
  t->fp8 = {ScaledGemm<false>, nullptr, RowBytesF32};
  t->fp4 = {ScaledGemm<true>, nullptr, RowBytesF32};
}

}  // namespace deepinfer::kernels::internal
