// AVX-512 (F/BW/VL/DQ + VNNI) kernels. Compiled with those ISA flags; reached only when
// DetectIsa() found them. Everything here has internal linkage (see matmul_internal.h).
//
// 32-element formats (Q4_0, Q4_1, Q8_0) work on pairs of blocks: one zmm holds 64 weights
// (two blocks) as unsigned bytes, VPDPBUSD multiplies them with 64 int8 activations into 16
// int32 lanes (lanes 0-7: first block, 8-15: second), and each lane group is scaled by its
// block's d_w * d_x. Activations are repacked per ISA into "pair" records so the kernel only
// issues full-width loads:
//   int8 qs[64] | float dx[16] (d of block 0 x8, block 1 x8) | extra[16]
// where extra is, for Q4_1, the float s of each block in lanes 0 and 8 (the min term m * s is
// added into the same lanes), and for Q4_0 / Q8_0 the int32 correction -off * sum(qs) in lanes
// 0 and 8, used as VPDPBUSD's starting accumulator because the weights are fed unsigned
// (q + off) and VPDPBUSD needs one unsigned operand.
//
// Prefill tiles 4 rows x 4 tokens: each weight pair is unpacked once and used for 4 tokens.
// Integer sums within a block and the per-block float scaling follow ggml_vec_dot_*, so the
// results differ from ggml only by the order of the float additions across blocks.
//
// FillAvx512GgmlKernels adds Q4_1 / Q8_0 variants that keep that order too (MatMulGgml,
// ggml_numerics.h): ggml_vec_dot_q4_1_q8_1 / q8_0_q8_0 run one 8-lane chain
// acc = fma(d_w * d_x, float(lane), acc) over the blocks in order, then hsum_float_8, and Q4_1
// adds a separate chain summs = fma(m, s, summs). Lanes 0-7 of the accumulator run the 8-lane
// chain, block 2p and then block 2p+1 (swapped down with one shuffle); for Q4_1, lanes 8-15 run
// the summs chain alongside (m in the weight operand, s in the activation operand). That is about
// twice the vector work per block pair (prefill ~23% and decode ~8% slower here), so the default
// kernels keep their order. Their 256-byte records after qs:
//   xa[16] = d0 x8 | 1.0 x8, xb[16] = d1 x8 | 1.0 x8 (f32), then
//   Q4_1: s[16] = s1 x8 | s0 x8 (f32);
//   Q8_0: bias[16] (int32) = -128 * (sum of the lane's 4 qs), undoing the unsigned weights lane
//         by lane (ggml's lanes each sum 4 products, so the correction cannot sit in one lane).

#include <immintrin.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/bf16_avx512.h"
#include "kernels/cpu/half.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quant.h"
#include "tensor/tensor.h"

namespace deepinfer::kernels::internal {
namespace {

using tensor::BlockQ8_0;
using tensor::BlockQ8_1;

constexpr int kPairBytes = 192;
constexpr int kGgmlPairBytes = 256;
constexpr int64_t kTokenChunk = 64;  // activations of a chunk stay in L2 while rows stream
constexpr int64_t kPrefetchRows = 16;  // how far ahead decode prefetches weight rows

enum class ActKind { kQ8_1, kBias8, kBias128, kQ8_1Ggml, kBias128Ggml };

size_t PairRowBytes(int64_t k) { return static_cast<size_t>((k / 32 + 1) / 2) * kPairBytes; }
size_t GgmlPairRowBytes(int64_t k) {
  return static_cast<size_t>((k / 32 + 1) / 2) * kGgmlPairBytes;
}

// Quantizes 32 floats like ggml-cpu's quantize_row_q8_0 (127 / amax, round half to even).
// Returns d (as the fp32 value of the stored fp16) and sum(q); writes 32 int8.
static inline float QuantizeBlock(const float* x, int8_t* q, int* sum, uint16_t* d16) {
  const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
  const __m512 amax_v = _mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1));
  const float amax = _mm512_reduce_max_ps(amax_v);
  const float d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const __m512 idv = _mm512_set1_ps(id);
  // cvtps rounds with MXCSR's default round-to-nearest-even, like _mm256_round_ps in ggml.
  const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, idv));
  const __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, idv));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(i0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtepi32_epi8(i1));
  *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
  *d16 = FloatToHalf(d);
  return d;
}

template <ActKind kKind>
void QuantizePairs(const float* x, uint8_t* out, int64_t k) {
  const int64_t nb = k / 32;
  for (int64_t p = 0; p < (nb + 1) / 2; ++p, out += kPairBytes) {
    auto* qs = reinterpret_cast<int8_t*>(out);
    auto* dx = reinterpret_cast<float*>(out + 64);
    auto* extra_f = reinterpret_cast<float*>(out + 128);
    auto* extra_i = reinterpret_cast<int32_t*>(out + 128);
    std::memset(out + 64, 0, kPairBytes - 64);
    for (int h = 0; h < 2; ++h) {
      const int64_t b = 2 * p + h;
      if (b >= nb) {
        std::memset(qs + 32 * h, 0, 32);
        continue;
      }
      int sum;
      uint16_t d16;
      const float d = QuantizeBlock(x + 32 * b, qs + 32 * h, &sum, &d16);
      (void)d;
      const float dr = HalfToFloat(d16);  // the kernels use the rounded scale, as ggml does
      for (int l = 0; l < 8; ++l) dx[8 * h + l] = dr;
      if constexpr (kKind == ActKind::kQ8_1) {
        extra_f[8 * h] = HalfToFloat(FloatToHalf(d * static_cast<float>(sum)));
      } else if constexpr (kKind == ActKind::kBias8) {
        extra_i[8 * h] = -8 * sum;
      } else {
        extra_i[8 * h] = -128 * sum;
      }
    }
  }
}

