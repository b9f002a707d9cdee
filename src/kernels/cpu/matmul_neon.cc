// Advanced SIMD (NEON) kernels for aarch64: every weight type MatMul takes. Baseline armv8-a
// (every aarch64 Linux CPU); the integer dot products have a second copy with SDOT (armv8.2-a
// dotprod, HWCAP_ASIMDDP) and a third that adds SMMLA tiles for 2 or more tokens (i8mm,
// HWCAP2_I8MM), which FillNeonKernels installs only where getauxval reports them. Where SVE's
// vectors are 256 bits wide, Q4_0 / Q4_1 / Q8_0 have SVE tiles (matmul_neon_sve.inc) for single
// tokens, and without i8mm for every token count.
// Everything here has internal linkage (see matmul_internal.h).
//
// 32-element formats (Q4_0, Q4_1, Q8_0) times Q8_0 / Q8_1 activations, repacked per group of 4
// blocks into 160-byte records:
//   int8 qs[4][32] | float dx[4] | float sx[4]
// (dx: the block's fp16 d as f32; sx: Q8_1's fp16 s as f32, Q4_1 only; a row's last group is
// padded with zero blocks). Weights are signed int8 (Q4_0's nibbles minus 8, Q4_1's nibbles as
// they are, Q8_0's bytes), so a block's integer sum is sum(w * x) itself, exactly the scalar
// path's: VMULL.S8 + VPADAL.S16 on baseline NEON, SDOT with dotprod, SMMLA with i8mm (all
// exact, in any order). Pairwise adds fold the four blocks' int32x4 partial sums into one vector
// [b0, b1, b2, b3] (SMMLA's 2x2 tiles of blocks 0-3 are transposed into the same vectors),
// converted to f32 and multiplied by d_w * d_x with one FMA: lane j accumulates the blocks
// b = j mod 4 of the row, whichever copy computed the integers, so the three copies give the
// same bits (SVE's 256-bit SDOT sums the same integers, matmul_neon_sve.inc).
//
// K-quants (Q4_K, Q6_K) times ggml's BlockQ8_K: per 256-element block the integer sum of each
// 32 (Q4_K) or 16 (Q6_K) elements times its sub-block scale, as the scalar path (Q6_K's weights
// signed, q - 32, so no correction term), then one scalar FMA per block (SMMLA's 2x2 tiles sum
// the same scaled sub-block dots per (row, token), so the copies agree here too).
//
// Float weights (F32 / F16 / BF16) and DeepSeek's block-scaled formats (FP8 E4M3, FP4 E2M1 with
// E8M0 scales, decoded exactly) multiply the f32 activations: every output accumulates in two
// 4-lane registers, columns 8i..8i+3 in the first and 8i+4..8i+7 in the second, then one
// horizontal sum and the last columns one by one.
//
// Every tile shape (decode: 4 rows x 1 token; prefill: 2 x 4, or 4 x 2 for float weights, the
// SMMLA tiles and the block-scaled panels) issues the same operations in the same order for a
// given output, so a token's outputs do not depend on how many tokens share the call, and the
// thread count changes nothing (as on x86).

#if !defined(__aarch64__)
#error "matmul_neon.cc is for aarch64 only (src/kernels/cpu/CMakeLists.txt)"
#endif

#include <arm_neon.h>
#include <arm_sve.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/half.h"
#include "kernels/cpu/matmul_internal.h"
#include "kernels/cpu/quant.h"
#include "tensor/tensor.h"

