// AVX2 + FMA + F16C kernels. Compiled with those ISA flags; reached only when DetectIsa() found
// them. Everything here has internal linkage (see matmul_internal.h). The AVX-512 table falls
// back to these for the types it does not implement itself.
//
// The 32-element block formats' kernels are in matmul_avx2_block.h, which matmul_avx2_vnni.cc
// compiles a second time with AVX-VNNI; the K-quant kernels below multiply by their sub-block
// scales inside VPMADDWD, which VPDPBUSD has no place for, so they have one copy.
//
// DeepSeek's released formats (FP8 E4M3, FP4 E2M1, E8M0 block scales) are decoded exactly to
// f32 and multiply f32 activations, as on AVX-512 (see "Block-scaled weights" below).

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/half.h"
#include "kernels/cpu/matmul_avx2_block.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quant.h"
#include "tensor/tensor.h"

namespace deepinfer::kernels::internal {
namespace {

// ---- float weights (F32 / F16 / BF16) times f32 activations ----------------------------------

enum class FKind { kF32, kF16, kBF16 };

template <FKind kF>
static inline __m256 LoadW8(const uint8_t* row, int64_t i) {
  if constexpr (kF == FKind::kF32) return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i));
  if constexpr (kF == FKind::kF16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <FKind kF>
static inline float LoadW1(const uint8_t* row, int64_t i) {
  if constexpr (kF == FKind::kF32) {
    float f;
    std::memcpy(&f, row + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, row + 2 * i, 2);
  if constexpr (kF == FKind::kF16) return HalfToFloat(h);
  return BitsToFloat(static_cast<uint32_t>(h) << 16);
}

// The drivers' first token tile of a row group prefetches as it reads (kSpreadPrefetch).
constexpr bool kSpreadPrefetch = true;

// The line of each of the R rows kPrefetchRows further on, `bytes` into them (once per 64 bytes
// of row; see matmul_avx512.cc's PrefetchAhead).
template <int R>
static inline void PrefetchAhead(const GemmArgs& g, const uint8_t* const* rows, int64_t bytes) {
  const int64_t ahead = kPrefetchRows * static_cast<int64_t>(g.w_row_bytes) + bytes;
  for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(rows[r] + ahead), _MM_HINT_T0);
}

template <FKind kF, int R, int T>
static inline void FloatTile(const GemmArgs& g, int64_t r0, int64_t t0, bool prefetch) {
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  const uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = g.w + (r0 + r) * g.w_row_bytes;
  const float* xs[T];
  for (int t = 0; t < T; ++t) xs[t] = reinterpret_cast<const float*>(g.a + (t0 + t) * g.a_row_bytes);
  int64_t i = 0;
  constexpr int64_t kWeightBytes = kF == FKind::kF32 ? 4 : 2;
  for (; i + 8 <= g.k; i += 8) {
    __m256 w[R];
    if (prefetch && (i * kWeightBytes) % 64 == 0) PrefetchAhead<R>(g, rows, i * kWeightBytes);
    for (int r = 0; r < R; ++r) w[r] = LoadW8<kF>(rows[r], i);
    for (int t = 0; t < T; ++t) {
      const __m256 x = _mm256_loadu_ps(xs[t] + i);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(w[r], x, acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float s = HsumPs(acc[r][t]);
      for (int64_t j = i; j < g.k; ++j) s += LoadW1<kF>(rows[r], j) * xs[t][j];
      g.y[(t0 + t) * g.y_stride + r0 + r] = s;
    }
  }
}

size_t F32RowBytes(int64_t k) { return static_cast<size_t>(k) * 4; }

// ---- K-quants times Q8_K (activations in ggml's BlockQ8_K layout) ------------------------------
//
// Integer sums per 256-element block exactly as ggml (VPMADDUBSW on unsigned weight values, then
// VPMADDWD with the sub-block scales), scaled once per block by d_w * d_x.

using tensor::BlockQ4_K;
using tensor::BlockQ6_K;
using tensor::BlockQ8_K;

template <int R, int T>
static inline void Q4KTile(const GemmArgs& g, int64_t r0, int64_t t0) {
  const int64_t nb = g.k / tensor::kQK_K;
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ4_K* w[R];
    uint8_t sc[R][8], mn[R][8];
    for (int r = 0; r < R; ++r) {
      w[r] = reinterpret_cast<const BlockQ4_K*>(g.w + (r0 + r) * g.w_row_bytes) + b;
      UnpackQ4KScales(w[r]->scales, sc[r], mn[r]);
    }
    const BlockQ8_K* a[T];
    for (int t = 0; t < T; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(g.a + (t0 + t) * g.a_row_bytes) + b;
    __m256i isum[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) isum[r][t] = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      __m256i lo[R], hi[R], s_lo[R], s_hi[R];
      for (int r = 0; r < R; ++r) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[r]->qs + 32 * j));
        lo[r] = _mm256_and_si256(q, low4);
        hi[r] = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
        s_lo[r] = _mm256_set1_epi16(sc[r][2 * j]);
        s_hi[r] = _mm256_set1_epi16(sc[r][2 * j + 1]);
      }
      for (int t = 0; t < T; ++t) {
        const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t]->qs + 64 * j));
        const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t]->qs + 64 * j + 32));
        for (int r = 0; r < R; ++r) {
          const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo[r], y0), s_lo[r]);
          const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi[r], y1), s_hi[r]);
          isum[r][t] = _mm256_add_epi32(isum[r][t], _mm256_add_epi32(p0, p1));
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      __m128i m8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn[r]));
      // Each min covers two 16-element bsums: duplicate it to 16 int16 lanes.
      const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
      const float dw = HalfToFloat(w[r]->d), dminw = HalfToFloat(w[r]->dmin);
      for (int t = 0; t < T; ++t) {
        const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t]->bsums));
        const __m256i msum = _mm256_madd_epi16(mins, bs);
        const float d = a[t]->d * dw;
        const float dmin = dminw * a[t]->d;
        acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(isum[r][t]), acc[r][t]);
        acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(-dmin), _mm256_cvtepi32_ps(msum), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) g.y[(t0 + t) * g.y_stride + r0 + r] = HsumPs(acc[r][t]);
}

