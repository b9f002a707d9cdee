// Grouped-query attention over the paged cache (arch/gqa_attention.h): work items, their
// scratch, and the merge of split items; the arithmetic is kernels/cpu/attention.h's.

#include "arch/gqa_attention.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "kernels/cpu/ggml_numerics.h"
#include "util/status.h"

namespace deepinfer::arch {
namespace {

// Query tokens per attention work item: K/V rows are read once per tile.
constexpr int kAttentionTile = 16;
// Attention over a long context is split into parts of this many positions (whole KV blocks),
// computed in parallel and merged. The split depends only on the positions, never on what else
// is in the batch (batch invariance).
constexpr int kPositionsPerPart = 256;

}  // namespace

void GqaAttention::Store(const ForwardBatch& batch, KvCache& kv, int layer, const float* k,
                         const float* v) const {
  const kernels::GqaKvLayout layout = Layout(kv);
  const int64_t kvd = int64_t{num_kv_heads_} * head_dim_;
  for (const auto& s : batch.seqs) {
    for (int32_t i = 0; i < s.num_tokens; ++i) {
      int32_t pos = s.start_pos + i;
      uint8_t* block = kv.layer_bytes(layer) +
                       int64_t{s.block_table[pos / kv.block_size]} * layout.block_bytes();
      int64_t t = s.token_offset + i;
      kernels::StoreKv(layout, block, pos % kv.block_size, k + t * kvd, v + t * kvd);
    }
  }
}

int64_t GqaAttention::PlanItems(const ForwardBatch& batch, int block_size) {
  items_.clear();
  merges_.clear();
  int64_t num_partials = 0;
  for (int32_t si = 0; si < static_cast<int32_t>(batch.seqs.size()); ++si) {
    const SequenceSlice& s = batch.seqs[si];
    for (int32_t first = 0; first < s.num_tokens; first += kAttentionTile) {
      const int32_t n = std::min(kAttentionTile, s.num_tokens - first);
      const int32_t ctx = s.start_pos + first + n;
      const int32_t blocks = (ctx + block_size - 1) / block_size;
      const int32_t per_part = std::max(1, kPositionsPerPart / block_size);  // in blocks
      const int32_t parts = (blocks + per_part - 1) / per_part;              // none of them empty
      for (int32_t g = 0; g < num_kv_heads_; ++g) {
        if (parts > 1) merges_.push_back(static_cast<int64_t>(items_.size()));
        for (int32_t p = 0; p < parts; ++p) {
          const int32_t begin = p * per_part * block_size;
          const int32_t end = std::min(ctx, (p + 1) * per_part * block_size);
          items_.push_back({si, first, n, g, begin, end, parts, parts > 1 ? num_partials++ : -1});
        }
      }
    }
  }
  return num_partials;
}

void GqaAttention::Attend(const ForwardBatch& batch, const KvCache& kv, int layer, const float* q,
                          float* out, util::ThreadPool& pool) {
  const int head_dim = head_dim_, group = num_heads_ / num_kv_heads_;
  const int64_t token_stride = int64_t{num_heads_} * head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const kernels::GqaKvLayout layout = Layout(kv);
  const int threads = pool.num_threads();
  const int rows_max = kAttentionTile * group;

  const int64_t num_partials = PlanItems(batch, kv.block_size);
  const int64_t scratch_floats =
      kernels::AttentionScratchFloats(layout, rows_max) + int64_t{rows_max} * (head_dim + 2);
  if (static_cast<int64_t>(scratch_.size()) < threads * scratch_floats) {
    scratch_.resize(threads * scratch_floats);
  }
  if (static_cast<int64_t>(partial_ml_.size()) < num_partials * rows_max * 2) {
    partial_ml_.resize(num_partials * rows_max * 2);
    partial_o_.resize(num_partials * rows_max * head_dim);
  }
  auto query_of = [&](const Item& it) {
    const SequenceSlice& s = batch.seqs[it.slice];
    kernels::AttentionQuery aq;
    const int64_t offset = (int64_t{s.token_offset} + it.first) * token_stride +
                           int64_t{it.kv_head} * group * head_dim;
    aq.q = q + offset;
    aq.token_stride = token_stride;
    aq.num_tokens = it.num_tokens;
    aq.first_pos = s.start_pos + it.first;
    aq.group = group;
    aq.kv_head = it.kv_head;
    aq.scale = scale;
    return std::make_pair(aq, offset);
  };
  auto partial_at = [&](int64_t slot) {
    return kernels::AttentionPartial{partial_o_.data() + slot * rows_max * head_dim,
                                     partial_ml_.data() + slot * rows_max,
                                     partial_ml_.data() + (num_partials + slot) * rows_max};
  };
  pool.ParallelFor(
      static_cast<int64_t>(items_.size()), [&](int64_t begin, int64_t end, int thread) {
        float* scratch = scratch_.data() + thread * scratch_floats;
        float* direct = scratch + kernels::AttentionScratchFloats(layout, rows_max);
        for (int64_t i = begin; i < end; ++i) {
          const Item& it = items_[i];
          const auto [aq, offset] = query_of(it);
          const SequenceSlice& s = batch.seqs[it.slice];
          if (it.partial >= 0) {
            kernels::AttendRange(layout, kv.layers[layer], s.block_table, aq, it.pos_begin,
                                 it.pos_end, scratch, partial_at(it.partial));
          } else {
            kernels::AttentionPartial part{direct, direct + int64_t{rows_max} * head_dim,
                                           direct + int64_t{rows_max} * (head_dim + 1)};
            kernels::AttendRange(layout, kv.layers[layer], s.block_table, aq, it.pos_begin,
                                 it.pos_end, scratch, part);
            kernels::FinishAttention(aq, head_dim, part, 1, rows_max, out + offset);
          }
        }
      });
  if (merges_.empty()) return;
  pool.ParallelFor(static_cast<int64_t>(merges_.size()), [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const Item& it = items_[merges_[i]];
      const auto [aq, offset] = query_of(it);
      kernels::FinishAttention(aq, head_dim, partial_at(it.partial), it.num_parts, rows_max,
                               out + offset);
    }
  });
}

