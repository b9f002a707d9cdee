#include "kernels/cpu/index_score.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/isa_dispatch.h"
#include "kernels/cpu/vector_ext.h"
#include "util/status.h"  // DI_CHECK

#if DI_ISA_COPIES
#include <immintrin.h>
#endif

// IndexScores runs in one copy per ISA (isa_dispatch.h): 16 lanes under target("avx512f"), 8
// under target("avx2,fma") (kAvx2 requires FMA, kernels/cpu/matmul.cc), 4 in the portable copy.
// GCC contracts the multiply-adds of the first two into FMAs.

// The helpers pass vectors by value but are always inlined: no call ABI is involved.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace deepinfer::kernels {
namespace {

typedef float v16 __attribute__((vector_size(64)));
typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));

// The vector of heads each ISA's copy works on.
template <Isa isa>
struct HeadLanes {
  using V = v4;
};
template <>
struct HeadLanes<Isa::kAvx512> {
  using V = v16;
};
template <>
struct HeadLanes<Isa::kAvx2> {
  using V = v8;
};

// Keys per group: each query load serves all of them. With kHeadChunk head vectors per pass,
// 4 x 2 accumulators are eight independent multiply-add chains (enough to hide the FMA latency)
// and leave registers for the queries even in AVX2's sixteen.
constexpr int kKeys = 4;
constexpr int kHeadChunk = 2;
// Keys every token of a call scores before the next ones are read: 16 keys of 128 floats (8 KiB)
// stay in L1 while each token's queries stream past them.
constexpr int64_t kKeyTile = 16;

int PaddedHeads(int heads) { return (heads + kIndexHeadPad - 1) / kIndexHeadPad * kIndexHeadPad; }

// The lanes of v summed as a halving tree (lane i + lane i + L/2, then again), the same order
// for every key and token.
template <typename V>
DI_ALWAYS_INLINE float SumTree(V v) {
  constexpr int L = sizeof(V) / sizeof(float);
  float s[L];
  std::memcpy(s, &v, sizeof(v));
  for (int w = L / 2; w >= 1; w /= 2) {
    for (int i = 0; i < w; ++i) s[i] += s[i + w];
  }
  return s[0];
}

// part[k] += relu(q_h . key_k) * w_h, lane by lane, for the C head vectors from head vector c0.
// Each dot product is one multiply-add chain over d = 0 .. dim - 1 in its own lane.
template <typename V, int C>
DI_ALWAYS_INLINE void HeadChunk(const float* qt, const float* wv, int hp, int dim, int c0,
                                const float* const* key, V* part) {
  constexpr int L = sizeof(V) / sizeof(float);
  V acc[kKeys][C];
  for (int k = 0; k < kKeys; ++k) {
    for (int c = 0; c < C; ++c) acc[k][c] = V{};
  }
  const float* q = qt + c0 * L;
  for (int d = 0; d < dim; ++d) {
    V qv[C];
    for (int c = 0; c < C; ++c) qv[c] = internal::LoadV<V>(q + int64_t{d} * hp + c * L);
    for (int k = 0; k < kKeys; ++k) {
      const float x = key[k][d];
      for (int c = 0; c < C; ++c) acc[k][c] += x * qv[c];
    }
  }
  for (int c = 0; c < C; ++c) {
    const V w = internal::LoadV<V>(wv + (c0 + c) * L);
    for (int k = 0; k < kKeys; ++k) {
      const V a = acc[k][c];
      part[k] += (a > V{} ? a : V{}) * w;
    }
  }
}

// Asks for the cache lines of [p, p + bytes).
DI_ALWAYS_INLINE void PrefetchLines(const void* p, int64_t bytes) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t end = begin + static_cast<uintptr_t>(bytes);
  for (uintptr_t line = begin & ~uintptr_t{63}; line < end; line += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 3);
  }
}