// Records of the ggml-order kernels (see the file comment).
template <ActKind kKind>
void QuantizeGgmlPairs(const float* x, uint8_t* out, int64_t k) {
  const int64_t nb = k / 32;
  for (int64_t p = 0; p < (nb + 1) / 2; ++p, out += kGgmlPairBytes) {
    auto* qs = reinterpret_cast<int8_t*>(out);
    float* xab[2] = {reinterpret_cast<float*>(out + 64), reinterpret_cast<float*>(out + 128)};
    auto* s = reinterpret_cast<float*>(out + 192);
    auto* bias = reinterpret_cast<int32_t*>(out + 192);
    std::memset(out + 64, 0, kGgmlPairBytes - 64);
    for (int h = 0; h < 2; ++h) {
      for (int l = 8; l < 16; ++l) xab[h][l] = 1.0f;
      const int64_t b = 2 * p + h;
      if (b >= nb) {
        std::memset(qs + 32 * h, 0, 32);
        continue;
      }
      int sum;
      uint16_t d16;
      const float d = QuantizeBlock(x + 32 * b, qs + 32 * h, &sum, &d16);
      for (int l = 0; l < 8; ++l) xab[h][l] = HalfToFloat(d16);
      if constexpr (kKind == ActKind::kQ8_1Ggml) {
        const float sh = HalfToFloat(FloatToHalf(d * static_cast<float>(sum)));
        for (int l = 0; l < 8; ++l) s[8 * (1 - h) + l] = sh;
      } else {
        for (int l = 0; l < 8; ++l) {
          const int8_t* q = qs + 32 * h + 4 * l;
          bias[8 * h + l] = -128 * (q[0] + q[1] + q[2] + q[3]);
        }
      }
    }
  }
}

// Unpacked weights of one row for one block pair.
struct PairW {
  __m512i q;   // 64 unsigned values in activation order
  __m512 dw;   // d of block 0 in lanes 0-7, block 1 in lanes 8-15
  __m512 mw;   // Q4_1 only: m of block 0 / 1 in all lanes of their half
  // ggml-order kernels: the operands of the two fmas (Q4_1: d0 x8 | m0 x8 and d1 x8 | m1 x8;
  // Q8_0: dw as above and d1 x16).
  __m512 wa, wb;
};

// Q4_0 and Q4_1 blocks are 18 / 20 bytes: one masked load covers a pair. A word permute then
// places each block's 16 packed bytes twice (low and high nibbles), a per-word variable shift
// brings the high nibbles down and a mask keeps 4 bits per byte.
template <int kBlockBytes, bool kGgmlOrder = false>
static inline PairW LoadQ4Pair(const uint8_t* w, bool two) {
  constexpr int kQsWord = kBlockBytes == 20 ? 2 : 1;  // first word of qs in a block
  constexpr int kBlockWords = kBlockBytes / 2;
  const __mmask64 mask = two ? (~0ULL >> (64 - 2 * kBlockBytes)) : (~0ULL >> (64 - kBlockBytes));
  const __m512i raw = _mm512_maskz_loadu_epi8(mask, w);
  const __m512i idx = _mm512_set_epi16(
      kBlockWords + kQsWord + 7, kBlockWords + kQsWord + 6, kBlockWords + kQsWord + 5,
      kBlockWords + kQsWord + 4, kBlockWords + kQsWord + 3, kBlockWords + kQsWord + 2,
      kBlockWords + kQsWord + 1, kBlockWords + kQsWord, kBlockWords + kQsWord + 7,
      kBlockWords + kQsWord + 6, kBlockWords + kQsWord + 5, kBlockWords + kQsWord + 4,
      kBlockWords + kQsWord + 3, kBlockWords + kQsWord + 2, kBlockWords + kQsWord + 1,
      kBlockWords + kQsWord, kQsWord + 7, kQsWord + 6, kQsWord + 5, kQsWord + 4, kQsWord + 3,
      kQsWord + 2, kQsWord + 1, kQsWord, kQsWord + 7, kQsWord + 6, kQsWord + 5, kQsWord + 4,
      kQsWord + 3, kQsWord + 2, kQsWord + 1, kQsWord);
  const __m512i shifts = _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0, 0,
                                          0x0004000400040004, 0x0004000400040004, 0, 0);
  PairW p;
  p.q = _mm512_and_si512(_mm512_srlv_epi16(_mm512_permutexvar_epi16(idx, raw), shifts),
                         _mm512_set1_epi8(0x0f));
  const __m512 f = _mm512_cvtph_ps(_mm512_castsi512_si256(raw));
  p.dw = _mm512_permutexvar_ps(
      _mm512_set_epi32(kBlockWords, kBlockWords, kBlockWords, kBlockWords, kBlockWords,
                       kBlockWords, kBlockWords, kBlockWords, 0, 0, 0, 0, 0, 0, 0, 0),
      f);
  if constexpr (kBlockBytes == 20) {
    p.mw = _mm512_permutexvar_ps(_mm512_set_epi32(11, 11, 11, 11, 11, 11, 11, 11, 1, 1, 1, 1, 1,
                                                  1, 1, 1),
                                 f);
    if constexpr (kGgmlOrder) {
      // Words of a pair: d0 = 0, m0 = 1, d1 = 10, m1 = 11.
      p.wa = _mm512_permutexvar_ps(
          _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), f);
      p.wb = _mm512_permutexvar_ps(
          _mm512_set_epi32(11, 11, 11, 11, 11, 11, 11, 11, 10, 10, 10, 10, 10, 10, 10, 10), f);
    }
  } else {
    p.mw = _mm512_setzero_ps();
  }
  return p;
}

// Q8_0 blocks are 34 bytes: two 32-byte loads; the weights are made unsigned by flipping the
// sign bit (q + 128), which the activation record's -128 * sum(qs) undoes.
template <bool kGgmlOrder = false>
static inline PairW LoadQ8Pair(const uint8_t* w, bool two) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2));
  uint16_t d0, d1 = 0;
  std::memcpy(&d0, w, 2);
  __m256i hi = _mm256_setzero_si256();
  if (two) {
    hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 36));
    std::memcpy(&d1, w + 34, 2);
  }
  PairW p;
  p.q = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
                         _mm512_set1_epi8(static_cast<char>(0x80)));
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(d0 | (uint32_t{d1} << 16))));
  p.dw = _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                               _mm512_castps128_ps512(f));
  p.mw = _mm512_setzero_ps();
  if constexpr (kGgmlOrder) {
    p.wa = p.dw;
    p.wb = _mm512_permutexvar_ps(_mm512_set1_epi32(1), _mm512_castps128_ps512(f));
  }
  return p;
}

enum class WKind { kQ4_0, kQ4_1, kQ8_0, kQ4_1Ggml, kQ8_0Ggml };

template <WKind kW>
static inline PairW LoadPair(const uint8_t* row, int64_t p, bool two) {
  if constexpr (kW == WKind::kQ4_0) return LoadQ4Pair<18>(row + 36 * p, two);
  if constexpr (kW == WKind::kQ4_1) return LoadQ4Pair<20>(row + 40 * p, two);
  if constexpr (kW == WKind::kQ8_0) return LoadQ8Pair(row + 68 * p, two);
  if constexpr (kW == WKind::kQ4_1Ggml) return LoadQ4Pair<20, true>(row + 40 * p, two);
  if constexpr (kW == WKind::kQ8_0Ggml) return LoadQ8Pair<true>(row + 68 * p, two);
}