namespace deepinfer::kernels::internal {
namespace {

using tensor::BlockQ4_K;
using tensor::BlockQ6_K;
using tensor::BlockQ8_K;

constexpr int64_t kTokenChunk = 64;
constexpr int64_t kPrefetchRows = 16;

// The drivers' burst of whole rows stays (no Arm host to measure a spread one on).
constexpr bool kSpreadPrefetch = false;
static inline void PrefetchRows(const GemmArgs& g, int64_t r, int64_t n) {
  const char* p = reinterpret_cast<const char*>(g.w + (r + kPrefetchRows) * g.w_row_bytes);
  const int64_t bytes = n * static_cast<int64_t>(g.w_row_bytes);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off);
}

// Thread-local scratch of at least `bytes` for the i8mm copy's interleaved token pairs (grows,
// never shrinks). Compiled here, outside the target pragmas, like every std:: template it uses.
int8_t* PairScratch(size_t bytes) {
  thread_local std::vector<int8_t> buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return buf.data();
}

// ---- Q8_0 / Q8_1 activations in groups of 4 blocks ---------------------------------------------

constexpr int kGroupBlocks = 4;
constexpr int kGroupBytes = kGroupBlocks * 32 + 2 * kGroupBlocks * 4;  // 160
constexpr int kGroupDx = kGroupBlocks * 32;                            // offset of dx[4]
constexpr int kGroupSx = kGroupDx + kGroupBlocks * 4;                  // offset of sx[4]

size_t GroupRowBytes(int64_t k) {
  return static_cast<size_t>((k / 32 + kGroupBlocks - 1) / kGroupBlocks) * kGroupBytes;
}

// QuantizeRowQ8_0Cpu / QuantizeRowQ8_1Cpu of one 32-element block, the same values: 127 / amax,
// round half to even (FCVTNS, as nearbyint in the default rounding mode). Returns sum(q).
static inline int QuantizeBlock(const float* x, int8_t* q, float* dx) {
  float32x4_t v[8];
  float32x4_t m = vdupq_n_f32(0.0f);
  for (int i = 0; i < 8; ++i) {
    v[i] = vld1q_f32(x + 4 * i);
    m = vmaxq_f32(m, vabsq_f32(v[i]));
  }
  const float amax = vmaxvq_f32(m);
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  int32x4_t iv[8];
  for (int i = 0; i < 8; ++i) iv[i] = vcvtnq_s32_f32(vmulq_n_f32(v[i], id));
  for (int h = 0; h < 2; ++h) {  // |q| <= 127: the narrowing moves keep every value
    const int16x8_t lo = vcombine_s16(vmovn_s32(iv[4 * h]), vmovn_s32(iv[4 * h + 1]));
    const int16x8_t hi = vcombine_s16(vmovn_s32(iv[4 * h + 2]), vmovn_s32(iv[4 * h + 3]));
    vst1q_s8(q + 16 * h, vcombine_s8(vmovn_s16(lo), vmovn_s16(hi)));
  }
  int32x4_t s = iv[0];
  for (int i = 1; i < 8; ++i) s = vaddq_s32(s, iv[i]);
  *dx = amax / 127.0f;
  return vaddvq_s32(s);
}

template <bool kQ8_1>
void QuantizeGroups(const float* x, uint8_t* out, int64_t k) {
  const int64_t nb = k / 32;
  for (int64_t b0 = 0; b0 < nb; b0 += kGroupBlocks, out += kGroupBytes) {
    float dx[kGroupBlocks] = {}, sx[kGroupBlocks] = {};
    for (int j = 0; j < kGroupBlocks; ++j) {
      int8_t* q = reinterpret_cast<int8_t*>(out) + 32 * j;
      if (b0 + j >= nb) {
        std::memset(q, 0, 32);
        continue;
      }
      float d;
      const int sum = QuantizeBlock(x + 32 * (b0 + j), q, &d);
      dx[j] = HalfToFloat(FloatToHalf(d));
      if constexpr (kQ8_1) sx[j] = HalfToFloat(FloatToHalf(d * static_cast<float>(sum)));
    }
    std::memcpy(out + kGroupDx, dx, sizeof(dx));
    std::memcpy(out + kGroupSx, sx, sizeof(sx));
  }
}

// Four fp16 values `stride` bytes apart (blocks' d or m fields) as f32.
static inline float32x4_t LoadHalves4(const uint8_t* p, size_t stride, int n) {
  uint16_t h[4] = {};
  for (int j = 0; j < n; ++j) std::memcpy(&h[j], p + j * stride, 2);
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
}

enum class WKind { kQ4_0, kQ4_1, kQ8_0 };

template <WKind kW>
constexpr size_t BlockBytes() {
  return kW == WKind::kQ8_0 ? 34 : kW == WKind::kQ4_1 ? 20 : 18;
}

// Block b of a row as 32 signed int8 weights (elements 0-15, 16-31).
template <WKind kW>
static inline void LoadBlock(const uint8_t* row, int64_t b, int8x16_t* w0, int8x16_t* w1) {
  const uint8_t* p = row + BlockBytes<kW>() * b;
  if constexpr (kW == WKind::kQ8_0) {
    *w0 = vld1q_s8(reinterpret_cast<const int8_t*>(p + 2));
    *w1 = vld1q_s8(reinterpret_cast<const int8_t*>(p + 18));
  } else {
    const uint8x16_t q = vld1q_u8(p + (kW == WKind::kQ4_1 ? 4 : 2));
    int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f)));
    int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(q, 4));
    if constexpr (kW == WKind::kQ4_0) {
      lo = vsubq_s8(lo, vdupq_n_s8(8));
      hi = vsubq_s8(hi, vdupq_n_s8(8));
    }
    *w0 = lo;
    *w1 = hi;
  }
}

