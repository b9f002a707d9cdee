#pragma once

// Grouped-query attention over the paged KV cache, as a block that owns a layer's slot layout
// and its scratch: the builder projects and rotates Q and K, then calls Store (this step's K and
// V into the sequences' slots) and Attend (every query row over the positions it sees).
// Used by Llama (arch/llama.cc).

#include <cstdint>
#include <vector>

#include "arch/causal_lm.h"
#include "kernels/cpu/attention.h"
#include "util/aligned_vector.h"
#include "util/thread_pool.h"

namespace deepinfer::arch {

// One layer's causal GQA: `num_heads` query heads of `head_dim`, `num_kv_heads` K/V heads, query
// head h reading K/V head h / (num_heads / num_kv_heads), softmax scale 1 / sqrt(head_dim).
//
// KV cache: a layer's block is kernels::GqaKvLayout for the cache's block size and dtype
//   (f32: K [Hk][D][B] then V [B][Hk][D]; 16-bit: per head K [D][B] then V [B][D]), i.e.
//   kv_floats_per_token() = 2 * num_kv_heads * head_dim values per token slot.
// Work: Attend splits the step into items of (16 query tokens, K/V head, 256 positions of
//   whole blocks) over the pool's threads and merges the parts of a split item by log-sum-exp.
//   The split depends only on the positions, never on the rest of the batch, so a sequence gets
//   the same output alone or batched, in one prefill chunk or several (batch invariance).
// Shapes: k, v [T, num_kv_heads * head_dim]; q, out [T, num_heads * head_dim] f32, T the batch's
//   tokens in batch order.
// Threads: not thread-safe (scratch); Attend and AttendGgml use the pool passed in.
// Source: Ainslie et al. 2023 (GQA); Dao et al. 2023, "Flash-Decoding for long-context
//   inference" (split over positions, log-sum-exp merge); kernels/cpu/attention.h.
class GqaAttention {
 public:
  GqaAttention(int num_heads, int num_kv_heads, int head_dim)
      : num_heads_(num_heads), num_kv_heads_(num_kv_heads), head_dim_(head_dim) {}

  // Values one token occupies in one layer of the cache.
  int64_t kv_floats_per_token() const { return 2 * int64_t{num_kv_heads_} * head_dim_; }
  // The layout of a block of `kv` (its block size and dtype).
  kernels::GqaKvLayout Layout(const KvCache& kv) const {
    return {kv.block_size, num_kv_heads_, head_dim_, kv.dtype};
  }

  // Writes every batch token's K and V into its slot of layer `layer` (rounded to kv.dtype).
  // Call before Attend, so a token sees itself and the earlier tokens of its own chunk.
  void Store(const ForwardBatch& batch, KvCache& kv, int layer, const float* k,
             const float* v) const;

  // out = softmax(q K^T * scale) V over positions [0, pos] of each token's sequence.
  void Attend(const ForwardBatch& batch, const KvCache& kv, int layer, const float* q, float* out,
              util::ThreadPool& pool);

  // The same attention in llama.cpp's CPU order (kernels::AttendRowGgml over K rows and V^T rows
  // copied out of the cache as ggml's own cache holds them): bit-identical to llama.cpp, not
  // batch invariant (docs/parity.md). One item per (sequence, K/V head).
  // REQUIRES: kv.dtype == kF32.
  void AttendGgml(const ForwardBatch& batch, const KvCache& kv, int layer, const float* q,
                  float* out, util::ThreadPool& pool) const;

 private:
  // One work item: a query tile of a slice, one K/V head, one part of the positions.
  struct Item {
    int32_t slice, first, num_tokens;
    int32_t kv_head;
    int32_t pos_begin, pos_end;
    int32_t num_parts;
    int64_t partial;  // first slot of the item's (tile, head) in partial_*_, or -1: direct
  };
  // Fills items_ and merges_ for the batch; returns the number of partial slots.
  int64_t PlanItems(const ForwardBatch& batch, int block_size);

  int num_heads_, num_kv_heads_, head_dim_;
  std::vector<Item> items_;
  std::vector<int64_t> merges_;  // index in items_ of part 0 of every split (tile, head)
  util::AlignedVector<float> scratch_, partial_o_, partial_ml_;
};

}  // namespace deepinfer::arch