template <WKind kW>
constexpr bool kGgmlKind = kW == WKind::kQ4_1Ggml || kW == WKind::kQ8_0Ggml;

// acc[r][t] over all block pairs for R rows x T tokens; writes y.
template <WKind kW, int R, int T>
static inline void PairTile(const GemmArgs& g, int64_t r0, int64_t t0) {
  const int64_t nb = g.k / 32;
  const int64_t np = (nb + 1) / 2;
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = g.w + (r0 + r) * g.w_row_bytes;
  const uint8_t* acts[T];
  for (int t = 0; t < T; ++t) acts[t] = g.a + (t0 + t) * g.a_row_bytes;
  for (int64_t p = 0; p < np; ++p) {
    const bool two = 2 * p + 1 < nb;
    PairW w[R];
    for (int r = 0; r < R; ++r) w[r] = LoadPair<kW>(rows[r], p, two);
    for (int t = 0; t < T; ++t) {
      const uint8_t* a = acts[t] + p * (kGgmlKind<kW> ? kGgmlPairBytes : kPairBytes);
      const __m512i aq = _mm512_loadu_si512(a);
      const __m512 dx = _mm512_loadu_ps(reinterpret_cast<const float*>(a + 64));
      if constexpr (kW == WKind::kQ4_1Ggml) {
        const __m512 xb = _mm512_loadu_ps(reinterpret_cast<const float*>(a + 128));
        const __m512 s = _mm512_loadu_ps(reinterpret_cast<const float*>(a + 192));
        for (int r = 0; r < R; ++r) {
          const __m512 v =
              _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w[r].q, aq));
          // Lanes 0-7: d0 d_x0 * block 0 | lanes 8-15: m0 * s0; then block 1 likewise.
          const __m512 v0 = _mm512_mask_blend_ps(0xff00, v, s);
          const __m512 t1 = _mm512_mask_blend_ps(0x00ff, v, s);
          const __m512 v1 = _mm512_shuffle_f32x4(t1, t1, 0x4e);
          acc[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(w[r].wa, dx), v0, acc[r][t]);
          acc[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(w[r].wb, xb), v1, acc[r][t]);
        }
      } else if constexpr (kW == WKind::kQ8_0Ggml) {
        const __m512 xb = _mm512_loadu_ps(reinterpret_cast<const float*>(a + 128));
        const __m512i bias = _mm512_loadu_si512(a + 192);
        for (int r = 0; r < R; ++r) {
          const __m512 v = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bias, w[r].q, aq));
          const __m512 v1 = _mm512_shuffle_f32x4(v, v, 0x4e);
          acc[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(w[r].wa, dx), v, acc[r][t]);
          acc[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(w[r].wb, xb), v1, acc[r][t]);
        }
      } else if constexpr (kW == WKind::kQ4_1) {
        const __m512 s = _mm512_loadu_ps(reinterpret_cast<const float*>(a + 128));
        for (int r = 0; r < R; ++r) {
          const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[r].q, aq);
          acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(w[r].dw, dx), acc[r][t]);
          acc[r][t] = _mm512_fmadd_ps(w[r].mw, s, acc[r][t]);
        }
      } else {
        const __m512i bias = _mm512_loadu_si512(a + 128);
        for (int r = 0; r < R; ++r) {
          const __m512i dot = _mm512_dpbusd_epi32(bias, w[r].q, aq);
          acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(w[r].dw, dx), acc[r][t]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float y;
      if constexpr (kGgmlKind<kW>) {
        // hsum_float_8 of lanes 0-7; Q4_1 then adds the summs chain (lane 8).
        __m128 h = _mm_add_ps(_mm512_extractf32x4_ps(acc[r][t], 1), _mm512_castps512_ps128(acc[r][t]));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_movehdup_ps(h));
        y = _mm_cvtss_f32(h);
        if constexpr (kW == WKind::kQ4_1Ggml) y += _mm_cvtss_f32(_mm512_extractf32x4_ps(acc[r][t], 2));
      } else {
        y = _mm512_reduce_add_ps(acc[r][t]);
      }
      g.y[(t0 + t) * g.y_stride + r0 + r] = y;
    }
  }
}

// Rows are read as four short interleaved streams, which the hardware prefetchers do not pick
// up; without this, a decode step from DRAM runs at a fraction of the memory bandwidth.
static inline void PrefetchRows(const GemmArgs& g, int64_t r, int64_t n) {
  const char* p = reinterpret_cast<const char*>(g.w + (r + kPrefetchRows) * g.w_row_bytes);
  const int64_t bytes = n * static_cast<int64_t>(g.w_row_bytes);
  for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

// The same distance spread over the tile's k loop (the DeepSeek formats' decode tiles): the
// line of each of the R rows kPrefetchRows further on, at the offset the tile reads now. A burst
// of every line of four rows (PrefetchRows) fills the core's line-fill buffers and stalls it
// until they drain, so the tile's own loads and FMAs wait behind it; spread out, the prefetches
// overlap the arithmetic. matmul_bench DecodeCold, one thread, same run (Intel Xeon, load ~5):
// FP8 4096x4096 5.0 -> 8.2 GB/s, FP4 2048x4096 4.3 -> 6.8, BF16 head 7.8 -> 10.4 (the read
// ceiling then 10.4). `bytes` is the offset into each row; call it once per 64 bytes of row.
template <int R>
static inline void PrefetchAhead(const GemmArgs& g, const uint8_t* const* rows, int64_t bytes) {
  const int64_t ahead = kPrefetchRows * static_cast<int64_t>(g.w_row_bytes) + bytes;
  for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(rows[r] + ahead), _MM_HINT_T0);
}