// ---- Float weights (F32 / F16 / BF16) times f32 activations -------------------------------------

enum class FKind { kF32, kF16, kBF16 };

// Columns i..i+7 of a row as f32.
template <FKind kF>
static inline void LoadW8(const uint8_t* row, int64_t i, float32x4_t* lo, float32x4_t* hi) {
  if constexpr (kF == FKind::kF32) {
    const float* f = reinterpret_cast<const float*>(row) + i;
    *lo = vld1q_f32(f);
    *hi = vld1q_f32(f + 4);
  } else {
    const uint16x8_t h = vld1q_u16(reinterpret_cast<const uint16_t*>(row) + i);
    if constexpr (kF == FKind::kF16) {
      const float16x8_t f = vreinterpretq_f16_u16(h);
      *lo = vcvt_f32_f16(vget_low_f16(f));
      *hi = vcvt_high_f32_f16(f);
    } else {
      *lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
      *hi = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
    }
  }
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

template <FKind kF, int R, int T>
static inline void FloatTile(const GemmArgs& g, int64_t r0, int64_t t0, bool /*prefetch*/) {
  float32x4_t acc[R][T][2];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t][0] = acc[r][t][1] = vdupq_n_f32(0.0f);
  const uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = g.w + (r0 + r) * g.w_row_bytes;
  const float* xs[T];
  for (int t = 0; t < T; ++t)
    xs[t] = reinterpret_cast<const float*>(g.a + (t0 + t) * g.a_row_bytes);
  int64_t i = 0;
  for (; i + 8 <= g.k; i += 8) {
    float32x4_t w[R][2];
    for (int r = 0; r < R; ++r) LoadW8<kF>(rows[r], i, &w[r][0], &w[r][1]);
    for (int t = 0; t < T; ++t) {
      const float32x4_t x0 = vld1q_f32(xs[t] + i), x1 = vld1q_f32(xs[t] + i + 4);
      for (int r = 0; r < R; ++r) {
        acc[r][t][0] = vfmaq_f32(acc[r][t][0], w[r][0], x0);
        acc[r][t][1] = vfmaq_f32(acc[r][t][1], w[r][1], x1);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float s = vaddvq_f32(vaddq_f32(acc[r][t][0], acc[r][t][1]));
      for (int64_t j = i; j < g.k; ++j) s = std::fma(LoadW1<kF>(rows[r], j), xs[t][j], s);
      g.y[(t0 + t) * g.y_stride + r0 + r] = s;
    }
  }
}

size_t F32RowBytes(int64_t k) { return static_cast<size_t>(k) * 4; }

void QuantQ8K(const float* x, uint8_t* y, int64_t n) {
  QuantizeRowQ8_K(x, reinterpret_cast<BlockQ8_K*>(y), n);
}
size_t Q8KRowBytes(int64_t k) { return static_cast<size_t>(k / tensor::kQK_K) * sizeof(BlockQ8_K); }

// ---- Block-scaled weights (DeepSeek's released formats) times f32 activations -----------------
//
// The weights are decoded exactly (code value times its block's power of two), as on x86.
// FP8 E4M3: 8 codes sign-extend to 16-bit lanes; shifted left by 7 and with bit 14 cleared each
// lane is an IEEE half (sign at 15, the code's 7 magnitude bits at 13..7) whose value is the
// code's times 2^-8, subnormal codes included; FCVTL widens them exactly and one multiply by the
// block's 2^(scale - 127 + 8) gives the weights. FP4 E2M1: 16 bytes hold 32 codes (low nibble =
// even element); a TBL maps each code to twice its value as int8 (exact as f32 after widening),
// ZIP1/ZIP2 put the even and odd elements back in column order, and the multiply is by
// 2^(scale - 127 - 1). FP8 rows are walked 16 columns at a time (the rest one by one), FP4 rows
// 32 at a time (the loader's 1 x 32 blocks); the activations stay as they are.

// 16 FP8 codes -> the weights of columns 0-15, times `scale` (2^(e - 127 + 8)).
static inline void Fp8Weights16(const uint8_t* codes, float32x4_t scale, float32x4_t w[4]) {
  const int8x16_t c = vld1q_s8(reinterpret_cast<const int8_t*>(codes));
  const int16x8_t mask = vdupq_n_s16(static_cast<int16_t>(0xbfff));
  const int16x8_t h0 = vandq_s16(vshlq_n_s16(vmovl_s8(vget_low_s8(c)), 7), mask);
  const int16x8_t h1 = vandq_s16(vshlq_n_s16(vmovl_high_s8(c), 7), mask);
  const float16x8_t f0 = vreinterpretq_f16_s16(h0), f1 = vreinterpretq_f16_s16(h1);
  w[0] = vmulq_f32(vcvt_f32_f16(vget_low_f16(f0)), scale);
  w[1] = vmulq_f32(vcvt_high_f32_f16(f0), scale);
  w[2] = vmulq_f32(vcvt_f32_f16(vget_low_f16(f1)), scale);
  w[3] = vmulq_f32(vcvt_high_f32_f16(f1), scale);
}

// 32 FP4 codes (16 bytes) -> the weights of columns 0-31, times `scale` (2^(e - 127 - 1)).
static inline void Fp4Weights32(const uint8_t* bytes, float32x4_t scale, float32x4_t w[8]) {
  // Twice the E2M1 values 0, .5, 1, 1.5, 2, 3, 4, 6 and their negatives (code 8, -0, as +0: the
  // same sums).
  static constexpr int8_t kTwice[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  const int8x16_t table = vld1q_s8(kTwice);
  const uint8x16_t v = vld1q_u8(bytes);
  const int8x16_t even = vqtbl1q_s8(table, vandq_u8(v, vdupq_n_u8(0x0f)));
  const int8x16_t odd = vqtbl1q_s8(table, vshrq_n_u8(v, 4));
  const int8x16_t cols[2] = {vzip1q_s8(even, odd), vzip2q_s8(even, odd)};
  for (int h = 0; h < 2; ++h) {
    const int16x8_t lo = vmovl_s8(vget_low_s8(cols[h])), hi = vmovl_high_s8(cols[h]);
    w[4 * h + 0] = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), scale);
    w[4 * h + 1] = vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), scale);
    w[4 * h + 2] = vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), scale);
    w[4 * h + 3] = vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), scale);
  }
}

