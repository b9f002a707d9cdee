#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/half.h"
#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/vector_ext.h"
#include "kernels/cpu/matmul.h"
#include "tensor/dtype.h"

// AttendRange, MlaAttendRange and MlaFinish run in one copy per ISA, chosen per call from
// ActiveIsa() (isa_dispatch.h): target("avx512f") for kAvx512, target("avx2") for kAvx2, the
// baseline for kScalar, the strings of the target_clones they had. The 16-lane vectors below are
// GCC vector extensions: one zmm in the AVX-512 copy, split into narrower registers by the
// compiler in the others. Only the avx512f copy contracts their multiply-adds into FMAs, so it
// rounds differently from the other two, which agree bit for bit.
#define DI_INLINE inline __attribute__((always_inline))

// The helpers pass 64-byte vectors by value but are always inlined, so no call ABI is involved.
#pragma GCC diagnostic ignored "-Wpsabi"
// GCC 12 warns inside its own avx512fintrin.h (_mm512_undefined_*) when intrinsics are used in
// a function with a target attribute.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace deepinfer::kernels {
namespace {

constexpr int kLanes = 16;  // the fast path's block size
typedef float v16 __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

DI_INLINE v16 Splat(float x) { return v16{} + x; }
DI_INLINE float MaxLanes(v16 v) {
  float m = v[0];
  for (int i = 1; i < kLanes; ++i) m = std::max(m, v[i]);
  return m;
}
DI_INLINE float SumLanes(v16 v) {
  float s = 0;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}

// The paged kernels' 16 lanes as two 8-lane halves, for the AVX2 copies: with no 512-bit
// registers GCC keeps a 64-byte vector-extension value in memory and each operation loads and
// stores its halves (the AVX2 paged attention range ran 13x slower than the AVX-512 one, and
// slower than the baseline copy); a struct of two ymm values stays in registers. Every lane does
// the same arithmetic as in v16 and the cross-lane reductions go lane 0 to 15 as MaxLanes /
// SumLanes do, so both give the same bits.
typedef float v8 __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
struct v16x2 {
  v8 lo, hi;
};
DI_INLINE v16x2 operator+(v16x2 a, v16x2 b) { return {a.lo + b.lo, a.hi + b.hi}; }
DI_INLINE v16x2 operator-(v16x2 a, v16x2 b) { return {a.lo - b.lo, a.hi - b.hi}; }
DI_INLINE v16x2 operator*(v16x2 a, v16x2 b) { return {a.lo * b.lo, a.hi * b.hi}; }
DI_INLINE v16x2 operator/(v16x2 a, v16x2 b) { return {a.lo / b.lo, a.hi / b.hi}; }
DI_INLINE v16x2 operator-(v16x2 a, float b) { return {a.lo - b, a.hi - b}; }
DI_INLINE v16x2 operator*(v16x2 a, float b) { return {a.lo * b, a.hi * b}; }
DI_INLINE v16x2 operator*(float a, v16x2 b) { return {a * b.lo, a * b.hi}; }
DI_INLINE v16x2& operator+=(v16x2& a, v16x2 b) { return a = a + b; }

// The operations the paged bodies need, for both 16-lane types.
// v16x2 moves half by half: a 64-byte memcpy into the struct is lowered to four 16-byte moves
// through the stack, which the 32-byte loads after it cannot forward from (a store-forwarding
// stall on every load: 70% of the AVX2 range's time).
template <typename V>
DI_INLINE V Load16(const float* p) {
  if constexpr (std::is_same_v<V, v16x2>) {
    return {internal::LoadV<v8>(p), internal::LoadV<v8>(p + 8)};
  } else {
    return internal::LoadV<V>(p);
  }
}
template <typename V>
DI_INLINE void Store16(float* p, V v) {
  if constexpr (std::is_same_v<V, v16x2>) {
    internal::StoreV(p, v.lo);
    internal::StoreV(p + 8, v.hi);
  } else {
    internal::StoreV(p, v);
  }
}
template <typename V>
DI_INLINE V Splat16(float x) {
  if constexpr (std::is_same_v<V, v16>) {
    return Splat(x);
  } else {
    return {v8{} + x, v8{} + x};
  }
}
DI_INLINE float MaxLanes(v16x2 v) {
  float m = v.lo[0];
  for (int i = 1; i < 8; ++i) m = std::max(m, v.lo[i]);
  for (int i = 0; i < 8; ++i) m = std::max(m, v.hi[i]);
  return m;
}
DI_INLINE float SumLanes(v16x2 v) {
  float s = 0;
  for (int i = 0; i < 8; ++i) s += v.lo[i];
  for (int i = 0; i < 8; ++i) s += v.hi[i];
  return s;
}
// Lanewise a > b ? a : b.
DI_INLINE v16 Greater(v16 a, v16 b) { return a > b ? a : b; }
DI_INLINE v16x2 Greater(v16x2 a, v16x2 b) {
  return {a.lo > b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi};
}
// Lanes n and above replaced by `fill`.
DI_INLINE v16 KeepFirst(v16 x, int n, float fill) {
  v16i lane;
  for (int i = 0; i < kLanes; ++i) lane[i] = i;
  return lane < n ? x : Splat(fill);
}
DI_INLINE v16x2 KeepFirst(v16x2 x, int n, float fill) {
  v8i lane;
  for (int i = 0; i < 8; ++i) lane[i] = i;
  return {lane < n ? x.lo : v8{} + fill, lane + 8 < n ? x.hi : v8{} + fill};
}

// e^x for x <= 0 to about 1 ulp: x = n ln2 + r with |r| <= ln2 / 2, e^r by Cephes' expf
// polynomial, 2^n built in the exponent bits. Inputs below -87 give e^-87 (callers mask them).
// Source: Cephes Math Library, expf.c (S. L. Moshier).
// Any float vector type (16 lanes for the paged kernels, 8 for DenseAttend's AVX2 tile).
template <typename V>
DI_INLINE V ExpNonPositive(V x) {
  using VI = decltype(x < x);
  const V lo = V{} - 87.0f;
  x = x < lo ? lo : x;
  // Adding then subtracting 1.5 * 2^23 rounds to the nearest integer in f32 arithmetic.
  const V magic = V{} + 12582912.0f;
  const V n = (x * 1.44269504088896341f + magic) - magic;
  V r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  V p = V{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const VI e = (__builtin_convertvector(n, VI) + 127) << 23;
  V pow2n;
  std::memcpy(&pow2n, &e, sizeof(e));
  return p * pow2n;
}
DI_INLINE v16x2 ExpNonPositive(v16x2 x) { return {ExpNonPositive(x.lo), ExpNonPositive(x.hi)}; }

// First row of the item that can see position p (rows are ordered by token).
DI_INLINE int FirstActiveRow(const AttentionQuery& q, int32_t p) {
  return p <= q.first_pos ? 0 : std::min(q.rows(), (p - q.first_pos) * q.group);
}

// Positions of the block starting at p0 that row r may see, out of `valid` stored ones.
DI_INLINE int VisibleCount(const AttentionQuery& q, int r, int32_t p0, int valid) {
  return std::min(valid, q.first_pos + r / q.group - p0 + 1);
}

// Online-softmax update of one row with the logits s[0, n) of a block: rescales the row's
// running sum and output, and turns s into the weights exp(s - m).
DI_INLINE void UpdateRowScalar(float* s, int n, float* m, float* l, float* o, int head_dim) {
  float bm = -INFINITY;
  for (int j = 0; j < n; ++j) bm = std::max(bm, s[j]);
  const float m_new = std::max(*m, bm);
  const float c = std::exp(*m - m_new);
  float sum = 0;
  for (int j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - m_new);
    sum += s[j];
  }
  *l = *l * c + sum;
  *m = m_new;
  if (c != 1.0f) {
    for (int d = 0; d < head_dim; ++d) o[d] *= c;
  }
}

// Fast path: block_size 16, head_dim a multiple of 16. V: v16, or v16x2 for AVX2.
template <typename V>
DI_INLINE void AttendBlock16(const AttentionQuery& q, int head_dim, int row_begin, int32_t p0,
                             int valid, const float* kt, const float* v0, int64_t v_stride,
                             const float* qs, float* s, const AttentionPartial& out) {
  const int rows = q.rows(), D = head_dim;
  // Q·K: four rows at a time with two accumulators each (eight independent FMA chains).
  int r = row_begin;
  for (; r + 4 <= rows; r += 4) {
    const float* q0 = qs + int64_t{r} * D;
    V a[4] = {}, b[4] = {};
    for (int d = 0; d < D; d += 2) {
      const V k0 = Load16<V>(kt + d * kLanes), k1 = Load16<V>(kt + (d + 1) * kLanes);
      for (int i = 0; i < 4; ++i) {
        a[i] += q0[i * D + d] * k0;
        b[i] += q0[i * D + d + 1] * k1;
      }
    }
    for (int i = 0; i < 4; ++i) Store16(s + (r + i) * kLanes, a[i] + b[i]);
  }
  for (; r < rows; ++r) {
    const float* q0 = qs + int64_t{r} * D;
    V a[4] = {};
    for (int d = 0; d < D; d += 4) {
      for (int i = 0; i < 4; ++i) a[i] += q0[d + i] * Load16<V>(kt + (d + i) * kLanes);
    }
    Store16(s + r * kLanes, (a[0] + a[1]) + (a[2] + a[3]));
  }

  for (r = row_begin; r < rows; ++r) {
    const int n = VisibleCount(q, r, p0, valid);
    float* sr = s + r * kLanes;
    float* o = out.o + int64_t{r} * D;
    const V x = KeepFirst(Load16<V>(sr), n, -INFINITY);
    const float m_new = std::max(out.m[r], MaxLanes(x));
    const float c = std::exp(out.m[r] - m_new);
    const V p = KeepFirst(ExpNonPositive(x - m_new), n, 0.0f);
    out.l[r] = out.l[r] * c + SumLanes(p);
    out.m[r] = m_new;
    Store16(sr, p);
    // Weighted sum of V rows: 64 output floats (four chains) at a time, then 16 at a time.
    int d = 0;
    for (; d + 64 <= D; d += 64) {
      V acc[4];
      for (int i = 0; i < 4; ++i) acc[i] = Load16<V>(o + d + 16 * i) * c;
      for (int j = 0; j < n; ++j) {
        const float* v = v0 + j * v_stride + d;
        for (int i = 0; i < 4; ++i) acc[i] += sr[j] * Load16<V>(v + 16 * i);
      }
      for (int i = 0; i < 4; ++i) Store16(o + d + 16 * i, acc[i]);
    }
    for (; d < D; d += 16) {
      V acc = Load16<V>(o + d) * c;
      for (int j = 0; j < n; ++j) acc += sr[j] * Load16<V>(v0 + j * v_stride + d);
      Store16(o + d, acc);
    }
  }
}

DI_INLINE void AttendBlockGeneric(const AttentionQuery& q, int head_dim, int block_size,
                                  int row_begin, int32_t p0, int valid, const float* kt,
                                  const float* v0, int64_t v_stride, const float* qs, float* s,
                                  const AttentionPartial& out) {
  const int D = head_dim, B = block_size;
  for (int r = row_begin; r < q.rows(); ++r) {
    const int n = VisibleCount(q, r, p0, valid);
    const float* qr = qs + int64_t{r} * D;
    for (int j = 0; j < n; ++j) {
      float dot = 0;
      for (int d = 0; d < D; ++d) dot += qr[d] * kt[int64_t{d} * B + j];
      s[j] = dot;
    }
    float* o = out.o + int64_t{r} * D;
    UpdateRowScalar(s, n, &out.m[r], &out.l[r], o, D);
    for (int j = 0; j < n; ++j) {
      const float* v = v0 + j * v_stride;
      for (int d = 0; d < D; ++d) o[d] += s[j] * v[d];
    }
  }
}


// ---- 16-bit KV values -> f32 -------------------------------------------------------------------
// Exact in every variant (a 16-bit float is a subset of f32), so which one runs never changes a
// result. The SIMD ones carry their own target attributes: they are called from every copy of
// the attention ranges (isa_dispatch.h), and the baseline copy cannot hold intrinsics.

using WidenFn = void (*)(const uint16_t* src, float* dst, int64_t n);

void WidenF16Scalar(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = internal::HalfToFloat(src[i]);
}
void WidenBf16Scalar(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = internal::BitsToFloat(uint32_t{src[i]} << 16);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) void WidenF16Avx512(const uint16_t* src, float* dst,
                                                        int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
  WidenF16Scalar(src + i, dst + i, n - i);
}
__attribute__((target("avx512f"))) void WidenBf16Avx512(const uint16_t* src, float* dst,
                                                         int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  WidenBf16Scalar(src + i, dst + i, n - i);
}
__attribute__((target("avx2,f16c"))) void WidenF16Avx2(const uint16_t* src, float* dst,
                                                        int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  WidenF16Scalar(src + i, dst + i, n - i);
}
__attribute__((target("avx2"))) void WidenBf16Avx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  WidenBf16Scalar(src + i, dst + i, n - i);
}
#endif

