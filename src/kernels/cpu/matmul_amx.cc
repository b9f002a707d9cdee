// FP8 E4M3 and FP4 E2M1 weights (E8M0 block scales) times bf16 activations on AMX-BF16 tiles.
//
// Sapphire Rapids and later Xeons multiply 16 x 32 bf16 by 32 x 16 bf16 into 16 x 16 f32 in one
// TDPBF16PS; on the host of docs/benchmarks.md that runs at about 3.3 TFLOP/s per core against
// 0.23 for AVX-512 f32 FMAs (and 0.11 for AVX512-BF16's VDPBF16PS, half a vector per cycle
// there), so prefill of the released formats is no longer bound by the multiply.
//
// Layout: the weights are the A operand (16 output rows x 32 k per tile), decoded exactly from
// their codes and scales into bf16: an E4M3 or E2M1 value times a power of two has at most 4
// significant bits, within bf16's 8 (E8M0 scales below 2^-126 would be bf16 denormals, which
// AMX reads as zero; no released checkpoint has one). The activations are the B operand
// (32 k x up to 16 tokens, pairs of consecutive k per 32-bit element), rounded to bf16 once per
// call (RNE). C tiles (16 rows x tokens, f32) accumulate over k in order, one tile of k at a time,
// for every token count; TDPBF16PS computes each element of C from its A row and B column only,
// so a token's outputs do not depend on the other tokens of the call nor on the row split
// (matmul_test.cc checks both, bit for bit).
//
// Source: Intel 64 and IA-32 Architectures Software Developer's Manual, vol. 2, LDTILECFG,
// TILELOADD, TDPBF16PS; Linux Documentation/arch/x86/xstate.rst (ARCH_REQ_XCOMP_PERM).

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/bf16_avx512.h"
#include "kernels/cpu/matmul_internal.h"
#include "tensor/dtype.h"

namespace deepinfer::kernels::internal {
namespace {

constexpr int64_t kTileK = 32;        // k per A tile row (32 bf16 = 64 bytes)
constexpr int64_t kTileRows = 16;     // weight rows per A tile
constexpr int kRowTiles = 4;          // A tiles per row block: C tiles 0..3
constexpr int64_t kGroup = 16;        // tokens per B tile
// Tokens whose transposed activations (kChunk x k bf16: 1 MiB at k = 4096) stay in L2 while
// every row block of the call passes over them; the weights are decoded once per chunk.
constexpr int64_t kChunk = 128;

// Tile numbers: C accumulators 0..3, the B tile 4, A tiles 5..7 (rotating).
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

void Configure(int64_t tokens) {
  TileConfig c;
  std::memset(&c, 0, sizeof(c));
  c.palette_id = 1;
  for (int t = 0; t < 5; ++t) {  // C and B: 16 rows of `tokens` f32 / bf16 pairs
    c.rows[t] = 16;
    c.colsb[t] = static_cast<uint16_t>(4 * tokens);
  }
  for (int t = 5; t < 8; ++t) {  // A: 16 rows of 32 bf16
    c.rows[t] = 16;
    c.colsb[t] = 64;
  }
  _tile_loadconfig(&c);
}

// Decoding a k tile of a row (32 codes) into 32 bf16. Both formats are built as bf16 bit
// patterns with integer operations (the float route, through half-to-float conversions,
// multiplies and VCVTNE2PS2BF16, ran at half the rate, and decode is what a one-token step waits
// on): an E8M0 scale 2^(s - 127) adds s - 127 to the exponent field of every nonzero value. FP8
// E4M3 normal codes s|eeee|mmm become exponent e - 7 + 127 and mantissa mmm0000, subnormal ones
// (e = 0: m x 2^-9) come from a table; FP4 E2M1 codes come from a 16-entry table. Scales that
// would leave bf16's normal range (FP8 s outside [10, 246], FP4 outside [2, 252]) take the float
// route (DecodeExact32), as does the partial last tile of k.

// The scale-dependent part, for columns k0.. and k0 + 16.. (scale bytes s0 and s1; FP4 reads
// s0 only, its blocks being 32 wide or more).
struct TileScale {
  __m512i shift;  // (s - 127) << 7 per 16-bit lane
  bool integer;   // the integer route is exact for these scales
};

template <bool kFp4>
inline TileScale MakeTileScale(int s0, int s1) {
  if constexpr (kFp4) s1 = s0;
  TileScale t;
  t.integer = kFp4 ? (s0 >= 2 && s0 <= 252) : (s0 >= 10 && s0 <= 246 && s1 >= 10 && s1 <= 246);
  t.shift = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>((s0 - 127) << 7)),
                               _mm256_set1_epi16(static_cast<int16_t>((s1 - 127) << 7)), 1);
  return t;
}