void GqaAttention::AttendGgml(const ForwardBatch& batch, const KvCache& kv, int layer,
                              const float* q, float* out, util::ThreadPool& pool) const {
  DI_CHECK(kv.dtype == kernels::KvDtype::kF32);
  const int D = head_dim_, num_kv_heads = num_kv_heads_;
  const int group = num_heads_ / num_kv_heads;
  const int64_t token_stride = int64_t{num_heads_} * D;
  // ggml's kq_scale: 1.0f / sqrtf(float(n_embd_head)).
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const kernels::GqaKvLayout layout = Layout(kv);
  const int B = kv.block_size;
  const bool batched = batch.num_tokens >= 2;
  const int64_t items = static_cast<int64_t>(batch.seqs.size()) * num_kv_heads;
  pool.ParallelFor(items, [&](int64_t begin, int64_t end, int) {
    // K rows [ctx, D] and V^T rows [D, ctx rounded up to 64] of one KV head, as ggml's cache
    // holds them (its V cache is transposed when flash attention is off).
    thread_local std::vector<float> k, vt, scratch;
    for (int64_t it = begin; it < end; ++it) {
      const SequenceSlice& s = batch.seqs[it / num_kv_heads];
      const int g = static_cast<int>(it % num_kv_heads);
      const int ctx = s.start_pos + s.num_tokens;
      const int64_t pad = (int64_t{ctx} + 63) / 64 * 64;
      if (static_cast<int64_t>(k.size()) < int64_t{ctx} * D) k.resize(int64_t{ctx} * D);
      if (static_cast<int64_t>(vt.size()) < pad * D) vt.resize(pad * D);
      if (static_cast<int64_t>(scratch.size()) < 2 * pad) scratch.resize(2 * pad);
      for (int j = 0; j < ctx; ++j) {
        const float* block =
            kv.layers[layer] + int64_t{s.block_table[j / B]} * layout.block_values();
        const int slot = j % B;
        const float* kt = block + int64_t{g} * D * B + slot;
        const float* vr = block + layout.v_offset() + (int64_t{slot} * num_kv_heads + g) * D;
        for (int d = 0; d < D; ++d) {
          k[int64_t{j} * D + d] = kt[int64_t{d} * B];
          vt[int64_t{d} * pad + j] = vr[d];
        }
      }
      for (int d = 0; d < D; ++d) {
        std::fill(vt.begin() + int64_t{d} * pad + ctx, vt.begin() + int64_t{d} * pad + pad, 0.0f);
      }
      for (int i = 0; i < s.num_tokens; ++i) {
        const int64_t t = s.token_offset + i;
        for (int hh = 0; hh < group; ++hh) {
          const int64_t off = t * token_stride + (int64_t{g} * group + hh) * D;
          kernels::AttendRowGgml(q + off, k.data(), vt.data(), pad, s.start_pos + i + 1, D, scale,
                                 batched, scratch.data(), out + off);
        }
      }
    }
  });
}

}  // namespace deepinfer::arch