template <WKind kW>
void PairGemm(const GemmArgs& g) {
  for (int64_t tc = 0; tc < g.num_tokens; tc += kTokenChunk) {
    const int64_t te = tc + kTokenChunk < g.num_tokens ? tc + kTokenChunk : g.num_tokens;
    int64_t r = g.row_begin;
    for (; r + 4 <= g.row_end; r += 4) {
      PrefetchRows(g, r, 4);
      int64_t t = tc;
      if constexpr (kW == WKind::kQ4_1) {
        // Q4_1 weights take three registers per row (values, d, m): a 4x4 tile would spill.
        for (; t + 3 <= te; t += 3) PairTile<kW, 4, 3>(g, r, t);
        for (; t + 2 <= te; t += 2) PairTile<kW, 4, 2>(g, r, t);
      } else if constexpr (kGgmlKind<kW>) {
        for (; t + 2 <= te; t += 2) PairTile<kW, 4, 2>(g, r, t);
      } else {
        for (; t + 4 <= te; t += 4) PairTile<kW, 4, 4>(g, r, t);
      }
      for (; t < te; ++t) PairTile<kW, 4, 1>(g, r, t);
    }
    for (; r < g.row_end; ++r) {
      int64_t t = tc;
      for (; t + 4 <= te; t += 4) PairTile<kW, 1, 4>(g, r, t);
      for (; t < te; ++t) PairTile<kW, 1, 1>(g, r, t);
    }
  }
}

// ---- BF16 weights times f32 activations ---------------------------------------------------------
//
// A bf16 is the high half of an f32, so a 64-byte load of 32 weights yields the even-indexed ones
// as f32 with a 16-bit left shift and the odd-indexed ones with a mask of the high halves. The
// activations are repacked once per call to match: every 32 values as [16 even | 16 odd] (the
// tail past the last full 32 stays in order). Per 32 weights: one load, two ALU ops, two FMAs.

static void DeinterleaveBf16Activations(const float* x, uint8_t* out, int64_t k) {
  float* o = reinterpret_cast<float*>(out);
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    for (int j = 0; j < 16; ++j) {
      o[i + j] = x[i + 2 * j];
      o[i + 16 + j] = x[i + 2 * j + 1];
    }
  }
  for (; i < k; ++i) o[i] = x[i];
}

static size_t Bf16ActivationBytes(int64_t k) { return static_cast<size_t>(k) * 4; }

// prefetch: the tile's rows are the first token tile's: PrefetchAhead as it reads them.
template <int R, int T>
static inline void Bf16Tile(const GemmArgs& g, int64_t r0, int64_t t0, bool prefetch) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = g.w + (r0 + r) * g.w_row_bytes;
  const float* xs[T];
  for (int t = 0; t < T; ++t) xs[t] = reinterpret_cast<const float*>(g.a + (t0 + t) * g.a_row_bytes);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  int64_t i = 0;
  for (; i + 32 <= g.k; i += 32) {
    __m512 even[R], odd[R];
    if (prefetch) PrefetchAhead<R>(g, rows, 2 * i);  // 64 bytes of each row per step
    for (int r = 0; r < R; ++r) {
      const __m512i v = _mm512_loadu_si512(rows[r] + 2 * i);
      even[r] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      odd[r] = _mm512_castsi512_ps(_mm512_and_si512(v, high));
    }
    for (int t = 0; t < T; ++t) {
      const __m512 xe = _mm512_loadu_ps(xs[t] + i), xo = _mm512_loadu_ps(xs[t] + i + 16);
      for (int r = 0; r < R; ++r) {
        acc[r][t] = _mm512_fmadd_ps(even[r], xe, acc[r][t]);
        acc[r][t] = _mm512_fmadd_ps(odd[r], xo, acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float s = _mm512_reduce_add_ps(acc[r][t]);
      for (int64_t j = i; j < g.k; ++j) {
        uint16_t h;
        std::memcpy(&h, rows[r] + 2 * j, 2);
        s += BitsToFloat(static_cast<uint32_t>(h) << 16) * xs[t][j];
      }
      g.y[(t0 + t) * g.y_stride + r0 + r] = s;
    }
  }
}

static void Bf16Gemm(const GemmArgs& g) {
  for (int64_t tc = 0; tc < g.num_tokens; tc += kTokenChunk) {
    const int64_t te = tc + kTokenChunk < g.num_tokens ? tc + kTokenChunk : g.num_tokens;
    int64_t r = g.row_begin;
    for (; r + 4 <= g.row_end; r += 4) {
      int64_t t = tc;
      for (; t + 4 <= te; t += 4) Bf16Tile<4, 4>(g, r, t, t == tc);
      for (; t + 2 <= te; t += 2) Bf16Tile<4, 2>(g, r, t, t == tc);
      for (; t < te; ++t) Bf16Tile<4, 1>(g, r, t, t == tc);
    }
    for (; r < g.row_end; ++r)
      for (int64_t t = tc; t < te; ++t) Bf16Tile<1, 1>(g, r, t, false);
  }
}

// --- Block-scaled weights (DeepSeek-V4's released formats). ---
//
// FP8 E4M3: 32 codes widen to 16-bit lanes that read as IEEE halves (Fp8Weights32). FP4 E2M1: 16
// bytes hold 32 codes; the low nibbles are the even elements and the high nibbles the odd ones,
// each looked up in a 16-float table register, and the activations are repacked per 32 as
// [16 even | 16 odd] (as for BF16). Either way the weights are decoded exactly, once per tile,
// and every output accumulates in the same 16 lanes over k in order, whatever the tile: the
// results do not depend on how many tokens share the call.

// 32 FP8 codes -> two vectors of 16 f32 weights. An E4M3 code's bits placed as an IEEE half —
// magnitude (code & 0x7f) << 7, sign at bit 15 — is the code's value times 2^-8 (normal and
// subnormal codes alike), so one half-to-float conversion and one multiply by the block's
// 2^(scale - 127 + 8) give the exact weights. (A scale of 2^119 or more would overflow here; no
// finite weight quantizes to one.)
// Columns 0-15 take scale_lo, 16-31 scale_hi (blocks 16 wide; the same scale for wider ones).
static inline void Fp8Weights32(__m256i codes, __m512 scale_lo, __m512 scale_hi, __m512* lo,
                                __m512* hi) {
  // Sign-extended, a code shifted left by 7 has its magnitude in bits 7-13 and the sign in bits
  // 14 and 15: clearing bit 14 leaves the half (one shift and one AND where separate magnitude
  // and sign paths took five operations; the 4 vector pipes of an AMD Zen 4 were the limit).
  const __m512i v = _mm512_cvtepi8_epi16(codes);
  const __m512i half =
      _mm512_and_si512(_mm512_slli_epi16(v, 7), _mm512_set1_epi16(static_cast<int16_t>(0xbfff)));
  *lo = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(half)), scale_lo);
  *hi = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(half, 1)), scale_hi);
}