template <bool kFp4>
inline void DecodeCodes32(const uint8_t* codes, const TileScale& scale, uint16_t* out) {
  if constexpr (kFp4) {
    _mm512_storeu_si512(out, Fp4Bf16Bits32(codes, scale.shift));
  } else {
    alignas(64) static constexpr uint16_t kSubnormals[32] = {0,      0x3b00, 0x3b80, 0x3bc0,
                                                             0x3c00, 0x3c20, 0x3c40, 0x3c60};
    const __m512i v =
        _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes)));
    __m512i bits = _mm512_add_epi16(
        _mm512_and_si512(_mm512_slli_epi16(v, 4), _mm512_set1_epi16(0x07f0)),
        _mm512_add_epi16(scale.shift, _mm512_set1_epi16(120 << 7)));
    const __mmask32 subnormal = _mm512_testn_epi16_mask(v, _mm512_set1_epi16(0x78));
    const __mmask32 nonzero = _mm512_test_epi16_mask(v, _mm512_set1_epi16(0x07));
    const __m512i sub = _mm512_permutexvar_epi16(v, _mm512_load_si512(kSubnormals));
    bits = _mm512_mask_mov_epi16(bits, subnormal, _mm512_mask_add_epi16(sub, nonzero, sub, scale.shift));
    // The sign: bit 7 of the code to bit 15.
    _mm512_storeu_si512(out, _mm512_ternarylogic_epi32(bits, _mm512_slli_epi16(v, 8),
                                                       _mm512_set1_epi16(static_cast<int16_t>(0x8000)),
                                                       0xf8));
  }
}

// The float route: columns [k0, k0 + 32) of a row, exactly, zeros past g.k.
template <bool kFp4>
inline void DecodeExact32(const GemmArgs& g, const uint8_t* row, const uint8_t* sc, int64_t k0,
                          uint16_t* out) {
  static constexpr float kFp4Values[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6,
                                           0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int64_t i = 0; i < kTileK; ++i) {
    const int64_t k = k0 + i;
    if (k >= g.k) {
      out[i] = 0;
      continue;
    }
    const float v = kFp4 ? kFp4Values[(row[k / 2] >> (4 * (k % 2))) & 15]
                         : tensor::Fp8E4M3ToFp32(row[k]);
    out[i] = tensor::Fp32ToBf16(v * E8M0Value(sc[k / g.scale_block_cols]));  // exact: no rounding
  }
}

// How far ahead (in rows) decode prefetches: the next row tile's, as the FP8 / FP4 decode tiles
// of matmul_avx512.cc do.
constexpr int64_t kPrefetchRows = 16;

// One row tile's rows and what its k tiles' decode can share, prepared once per tile.
struct TileRows {
  const uint8_t* row[kTileRows];    // null past the caller's rows
  const uint8_t* scale[kTileRows];  // their scale rows
  // FP8: every row is there and all share one scale row (blocks 16 rows tall or more), so a k
  // tile's scales are read once for the 16 rows.
  bool shared = false;
  // FP4 (a scale row per weight row): every row is there and every scale takes the integer
  // route; shifts[m * scale_cols + b] is row m's (s - 127) << 7 for scale column b.
  bool fp4_integer = false;
  const int16_t* shifts = nullptr;
};

// Rows [r0, r0 + 16) (those before g.row_end); `shifts` has room for 16 x g.scale_cols.
template <bool kFp4>
void PrepareTile(const GemmArgs& g, int64_t r0, int16_t* shifts, TileRows* t) {
  for (int64_t m = 0; m < kTileRows; ++m) {
    const int64_t r = r0 + m;
    t->row[m] = r < g.row_end ? g.w + r * g.w_row_bytes : nullptr;
    t->scale[m] = r < g.row_end ? g.scale + (r / g.scale_block_rows) * g.scale_cols : nullptr;
  }
  const bool whole = t->row[kTileRows - 1] != nullptr;
  t->shared = !kFp4 && whole && t->scale[0] == t->scale[kTileRows - 1];
  t->fp4_integer = kFp4 && whole;
  for (int64_t m = 0; m < kTileRows && t->fp4_integer; ++m)
    t->fp4_integer = Fp4Shifts(t->scale[m], g.scale_cols, shifts + m * g.scale_cols);
  t->shifts = shifts;
}