// The variant of ActiveIsa() (kAvx2 includes F16C), so that SetIsaForTest reaches it too; once
// per AttendRange call.
WidenFn WidenFor(KvDtype dtype) {
  const bool f16 = dtype == KvDtype::kF16;
#if defined(__x86_64__) && defined(__GNUC__)
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return f16 ? WidenF16Avx512 : WidenBf16Avx512;
    case Isa::kAvx2:
      return f16 ? WidenF16Avx2 : WidenBf16Avx2;
    case Isa::kScalar:
    case Isa::kNeon:  // not on x86
      break;
  }
#endif
  return f16 ? WidenF16Scalar : WidenBf16Scalar;
}

}  // namespace

int KvDtypeBytes(KvDtype dtype) { return dtype == KvDtype::kF32 ? 4 : 2; }

const char* KvDtypeName(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32:
      return "f32";
    case KvDtype::kF16:
      return "f16";
    case KvDtype::kBF16:
      return "bf16";
  }
  return "f32";
}

std::optional<KvDtype> KvDtypeFromName(std::string_view name) {
  if (name == "f32" || name == "float32") return KvDtype::kF32;
  if (name == "f16" || name == "float16") return KvDtype::kF16;
  if (name == "bf16" || name == "bfloat16") return KvDtype::kBF16;
  return std::nullopt;
}