static inline __m256i Load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

static inline __m512 Fp8Scale(uint8_t b) { return _mm512_set1_ps(E8M0Value(b) * 256.0f); }

// A row's E8M0 scales as f32 times `mul` (E8M0Value(b) * mul: the same bits), 16 at a time. The
// decode tiles then broadcast each from memory, a load and no ALU work per block; computing
// E8M0Value per row and block in the loop was scalar work on every 32 weights.
static void ScaleFloats(const uint8_t* sc, int64_t n, float mul, float* out) {
  const __m512 m = _mm512_set1_ps(mul);
  int64_t b = 0;
  for (; b + 16 <= n; b += 16) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + b)));
    // 2^(b - 127) is b << 23 for b >= 1, and the denormal 2^-127 for b = 0.
    const __m512i bits = _mm512_mask_mov_epi32(_mm512_slli_epi32(v, 23), _mm512_testn_epi32_mask(v, v),
                                               _mm512_set1_epi32(0x00400000));
    _mm512_storeu_ps(out + b, _mm512_mul_ps(_mm512_castsi512_ps(bits), m));
  }
  for (; b < n; ++b) out[b] = E8M0Value(sc[b]) * mul;
}

// R rows' scale floats (ScaleFloats of their scale rows, times 256 for FP8's half trick, 1 for
// FP4) in `buf` (room for R * g.scale_cols); rows of one block share theirs.
template <bool kFp4, int R>
static inline void RowScaleFloats(const GemmArgs& g, int64_t r0, float* buf, const float* sf[R]) {
  const uint8_t* prev = nullptr;
  for (int r = 0; r < R; ++r) {
    const uint8_t* sc = g.scale + ((r0 + r) / g.scale_block_rows) * g.scale_cols;
    if (r > 0 && sc == prev) {
      sf[r] = sf[r - 1];
      continue;
    }
    ScaleFloats(sc, g.scale_cols, kFp4 ? 1.0f : 256.0f, buf + r * g.scale_cols);
    sf[r] = buf + r * g.scale_cols;
    prev = sc;
  }
}

// The 16 E2M1 values times a block's scale 2^(b - 127): exact (a power of two), so looking codes
// up in it gives the same bits as scaling each looked-up value, for one multiply per 32 weights
// instead of two.
static inline __m512 Fp4Table(__m512 scale) {
  const __m512 table = _mm512_setr_ps(0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3,
                                      -4, -6);
  return _mm512_mul_ps(table, scale);
}

// 32 FP4 codes (16 bytes) -> the 16 even and the 16 odd elements of `table` (Fp4Table).
static inline void Fp4Weights32(const uint8_t* bytes, __m512 table, __m512* even, __m512* odd) {
  const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)));
  *even = _mm512_permutexvar_ps(_mm512_and_si512(v, _mm512_set1_epi32(0x0f)), table);
  *odd = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);
}