// The factor Fp8Weights16 / Fp4Weights32 multiply the decoded codes by.
template <bool kFp4>
static inline float ScaleMul() {
  return kFp4 ? 0.5f : 256.0f;
}

template <bool kFp4>
static inline int64_t VectorColumns(int64_t k) {
  return kFp4 ? k : k & ~int64_t{15};
}

// Column j >= VectorColumns of an FP8 row (its weight as the scalar path computes it).
static inline float Fp8Tail(const GemmArgs& g, const uint8_t* row, const uint8_t* scales,
                            int64_t j) {
  return tensor::Fp8E4M3ToFp32(row[j]) * E8M0Value(scales[j / g.scale_block_cols]);
}

// R rows x T tokens decoded in registers (decode and short prompts). `scale_buf` holds
// R * g.scale_cols floats.
template <bool kFp4, int R, int T>
static inline void ScaledTile(const GemmArgs& g, int64_t r0, int64_t t0, float* scale_buf,
                              bool /*prefetch*/) {
  float32x4_t acc[R][T][2];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t][0] = acc[r][t][1] = vdupq_n_f32(0.0f);
  const uint8_t* rows[R];
  const uint8_t* scales[R];
  const float* sf[R];
  for (int r = 0; r < R; ++r) {
    rows[r] = g.w + (r0 + r) * g.w_row_bytes;
    scales[r] = g.scale + ((r0 + r) / g.scale_block_rows) * g.scale_cols;
    if (r > 0 && scales[r] == scales[r - 1]) {  // rows of one block share its scales
      sf[r] = sf[r - 1];
    } else {
      float* out = scale_buf + r * g.scale_cols;
      for (int64_t b = 0; b < g.scale_cols; ++b)
        out[b] = E8M0Value(scales[r][b]) * ScaleMul<kFp4>();
      sf[r] = out;
    }
  }
  const float* xs[T];
  for (int t = 0; t < T; ++t)
    xs[t] = reinterpret_cast<const float*>(g.a + (t0 + t) * g.a_row_bytes);
  const int64_t kv = VectorColumns<kFp4>(g.k);
  constexpr int64_t kStep = kFp4 ? 32 : 16;  // a divisor of the block width (SimdScaleBlocks)
  constexpr int kVecs = kStep / 4;
  for (int64_t i = 0, b = 0, next = g.scale_block_cols; i < kv; i += kStep) {
    if (i == next) {
      ++b;
      next += g.scale_block_cols;
    }
    for (int r = 0; r < R; ++r) {
      const float32x4_t s = vdupq_n_f32(sf[r][b]);
      float32x4_t w[kVecs];
      if constexpr (kFp4) {
        Fp4Weights32(rows[r] + i / 2, s, w);
      } else {
        Fp8Weights16(rows[r] + i, s, w);
      }
      for (int t = 0; t < T; ++t) {
        for (int q = 0; q < kVecs; ++q)
          acc[r][t][q & 1] = vfmaq_f32(acc[r][t][q & 1], w[q], vld1q_f32(xs[t] + i + 4 * q));
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float s = vaddvq_f32(vaddq_f32(acc[r][t][0], acc[r][t][1]));
      for (int64_t j = kv; j < g.k; ++j)
        s = std::fma(Fp8Tail(g, rows[r], scales[r], j), xs[t][j], s);
      g.y[(t0 + t) * g.y_stride + r0 + r] = s;
    }
  }
}