template <int R, int T>
static inline void Q6KTile(const GemmArgs& g, int64_t r0, int64_t t0) {
  const int64_t nb = g.k / tensor::kQK_K;
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i two = _mm256_set1_epi8(0x03);
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ6_K* w[R];
    for (int r = 0; r < R; ++r) w[r] = reinterpret_cast<const BlockQ6_K*>(g.w + (r0 + r) * g.w_row_bytes) + b;
    const BlockQ8_K* a[T];
    for (int t = 0; t < T; ++t) a[t] = reinterpret_cast<const BlockQ8_K*>(g.a + (t0 + t) * g.a_row_bytes) + b;
    __m256i isum[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) isum[r][t] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      for (int quarter = 0; quarter < 4; ++quarter) {
        // 32 elements: scales 8h + 2 * quarter (first 16) and + 1 (last 16).
        __m256i q[R], sv[R];
        for (int r = 0; r < R; ++r) {
          const uint8_t* ql = w[r]->ql + 64 * h + (quarter & 1) * 32;
          const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
          const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[r]->qh + 32 * h));
          const __m256i low = quarter < 2 ? _mm256_and_si256(l, low4)
                                          : _mm256_and_si256(_mm256_srli_epi16(l, 4), low4);
          const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * quarter), two);
          q[r] = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
          const int8_t* sc = w[r]->scales + 8 * h + 2 * quarter;
          sv[r] = _mm256_setr_m128i(_mm_set1_epi16(sc[0]), _mm_set1_epi16(sc[1]));
        }
        for (int t = 0; t < T; ++t) {
          const __m256i y = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(a[t]->qs + 128 * h + 32 * quarter));
          for (int r = 0; r < R; ++r)
            isum[r][t] = _mm256_add_epi32(isum[r][t],
                                          _mm256_madd_epi16(_mm256_maddubs_epi16(q[r], y), sv[r]));
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      // The weights went in as q + 32; remove 32 * scale * sum(activations) per 16-group.
      const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[r]->scales)));
      const float dw = HalfToFloat(w[r]->d);
      for (int t = 0; t < T; ++t) {
        const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t]->bsums));
        const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(sc16, bs), 5);
        const __m256i total = _mm256_sub_epi32(isum[r][t], corr);
        acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(a[t]->d * dw), _mm256_cvtepi32_ps(total), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) g.y[(t0 + t) * g.y_stride + r0 + r] = HsumPs(acc[r][t]);
}