// k tile j of a row tile as an A tile (16 rows of 32 bf16) at `a`; scale_index[2j], [2j + 1]:
// the scale columns of its two halves. With `prefetch`, each row's line kPrefetchRows further
// down is prefetched once per line read (decode, where the weights stream from memory).
template <bool kFp4>
inline void DecodeKTile(const GemmArgs& g, const TileRows& t, const int32_t* scale_index,
                        int64_t j, bool prefetch, uint16_t* a) {
  constexpr int64_t kBytes = kFp4 ? kTileK / 2 : kTileK;  // code bytes per k tile
  const int64_t off = j * kBytes;
  prefetch = prefetch && off % 64 == 0;
  const bool full = (j + 1) * kTileK <= g.k;
  const int32_t b0 = scale_index[2 * j], b1 = scale_index[2 * j + 1];
  if (full && t.fp4_integer) {
    for (int64_t m = 0; m < kTileRows; ++m) {
      if (prefetch)
        _mm_prefetch(reinterpret_cast<const char*>(t.row[m] + kPrefetchRows * g.w_row_bytes + off),
                     _MM_HINT_T0);
      TileScale scale;
      scale.shift = _mm512_set1_epi16(t.shifts[m * g.scale_cols + b0]);
      DecodeCodes32<kFp4>(t.row[m] + off, scale, a + m * kTileK);
    }
    return;
  }
  TileScale scale{};
  if (full && t.shared) {
    scale = MakeTileScale<kFp4>(t.scale[0][b0], t.scale[0][b1]);
    if (scale.integer) {  // FP8's usual case, in a loop of its own
      for (int64_t m = 0; m < kTileRows; ++m) {
        if (prefetch)
          _mm_prefetch(reinterpret_cast<const char*>(t.row[m] + kPrefetchRows * g.w_row_bytes + off),
                       _MM_HINT_T0);
        DecodeCodes32<kFp4>(t.row[m] + off, scale, a + m * kTileK);
      }
      return;
    }
  }
  for (int64_t m = 0; m < kTileRows; ++m) {
    uint16_t* out = a + m * kTileK;
    if (t.row[m] == nullptr) {
      std::memset(out, 0, 64);
      continue;
    }
    if (prefetch)
      _mm_prefetch(reinterpret_cast<const char*>(t.row[m] + kPrefetchRows * g.w_row_bytes + off),
                   _MM_HINT_T0);
    if (full && !t.shared) scale = MakeTileScale<kFp4>(t.scale[m][b0], t.scale[m][b1]);
    if (full && scale.integer) {
      DecodeCodes32<kFp4>(t.row[m] + off, scale, out);
    } else {
      DecodeExact32<kFp4>(g, t.row[m], t.scale[m], j * kTileK, out);
    }
  }
}

// y[t0 + n][r0 + m] = tmp[m][n] for the valid rows and tokens.
inline void WriteC(const GemmArgs& g, const float* tmp, int64_t r0, int64_t rows, int64_t t0,
                   int64_t tokens) {
  for (int64_t n = 0; n < tokens; ++n) {
    float* y = g.y + (t0 + n) * g.y_stride + r0;
    for (int64_t m = 0; m < rows; ++m) y[m] = tmp[m * kGroup + n];
  }
}

// GCC's tile intrinsics paste their tile numbers into the instruction text, so they take
// literals: C tile `c` += the A tile loaded (into tile `a`) from `ptr` times the B tile (4).
#define DI_AMX_MULTIPLY(c, a, ptr) \
  do {                             \
    _tile_loadd(a, ptr, 64);       \
    _tile_dpbf16ps(c, a, 4);       \
  } while (0)

inline void ZeroC(int tiles) {
  _tile_zero(0);
  if (tiles > 1) _tile_zero(1);
  if (tiles > 2) _tile_zero(2);
  if (tiles > 3) _tile_zero(3);
}