// Prefill: kPanelRows rows decoded once into thread-local f32 and multiplied with every token of
// the chunk by plain f32 tiles (PanelRows), the same FMAs on the same values as ScaledTile.
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
      const float32x4_t s = vdupq_n_f32(E8M0Value(sc[b]) * ScaleMul<kFp4>());
      if constexpr (kFp4) {
        for (int64_t i = c0; i < c1; i += 32) {
          float32x4_t w[8];
          Fp4Weights32(row + i / 2, s, w);
          for (int q = 0; q < 8; ++q) vst1q_f32(out + i + 4 * q, w[q]);
        }
      } else {
        for (int64_t i = c0; i < c1; i += 16) {
          float32x4_t w[4];
          Fp8Weights16(row + i, s, w);
          for (int q = 0; q < 4; ++q) vst1q_f32(out + i + 4 * q, w[q]);
        }
      }
    }
    for (int64_t j = kv; j < g.k; ++j) out[j] = Fp8Tail(g, row, sc, j);
  }
}

// Columns [i0, i1) of the panel's rows x T tokens from t0, continuing the accumulators in
// `acc_io` ([token - chunk start][row][2]). Slices of kPanelSlice columns keep the panel's part
// in L1 while the chunk's tokens stream past it; storing the accumulators between slices changes
// no rounding.
constexpr int64_t kPanelSlice = 512;