// sf: the rows' scale floats (RowScaleFloats).
template <int R, int T>
static inline void Fp8Tile(const GemmArgs& g, int64_t r0, int64_t t0, const float* const* sf,
                           bool prefetch) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const uint8_t* rows[R];
  const uint8_t* scales[R];
  for (int r = 0; r < R; ++r) {
    rows[r] = g.w + (r0 + r) * g.w_row_bytes;
    scales[r] = g.scale + ((r0 + r) / g.scale_block_rows) * g.scale_cols;
  }
  const float* xs[T];
  for (int t = 0; t < T; ++t) xs[t] = reinterpret_cast<const float*>(g.a + (t0 + t) * g.a_row_bytes);
  int64_t i = 0;
  // 32 columns at a time share one scale (blocks are multiples of 16 wide: a 32-column step
  // straddles two blocks when the width is 16 mod 32, so then it takes 16 at a time).
  const bool wide = g.scale_block_cols % 32 == 0;
  for (; wide && i + 32 <= g.k; i += 32) {
    __m512 lo[R], hi[R];
    if (prefetch && i % 64 == 0) PrefetchAhead<R>(g, rows, i);
    const int64_t b = i / g.scale_block_cols;
    for (int r = 0; r < R; ++r) {
      const __m512 scale = _mm512_set1_ps(sf[r][b]);
      Fp8Weights32(Load32(rows[r] + i), scale, scale, &lo[r], &hi[r]);
    }
    for (int t = 0; t < T; ++t) {
      const __m512 x0 = _mm512_loadu_ps(xs[t] + i), x1 = _mm512_loadu_ps(xs[t] + i + 16);
      for (int r = 0; r < R; ++r) {
        acc[r][t] = _mm512_fmadd_ps(lo[r], x0, acc[r][t]);
        acc[r][t] = _mm512_fmadd_ps(hi[r], x1, acc[r][t]);
      }
    }
  }
  for (; i + 32 <= g.k; i += 32) {  // narrow blocks: each half with its own scale
    __m512 lo[R], hi[R];
    if (prefetch && i % 64 == 0) PrefetchAhead<R>(g, rows, i);
    for (int r = 0; r < R; ++r) {
      Fp8Weights32(Load32(rows[r] + i), _mm512_set1_ps(sf[r][i / g.scale_block_cols]),
                   _mm512_set1_ps(sf[r][(i + 16) / g.scale_block_cols]), &lo[r], &hi[r]);
    }
    for (int t = 0; t < T; ++t) {
      const __m512 x0 = _mm512_loadu_ps(xs[t] + i), x1 = _mm512_loadu_ps(xs[t] + i + 16);
      for (int r = 0; r < R; ++r) {
        acc[r][t] = _mm512_fmadd_ps(lo[r], x0, acc[r][t]);
        acc[r][t] = _mm512_fmadd_ps(hi[r], x1, acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float s = _mm512_reduce_add_ps(acc[r][t]);
      for (int64_t j = i; j < g.k; ++j) {
        s += tensor::Fp8E4M3ToFp32(rows[r][j]) * E8M0Value(scales[r][j / g.scale_block_cols]) *
             xs[t][j];
      }
      g.y[(t0 + t) * g.y_stride + r0 + r] = s;
    }
  }
}

template <int R, int T>
static inline void Fp4Tile(const GemmArgs& g, int64_t r0, int64_t t0, const float* const* sf,
                           bool prefetch) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = g.w + (r0 + r) * g.w_row_bytes;
  const float* xs[T];
  for (int t = 0; t < T; ++t) xs[t] = reinterpret_cast<const float*>(g.a + (t0 + t) * g.a_row_bytes);
  for (int64_t i = 0; i < g.k; i += 32) {  // k % 32 == 0: one scale per 32 along the row
    __m512 even[R], odd[R];
    if (prefetch && i % 128 == 0) PrefetchAhead<R>(g, rows, i / 2);
    const int64_t b = i / g.scale_block_cols;
    for (int r = 0; r < R; ++r) {
      Fp4Weights32(rows[r] + i / 2, Fp4Table(_mm512_set1_ps(sf[r][b])), &even[r], &odd[r]);
    }
    for (int t = 0; t < T; ++t) {
      const __m512 xe = _mm512_loadu_ps(xs[t] + i), xo = _mm512_loadu_ps(xs[t] + i + 16);
      for (int r = 0; r < R; ++r) {
        acc[r][t] = _mm512_fmadd_ps(even[r], xe, acc[r][t]);
        acc[r][t] = _mm512_fmadd_ps(odd[r], xo, acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) g.y[(t0 + t) * g.y_stride + r0 + r] = _mm512_reduce_add_ps(acc[r][t]);
}

// Prefill: a panel of 4 rows decoded once into thread-local f32 (FP8 in natural order, FP4 as
// [16 even | 16 odd] per 32, matching its activations) and multiplied with every token of the
// chunk by plain f32 tiles. The tiles issue the same FMAs in the same order as Fp8Tile / Fp4Tile
// on the same (exactly decoded) weights, so a token's outputs are bit-identical either way.
constexpr int64_t kPanelRows = 4;
constexpr int64_t kPanelMinTokens = 8;

template <bool kFp4>
static void DecodePanel(const GemmArgs& g, int64_t r0, float* panel) {
  for (int64_t r = 0; r < kPanelRows; ++r) {
    const uint8_t* row = g.w + (r0 + r) * g.w_row_bytes;
    const uint8_t* sc = g.scale + ((r0 + r) / g.scale_block_rows) * g.scale_cols;
    float* out = panel + r * g.k;
    int64_t i = 0;
    for (; i + 32 <= g.k; i += 32) {
      if constexpr (kFp4) {
        __m512 even, odd;
        Fp4Weights32(row + i / 2, Fp4Table(_mm512_set1_ps(E8M0Value(sc[i / g.scale_block_cols]))),
                     &even, &odd);
        _mm512_storeu_ps(out + i, even);
        _mm512_storeu_ps(out + i + 16, odd);
      } else {
        __m512 lo, hi;
        Fp8Weights32(Load32(row + i), Fp8Scale(sc[i / g.scale_block_cols]),
                     Fp8Scale(sc[(i + 16) / g.scale_block_cols]), &lo, &hi);
        _mm512_storeu_ps(out + i, lo);
        _mm512_storeu_ps(out + i + 16, hi);
      }
    }
    for (; i < g.k; ++i) {  // FP8 only (FP4 rows are whole 32s)
      out[i] = tensor::Fp8E4M3ToFp32(row[i]) * E8M0Value(sc[i / g.scale_block_cols]);
    }
  }
}

template <int T>
static inline void PanelTile(const GemmArgs& g, const float* panel, int64_t r0, int64_t t0) {
  constexpr int R = kPanelRows;
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const float* xs[T];
  for (int t = 0; t < T; ++t) xs[t] = reinterpret_cast<const float*>(g.a + (t0 + t) * g.a_row_bytes);
  int64_t i = 0;
  for (; i + 32 <= g.k; i += 32) {
    __m512 lo[R], hi[R];
    for (int r = 0; r < R; ++r) {
      lo[r] = _mm512_loadu_ps(panel + r * g.k + i);
      hi[r] = _mm512_loadu_ps(panel + r * g.k + i + 16);
    }
    for (int t = 0; t < T; ++t) {
      const __m512 x0 = _mm512_loadu_ps(xs[t] + i), x1 = _mm512_loadu_ps(xs[t] + i + 16);
      for (int r = 0; r < R; ++r) {
        acc[r][t] = _mm512_fmadd_ps(lo[r], x0, acc[r][t]);
        acc[r][t] = _mm512_fmadd_ps(hi[r], x1, acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float s = _mm512_reduce_add_ps(acc[r][t]);
      for (int64_t j = i; j < g.k; ++j) s += panel[r * g.k + j] * xs[t][j];
      g.y[(t0 + t) * g.y_stride + r0 + r] = s;
    }
  }
}

template <bool kFp4>
static void ScaledGemm(const GemmArgs& g) {
  thread_local std::vector<float> panel;
  thread_local std::vector<float> scale_buf;
  if (static_cast<int64_t>(scale_buf.size()) < 4 * g.scale_cols) scale_buf.resize(4 * g.scale_cols);
  const float* sf[4];
  for (int64_t tc = 0; tc < g.num_tokens; tc += kTokenChunk) {
    const int64_t te = tc + kTokenChunk < g.num_tokens ? tc + kTokenChunk : g.num_tokens;
    int64_t r = g.row_begin;
    // The panel path needs the 32-column step of the direct tiles' wide loop.
    const bool panels = te - tc >= kPanelMinTokens && (kFp4 || g.scale_block_cols % 32 == 0);
    for (; r + 4 <= g.row_end; r += 4) {
      if (panels) PrefetchRows(g, r, 4);  // decoded once for many tokens: compute bound
      int64_t t = tc;
      if (panels) {
        if (static_cast<int64_t>(panel.size()) < kPanelRows * g.k) panel.resize(kPanelRows * g.k);
        DecodePanel<kFp4>(g, r, panel.data());
        for (; t + 4 <= te; t += 4) PanelTile<4>(g, panel.data(), r, t);
        for (; t < te; ++t) PanelTile<1>(g, panel.data(), r, t);
      } else if constexpr (kFp4) {
        RowScaleFloats<kFp4, 4>(g, r, scale_buf.data(), sf);
        for (; t + 4 <= te; t += 4) Fp4Tile<4, 4>(g, r, t, sf, t == tc);
        for (; t + 2 <= te; t += 2) Fp4Tile<4, 2>(g, r, t, sf, t == tc);
        for (; t < te; ++t) Fp4Tile<4, 1>(g, r, t, sf, t == tc);
      } else {
        RowScaleFloats<kFp4, 4>(g, r, scale_buf.data(), sf);
        for (; t + 4 <= te; t += 4) Fp8Tile<4, 4>(g, r, t, sf, t == tc);
        for (; t + 2 <= te; t += 2) Fp8Tile<4, 2>(g, r, t, sf, t == tc);
        for (; t < te; ++t) Fp8Tile<4, 1>(g, r, t, sf, t == tc);
      }
    }
    for (; r < g.row_end; ++r) {
      RowScaleFloats<kFp4, 1>(g, r, scale_buf.data(), sf);
      for (int64_t t = tc; t < te; ++t) {
        if constexpr (kFp4) {
          Fp4Tile<1, 1>(g, r, t, sf, false);
        } else {
          Fp8Tile<1, 1>(g, r, t, sf, false);
        }
      }
    }
  }
}

// ---- FP8 / FP4 weights times bf16 activations: AVX512-BF16 dot products (opt-in) ---------------
//
// Where bf16 activations are allowed and the CPU has AVX512-BF16 but no AMX (AMD Zen 4 and
// later, Intel Cooper Lake; Avx512UsesBf16Dot), the FP8 and FP4 weights are decoded exactly as
// above and converted to bf16, which is exact too (an E4M3 or E2M1 value times a power of two has
// at most 4 significant bits, bf16 keeps 8; values below 2^-126 would be bf16 denormals, which
// VDPBF16PS reads as zero, as AMX does: no released checkpoint has one). The activations are
// rounded to bf16 once per call (round to nearest even), and VDPBF16PS multiplies 32 weights by 32
// activations into 16 f32 lanes: 32 multiply-adds per instruction where an FMA does 16. Every
// output accumulates in the same 16 lanes over k in order, in whole steps of 32 (the activations
// are zero past k and an FP8 row's last partial step loads its codes masked), with the same
// instructions in the direct tiles and in the panels, so a token's outputs do not depend on the
// call's other tokens or on the row split.

// The file's flags lack AVX512-BF16 (its other kernels run on CPUs without it), so this section
// alone is compiled for it: GCC's target pragma, clang's attribute region (clang ignores the
// former; the fuzz build uses clang).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512bf16"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512bf16")
#endif

static inline int64_t Bf16DotSteps(int64_t k) { return (k + 31) / 32; }

// What the rows of a step (columns [i, i + 32)) share: the scale columns of its two halves and,
// for an FP8 row's last partial step, the mask of the columns before k.
struct Bf16Step {
  int64_t b0, b1;
  __mmask32 valid;  // all ones for a whole step
};

static inline Bf16Step MakeBf16Step(const GemmArgs& g, int64_t i) {
  Bf16Step s;
  s.b0 = i / g.scale_block_cols;
  s.b1 = i + 16 < g.k ? (i + 16) / g.scale_block_cols : s.b0;
  s.valid = i + 32 <= g.k ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << (g.k - i)) - 1);
  return s;
}

// The scales of up to 4 rows: as floats (RowScaleFloats) and, for FP4, as exponent shifts
// (Fp4Shifts), with whether every one of them takes the integer route.
struct Bf16Rows {
  const float* sf[4];
  const int16_t* shift[4];
  bool integer = false;
};

template <bool kFp4, int R>
static inline void PrepareBf16Rows(const GemmArgs& g, int64_t r0, float* float_buf,
                                   int16_t* shift_buf, Bf16Rows* rs) {
  RowScaleFloats<kFp4, R>(g, r0, float_buf, rs->sf);
  if constexpr (kFp4) {
    rs->integer = true;
    for (int r = 0; r < R; ++r) {
      const uint8_t* sc = g.scale + ((r0 + r) / g.scale_block_rows) * g.scale_cols;
      rs->shift[r] = shift_buf + r * g.scale_cols;
      rs->integer &= Fp4Shifts(sc, g.scale_cols, shift_buf + r * g.scale_cols);
    }
  }
}

// The step's 32 weights of row r as bf16 in element order. FP4 takes the integer route
// (Fp4Bf16Bits32) when its scales allow, else the float one, whose [16 even | 16 odd] a VPERMW
// puts back in order: the same bits either way.
template <bool kFp4>
static inline __m512bh WeightsBf16(const uint8_t* row, const Bf16Rows& rs, int r, int64_t i,
                                   const Bf16Step& s) {
  __m512 a, b;
  if constexpr (kFp4) {
    if (rs.integer)
      return reinterpret_cast<__m512bh>(
          Fp4Bf16Bits32(row + i / 2, _mm512_set1_epi16(rs.shift[r][s.b0])));
    Fp4Weights32(row + i / 2, Fp4Table(_mm512_set1_ps(rs.sf[r][s.b0])), &a, &b);
    const __m512i order =
        _mm512_setr_epi32(0x00100000, 0x00110001, 0x00120002, 0x00130003, 0x00140004, 0x00150005,
                          0x00160006, 0x00170007, 0x00180008, 0x00190009, 0x001a000a, 0x001b000b,
                          0x001c000c, 0x001d000d, 0x001e000e, 0x001f000f);
    return reinterpret_cast<__m512bh>(
        _mm512_permutexvar_epi16(order, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a))));
  } else {
    const __m256i codes =
        s.valid == ~__mmask32{0} ? Load32(row + i) : _mm256_maskz_loadu_epi8(s.valid, row + i);
    Fp8Weights32(codes, _mm512_set1_ps(rs.sf[r][s.b0]), _mm512_set1_ps(rs.sf[r][s.b1]), &a, &b);
    return _mm512_cvtne2ps_pbh(b, a);
  }
}

static inline __m512bh LoadBf16(const uint16_t* p) {
  return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p));
}

