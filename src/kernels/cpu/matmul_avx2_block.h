#pragma once

// The AVX2 kernels of the 32-element block formats (Q4_0, Q4_1, Q8_0) and the helpers the other
// AVX2 kernels share, for matmul_avx2.cc and matmul_avx2_vnni.cc only. Each of those files
// compiles its own copy (everything here has internal linkage, see matmul_internal.h) with its
// own flags: -mavx2 -mfma -mf16c, plus -mavxvnni for the second, whose block dot products then
// use AVX-VNNI's VPDPBUSD in place of VPMADDUBSW + VPMADDWD (DotU8S8). Both copies read the same
// activation records and give the same bits.
//
// 32-element formats work block by block: one ymm holds a block's 32 weights as bytes, a u8 x s8
// dot gives 8 int32 partial sums, and the block's d_w * d_x scales them, as in ggml's AVX2
// ggml_vec_dot_*. Activations are repacked into 40-byte records:
//   int8 qs[32] | float dx | extra
// where extra is Q4_1's s (float) or Q4_0's correction -8 * sum(qs) (int32; Q4_0 weights are
// fed as unsigned nibbles). Q8_0 x Q8_0 uses the sign trick (|w| times a with w's sign).
// Prefill tiles 2 rows x 4 tokens (16 ymm registers); decode 4 rows x 1 token.

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "matmul_avx2_block.h is for files compiled with -mavx2 -mfma -mf16c"
#endif

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/half.h"
#include "kernels/cpu/matmul_internal.h"

namespace deepinfer::kernels::internal {
namespace {

constexpr int kRecBytes = 40;
constexpr int64_t kTokenChunk = 64;
constexpr int64_t kPrefetchRows = 16;

enum class ActKind { kQ8_1, kBias8, kPlain };

size_t RecRowBytes(int64_t k) { return static_cast<size_t>(k / 32) * kRecBytes; }

static inline float HsumPs(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

static inline int HsumEpi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// ggml-cpu's quantize_row_q8_0/q8_1 for one block: 127 / amax, round half to even.
static inline float QuantizeBlock(const float* x, int8_t* q, int* sum, uint16_t* d16) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float max_scalar = _mm_cvtss_f32(m);
  const float d = max_scalar / 127.0f;
  const float id = max_scalar != 0.0f ? 127.0f / max_scalar : 0.0f;
  const __m256 idv = _mm256_set1_ps(id);
  __m256i i[4];
  for (int k = 0; k < 4; ++k)
    i[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], idv), _MM_ROUND_NEAREST));
  *sum = HsumEpi32(_mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3])));
  // Pack 32 int32 to int8 in order: packs interleave 128-bit lanes, undone by a permute.
  __m256i p01 = _mm256_packs_epi32(i[0], i[1]);
  __m256i p23 = _mm256_packs_epi32(i[2], i[3]);
  __m256i p = _mm256_packs_epi16(p01, p23);
  p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), p);
  *d16 = FloatToHalf(d);
  return d;
}

template <ActKind kKind>
void QuantizeRecords(const float* x, uint8_t* out, int64_t k) {
  for (int64_t b = 0; b < k / 32; ++b, out += kRecBytes) {
    int sum;
    uint16_t d16;
    const float d = QuantizeBlock(x + 32 * b, reinterpret_cast<int8_t*>(out), &sum, &d16);
    const float dr = HalfToFloat(d16);
    std::memcpy(out + 32, &dr, 4);
    if constexpr (kKind == ActKind::kQ8_1) {
      const float s = HalfToFloat(FloatToHalf(d * static_cast<float>(sum)));
      std::memcpy(out + 36, &s, 4);
    } else if constexpr (kKind == ActKind::kBias8) {
      const int32_t bias = -8 * sum;
      std::memcpy(out + 36, &bias, 4);
    } else {
      std::memset(out + 36, 0, 4);
    }
  }
}

enum class WKind { kQ4_0, kQ4_1, kQ8_0 };