void StoreKv(const GqaKvLayout& layout, void* block, int slot, const float* k, const float* v) {
  const int B = layout.block_size, D = layout.head_dim, Hk = layout.num_kv_heads;
  if (layout.dtype == KvDtype::kF32) {
    float* b = static_cast<float*>(block);
    for (int g = 0; g < Hk; ++g) {
      float* kt = b + int64_t{g} * D * B + slot;
      for (int d = 0; d < D; ++d) kt[int64_t{d} * B] = k[g * D + d];
    }
    std::memcpy(b + layout.v_offset() + int64_t{slot} * Hk * D, v, sizeof(float) * Hk * D);
    return;
  }
  const bool f16 = layout.dtype == KvDtype::kF16;
  auto narrow = [f16](float x) {
    return f16 ? internal::FloatToHalf(x) : tensor::Fp32ToBf16(x);
  };
  for (int g = 0; g < Hk; ++g) {
    uint16_t* head = static_cast<uint16_t*>(block) + int64_t{g} * 2 * D * B;
    for (int d = 0; d < D; ++d) head[int64_t{d} * B + slot] = narrow(k[g * D + d]);
    uint16_t* vr = head + int64_t{D} * B + int64_t{slot} * D;
    for (int d = 0; d < D; ++d) vr[d] = narrow(v[g * D + d]);
  }
}