// The R x T sums of a tile over tokens [t0, t0 + T): each step adds w[r] . x[t] into lane-wise
// f32 accumulators; Store writes their horizontal sums.
template <int R, int T>
struct Bf16Sums {
  __m512 acc[R][T];
  const uint16_t* xs[T];

  Bf16Sums(const GemmArgs& g, int64_t t0) {
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
    for (int t = 0; t < T; ++t)
      xs[t] = reinterpret_cast<const uint16_t*>(g.a + (t0 + t) * g.a_row_bytes);
  }
  // Columns [i, i + 32).
  void Step(const __m512bh (&w)[R], int64_t i) {
    for (int t = 0; t < T; ++t) {
      const __m512bh x = LoadBf16(xs[t] + i);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], w[r], x);
    }
  }
  void Store(const GemmArgs& g, int64_t r0, int64_t t0) const {
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t)
        g.y[(t0 + t) * g.y_stride + r0 + r] = _mm512_reduce_add_ps(acc[r][t]);
  }
};

// R rows x T tokens, decoding each step's weights once for the T tokens.
template <bool kFp4, int R, int T>
static inline void Bf16DotTile(const GemmArgs& g, int64_t r0, int64_t t0, const Bf16Rows& rs,
                               bool prefetch) {
  Bf16Sums<R, T> sums(g, t0);
  const uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = g.w + (r0 + r) * g.w_row_bytes;
  for (int64_t i = 0; i < g.k; i += 32) {
    constexpr int64_t kStepBytes = kFp4 ? 16 : 32;
    if (prefetch && (i / 32 * kStepBytes) % 64 == 0) PrefetchAhead<R>(g, rows, i / 32 * kStepBytes);
    const Bf16Step step = MakeBf16Step(g, i);
    __m512bh w[R];
    for (int r = 0; r < R; ++r) w[r] = WeightsBf16<kFp4>(rows[r], rs, r, i, step);
    sums.Step(w, i);
  }
  sums.Store(g, r0, t0);
}