template <int T>
static inline void PanelTile(const GemmArgs& g, const float* panel, int64_t i0, int64_t i1,
                             int64_t t0, float32x4_t* acc_io) {
  constexpr int R = kPanelRows;
  float32x4_t acc[R][T][2];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < 2; ++h) acc[r][t][h] = acc_io[(t * R + r) * 2 + h];
  const float* xs[T];
  for (int t = 0; t < T; ++t)
    xs[t] = reinterpret_cast<const float*>(g.a + (t0 + t) * g.a_row_bytes);
  for (int64_t i = i0; i < i1; i += 8) {
    float32x4_t w[R][2];
    for (int r = 0; r < R; ++r) {
      w[r][0] = vld1q_f32(panel + r * g.k + i);
      w[r][1] = vld1q_f32(panel + r * g.k + i + 4);
    }
    for (int t = 0; t < T; ++t) {
      const float32x4_t x0 = vld1q_f32(xs[t] + i), x1 = vld1q_f32(xs[t] + i + 4);
      for (int r = 0; r < R; ++r) {
        acc[r][t][0] = vfmaq_f32(acc[r][t][0], w[r][0], x0);
        acc[r][t][1] = vfmaq_f32(acc[r][t][1], w[r][1], x1);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < 2; ++h) acc_io[(t * R + r) * 2 + h] = acc[r][t][h];
}

// The panel's rows times tokens [tc, te): slice by slice, then the sums (and FP8's last columns).
static void PanelRows(const GemmArgs& g, const float* panel, int64_t kv, int64_t r0, int64_t tc,
                      int64_t te) {
  float32x4_t acc[kTokenChunk * kPanelRows * 2];
  for (int64_t j = 0; j < (te - tc) * kPanelRows * 2; ++j) acc[j] = vdupq_n_f32(0.0f);
  for (int64_t i0 = 0; i0 < kv; i0 += kPanelSlice) {
    const int64_t i1 = i0 + kPanelSlice < kv ? i0 + kPanelSlice : kv;
    int64_t t = tc;
    for (; t + 2 <= te; t += 2) PanelTile<2>(g, panel, i0, i1, t, acc + (t - tc) * kPanelRows * 2);
    for (; t < te; ++t) PanelTile<1>(g, panel, i0, i1, t, acc + (t - tc) * kPanelRows * 2);
  }
  for (int64_t t = tc; t < te; ++t) {
    const float* x = reinterpret_cast<const float*>(g.a + t * g.a_row_bytes);
    for (int64_t r = 0; r < kPanelRows; ++r) {
      const float32x4_t* a = acc + ((t - tc) * kPanelRows + r) * 2;
      float s = vaddvq_f32(vaddq_f32(a[0], a[1]));
      for (int64_t j = kv; j < g.k; ++j) s = std::fma(panel[r * g.k + j], x[j], s);
      g.y[t * g.y_stride + r0 + r] = s;
    }
  }
}

#include "kernels/cpu/matmul_gemm_drivers.inc"

}  // namespace

// ---- Integer dot-product kernels, once per dot instruction --------------------------------------
//
// matmul_neon_int.inc holds the Q4_0 / Q4_1 / Q8_0 / Q4_K / Q6_K gemms written against
// DotAcc and kMmla; it is included four times, into namespace `base` (VMULL + VPADAL, baseline
// armv8-a), into `dot` under a dotprod target pragma (SDOT), into `mmla` under a dotprod +
// i8mm one (SDOT for single tokens, SMMLA tiles for pairs of tokens), and into `sve` under a
// dotprod + SVE one (DI_NEON_INT_SVE: SVE tiles, and only Q4_0 / Q4_1 / Q8_0), so no function of
// the baseline copy, nor any inline function shared with other files, is compiled for dotprod,
// i8mm or SVE.

namespace base {
namespace {
// acc + the 16 products w * a, folded into 4 int32 lanes.
static inline int32x4_t DotAcc(int32x4_t acc, int8x16_t w, int8x16_t a) {
  acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(w), vget_low_s8(a)));
  return vpadalq_s16(acc, vmull_high_s8(w, a));
}
constexpr bool kMmla = false;
}  // namespace
#include "kernels/cpu/matmul_neon_int.inc"
}  // namespace base

#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")
namespace dot {
namespace {
static inline int32x4_t DotAcc(int32x4_t acc, int8x16_t w, int8x16_t a) {
  return vdotq_s32(acc, w, a);
}
constexpr bool kMmla = false;
}  // namespace
#include "kernels/cpu/matmul_neon_int.inc"
}  // namespace dot
#pragma GCC pop_options