int64_t AttentionScratchFloats(const GqaKvLayout& layout, int rows) {
  const int64_t widened =
      layout.dtype == KvDtype::kF32 ? 0 : 2 * int64_t{layout.block_size} * layout.head_dim;
  return int64_t{rows} * (layout.head_dim + std::max(layout.block_size, kLanes)) + widened;
}

namespace {

// The paged bodies' 16-lane type in each ISA's copy (v16x2: see there).
template <Isa isa>
using Lanes16 = std::conditional_t<isa == Isa::kAvx2, v16x2, v16>;

template <Isa isa>
DI_INLINE void AttendRangeBody(const GqaKvLayout& layout, const void* layer,
                               const int32_t* block_table, const AttentionQuery& query,
                               int32_t pos_begin, int32_t pos_end, float* scratch,
                               const AttentionPartial& out) {
  const int B = layout.block_size, D = layout.head_dim, rows = query.rows();
  float* qs = scratch;                    // [rows, D] queries, pre-scaled
  float* s = scratch + int64_t{rows} * D;  // [rows, B] logits, then weights
  for (int r = 0; r < rows; ++r) {
    const float* src = query.q + (r / query.group) * query.token_stride + (r % query.group) * D;
    for (int d = 0; d < D; ++d) qs[int64_t{r} * D + d] = src[d] * query.scale;
    out.m[r] = -INFINITY;
    out.l[r] = 0;
  }
  std::fill(out.o, out.o + int64_t{rows} * D, 0.0f);
  const bool fast = B == kLanes && D % 16 == 0;
  const bool wide = layout.dtype == KvDtype::kF32;
  // 16-bit blocks: this head's K and V are widened into `widened` ([D][B] then [B][D]) first.
  float* widened = s + int64_t{rows} * std::max(B, kLanes);
  const WidenFn widen = wide ? nullptr : WidenFor(layout.dtype);
  const int64_t v_stride = wide ? int64_t{layout.num_kv_heads} * D : D;
  const auto* base = static_cast<const uint8_t*>(layer);
  for (int32_t p0 = pos_begin; p0 < pos_end; p0 += B) {
    const int valid = std::min(B, pos_end - p0);
    const int row_begin = FirstActiveRow(query, p0);
    if (row_begin >= rows) break;
    const uint8_t* block = base + int64_t{block_table[p0 / B]} * layout.block_bytes();
    const float* kt;
    const float* v0;
    if (wide) {
      const float* b = reinterpret_cast<const float*>(block);
      kt = b + int64_t{query.kv_head} * D * B;
      v0 = b + layout.v_offset() + int64_t{query.kv_head} * D;
    } else {
      const uint16_t* head = reinterpret_cast<const uint16_t*>(block) + int64_t{query.kv_head} * 2 * D * B;
      // K whole (its lanes past `valid` are masked), V only the rows that are read.
      widen(head, widened, int64_t{D} * B + int64_t{valid} * D);
      kt = widened;
      v0 = widened + int64_t{D} * B;
    }
    if (fast) {
      AttendBlock16<Lanes16<isa>>(query, D, row_begin, p0, valid, kt, v0, v_stride, qs, s, out);
    } else {
      AttendBlockGeneric(query, D, B, row_begin, p0, valid, kt, v0, v_stride, qs, s, out);
    }
  }
}

template <Isa isa>
DI_INLINE void MlaAttendRangeBody(const MlaKv& kv, const float* q_t, int32_t pos_begin,
                                  int32_t pos_end, float* scratch, const AttentionPartial& out) {
  using V = Lanes16<isa>;
  constexpr int kChains = 8;  // positions whose logits are accumulated together
  const int lat = kv.lat, rank = kv.rank;
  float* s_buf = scratch;                    // [16 positions][16 heads] logits, then weights
  V m = Splat16<V>(-INFINITY), l = Splat16<V>(0.0f);
  std::fill(out.o, out.o + int64_t{rank} * kLanes, 0.0f);
  const float* rows[kLanes];
  for (int32_t p0 = pos_begin; p0 < pos_end; p0 += kLanes) {
    const int n = std::min<int32_t>(kLanes, pos_end - p0);
    for (int j = 0; j < kLanes; ++j) {
      const int32_t p = p0 + std::min(j, n - 1);  // padding repeats a valid row
      rows[j] = kv.layer +
                (int64_t{kv.block_table[p / kv.block_size]} * kv.block_size + p % kv.block_size) * lat;
    }
    // Logits: lane h of s_j = sum_d row_j[d] * q_t[d][h].
    for (int j0 = 0; j0 < n; j0 += kChains) {
      V acc[kChains] = {};
      for (int d = 0; d < lat; ++d) {
        const V q = Load16<V>(q_t + int64_t{d} * kLanes);
        for (int i = 0; i < kChains; ++i) acc[i] += rows[j0 + i][d] * q;
      }
      for (int i = 0; i < kChains && j0 + i < n; ++i) Store16(s_buf + (j0 + i) * kLanes, acc[i]);
    }
    V bm = Load16<V>(s_buf);
    for (int j = 1; j < n; ++j) bm = Greater(Load16<V>(s_buf + j * kLanes), bm);
    const V m_new = Greater(bm, m);
    const V c = ExpNonPositive(m - m_new);
    V sum = Splat16<V>(0.0f);
    for (int j = 0; j < n; ++j) {
      const V p = ExpNonPositive(Load16<V>(s_buf + j * kLanes) - m_new);
      sum += p;
      Store16(s_buf + j * kLanes, p);
    }
    l = l * c + sum;
    m = m_new;
    // Output: lane h of o[d] += row_j[d] * p_j[h], eight latent dims in registers at a time.
    int d = 0;
    for (; d + 8 <= rank; d += 8) {
      V acc[8];
      for (int i = 0; i < 8; ++i) acc[i] = Load16<V>(out.o + int64_t{d + i} * kLanes) * c;
      for (int j = 0; j < n; ++j) {
        const V p = Load16<V>(s_buf + j * kLanes);
        for (int i = 0; i < 8; ++i) acc[i] += rows[j][d + i] * p;
      }
      for (int i = 0; i < 8; ++i) Store16(out.o + int64_t{d + i} * kLanes, acc[i]);
    }
    for (; d < rank; ++d) {
      V acc = Load16<V>(out.o + int64_t{d} * kLanes) * c;
      for (int j = 0; j < n; ++j) acc += rows[j][d] * Load16<V>(s_buf + j * kLanes);
      Store16(out.o + int64_t{d} * kLanes, acc);
    }
  }
  Store16(out.m, m);
  Store16(out.l, l);
}

template <Isa isa>
DI_INLINE void MlaFinishBody(int rank, const AttentionPartial& parts, int num_parts, float* out_t) {
  using V = Lanes16<isa>;
  V m = Load16<V>(parts.m);
  for (int p = 1; p < num_parts; ++p) m = Greater(Load16<V>(parts.m + p * kLanes), m);
  V l = Splat16<V>(0.0f);
  for (int p = 0; p < num_parts; ++p) {
    l += ExpNonPositive(Load16<V>(parts.m + p * kLanes) - m) * Load16<V>(parts.l + p * kLanes);
  }
  // Parts are added one after another: no per-part storage, so any number of parts.
  std::fill(out_t, out_t + int64_t{rank} * kLanes, 0.0f);
  for (int p = 0; p < num_parts; ++p) {
    const V w = ExpNonPositive(Load16<V>(parts.m + p * kLanes) - m);
    for (int d = 0; d < rank; ++d) {
      Store16(out_t + int64_t{d} * kLanes,
                       Load16<V>(out_t + int64_t{d} * kLanes) +
                           w * Load16<V>(parts.o + (int64_t{p} * rank + d) * kLanes));
    }
  }
  const V inv = Splat16<V>(1.0f) / l;
  for (int d = 0; d < rank; ++d) {
    Store16(out_t + int64_t{d} * kLanes, Load16<V>(out_t + int64_t{d} * kLanes) * inv);
  }
}

}  // namespace

