#pragma once

// Grouped-query attention over a paged KV cache, computed block by block with an online softmax
// (flash-decoding style) so that a long context can be split over threads and merged.
//
// Source: Vaswani et al. 2017 (scaled dot-product attention); Ainslie et al. 2023 (GQA);
// Milakov & Gimelshein 2018, "Online normalizer calculation for softmax"; Dao et al. 2023,
// "Flash-Decoding for long-context inference" (split-K over positions, log-sum-exp merge).

#include <cstdint>
#include <optional>
#include <string_view>

namespace deepinfer::kernels {

// Element type of the values a KV cache stores. The 16-bit types halve the cache's memory and
// the bytes attention reads per position; a value is rounded to nearest even when stored and
// widened exactly to f32 when read, so attention over a 16-bit cache computes the same f32
// arithmetic as over an f32 cache holding the rounded values (tested bit for bit).
// f16 keeps 11 significant bits up to 65504; bf16 keeps 8 bits over f32's whole range.
enum class KvDtype : uint8_t { kF32, kF16, kBF16 };
// Bytes per stored value: 4 or 2.
int KvDtypeBytes(KvDtype dtype);
// "f32", "f16", "bf16".
const char* KvDtypeName(KvDtype dtype);
// Parses those names (also "float32", "float16", "bfloat16", vLLM's spellings); nullopt for
// another name.
std::optional<KvDtype> KvDtypeFromName(std::string_view name);

// Layout of one KV-cache block for grouped-query attention.
//
// A block holds `block_size` (B) token slots for `num_kv_heads` (Hk) heads of `head_dim` (D).
// f32:
//   K: [Hk][D][B] (transposed per head, so Q·K over a block is D broadcast-FMAs of B lanes
//      with no horizontal sums), then
//   V: [B][Hk][D] (token-major, so the weighted sum streams whole rows).
// f16 / bf16: per head, K [D][B] then V [B][D] ([Hk][2][D * B] values), so one head's part of a
//   block is one contiguous run that attention widens to f32 in a single pass.
// Units: block_values() values = 2 * B * Hk * D (the same as B tokens of K then V);
//   block_bytes() = block_values() * KvDtypeBytes(dtype).
struct GqaKvLayout {
  int block_size = 16;
  int num_kv_heads = 1;
  int head_dim = 1;
  KvDtype dtype = KvDtype::kF32;

  int64_t block_values() const { return 2 * int64_t{block_size} * num_kv_heads * head_dim; }
  int64_t block_bytes() const { return block_values() * KvDtypeBytes(dtype); }
  // f32 layout: offset of V in a block, in values.
  int64_t v_offset() const { return int64_t{block_size} * num_kv_heads * head_dim; }
};

// Writes one token's K and V into slot `slot` (0 <= slot < block_size) of `block`, rounding
// them to the layout's dtype.
// Shapes: k, v [Hk * D] f32; block: layout.block_bytes() bytes.
void StoreKv(const GqaKvLayout& layout, void* block, int slot, const float* k, const float* v);

// The queries of one attention work item: `num_tokens` consecutive tokens of one sequence and
// the `group` query heads that share KV head `kv_head`. Row r of the item is token r / group,
// head r % group. Token i sits at position first_pos + i and attends positions [0, first_pos + i].
// Shapes: query (token i, head g) is q[i * token_stride + g * head_dim .. + head_dim) f32.
struct AttentionQuery {
  const float* q = nullptr;
  int64_t token_stride = 0;
  int num_tokens = 1;
  int32_t first_pos = 0;
  int group = 1;
  int kv_head = 0;
  float scale = 1.0f;  // softmax scale, usually 1 / sqrt(D)