template <Isa isa>
DI_ALWAYS_INLINE void IndexScoresBody(const float* packed, int num_tokens, int heads, int dim,
                                      const float* keys, int64_t key_stride, int64_t count,
                                      float* score, int64_t score_stride, const float* next,
                                      int64_t next_count) {
  using V = typename HeadLanes<isa>::V;
  constexpr int L = sizeof(V) / sizeof(float);
  const int hp = PaddedHeads(heads), hv = hp / L;
  const int64_t qf = IndexQueryFloats(heads, dim);
  for (int64_t j0 = 0; j0 < count; j0 += kKeyTile) {
    const int64_t tile = std::min(kKeyTile, count - j0);
    // The keys after this tile (the call's next tile, else the caller's next run) are requested
    // while the first token scores this one: the keys are strided, and scattered over cache
    // blocks, so the hardware prefetcher does not see them coming (decode waited on memory for
    // most of its time without this).
    const float* ahead = j0 + tile < count ? keys + (j0 + tile) * key_stride : next;
    const int64_t num_ahead =
        j0 + tile < count ? std::min(kKeyTile, count - j0 - tile) : std::min(kKeyTile, next_count);
    for (int i = 0; i < num_tokens; ++i) {
      const float* qt = packed + i * qf;
      const float* wv = qt + int64_t{dim} * hp;
      float* out = score + i * score_stride + j0;
      for (int64_t g = 0; g < tile; g += kKeys) {
        // A short last group repeats its last key: every key goes through the same arithmetic.
        const int n = static_cast<int>(std::min<int64_t>(kKeys, tile - g));
        const float* key[kKeys];
        for (int k = 0; k < kKeys; ++k) key[k] = keys + (j0 + g + std::min(k, n - 1)) * key_stride;
        if (i == 0 && ahead != nullptr) {
          for (int64_t a = g; a < std::min(g + kKeys, num_ahead); ++a) {
            PrefetchLines(ahead + a * key_stride, int64_t{dim} * sizeof(float));
          }
          // A tile shorter than the one ahead requests the rest with its last group.
          if (g + kKeys >= tile) {
            for (int64_t a = g + kKeys; a < num_ahead; ++a) {
              PrefetchLines(ahead + a * key_stride, int64_t{dim} * sizeof(float));
            }
          }
        }
        V part[kKeys];
        for (int k = 0; k < kKeys; ++k) part[k] = V{};
        int c0 = 0;
        for (; c0 + kHeadChunk <= hv; c0 += kHeadChunk) {
          HeadChunk<V, kHeadChunk>(qt, wv, hp, dim, c0, key, part);
        }
        for (; c0 < hv; ++c0) HeadChunk<V, 1>(qt, wv, hp, dim, c0, key, part);
        for (int k = 0; k < n; ++k) out[g + k] = SumTree(part[k]);
      }
    }
  }
}

// The FP4 kernel's copies (index_score_fp4.inc), each in its own namespace.
namespace fp4_portable {
#define DI_FP4_LEVEL 0
#include "kernels/cpu/index_score_fp4.inc"
#undef DI_FP4_LEVEL
}  // namespace fp4_portable
#if DI_ISA_COPIES
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace fp4_avx2 {
#define DI_FP4_LEVEL 1
#include "kernels/cpu/index_score_fp4.inc"
#undef DI_FP4_LEVEL
}  // namespace fp4_avx2
#pragma GCC pop_options
// kAvx512 requires AVX512-VNNI (CpuHasAvx512, matmul.cc).
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
namespace fp4_avx512 {
#define DI_FP4_LEVEL 2
#include "kernels/cpu/index_score_fp4.inc"
#undef DI_FP4_LEVEL
}  // namespace fp4_avx512
#pragma GCC pop_options
#endif

// The exponent E of an FP4 block's grid: every value is n * 2^E with an integer |n| <= 15
// (values c * 2^e, 2c in {0, 1, 2, 3, 4, 6, 8, 12}: E = ilogb(amax) - 3 <= e - 1); 0 for a block of
// zeros. The codes n into code[i]. A value FakeQuantFp4 cannot leave (NaN or infinite activations
// of a broken model) gets code 0 rather than stopping the server; others it could not leave are
// rounded to the grid.
int Fp4BlockCodes(const float* x, int n, int8_t* code) {
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::isfinite(x[i])) amax = std::max(amax, std::fabs(x[i]));
  }
  const int e = amax > 0 ? std::ilogb(amax) - 3 : 0;
  for (int i = 0; i < n; ++i) {
    const float v = std::isfinite(x[i]) ? std::nearbyint(std::ldexp(x[i], -e)) : 0.0f;
    code[i] = static_cast<int8_t>(std::clamp(v, -15.0f, 15.0f));
  }
  return e;
}

}  // namespace

// The widest packed key (stack buffers).
constexpr int kMaxFp4Dim = 1024;

int64_t IndexKeyFp4Bytes(int dim) { return dim + int64_t{8} * (dim / 32); }