// 8 int32 sums of 4 adjacent u8 * s8 products. Exact either way: the products of these formats
// never saturate VPMADDUBSW's int16 pairs (|w| <= 15 for Q4, |w| <= 128 and |a| <= 127 for
// Q8_0's sign trick: 2 * 128 * 127 < 2^15), so VPDPBUSD gives the same integers.
static inline __m256i DotU8S8(__m256i u, __m256i s) {
#if defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

struct BlockW {
  __m256i q;   // Q4: 32 unsigned nibbles; Q8_0: |q|
  __m256i sq;  // Q8_0: q itself (its signs are applied to the activations)
  __m256 dw;   // d broadcast
  __m256 mw;   // Q4_1: m in lane 0, zeros elsewhere
};

template <WKind kW>
static inline BlockW LoadBlock(const uint8_t* row, int64_t b) {
  BlockW w;
  if constexpr (kW == WKind::kQ8_0) {
    const uint8_t* p = row + 34 * b;
    w.sq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
    w.q = _mm256_sign_epi8(w.sq, w.sq);
    uint16_t d;
    std::memcpy(&d, p, 2);
    w.dw = _mm256_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(d))));
    w.mw = _mm256_setzero_ps();
  } else {
    constexpr int kBytes = kW == WKind::kQ4_1 ? 20 : 18;
    constexpr int kQs = kW == WKind::kQ4_1 ? 4 : 2;
    const uint8_t* p = row + kBytes * b;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kQs));
    const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1);
    w.q = _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
    uint32_t dm = 0;
    std::memcpy(&dm, p, kW == WKind::kQ4_1 ? 4 : 2);
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dm)));  // [d, m, 0, 0]
    w.dw = _mm256_broadcastss_ps(f);
    w.mw = _mm256_zextps128_ps256(_mm_shuffle_ps(f, f, 0xe9));  // [m, 0, 0, 0]
  }
  return w;
}

template <WKind kW, int R, int T>
static inline void BlockTile(const GemmArgs& g, int64_t r0, int64_t t0) {
  const int64_t nb = g.k / 32;
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  const uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = g.w + (r0 + r) * g.w_row_bytes;
  const uint8_t* acts[T];
  for (int t = 0; t < T; ++t) acts[t] = g.a + (t0 + t) * g.a_row_bytes;
  for (int64_t b = 0; b < nb; ++b) {
    BlockW w[R];
    for (int r = 0; r < R; ++r) w[r] = LoadBlock<kW>(rows[r], b);
    for (int t = 0; t < T; ++t) {
      const uint8_t* a = acts[t] + b * kRecBytes;
      const __m256i aq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
      const __m256 dx = _mm256_broadcast_ss(reinterpret_cast<const float*>(a + 32));
      for (int r = 0; r < R; ++r) {
        __m256i dot;
        if constexpr (kW == WKind::kQ8_0) {
          dot = DotU8S8(w[r].q, _mm256_sign_epi8(aq, w[r].sq));
        } else {
          dot = DotU8S8(w[r].q, aq);
        }
        if constexpr (kW == WKind::kQ4_0) {
          int32_t bias;
          std::memcpy(&bias, a + 36, 4);
          dot = _mm256_add_epi32(dot, _mm256_zextsi128_si256(_mm_cvtsi32_si128(bias)));
        }
        acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(w[r].dw, dx), acc[r][t]);
        if constexpr (kW == WKind::kQ4_1) {
          acc[r][t] = _mm256_fmadd_ps(w[r].mw, _mm256_broadcast_ss(reinterpret_cast<const float*>(a + 36)),
                                      acc[r][t]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) g.y[(t0 + t) * g.y_stride + r0 + r] = HsumPs(acc[r][t]);
}

static inline void PrefetchRows(const GemmArgs& g, int64_t r, int64_t n) {
  const char* p = reinterpret_cast<const char*>(g.w + (r + kPrefetchRows) * g.w_row_bytes);
  const int64_t bytes = n * static_cast<int64_t>(g.w_row_bytes);
  for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

template <WKind kW>
void BlockGemm(const GemmArgs& g) {
  if (g.num_tokens < 4) {
    for (int64_t t = 0; t < g.num_tokens; ++t) {
      int64_t r = g.row_begin;
      for (; r + 4 <= g.row_end; r += 4) {
        PrefetchRows(g, r, 4);
        BlockTile<kW, 4, 1>(g, r, t);
      }
      for (; r < g.row_end; ++r) BlockTile<kW, 1, 1>(g, r, t);
    }
    return;
  }
  for (int64_t tc = 0; tc < g.num_tokens; tc += kTokenChunk) {
    const int64_t te = tc + kTokenChunk < g.num_tokens ? tc + kTokenChunk : g.num_tokens;
    int64_t r = g.row_begin;
    for (; r + 2 <= g.row_end; r += 2) {
      PrefetchRows(g, r, 2);
      int64_t t = tc;
      for (; t + 4 <= te; t += 4) BlockTile<kW, 2, 4>(g, r, t);
      for (; t < te; ++t) BlockTile<kW, 2, 1>(g, r, t);
    }
    for (; r < g.row_end; ++r) {
      int64_t t = tc;
      for (; t + 4 <= te; t += 4) BlockTile<kW, 1, 4>(g, r, t);
      for (; t < te; ++t) BlockTile<kW, 1, 1>(g, r, t);
    }
  }
}

}  // namespace
}  // namespace deepinfer::kernels::internal