#define DI_ATTENTION_DISPATCH(RET, NAME, PARAMS, ARGS) \
  DI_ISA_DISPATCH(internal::VectorLoopIsa(), "avx512f", "avx2", RET, NAME, PARAMS, ARGS)

DI_ATTENTION_DISPATCH(void, AttendRange,
                      (const GqaKvLayout& layout, const void* layer, const int32_t* block_table,
                       const AttentionQuery& query, int32_t pos_begin, int32_t pos_end,
                       float* scratch, const AttentionPartial& out),
                      (layout, layer, block_table, query, pos_begin, pos_end, scratch, out))
DI_ATTENTION_DISPATCH(void, MlaAttendRange,
                      (const MlaKv& kv, const float* q_t, int32_t pos_begin, int32_t pos_end,
                       float* scratch, const AttentionPartial& out),
                      (kv, q_t, pos_begin, pos_end, scratch, out))
DI_ATTENTION_DISPATCH(void, MlaFinish,
                      (int rank, const AttentionPartial& parts, int num_parts, float* out_t),
                      (rank, parts, num_parts, out_t))

int64_t MlaScratchFloats() { return 2 * kLanes * kLanes; }

void FinishAttention(const AttentionQuery& query, int head_dim, const AttentionPartial& parts,
                     int num_parts, int64_t part_stride, float* out) {
  const int D = head_dim;
  for (int r = 0; r < query.rows(); ++r) {
    float m = -INFINITY;
    for (int p = 0; p < num_parts; ++p) m = std::max(m, parts.m[p * part_stride + r]);
    float* dst = out + (r / query.group) * query.token_stride + (r % query.group) * D;
    auto weight = [&](int p) {
      const float pm = parts.m[p * part_stride + r];
      return pm == -INFINITY ? 0.0f : std::exp(pm - m);
    };
    float l = 0;
    for (int p = 0; p < num_parts; ++p) l += weight(p) * parts.l[p * part_stride + r];
    std::fill(dst, dst + D, 0.0f);
    for (int p = 0; p < num_parts; ++p) {
      const float w = weight(p);
      const float* o = parts.o + (p * part_stride + r) * D;
      for (int d = 0; d < D; ++d) dst[d] += w * o[d];
    }
    const float inv = l > 0 ? 1.0f / l : 0.0f;
    for (int d = 0; d < D; ++d) dst[d] *= inv;
  }
}