// C tiles [0, tiles) += the A tiles at a, a + 1 KiB, ... times the B tile.
inline void MultiplyTiles(const uint16_t* a, int tiles) {
  constexpr int64_t kNext = kTileRows * kTileK;
  DI_AMX_MULTIPLY(0, 5, a);
  if (tiles > 1) DI_AMX_MULTIPLY(1, 6, a + kNext);
  if (tiles > 2) DI_AMX_MULTIPLY(2, 7, a + 2 * kNext);
  if (tiles > 3) DI_AMX_MULTIPLY(3, 5, a + 3 * kNext);
}

// C tiles [0, tiles) (row tiles from r0) to y, for tokens [t0, t0 + tokens).
inline void StoreTiles(const GemmArgs& g, float* tmp, int64_t r0, int64_t r_end, int tiles,
                       int64_t t0, int64_t tokens) {
  for (int i = 0; i < tiles; ++i) {
    switch (i) {
      case 0:
        _tile_stored(0, tmp, kGroup * 4);
        break;
      case 1:
        _tile_stored(1, tmp, kGroup * 4);
        break;
      case 2:
        _tile_stored(2, tmp, kGroup * 4);
        break;
      default:
        _tile_stored(3, tmp, kGroup * 4);
        break;
    }
    const int64_t rs = r0 + i * kTileRows;
    WriteC(g, tmp, rs, std::min(kTileRows, r_end - rs), t0, tokens);
  }
}

// Activations of tokens [t0, t0 + n) (n <= 16), bf16 rows of g.a_row_bytes, as B tiles: tile j
// is 16 rows (k pairs) of n 32-bit pairs, at xt + j * 16 * n.
inline void TransposeGroup(const GemmArgs& g, int64_t t0, int64_t n, int64_t k_tiles,
                           uint32_t* xt) {
  for (int64_t t = 0; t < n; ++t) {
    const uint32_t* src = reinterpret_cast<const uint32_t*>(g.a + (t0 + t) * g.a_row_bytes);
    for (int64_t p = 0; p < k_tiles * kTileRows; ++p) xt[p * n + t] = src[p];
  }
}

// Scratch of one thread's calls, grown and kept.
struct AmxScratch {
  std::vector<uint16_t> weights;     // prefill: a row block's A tiles, [k tile][row tile][16][32]
  std::vector<uint32_t> xt;          // a chunk's B tiles, token group after token group
  std::vector<int32_t> scale_index;  // per k tile: the scale columns of k and k + 16
  std::vector<int16_t> shifts;       // FP4: the row tiles' scales as exponent shifts
};

// Decode (one token group of n tokens, its B tiles at xt): row tile by row tile, kSlabTiles k
// tiles decoded into L1, then multiplied. A tile load waits until the stores before it have
// reached the cache (no store forwarding into tiles), so loading each k tile right after
// decoding it paid that drain per 512 weights. Row tiles [r0, r0 + 16 * tiles).
template <bool kFp4>
void DecodeRowTiles(const GemmArgs& g, AmxScratch& s, int64_t r0, int tiles, int64_t t0,
                    int64_t n) {
  constexpr int64_t kSlabTiles = 8;
  alignas(64) uint16_t slab[2 * kSlabTiles * kTileRows * kTileK];
  alignas(64) float tmp[kTileRows * kGroup];
  const int64_t k_tiles = (g.k + kTileK - 1) / kTileK;
  for (int i = 0; i < tiles; ++i) {
    const int64_t rs = r0 + i * kTileRows;
    TileRows t;
    PrepareTile<kFp4>(g, rs, s.shifts.data(), &t);
    _tile_zero(0);
    for (int64_t j0 = 0, c = 0; j0 < k_tiles; j0 += kSlabTiles, ++c) {
      const int64_t j1 = std::min(k_tiles, j0 + kSlabTiles);
      uint16_t* chunk = slab + (c & 1) * kSlabTiles * kTileRows * kTileK;
      for (int64_t j = j0; j < j1; ++j)
        DecodeKTile<kFp4>(g, t, s.scale_index.data(), j, true, chunk + (j - j0) * kTileRows * kTileK);
      for (int64_t j = j0; j < j1; ++j) {
        _tile_loadd(4, s.xt.data() + j * kTileRows * n, 4 * n);
        DI_AMX_MULTIPLY(0, 5, chunk + (j - j0) * kTileRows * kTileK);
      }
    }
    _tile_stored(0, tmp, kGroup * 4);
    WriteC(g, tmp, rs, std::min(kTileRows, g.row_end - rs), t0, n);
  }
}

