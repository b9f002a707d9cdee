// AVX2 + FMA version of MatMulGgml's dot products (see ggml_numerics.h): the same operations in
// the same order as the portable DotQ4_1Q8_1Ggml / DotQ8_0Q8_0Ggml, eight lanes at a time.
// Compiled with -mavx2 -mfma -mf16c; reached only when DetectIsa() found them. Everything here
// has internal linkage except the two entry points (see matmul_internal.h for why).

#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tensor/dtype.h"

namespace deepinfer::kernels::internal {
namespace {

using tensor::BlockQ4_1;
using tensor::BlockQ8_0;
using tensor::BlockQ8_1;

inline float Fp16(uint16_t h) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))); }

// High half plus low half, then (0 + 2) + (1 + 3): hsum_float_8.
inline float Hsum8(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

// Eight int32 lanes, lane j = sum of u[4j..4j+3] * s[4j..4j+3] (u unsigned, |products| small
// enough that the 16-bit pair sums cannot saturate).
inline __m256 LaneSums(__m256i u, __m256i s) {
  const __m256i pairs = _mm256_maddubs_epi16(u, s);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

inline float DotQ4_1(const BlockQ4_1* w, const BlockQ8_1* x, int64_t nb) {
  __m256 acc = _mm256_setzero_ps();
  float summs = 0.0f;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  for (int64_t b = 0; b < nb; ++b) {
    const __m256 d = _mm256_set1_ps(Fp16(w[b].d) * Fp16(x[b].d));
    summs = std::fma(Fp16(w[b].m), Fp16(x[b].s), summs);
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
    const __m256i q = _mm256_and_si256(
        _mm256_insertf128_si256(_mm256_castsi128_si256(packed), _mm_srli_epi16(packed, 4), 1),
        low4);
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
    acc = _mm256_fmadd_ps(d, LaneSums(q, a), acc);
  }
  return Hsum8(acc) + summs;
}

inline float DotQ8_0(const BlockQ8_0* w, const BlockQ8_0* x, int64_t nb) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256 d = _mm256_set1_ps(Fp16(w[b].d) * Fp16(x[b].d));
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
    // |q| * sign(a, q) = q * a, with the unsigned operand maddubs needs.
    acc = _mm256_fmadd_ps(d, LaneSums(_mm256_sign_epi8(q, q), _mm256_sign_epi8(a, q)), acc);
  }
  return Hsum8(acc);
}

}  // namespace

namespace {

// Every output of rows [row_begin, row_end) for every token, one dot product at a time.
template <typename WBlock, typename XBlock, float (*kDot)(const WBlock*, const XBlock*, int64_t)>
void GemmRows(const uint8_t* w, size_t w_row_bytes, const uint8_t* a, size_t a_row_bytes,
              int64_t nb, int64_t num_tokens, float* y, int64_t y_stride, int64_t row_begin,
              int64_t row_end) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const auto* wr = reinterpret_cast<const WBlock*>(w + r * w_row_bytes);
    for (int64_t t = 0; t < num_tokens; ++t) {
      y[t * y_stride + r] = kDot(wr, reinterpret_cast<const XBlock*>(a + t * a_row_bytes), nb);
    }
  }
}

}  // namespace

void GgmlGemmQ4_1Avx2(const uint8_t* w, size_t w_row_bytes, const uint8_t* a, size_t a_row_bytes,
                      int64_t nb, int64_t num_tokens, float* y, int64_t y_stride, int64_t row_begin,
                      int64_t row_end) {
  GemmRows<BlockQ4_1, BlockQ8_1, DotQ4_1>(w, w_row_bytes, a, a_row_bytes, nb, num_tokens, y,
                                          y_stride, row_begin, row_end);
}

void GgmlGemmQ8_0Avx2(const uint8_t* w, size_t w_row_bytes, const uint8_t* a, size_t a_row_bytes,
                      int64_t nb, int64_t num_tokens, float* y, int64_t y_stride, int64_t row_begin,
                      int64_t row_end) {
  GemmRows<BlockQ8_0, BlockQ8_0, DotQ8_0>(w, w_row_bytes, a, a_row_bytes, nb, num_tokens, y,
                                          y_stride, row_begin, row_end);
}

}  // namespace deepinfer::kernels::internal