// ---- Dense attention ---------------------------------------------------------------------------

namespace {

DI_INLINE int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));

using internal::LoadV;
using internal::StoreV;

// One call of DenseAttend with a register tile of R query rows by two vectors V of L lanes:
// R x 2L logits (Q·K) or output values (P·V) of accumulators. 8 rows x 2 zmm on AVX-512 and
// 6 rows x 2 ymm on AVX2, so the accumulators and the two loaded vectors fit the register file.
template <typename V, int R>
DI_INLINE void DenseAttendTiled(const float* q, int64_t q_stride, int rows, const float* packed,
                                int n, int D, float scale, float* scratch, float* out,
                                int64_t out_stride) {
  constexpr int KB = kDenseKeyBlock, L = sizeof(V) / sizeof(float);
  const int64_t n_pad = RoundUp(n, 32);
  const int D16 = static_cast<int>(RoundUp(D, 16));
  const int rows_pad = static_cast<int>(RoundUp(rows, R));
  float* qs = scratch;                        // [rows_pad][D] queries times the scale
  float* s = qs + int64_t{rows_pad} * D;      // [rows_pad][KB] logits, then weights
  float* o = s + int64_t{rows_pad} * KB;      // [rows_pad][D16] unnormalized outputs
  float* m = o + int64_t{rows_pad} * D16;     // [rows_pad] running max logit
  float* l = m + rows_pad;                    // [rows_pad] running sum of weights
  float* c = l + rows_pad;                    // [rows_pad] this block's rescale of o
  for (int r = 0; r < rows_pad; ++r) {
    float* dst = qs + int64_t{r} * D;
    for (int d = 0; d < D; ++d) dst[d] = r < rows ? q[r * q_stride + d] * scale : 0.0f;
    m[r] = -INFINITY;
    l[r] = 0;
  }
  std::fill(o, o + int64_t{rows_pad} * D16, 0.0f);
  using VI = decltype(V{} < V{});
  VI lane;
  for (int i = 0; i < L; ++i) lane[i] = i;
  const float* values = packed + n_pad * D;
  for (int64_t j0 = 0; j0 < n_pad; j0 += KB) {
    const int w = static_cast<int>(std::min<int64_t>(KB, n_pad - j0));  // a multiple of 32
    const int valid = static_cast<int>(std::min<int64_t>(w, n - j0));   // >= 1
    const float* kt = packed + j0 * D;                                  // [D][w]
    for (int r0 = 0; r0 < rows_pad; r0 += R) {
      const float* q0 = qs + int64_t{r0} * D;
      for (int c0 = 0; c0 < valid; c0 += 2 * L) {
        V a[R][2] = {};
        for (int d = 0; d < D; ++d) {
          const V k0 = LoadV<V>(kt + int64_t{d} * w + c0);
          const V k1 = LoadV<V>(kt + int64_t{d} * w + c0 + L);
          for (int i = 0; i < R; ++i) {
            const float x = q0[i * D + d];
            a[i][0] += x * k0;
            a[i][1] += x * k1;
          }
        }
        for (int i = 0; i < R; ++i) {
          StoreV(s + int64_t{r0 + i} * KB + c0, a[i][0]);
          StoreV(s + int64_t{r0 + i} * KB + c0 + L, a[i][1]);
        }
      }
    }
    // Online softmax, once per row per block; padded keys get weight 0 and are not read below.
    for (int r = 0; r < rows_pad; ++r) {
      float* sr = s + int64_t{r} * KB;
      for (int j = valid; j % L != 0; ++j) sr[j] = -INFINITY;
      V mx = LoadV<V>(sr);
      for (int j = L; j < valid; j += L) {
        const V x = LoadV<V>(sr + j);
        mx = x > mx ? x : mx;
      }
      float bm = mx[0];
      for (int i = 1; i < L; ++i) bm = std::max(bm, mx[i]);
      const float m_new = std::max(m[r], bm);
      c[r] = std::exp(m[r] - m_new);  // 0 for the first block (m = -inf)
      V sum = V{};
      for (int j = 0; j < valid; j += L) {
        V p = ExpNonPositive(LoadV<V>(sr + j) - m_new);
        p = lane < valid - j ? p : V{};
        StoreV(sr + j, p);
        sum += p;
      }
      float total = 0;
      for (int i = 0; i < L; ++i) total += sum[i];
      l[r] = l[r] * c[r] + total;
      m[r] = m_new;
    }
    const float* vb = values + j0 * D16;  // [w][D16]
    for (int r0 = 0; r0 < rows_pad; r0 += R) {
      int c0 = 0;
      for (; c0 + 2 * L <= D16; c0 += 2 * L) {
        V a[R][2];
        for (int i = 0; i < R; ++i) {
          a[i][0] = LoadV<V>(o + int64_t{r0 + i} * D16 + c0) * c[r0 + i];
          a[i][1] = LoadV<V>(o + int64_t{r0 + i} * D16 + c0 + L) * c[r0 + i];
        }
        for (int j = 0; j < valid; ++j) {
          const V v0 = LoadV<V>(vb + int64_t{j} * D16 + c0);
          const V v1 = LoadV<V>(vb + int64_t{j} * D16 + c0 + L);
          for (int i = 0; i < R; ++i) {
            const float p = s[int64_t{r0 + i} * KB + j];
            a[i][0] += p * v0;
            a[i][1] += p * v1;
          }
        }
        for (int i = 0; i < R; ++i) {
          StoreV(o + int64_t{r0 + i} * D16 + c0, a[i][0]);
          StoreV(o + int64_t{r0 + i} * D16 + c0 + L, a[i][1]);
        }
      }
      if (c0 < D16) {  // one vector left (a head_dim of an odd number of 16-float groups)
        V a[R];
        for (int i = 0; i < R; ++i) a[i] = LoadV<V>(o + int64_t{r0 + i} * D16 + c0) * c[r0 + i];
        for (int j = 0; j < valid; ++j) {
          const V v0 = LoadV<V>(vb + int64_t{j} * D16 + c0);
          for (int i = 0; i < R; ++i) a[i] += s[int64_t{r0 + i} * KB + j] * v0;
        }
        for (int i = 0; i < R; ++i) StoreV(o + int64_t{r0 + i} * D16 + c0, a[i]);
      }
    }
  }
  for (int r = 0; r < rows; ++r) {
    const float inv = 1.0f / l[r];
    for (int d = 0; d < D; ++d) out[r * out_stride + d] = o[int64_t{r} * D16 + d] * inv;
  }
}