  int rows() const { return num_tokens * group; }
};

// Online-softmax state of an item's rows over part of the positions: o is the unnormalized
// weighted sum of V rows, m the running max logit, l the running sum of exp(logit - m).
// Shapes: o [rows, D], m [rows], l [rows] f32. A row that saw no position has m = -inf, l = 0.
struct AttentionPartial {
  float* o = nullptr;
  float* m = nullptr;
  float* l = nullptr;
};

// Floats of scratch AttendRange needs for an item of `rows` rows (16-bit layouts add room for
// one head's block widened to f32).
int64_t AttentionScratchFloats(const GqaKvLayout& layout, int rows);

// Attends the item's rows to positions [pos_begin, pos_end) (clipped per row by the causal
// mask) and writes, not accumulates, their partial state.
// `layer` is the layer's first block (block b at layer + b * layout.block_bytes() bytes).
// REQUIRES: pos_begin a multiple of block_size; pos_end <= first_pos + num_tokens; block_table
//   covers every position below pos_end; scratch holds AttentionScratchFloats floats.
// Threads: pure function of its arguments; callers run disjoint items on different threads.
void AttendRange(const GqaKvLayout& layout, const void* layer, const int32_t* block_table,
                 const AttentionQuery& query, int32_t pos_begin, int32_t pos_end, float* scratch,
                 const AttentionPartial& out);

// Merges `num_parts` partial states of one item (part p at o + p * part_stride * D, m + p *
// part_stride, l + p * part_stride) and writes the normalized output of row r (token i, head g)
// to out[i * token_stride + g * D .. + D).
// REQUIRES: num_parts >= 1.
void FinishAttention(const AttentionQuery& query, int head_dim, const AttentionPartial& parts,
                     int num_parts, int64_t part_stride, float* out);

// ---- Multi-head latent attention, weight-absorbed form (DeepSeek-V2/V3 decode) ----------------
//
// Every head attends the same latent row per position (multi-query attention with K = [latent ;
// rope part] of `lat` floats and V = the first `rank` floats), so heads are the vector lanes:
// queries and outputs are stored transposed, 16 heads per chunk ([chunk][dim][16]), and each
// latent value is broadcast against 16 heads at once. Heads past num_heads in the last chunk are
// padding (zero queries; their outputs are ignored).
// Source: DeepSeek-AI 2024, "DeepSeek-V2", section 2.1.3 (absorbing W^UK into the query and
// W^UV into the output); vLLM MLACommonImpl (the same absorbed decode).

// Heads per chunk, the lane count of the MLA kernel.
constexpr int kMlaHeadsPerChunk = 16;

// Where one layer's latent rows live: position j's row of `lat` floats starts at
// layer + (block_table[j / block_size] * block_size + j % block_size) * lat.
struct MlaKv {
  const float* layer = nullptr;
  const int32_t* block_table = nullptr;
  int block_size = 16;
  int lat = 0;   // kv_lora_rank + qk_rope_head_dim
  int rank = 0;  // kv_lora_rank: the V part
};

// Floats of scratch MlaAttendRange needs.
int64_t MlaScratchFloats();

// One head chunk of one query token attends positions [pos_begin, pos_end) and writes its
// partial online-softmax state (lane h of every vector is head h of the chunk).
// Shapes: q_t [lat, 16] f32, already multiplied by the softmax scale; out.o [rank, 16],
//   out.m [16], out.l [16] f32.
// REQUIRES: pos_begin < pos_end; every position below pos_end is in the block table.
// Threads: pure function of its arguments.
void MlaAttendRange(const MlaKv& kv, const float* q_t, int32_t pos_begin, int32_t pos_end,
                    float* scratch, const AttentionPartial& out);

// Merges `num_parts` partial states of one head chunk (part p at o + p * rank * 16, m + p * 16,
// l + p * 16) into the normalized attended latent.
// Shapes: out_t [rank, 16] f32.
// REQUIRES: num_parts >= 1.
void MlaFinish(int rank, const AttentionPartial& parts, int num_parts, float* out_t);

// ---- Dense (unmasked) multi-head attention, for encoders ---------------------------------------
//
// Every one of n tokens attends all n tokens of its own sequence, one head at a time: the ViT of
// DeepSeek-V4.1's vision tower. FlashAttention-2's schedule on a CPU: a call's query rows walk
// the keys in blocks of kDenseKeyBlock; the logits of a register tile of rows come from
// broadcast-FMAs over keys packed transposed (no horizontal sums), the online softmax rescales
// once per row per block, and P·V is register-tiled over values packed as padded rows. The
// packed keys of one block (kDenseKeyBlock x head_dim floats) and its values stay in L1/L2 while
// every row tile of the call uses them.
// Source: Dao 2023, "FlashAttention-2: Faster Attention with Better Parallelism and Work
//   Partitioning", Algorithm 1; Milakov & Gimelshein 2018 (online softmax).

// Keys per online-softmax step.
constexpr int kDenseKeyBlock = 128;

// Floats of one head's packed keys and values for n tokens of head_dim.
int64_t DensePackedFloats(int n, int head_dim);

// Packs one head's keys and values for DenseAttend: keys transposed per key block ([head_dim]
// [block width] each, n padded to a multiple of 32 with zeros), then values as rows padded to a
// multiple of 16 floats.
// Shapes: token t's key at k + t * stride .. + head_dim, its value at v + t * stride, f32;
//   packed: DensePackedFloats(n, head_dim) floats.
// Threads: pure function of its arguments (heads pack on different threads).
void PackDenseKv(const float* k, const float* v, int64_t stride, int n, int head_dim,
                 float* packed);

// Floats of scratch DenseAttend needs for `rows` query rows.
int64_t DenseAttendScratchFloats(int rows, int head_dim);

// Query rows [0, rows) (row i at q + i * q_stride, head_dim f32) attend all n tokens packed by
// PackDenseKv with softmax scale `scale`, and write the normalized outputs to
// out + i * out_stride (head_dim floats each).
// Cost: 4 * rows * n * head_dim flops; best with rows a multiple of 8 (the AVX-512 tile) and
//   at least 32, so each packed key block is reused from cache.
// Threads: pure function of its arguments; callers run disjoint row ranges on different threads.
// REQUIRES: n >= 1; scratch holds DenseAttendScratchFloats(rows, head_dim) floats.
void DenseAttend(const float* q, int64_t q_stride, int rows, const float* packed, int n,
                 int head_dim, float scale, float* scratch, float* out, int64_t out_stride);

}  // namespace deepinfer::kernels