// Prefill: the row block's tiles are decoded once for the chunk [tc, te) (k tile by k tile: row
// by row wrote 1 KiB apart and ran about 40% slower), then every token group passes over them.
template <bool kFp4>
void PrefillRowBlock(const GemmArgs& g, AmxScratch& s, int64_t r0, int tiles, int64_t tc,
                     int64_t te, int64_t* configured) {
  alignas(64) float tmp[kTileRows * kGroup];
  const int64_t k_tiles = (g.k + kTileK - 1) / kTileK;
  TileRows t[kRowTiles];
  for (int i = 0; i < tiles; ++i)
    PrepareTile<kFp4>(g, r0 + i * kTileRows, s.shifts.data() + i * kTileRows * g.scale_cols, &t[i]);
  for (int64_t j = 0; j < k_tiles; ++j) {
    for (int i = 0; i < tiles; ++i) {
      DecodeKTile<kFp4>(g, t[i], s.scale_index.data(), j, false,
                        s.weights.data() + (j * kRowTiles + i) * kTileRows * kTileK);
    }
  }
  for (int64_t t0 = tc; t0 < te; t0 += kGroup) {
    const int64_t n = std::min(kGroup, te - t0);
    if (*configured != n) Configure(*configured = n);
    const uint32_t* b = s.xt.data() + (t0 - tc) * k_tiles * kTileRows;
    ZeroC(tiles);
    for (int64_t j = 0; j < k_tiles; ++j) {
      _tile_loadd(4, b + j * kTileRows * n, 4 * n);
      MultiplyTiles(s.weights.data() + j * kRowTiles * kTileRows * kTileK, tiles);
    }
    StoreTiles(g, tmp, r0, g.row_end, tiles, t0, n);
  }
}

template <bool kFp4>
void AmxScaledGemm(const GemmArgs& g) {
  thread_local AmxScratch s;
  const int64_t k_tiles = (g.k + kTileK - 1) / kTileK;
  if (static_cast<int64_t>(s.scale_index.size()) < 2 * k_tiles) s.scale_index.resize(2 * k_tiles);
  for (int64_t j = 0; j < k_tiles; ++j) {
    s.scale_index[2 * j] = static_cast<int32_t>(j * kTileK / g.scale_block_cols);
    s.scale_index[2 * j + 1] = static_cast<int32_t>((j * kTileK + 16) / g.scale_block_cols);
  }
  if (static_cast<int64_t>(s.shifts.size()) < kRowTiles * kTileRows * g.scale_cols)
    s.shifts.resize(kRowTiles * kTileRows * g.scale_cols);
  const size_t block = static_cast<size_t>(k_tiles * kRowTiles * kTileRows * kTileK);
  int64_t configured = -1;
  for (int64_t tc = 0; tc < g.num_tokens; tc += kChunk) {
    const int64_t te = std::min(g.num_tokens, tc + kChunk);
    if (static_cast<int64_t>(s.xt.size()) < (te - tc) * k_tiles * kTileRows)
      s.xt.resize((te - tc) * k_tiles * kTileRows);
    for (int64_t t = tc; t < te; t += kGroup) {
      TransposeGroup(g, t, std::min(kGroup, te - t), k_tiles,
                     s.xt.data() + (t - tc) * k_tiles * kTileRows);
    }
    if (te - tc > kGroup && s.weights.size() < block) s.weights.resize(block);
    for (int64_t r0 = g.row_begin; r0 < g.row_end; r0 += kRowTiles * kTileRows) {
      const int tiles = static_cast<int>(
          std::min<int64_t>(kRowTiles, (g.row_end - r0 + kTileRows - 1) / kTileRows));
      if (te - tc <= kGroup) {
        if (configured != te - tc) Configure(configured = te - tc);
        DecodeRowTiles<kFp4>(g, s, r0, tiles, tc, te - tc);
      } else {
        PrefillRowBlock<kFp4>(g, s, r0, tiles, tc, te, &configured);
      }
    }
  }
  _tile_release();
}

}  // namespace

void FillAmxKernels(KernelTable* t) {
  t->fp8 = {AmxScaledGemm<false>, Bf16Activations, Bf16RowBytes};
  t->fp4 = {AmxScaledGemm<true>, Bf16Activations, Bf16RowBytes};
}

}  // namespace deepinfer::kernels::internal