template <void (*Tile22)(const GemmArgs&, int64_t, int64_t),
          void (*Tile21)(const GemmArgs&, int64_t, int64_t),
          void (*Tile11)(const GemmArgs&, int64_t, int64_t)>
void KGemm(const GemmArgs& g) {
  for (int64_t tc = 0; tc < g.num_tokens; tc += kTokenChunk) {
    const int64_t te = tc + kTokenChunk < g.num_tokens ? tc + kTokenChunk : g.num_tokens;
    int64_t r = g.row_begin;
    for (; r + 2 <= g.row_end; r += 2) {
      PrefetchRows(g, r, 2);
      int64_t t = tc;
      for (; t + 2 <= te; t += 2) Tile22(g, r, t);
      for (; t < te; ++t) Tile21(g, r, t);
    }
    for (; r < g.row_end; ++r)
      for (int64_t t = tc; t < te; ++t) Tile11(g, r, t);
  }
}

void QuantQ8K(const float* x, uint8_t* y, int64_t n) {
  QuantizeRowQ8_K(x, reinterpret_cast<BlockQ8_K*>(y), n);
}
size_t Q8KRowBytes(int64_t k) { return static_cast<size_t>(k / tensor::kQK_K) * sizeof(BlockQ8_K); }

// ---- Block-scaled weights (DeepSeek's released formats) times f32 activations -----------------
//
// Same contract as the AVX-512 kernels: the weights are decoded exactly (code value times its
// block's power of two) and every output accumulates in one 8-lane register over k in order,
// 8 columns per FMA, then a horizontal sum (and, for FP8 rows that are not a multiple of 16 long,
// the last columns one by one). Decode tiles, prefill panels and the 1-row edges all issue the
// same FMAs in the same order on the same values, so a token's outputs do not depend on how many
// tokens share the call, and the thread count changes nothing.
//
// FP8 E4M3: 16 codes sign-extend to 16-bit lanes; shifted left by 7 and with bit 14 cleared,
// each lane is an IEEE half (sign at 15, the code's 7 magnitude bits at 13..7) whose value is the
// code's times 2^-8, subnormal codes included; F16C widens 8 at a time, and one multiply by the
// block's 2^(scale - 127 + 8) gives the exact weights. (A scale of 2^119 or more would overflow,
// as on AVX-512; no finite weight quantizes to one.) Activations stay as they are.
//
// FP4 E2M1: 16 bytes hold 32 codes (low nibble = even element). Every code's value is a bf16
// whose low byte and high byte come from two 16-entry VPSHUFB tables; interleaving the two looked
// up vectors gives 16-bit bf16 lanes, and each 32-bit lane yields two f32 weights (its low half
// shifted up, its high half masked), times the block's 2^(scale - 127). That visits the 32
// elements of a block in the order Fp4Order gives, so the activations are permuted per 32 to
// match once per call (PermuteFp4Activations). Blocks are the loader's 1 x 32.

// Element of a 32-element FP4 block that lands in f32 lane `lane` (0..31) of Fp4Weights32's four
// vectors: vector q = lane / 8 holds, in its low 128 bits (l = 0) the even and in its high
// 128 bits (l = 1) the odd elements of 16 * (q / 2) + 2 * (q % 2) + 4 * j + l, j = 0..3.
static inline int Fp4Order(int lane) {
  const int q = lane / 8, l = (lane / 4) % 2, j = lane % 4;
  return 16 * (q / 2) + 2 * (q % 2) + 4 * j + l;
}

static void PermuteFp4Activations(const float* x, uint8_t* out, int64_t k) {
  float* o = reinterpret_cast<float*>(out);
  for (int64_t i = 0; i < k; i += 32)  // FP4 rows are whole 32s (the loader's 1 x 32 blocks)
    for (int lane = 0; lane < 32; ++lane) o[i + lane] = x[i + Fp4Order(lane)];
}

// 16 FP8 codes -> weights of columns 0-7 (lo) and 8-15 (hi), times `scale` (2^(e - 127 + 8)).
static inline void Fp8Weights16(const uint8_t* codes, __m256 scale, __m256* lo, __m256* hi) {
  const __m256i v = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
  const __m256i half =
      _mm256_and_si256(_mm256_slli_epi16(v, 7), _mm256_set1_epi16(static_cast<int16_t>(0xbfff)));
  *lo = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(half)), scale);
  *hi = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(half, 1)), scale);
}

