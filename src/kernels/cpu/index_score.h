#pragma once

// The lightning indexer's scores (DeepSeek-V3.2 / V4 / V4.1 sparse attention), computed where
// the index keys lie: score_j = sum_h w_h relu(q_h . k_j) over the query's heads, for keys read
// in place at a fixed stride (one block of a paged cache at a time), with no gathered copy.
//
// The queries are packed transposed, heads in the vector lanes ([dim][heads]), so each key value
// is broadcast against a lane-width of heads at once and a key's head dot products need no
// horizontal sums; only the weighted head sum is reduced across lanes, once per key and token.
// Several tokens share each key while it is in L1 (prefill), and several keys share each query
// load.
//
// Source: DeepSeek-AI 2025, "DeepSeek-V3.2-Exp: Boosting Long-Context Efficiency with DeepSeek
//   Sparse Attention", the lightning indexer (eq. 1).

#include <cstdint>

namespace deepinfer::kernels {

// A packed query's heads are padded with zero queries and zero weights to a multiple of this.
constexpr int kIndexHeadPad = 16;

// Floats of one token's packed query (PackIndexQuery) for `heads` heads of `dim` values.
int64_t IndexQueryFloats(int heads, int dim);

// Packs one token's index queries for IndexScores: the queries transposed, [dim][hp] (hp = heads
// rounded up to kIndexHeadPad), then the head weights w_h * scale [hp], padding zero.
// Shapes: q [heads, dim], w [heads] f32; packed IndexQueryFloats(heads, dim) floats.
// Threads: pure function of its arguments.
void PackIndexQuery(const float* q, const float* w, float scale, int heads, int dim, float* packed);

// For the num_tokens packed queries (token i's at packed + i * IndexQueryFloats(heads, dim)) and
// `count` keys (key j's `dim` floats at keys + j * key_stride):
//   score[i * score_stride + j] = sum_h max(q_{i,h} . k_j, 0) * (w_{i,h} * scale).
// A score's arithmetic depends only on its query and key (not on count, the key's place in the
// run, num_tokens or which thread runs it), so callers may split keys and tokens any way and get
// the same bits. The copy of the active ISA runs (isa_dispatch.h); copies round differently (16,
// 8 or 4 lanes per head vector; the AVX-512 and AVX2 copies fuse multiply-adds).
// `next` (null: none) names the next_count keys (same stride) the caller scores next: they are
// prefetched while this call computes, which changes no result.
// Cost: num_tokens * count * hp * dim multiply-adds; each key is read from memory once per call.
// Threads: pure function of its arguments; callers run disjoint key ranges on different threads.
void IndexScores(const float* packed, int num_tokens, int heads, int dim, const float* keys,
                 int64_t key_stride, int64_t count, float* score, int64_t score_stride,
                 const float* next = nullptr, int64_t next_count = 0);

// ---- The same scores over FP4 keys and queries, in integers ----
// Under DeepSeek's QAT numerics the index keys and queries are FP4 E2M1 values with a power-of-two
// scale per 32 (FakeQuantFp4): every value is n * 2^E with n an integer, |n| <= 15. A key is then
// kept packed (PackFp4IndexKey): its codes n as int8 and, per block of 32, the scale 2^E and -16
// times the block's code sum; a query is packed with codes n + 16 as uint8 (PackIndexQueryFp4).
// Each block's dot product is then exact in int32 (VPDPBUSD under AVX-512, VPMADDUBSW + VPMADDWD
// under AVX2, scalar elsewhere), turned to float and scaled by the two powers of two (exact), and
// the blocks are summed in order. A float multiply-add chain over the same values gives the same
// value whenever its partial sums are exact, which holds unless one block's scale is about 2^9
// times another's; so scores equal IndexScores' bit for bit on such data, on each ISA (the head sum
// is the same code), while a key is read as dim + 8 * dim / 32 bytes instead of 4 * dim.

// Bytes of one packed key of `dim` values (dim a multiple of 32): dim int8 codes, then per block of
// 32 a float scale and an int32 correction.
int64_t IndexKeyFp4Bytes(int dim);

// Packs key [dim] (FP4 E2M1 values times a power of two per 32, as FakeQuantFp4 leaves them) into
// out [IndexKeyFp4Bytes(dim)]. out may overlap key (it is read first). dim: a multiple of 32, at
// most 1,024 (DI_CHECK). Values FakeQuantFp4 does not leave are rounded to the block's grid, NaN
// and infinities to 0 (a broken model's activations stop no server).
void PackFp4IndexKey(const float* key, int dim, uint8_t* out);

// Floats of one token's packed FP4 query for `heads` heads of `dim` values.
int64_t IndexQueryFp4Floats(int heads, int dim);

// Packs one token's FP4 index queries (q [heads, dim] as FakeQuantFp4 leaves each head's values,
// w [heads] f32) into packed [IndexQueryFp4Floats(heads, dim)]: codes + 16 as uint8
// [dim / 4][hp][4] (hp = heads rounded up to kIndexHeadPad, padding heads zero), the blocks'
// scales [dim / 32][hp], then w_h * scale [hp]. dim and other values as PackFp4IndexKey.
void PackIndexQueryFp4(const float* q, const float* w, float scale, int heads, int dim,
                       float* packed);

// IndexScores over packed FP4 queries (token i's at packed + i * IndexQueryFp4Floats) and packed
// keys (key j at keys + j * key_stride bytes): the same scores, threading, splitting and prefetch
// contract. Cost: num_tokens * count * hp * dim int8 multiply-adds; a key is read once per call.
void IndexScoresFp4(const float* packed, int num_tokens, int heads, int dim, const uint8_t* keys,
                    int64_t key_stride, int64_t count, float* score, int64_t score_stride,
                    const uint8_t* next = nullptr, int64_t next_count = 0);

}  // namespace deepinfer::kernels