// FEAT_I8MM is optional from armv8.2-a and mandatory from armv8.6-a; every core that has it
// (Neoverse V1 / N2 / V2, Cortex-A510 / A710 / X2 and later) has dotprod too, and the copy
// is installed only where both are reported.
#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod+i8mm")
namespace mmla {
namespace {
static inline int32x4_t DotAcc(int32x4_t acc, int8x16_t w, int8x16_t a) {
  return vdotq_s32(acc, w, a);
}
constexpr bool kMmla = true;
}  // namespace
#include "kernels/cpu/matmul_neon_int.inc"
}  // namespace mmla
#pragma GCC pop_options

// SVE (FEAT_SVE, armv8.2-a on) has its own SDOT; the SVE copies are the dotprod and i8mm ones
// with SVE Q4_0 / Q4_1 / Q8_0 tiles, so they need dotprod (and i8mm) too. Installed only where
// the vectors are 256 bits (matmul_neon_sve.inc): at that width Neoverse V1 issues SVE on two
// 256-bit pipes against NEON on four 128-bit ones, so SVE saves instructions per block, not
// lanes. SMMLA's 2 x 2 tiles do twice SDOT's multiplies per instruction, so with i8mm the
// i8mm copy's gemms keep 2 or more tokens (SveDecodeMmlaPrefill). No auto-vectorization here:
// with SVE enabled GCC turns the tiles' small scalar loops (LoadHalves4's fp16 loads, pointer
// setup) into predicated loops and gathers, slower than the plain code the other copies run.
#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod+sve")
#pragma GCC optimize("no-tree-vectorize")
namespace sve {
namespace {
static inline int32x4_t DotAcc(int32x4_t acc, int8x16_t w, int8x16_t a) {
  return vdotq_s32(acc, w, a);
}
constexpr bool kMmla = false;
#define DI_NEON_INT_SVE 1
}  // namespace
#include "kernels/cpu/matmul_neon_int.inc"
#undef DI_NEON_INT_SVE
}  // namespace sve

int SveVectorBytes() { return static_cast<int>(svcntb()); }
#pragma GCC pop_options

namespace {
// kSveI8mm's Q4_0 / Q4_1 / Q8_0 gemm: a single token through the SVE copy's tiles, 2 or more
// through the i8mm copy's (SMMLA, its leftover single tokens and rows SDOT's): the same bits.
// Compiled for baseline armv8-a; only the callees use SVE or i8mm.
template <WKind kW>
void SveDecodeMmlaPrefill(const GemmArgs& g) {
  if (g.num_tokens < 2) {
    sve::BlockGemm<kW>(g);
  } else {
    mmla::BlockGemm<kW>(g);
  }
}
}  // namespace

void FillNeonKernels(KernelTable* t, NeonIntDot copy) {
  t->f32 = {FloatGemm<FKind::kF32>, nullptr, F32RowBytes};
  t->f16 = {FloatGemm<FKind::kF16>, nullptr, F32RowBytes};
  t->bf16 = {FloatGemm<FKind::kBF16>, nullptr, F32RowBytes};
  switch (copy) {
    case NeonIntDot::kBaseline:
      base::FillIntKernels(t);
      break;
    case NeonIntDot::kDotProd:
      dot::FillIntKernels(t);
      break;
    case NeonIntDot::kI8mm:
      mmla::FillIntKernels(t);
      break;
    case NeonIntDot::kSve:
      dot::FillIntKernels(t);
      sve::FillIntKernels(t);
      break;
    case NeonIntDot::kSveI8mm:
      mmla::FillIntKernels(t);
      t->q4_0.gemm = SveDecodeMmlaPrefill<WKind::kQ4_0>;
      t->q4_1.gemm = SveDecodeMmlaPrefill<WKind::kQ4_1>;
      t->q8_0.gemm = SveDecodeMmlaPrefill<WKind::kQ8_0>;
      break;
  }
  t->fp8 = {ScaledGemm<false>, nullptr, F32RowBytes};
  t->fp4 = {ScaledGemm<true>, nullptr, F32RowBytes};
}

}  // namespace deepinfer::kernels::internal