static inline __m256 Fp8Scale(uint8_t b) { return _mm256_set1_ps(E8M0Value(b) * 256.0f); }

// 32 FP4 codes (16 bytes) -> four vectors of 8 exact weights in Fp4Order, times `scale`.
static inline void Fp4Weights32(const uint8_t* bytes, __m256 scale, __m256 w[4]) {
  // bf16 of 0, .5, 1, 1.5, 2, 3, 4, 6 and their negatives (code 8, -0, as +0: the same sums).
  const __m256i low = _mm256_setr_epi8(0, 0, -128, -64, 0, 64, -128, -64, 0, 0, -128, -64, 0, 64,
                                       -128, -64, 0, 0, -128, -64, 0, 64, -128, -64, 0, 0, -128,
                                       -64, 0, 64, -128, -64);
  const __m256i high = _mm256_setr_epi8(0, 0x3f, 0x3f, 0x3f, 0x40, 0x40, 0x40, 0x40, 0, -65, -65,
                                        -65, -64, -64, -64, -64, 0, 0x3f, 0x3f, 0x3f, 0x40, 0x40,
                                        0x40, 0x40, 0, -65, -65, -65, -64, -64, -64, -64);
  // Both 128-bit lanes hold the 16 bytes; the low lane keeps the low nibbles (even elements),
  // the high lane the high ones (odd elements).
  const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)));
  const __m256i codes = _mm256_and_si256(_mm256_blend_epi32(v, _mm256_srli_epi16(v, 4), 0xf0),
                                         _mm256_set1_epi8(0x0f));
  const __m256i lo = _mm256_shuffle_epi8(low, codes), hi = _mm256_shuffle_epi8(high, codes);
  const __m256i b0 = _mm256_unpacklo_epi8(lo, hi), b1 = _mm256_unpackhi_epi8(lo, hi);
  const __m256i top = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  w[0] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(b0, 16)), scale);
  w[1] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(b0, top)), scale);
  w[2] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(b1, 16)), scale);
  w[3] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(b1, top)), scale);
}

// Columns a block-scaled row is walked in by vectors: FP8 16 at a time (the rest one by one),
// FP4 whole rows.
template <bool kFp4>
static inline int64_t VectorColumns(int64_t k) {
  return kFp4 ? k : k & ~int64_t{15};
}

// A row's E8M0 scales as f32 times `mul` (E8M0Value(b) * mul), 8 at a time: the decode tiles
// then broadcast each from memory, a load and no ALU work per block.
static void ScaleFloats(const uint8_t* sc, int64_t n, float mul, float* out) {
  const __m256 m = _mm256_set1_ps(mul);
  int64_t b = 0;
  for (; b + 8 <= n; b += 8) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + b)));
    // 2^(b - 127) is b << 23 for b >= 1, and the denormal 2^-127 for b = 0.
    const __m256i zero = _mm256_cmpeq_epi32(v, _mm256_setzero_si256());
    const __m256i bits = _mm256_or_si256(_mm256_slli_epi32(v, 23),
                                         _mm256_and_si256(zero, _mm256_set1_epi32(0x00400000)));
    _mm256_storeu_ps(out + b, _mm256_mul_ps(_mm256_castsi256_ps(bits), m));
  }
  for (; b < n; ++b) out[b] = E8M0Value(sc[b]) * mul;
}