using DenseAttendFn = void (*)(const float*, int64_t, int, const float*, int, int, float, float*,
                               float*, int64_t);

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,fma"))) void DenseAttendAvx512(
    const float* q, int64_t q_stride, int rows, const float* packed, int n, int D, float scale,
    float* scratch, float* out, int64_t out_stride) {
  DenseAttendTiled<v16, 8>(q, q_stride, rows, packed, n, D, scale, scratch, out, out_stride);
}
__attribute__((target("avx2,fma"))) void DenseAttendAvx2(const float* q, int64_t q_stride,
                                                         int rows, const float* packed, int n,
                                                         int D, float scale, float* scratch,
                                                         float* out, int64_t out_stride) {
  DenseAttendTiled<v8, 6>(q, q_stride, rows, packed, n, D, scale, scratch, out, out_stride);
}
#endif
// 4-lane vectors: SSE2 on x86 (16 registers: a 4 x 2 tile), NEON on aarch64, whose 32 registers
// hold AVX-512's 8 x 2 tile (16 accumulators, 2 key vectors and the broadcasts). The tile's rows
// only group the work: every output sums in the same order whatever R is.
void DenseAttendPortable(const float* q, int64_t q_stride, int rows, const float* packed, int n,
                         int D, float scale, float* scratch, float* out, int64_t out_stride) {
#if defined(__aarch64__)
  constexpr int kRows = 8;
#else
  constexpr int kRows = 4;
#endif
  DenseAttendTiled<v4, kRows>(q, q_stride, rows, packed, n, D, scale, scratch, out, out_stride);
}

}  // namespace