void PackFp4IndexKey(const float* key, int dim, uint8_t* out) {
  DI_CHECK(dim % 32 == 0 && dim <= kMaxFp4Dim);
  const int nb = dim / 32;
  // Read every value before the first byte is written (out may overlap key).
  int8_t code[kMaxFp4Dim];
  float scale[kMaxFp4Dim / 32];
  int32_t corr[kMaxFp4Dim / 32];
  for (int b = 0; b < nb; ++b) {
    const int e = Fp4BlockCodes(key + b * 32, 32, code + b * 32);
    scale[b] = std::ldexp(1.0f, e);
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) sum += code[b * 32 + i];
    corr[b] = -16 * sum;  // the query codes' offset of 16, taken back
  }
  std::memcpy(out, code, dim);
  std::memcpy(out + dim, scale, nb * sizeof(float));
  std::memcpy(out + dim + nb * sizeof(float), corr, nb * sizeof(int32_t));
}

int64_t IndexQueryFp4Floats(int heads, int dim) {
  return int64_t{PaddedHeads(heads)} * (dim / 4 + dim / 32 + 1);
}

void PackIndexQueryFp4(const float* q, const float* w, float scale, int heads, int dim,
                       float* packed) {
  DI_CHECK(dim % 32 == 0 && dim <= kMaxFp4Dim);
  const int hp = PaddedHeads(heads), nb = dim / 32;
  uint8_t* codes = reinterpret_cast<uint8_t*>(packed);
  float* qscale = packed + int64_t{dim} * hp / 4;
  float* wp = qscale + int64_t{nb} * hp;
  std::memset(codes, 16, static_cast<size_t>(dim) * hp);  // padding heads: code 0
  std::fill(qscale, qscale + int64_t{nb} * hp, 1.0f);
  int8_t code[32];
  for (int h = 0; h < heads; ++h) {
    for (int b = 0; b < nb; ++b) {
      const int e = Fp4BlockCodes(q + int64_t{h} * dim + b * 32, 32, code);
      qscale[int64_t{b} * hp + h] = std::ldexp(1.0f, e);
      for (int i = 0; i < 32; ++i) {
        const int d = b * 32 + i;
        codes[(int64_t{d / 4} * hp + h) * 4 + d % 4] = static_cast<uint8_t>(code[i] + 16);
      }
    }
    wp[h] = w[h] * scale;
  }
  std::fill(wp + heads, wp + hp, 0.0f);
}

void IndexScoresFp4(const float* packed, int num_tokens, int heads, int dim, const uint8_t* keys,
                    int64_t key_stride, int64_t count, float* score, int64_t score_stride,
                    const uint8_t* next, int64_t next_count) {
#if DI_ISA_COPIES
  switch (internal::VectorLoopIsa()) {
    case Isa::kAvx512:
      return fp4_avx512::Scores(packed, num_tokens, heads, dim, keys, key_stride, count, score,
                                score_stride, next, next_count);
    case Isa::kAvx2:
      return fp4_avx2::Scores(packed, num_tokens, heads, dim, keys, key_stride, count, score,
                              score_stride, next, next_count);
    default:
      break;
  }
#endif
  fp4_portable::Scores(packed, num_tokens, heads, dim, keys, key_stride, count, score, score_stride,
                       next, next_count);
}

int64_t IndexQueryFloats(int heads, int dim) {
  return int64_t{PaddedHeads(heads)} * (int64_t{dim} + 1);
}

void PackIndexQuery(const float* q, const float* w, float scale, int heads, int dim,
                    float* packed) {
  const int hp = PaddedHeads(heads);
  for (int d = 0; d < dim; ++d) {
    float* row = packed + int64_t{d} * hp;
    for (int h = 0; h < heads; ++h) row[h] = q[int64_t{h} * dim + d];
    std::fill(row + heads, row + hp, 0.0f);
  }
  float* wp = packed + int64_t{dim} * hp;
  for (int h = 0; h < heads; ++h) wp[h] = w[h] * scale;
  std::fill(wp + heads, wp + hp, 0.0f);
}

DI_ISA_DISPATCH(internal::VectorLoopIsa(), "avx512f", "avx2,fma", void, IndexScores,
                (const float* packed, int num_tokens, int heads, int dim, const float* keys,
                 int64_t key_stride, int64_t count, float* score, int64_t score_stride,
                 const float* next, int64_t next_count),
                (packed, num_tokens, heads, dim, keys, key_stride, count, score, score_stride, next,
                 next_count))

}  // namespace deepinfer::kernels