// R rows x T tokens decoded in place (decode and short prompts). `scale_buf` holds
// R * g.scale_cols floats. The row loop sits inside the column loop so that the accumulators
// stay in registers.
template <bool kFp4, int R, int T>
static inline void ScaledTile(const GemmArgs& g, int64_t r0, int64_t t0, float* scale_buf,
                              bool prefetch) {
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  const uint8_t* rows[R];
  const uint8_t* scales[R];
  const float* sf[R];
  for (int r = 0; r < R; ++r) {
    rows[r] = g.w + (r0 + r) * g.w_row_bytes;
    scales[r] = g.scale + ((r0 + r) / g.scale_block_rows) * g.scale_cols;
    if (r > 0 && scales[r] == scales[r - 1]) {  // rows of one block share its scales
      sf[r] = sf[r - 1];
    } else {
      ScaleFloats(scales[r], g.scale_cols, kFp4 ? 1.0f : 256.0f, scale_buf + r * g.scale_cols);
      sf[r] = scale_buf + r * g.scale_cols;
    }
  }
  const float* xs[T];
  for (int t = 0; t < T; ++t) xs[t] = reinterpret_cast<const float*>(g.a + (t0 + t) * g.a_row_bytes);
  const int64_t kv = VectorColumns<kFp4>(g.k);
  constexpr int64_t kStep = kFp4 ? 32 : 16;  // a divisor of the block width (SimdScaleBlocks)
  for (int64_t i = 0, b = 0, next = g.scale_block_cols; i < kv; i += kStep) {
    if (i == next) {
      ++b;
      next += g.scale_block_cols;
    }
    // A step reads 16 bytes of each row (32 FP4 or 16 FP8 codes).
    if (prefetch && i % (kFp4 ? 128 : 64) == 0) PrefetchAhead<R>(g, rows, kFp4 ? i / 2 : i);
    for (int r = 0; r < R; ++r) {
      const __m256 s = _mm256_broadcast_ss(sf[r] + b);
      if constexpr (kFp4) {
        __m256 w[4];
        Fp4Weights32(rows[r] + i / 2, s, w);
        for (int t = 0; t < T; ++t) {
          for (int q = 0; q < 4; ++q)
            acc[r][t] = _mm256_fmadd_ps(w[q], _mm256_loadu_ps(xs[t] + i + 8 * q), acc[r][t]);
        }
      } else {
        __m256 lo, hi;
        Fp8Weights16(rows[r] + i, s, &lo, &hi);
        for (int t = 0; t < T; ++t) {
          acc[r][t] = _mm256_fmadd_ps(lo, _mm256_loadu_ps(xs[t] + i), acc[r][t]);
          acc[r][t] = _mm256_fmadd_ps(hi, _mm256_loadu_ps(xs[t] + i + 8), acc[r][t]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float s = HsumPs(acc[r][t]);
      // FP8 only. One explicit FMA per column, as PanelRows does: left to the compiler, the two
      // sites contracted differently and a token's outputs changed with the token count.
      for (int64_t j = kv; j < g.k; ++j) {
        const float w =
            tensor::Fp8E4M3ToFp32(rows[r][j]) * E8M0Value(scales[r][j / g.scale_block_cols]);
        s = std::fma(w, xs[t][j], s);
      }
      g.y[(t0 + t) * g.y_stride + r0 + r] = s;
    }
  }
}

// Prefill: kPanelRows rows decoded once into thread-local f32 (in the order their activations
// are in) and multiplied with every token of the chunk by plain f32 tiles (PanelRows).
constexpr int64_t kPanelRows = 4;
constexpr int64_t kPanelMinTokens = 8;

template <bool kFp4>
static void DecodePanel(const GemmArgs& g, int64_t r0, float* panel) {
  const int64_t kv = VectorColumns<kFp4>(g.k);
  for (int64_t r = 0; r < kPanelRows; ++r) {
    const uint8_t* row = g.w + (r0 + r) * g.w_row_bytes;
    const uint8_t* sc = g.scale + ((r0 + r) / g.scale_block_rows) * g.scale_cols;
    float* out = panel + r * g.k;
    for (int64_t c0 = 0, b = 0; c0 < kv; c0 += g.scale_block_cols, ++b) {
      const int64_t c1 = c0 + g.scale_block_cols < kv ? c0 + g.scale_block_cols : kv;
      if constexpr (kFp4) {
        const __m256 s = _mm256_set1_ps(E8M0Value(sc[b]));
        for (int64_t i = c0; i < c1; i += 32) {
          __m256 w[4];
          Fp4Weights32(row + i / 2, s, w);
          for (int q = 0; q < 4; ++q) _mm256_storeu_ps(out + i + 8 * q, w[q]);
        }
      } else {
        const __m256 s = Fp8Scale(sc[b]);
        for (int64_t i = c0; i < c1; i += 16) {
          __m256 lo, hi;
          Fp8Weights16(row + i, s, &lo, &hi);
          _mm256_storeu_ps(out + i, lo);
          _mm256_storeu_ps(out + i + 8, hi);
        }
      }
    }
    for (int64_t j = kv; j < g.k; ++j)
      out[j] = tensor::Fp8E4M3ToFp32(row[j]) * E8M0Value(sc[j / g.scale_block_cols]);
  }
}

// Columns [i0, i1) of the panel's rows x T tokens from t0, continuing the accumulators in
// `acc` ([token - chunk start][row]). Slices of kPanelSlice columns keep the panel's part in L1
// while every token of the chunk streams past it (reading the whole panel from L2 for every
// token tile measured about 15% slower); storing the accumulators between slices changes no
// rounding.
constexpr int64_t kPanelSlice = 512;

template <int T>
static inline void PanelTile(const GemmArgs& g, const float* panel, int64_t i0, int64_t i1,
                             int64_t t0, __m256* acc_io) {
  constexpr int R = kPanelRows;
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = acc_io[t * R + r];
  const float* xs[T];
  for (int t = 0; t < T; ++t) xs[t] = reinterpret_cast<const float*>(g.a + (t0 + t) * g.a_row_bytes);
  for (int64_t i = i0; i < i1; i += 8) {
    __m256 w[R];
    for (int r = 0; r < R; ++r) w[r] = _mm256_loadu_ps(panel + r * g.k + i);
    for (int t = 0; t < T; ++t) {
      const __m256 x = _mm256_loadu_ps(xs[t] + i);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(w[r], x, acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc_io[t * R + r] = acc[r][t];
}

// The panel's rows times tokens [tc, te): slice by slice, then the sums (and FP8's last columns).
static void PanelRows(const GemmArgs& g, const float* panel, int64_t kv, int64_t r0, int64_t tc,
                      int64_t te) {
  __m256 acc[kTokenChunk * kPanelRows];
  for (int64_t j = 0; j < (te - tc) * kPanelRows; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t i0 = 0; i0 < kv; i0 += kPanelSlice) {
    const int64_t i1 = i0 + kPanelSlice < kv ? i0 + kPanelSlice : kv;
    // 4 rows x 3 tokens: 12 accumulator chains keep both FMA ports busy (4 x 2 has 8, one
    // FMA latency's worth; measured about 15% slower).
    int64_t t = tc;
    for (; t + 3 <= te; t += 3) PanelTile<3>(g, panel, i0, i1, t, acc + (t - tc) * kPanelRows);
    for (; t < te; ++t) PanelTile<1>(g, panel, i0, i1, t, acc + (t - tc) * kPanelRows);
  }
  for (int64_t t = tc; t < te; ++t) {
    const float* x = reinterpret_cast<const float*>(g.a + t * g.a_row_bytes);
    for (int64_t r = 0; r < kPanelRows; ++r) {
      float s = HsumPs(acc[(t - tc) * kPanelRows + r]);
      for (int64_t j = kv; j < g.k; ++j) s = std::fma(panel[r * g.k + j], x[j], s);
      g.y[t * g.y_stride + r0 + r] = s;
    }
  }
}

#include "kernels/cpu/matmul_gemm_drivers.inc"

}  // namespace

void FillAvx2Kernels(KernelTable* t) {
  t->f32 = {FloatGemm<FKind::kF32>, nullptr, F32RowBytes};
  t->f16 = {FloatGemm<FKind::kF16>, nullptr, F32RowBytes};
  t->bf16 = {FloatGemm<FKind::kBF16>, nullptr, F32RowBytes};
  t->q4_0 = {BlockGemm<WKind::kQ4_0>, QuantizeRecords<ActKind::kBias8>, RecRowBytes};
  t->q4_1 = {BlockGemm<WKind::kQ4_1>, QuantizeRecords<ActKind::kQ8_1>, RecRowBytes};
  t->q8_0 = {BlockGemm<WKind::kQ8_0>, QuantizeRecords<ActKind::kPlain>, RecRowBytes};
  t->q4_k = {KGemm<Q4KTile<2, 2>, Q4KTile<2, 1>, Q4KTile<1, 1>>, QuantQ8K, Q8KRowBytes};
  t->q6_k = {KGemm<Q6KTile<2, 2>, Q6KTile<2, 1>, Q6KTile<1, 1>>, QuantQ8K, Q8KRowBytes};
  t->fp8 = {ScaledGemm<false>, nullptr, F32RowBytes};
  t->fp4 = {ScaledGemm<true>, PermuteFp4Activations, F32RowBytes};
}

}  // namespace deepinfer::kernels::internal