int64_t DensePackedFloats(int n, int head_dim) {
  const int64_t n_pad = RoundUp(n, 32);
  return n_pad * head_dim + n_pad * RoundUp(head_dim, 16);
}

void PackDenseKv(const float* k, const float* v, int64_t stride, int n, int head_dim,
                 float* packed) {
  const int D = head_dim, D16 = static_cast<int>(RoundUp(D, 16));
  const int64_t n_pad = RoundUp(n, 32);
  for (int64_t j0 = 0; j0 < n_pad; j0 += kDenseKeyBlock) {
    const int w = static_cast<int>(std::min<int64_t>(kDenseKeyBlock, n_pad - j0));
    float* kt = packed + j0 * D;
    for (int j = 0; j < w; ++j) {
      const float* src = j0 + j < n ? k + (j0 + j) * stride : nullptr;
      for (int d = 0; d < D; ++d) kt[int64_t{d} * w + j] = src != nullptr ? src[d] : 0.0f;
    }
  }
  float* vp = packed + n_pad * D;
  for (int64_t t = 0; t < n_pad; ++t) {
    float* row = vp + t * D16;
    if (t < n) std::memcpy(row, v + t * stride, sizeof(float) * D);
    std::fill(row + (t < n ? D : 0), row + D16, 0.0f);
  }
}

int64_t DenseAttendScratchFloats(int rows, int head_dim) {
  // Every ISA's tile has at most 8 rows, so rows + 8 covers its padding.
  return int64_t{rows + 8} * (head_dim + kDenseKeyBlock + RoundUp(head_dim, 16) + 3);
}

void DenseAttend(const float* q, int64_t q_stride, int rows, const float* packed, int n,
                 int head_dim, float scale, float* scratch, float* out, int64_t out_stride) {
  DenseAttendFn fn = DenseAttendPortable;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if (ActiveIsa() == Isa::kAvx512) fn = DenseAttendAvx512;
  if (ActiveIsa() == Isa::kAvx2) fn = DenseAttendAvx2;
#endif
  fn(q, q_stride, rows, packed, n, head_dim, scale, scratch, out, out_stride);
}

}  // namespace deepinfer::kernels