// Prefill: kPanelRows rows decoded once into bf16 ([row][32 x Bf16DotSteps(k)]) for every token
// of the chunk.
template <bool kFp4>
static void DecodePanelBf16(const GemmArgs& g, int64_t r0, const Bf16Rows& rs, uint16_t* panel) {
  const int64_t kk = Bf16DotSteps(g.k) * 32;
  for (int64_t r = 0; r < kPanelRows; ++r) {
    const uint8_t* row = g.w + (r0 + r) * g.w_row_bytes;
    for (int64_t i = 0; i < g.k; i += 32) {
      const __m512bh w = WeightsBf16<kFp4>(row, rs, static_cast<int>(r), i, MakeBf16Step(g, i));
      _mm512_storeu_si512(panel + r * kk + i, reinterpret_cast<__m512i>(w));
    }
  }
}

template <int T>
static inline void PanelTileBf16(const GemmArgs& g, const uint16_t* panel, int64_t r0, int64_t t0) {
  constexpr int R = kPanelRows;
  const int64_t kk = Bf16DotSteps(g.k) * 32;
  Bf16Sums<R, T> sums(g, t0);
  for (int64_t i = 0; i < kk; i += 32) {
    __m512bh w[R];
    for (int r = 0; r < R; ++r) w[r] = LoadBf16(panel + r * kk + i);
    sums.Step(w, i);
  }
  sums.Store(g, r0, t0);
}

template <bool kFp4>
static void Bf16DotGemm(const GemmArgs& g) {
  thread_local std::vector<uint16_t> panel;
  thread_local std::vector<float> scale_buf;
  thread_local std::vector<int16_t> shift_buf;
  if (static_cast<int64_t>(scale_buf.size()) < 4 * g.scale_cols) {
    scale_buf.resize(4 * g.scale_cols);
    shift_buf.resize(4 * g.scale_cols);
  }
  Bf16Rows rs;
  for (int64_t tc = 0; tc < g.num_tokens; tc += kTokenChunk) {
    const int64_t te = tc + kTokenChunk < g.num_tokens ? tc + kTokenChunk : g.num_tokens;
    const bool panels = te - tc >= kPanelMinTokens;
    int64_t r = g.row_begin;
    for (; r + 4 <= g.row_end; r += 4) {
      PrepareBf16Rows<kFp4, 4>(g, r, scale_buf.data(), shift_buf.data(), &rs);
      int64_t t = tc;
      if (panels) {
        PrefetchRows(g, r, 4);  // decoded once for many tokens: compute bound
        const int64_t need = kPanelRows * Bf16DotSteps(g.k) * 32;
        if (static_cast<int64_t>(panel.size()) < need) panel.resize(need);
        DecodePanelBf16<kFp4>(g, r, rs, panel.data());
        for (; t + 6 <= te; t += 6) PanelTileBf16<6>(g, panel.data(), r, t);
        for (; t + 2 <= te; t += 2) PanelTileBf16<2>(g, panel.data(), r, t);
        for (; t < te; ++t) PanelTileBf16<1>(g, panel.data(), r, t);
      } else {
        for (; t + 4 <= te; t += 4) Bf16DotTile<kFp4, 4, 4>(g, r, t, rs, t == tc);
        for (; t + 2 <= te; t += 2) Bf16DotTile<kFp4, 4, 2>(g, r, t, rs, t == tc);
        for (; t < te; ++t) Bf16DotTile<kFp4, 4, 1>(g, r, t, rs, t == tc);
      }
    }
    for (; r < g.row_end; ++r) {
      PrepareBf16Rows<kFp4, 1>(g, r, scale_buf.data(), shift_buf.data(), &rs);
      for (int64_t t = tc; t < te; ++t) Bf16DotTile<kFp4, 1, 1>(g, r, t, rs, false);
    }
  }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

static size_t F32ActivationBytes(int64_t k) { return static_cast<size_t>(k) * 4; }

}  // namespace

void FillAvx512Kernels(KernelTable* t) {
  t->bf16 = {Bf16Gemm, DeinterleaveBf16Activations, Bf16ActivationBytes};
  t->q4_0 = {PairGemm<WKind::kQ4_0>, QuantizePairs<ActKind::kBias8>, PairRowBytes};
  t->q4_1 = {PairGemm<WKind::kQ4_1>, QuantizePairs<ActKind::kQ8_1>, PairRowBytes};
  t->q8_0 = {PairGemm<WKind::kQ8_0>, QuantizePairs<ActKind::kBias128>, PairRowBytes};
  t->fp8 = {ScaledGemm<false>, nullptr, F32ActivationBytes};
  t->fp4 = {ScaledGemm<true>, DeinterleaveBf16Activations, Bf16ActivationBytes};
}

void FillAvx512Bf16DotKernels(KernelTable* t) {
  t->fp8 = {Bf16DotGemm<false>, Bf16Activations, Bf16RowBytes};
  t->fp4 = {Bf16DotGemm<true>, Bf16Activations, Bf16RowBytes};
}

void FillAvx512GgmlKernels(KernelTable* t) {
  t->q4_1 = {PairGemm<WKind::kQ4_1Ggml>, QuantizeGgmlPairs<ActKind::kQ8_1Ggml>, GgmlPairRowBytes};
  t->q8_0 = {PairGemm<WKind::kQ8_0Ggml>, QuantizeGgmlPairs<ActKind::kBias128Ggml>, GgmlPairRowBytes};
}

}  // namespace deepinfer::kernels::internal
