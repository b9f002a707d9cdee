// Multi-head latent attention over the paged cache (arch/mla_attention.h): the latent slots, the
// choice of form per slice, the expanded form (latents through kv_b_proj, then attention per
// head) and the absorbed form (queries through W_UK, kernels::MlaAttendRange over the latents,
// the attended latent through W_UV).

#include "arch/mla_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "arch/rope.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "util/status.h"

namespace deepinfer::arch {
namespace {

// Budget for the expanded form's per-slice key/value buffer (256 MiB of f32).
constexpr int64_t kMaxExpandedFloats = int64_t{64} << 20;

template <typename T>
void Grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

}  // namespace

absl::StatusOr<MlaWeights> LoadMlaWeights(TensorSchema& schema, const std::string& name,
                                          const model::ModelConfig& cfg) {
  const model::DeepseekConfig& ds = *cfg.deepseek;
  const int64_t rows = int64_t{cfg.num_heads} * (ds.qk_nope_head_dim + ds.v_head_dim);
  MlaWeights w;
  DI_ASSIGN_OR_RETURN(w.kv_b, schema.Mat(name, rows, ds.kv_lora_rank));
  w.kv_b_f32.resize(static_cast<size_t>(rows * ds.kv_lora_rank));
  for (int64_t r = 0; r < rows; ++r) {
    kernels::DequantizeRow(w.kv_b->dtype, w.kv_b->row(r), w.kv_b_f32.data() + r * ds.kv_lora_rank,
                           ds.kv_lora_rank);
  }
  return w;
}

MlaAttention::MlaAttention(const model::ModelConfig& cfg)
    : nh_(cfg.num_heads),
      dn_(cfg.deepseek->qk_nope_head_dim),
      rope_(cfg.deepseek->qk_rope_head_dim),
      dv_(cfg.deepseek->v_head_dim),
      rank_(cfg.deepseek->kv_lora_rank) {
  const model::DeepseekConfig& ds = *cfg.deepseek;
  double qk_scale = 1.0 / std::sqrt(static_cast<double>(ds.qk_nope_head_dim + ds.qk_rope_head_dim));
  if (ds.yarn && ds.yarn->mscale_all_dim != 0) {
    const double m = YarnMscale(ds.yarn->factor, ds.yarn->mscale_all_dim);
    qk_scale = qk_scale * m * m;
  }
  softmax_scale_ = static_cast<float>(qk_scale);
}

void MlaAttention::Store(const ForwardBatch& batch, KvCache& kv, int layer,
                         const float* latents) const {
  const int64_t lat = kv_floats_per_token();
  for (const auto& s : batch.seqs) {
    for (int32_t i = 0; i < s.num_tokens; ++i) {
      const int32_t pos = s.start_pos + i;
      float* slot = kv.Slot(layer, s.block_table[pos / kv.block_size], pos % kv.block_size);
      std::memcpy(slot, latents + (s.token_offset + i) * lat, lat * sizeof(float));
    }
  }
}

void MlaAttention::Attend(const MlaWeights& w, const ForwardBatch& batch, KvCache& kv, int layer,
                          const float* q, float* out, Mode mode, util::ThreadPool& pool) {
  const int64_t nh = nh_, dn = dn_, dr = rope_, qk = dn + dr, rkv = rank_;
  int64_t max_ctx = 0;
  for (const auto& s : batch.seqs) max_ctx = std::max<int64_t>(max_ctx, s.start_pos + s.num_tokens);
  thread_stride_ = max_ctx + 2 * kv_floats_per_token();
  Grow(thread_scratch_, pool.num_threads() * thread_stride_);
  // Flops per context token: expanded pays kv_b once per slice (kvb) plus exp per query;
  // absorbed pays abs per query. Expanded wins once num_tokens > kvb / (abs - exp).
  const double kvb = static_cast<double>(rkv) * nh * (dn + dv_);
  const double per_query_gain = static_cast<double>(nh) * ((2 * rkv + dr) - (qk + dv_));
  const int64_t kvb_rows = nh * (dn + dv_);
  for (const auto& s : batch.seqs) {
    bool expanded = mode == Mode::kExpanded;
    if (mode == Mode::kAuto) {
      // The expanded form materializes [context, heads * (nope + v)] floats; past the budget
      // (long contexts) the absorbed form is used whatever the flop estimate says.
      const int64_t ctx = s.start_pos + s.num_tokens;
      expanded = per_query_gain > 0 && s.num_tokens * per_query_gain > kvb &&
                 ctx * kvb_rows <= kMaxExpandedFloats;
    }
    if (expanded) {
      AttendExpanded(w, s, kv, layer, q, out, pool);
    } else {
      AttendAbsorbed(w, s, kv, layer, q, out, pool);
    }
  }
}

void MlaAttention::AttendAbsorbed(const MlaWeights& w, const SequenceSlice& s, KvCache& kv,
                                  int layer, const float* q_all, float* out_all,
                                  util::ThreadPool& pool) {
  constexpr int kLanes = kernels::kMlaHeadsPerChunk;
  const int64_t nh = nh_, dn = dn_, dr = rope_;
  const int64_t dv = dv_, qk = dn + dr, rkv = rank_, lat = rkv + dr;
  const int64_t head_rows = dn + dv;
  const int64_t chunks = (nh + kLanes - 1) / kLanes;
  const int64_t n = s.num_tokens;
  const int threads = pool.num_threads();
  // 1. Queries through W_UK (the absorbed nope part) next to the rope part, scaled, transposed
  //    so that heads are lanes; padding lanes stay zero.
  Grow(q_t_, n * chunks * lat * kLanes);
  std::fill(q_t_.begin(), q_t_.begin() + n * chunks * lat * kLanes, 0.0f);
  const float scale = softmax_scale_;
  pool.ParallelFor(n * nh, [&](int64_t begin, int64_t end, int thread) {
    float* qabs = thread_scratch_.data() + thread * thread_stride_;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t i = item / nh, h = item % nh;
      const float* q = q_all + ((s.token_offset + i) * nh + h) * qk;
      const float* wk = w.kv_b_f32.data() + h * head_rows * rkv;
      std::fill(qabs, qabs + rkv, 0.0f);
      for (int64_t d = 0; d < dn; ++d) kernels::Axpy(q[d], wk + d * rkv, qabs, rkv);
      std::memcpy(qabs + rkv, q + dn, dr * sizeof(float));
      float* dst = q_t_.data() + (i * chunks + h / kLanes) * lat * kLanes + h % kLanes;
      for (int64_t d = 0; d < lat; ++d) dst[d * kLanes] = qabs[d] * scale;
    }
  });
  // 2. Items: (token, head chunk, part of the positions). Parts are fixed runs of positions, so
  //    the threads share even one decode token and the arithmetic does not depend on the rest
  //    of the batch (batch invariance).
  constexpr int32_t kPositionsPerPart = 256;
  items_.clear();
  first_.clear();
  int32_t num_partials = 0;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t ctx = s.start_pos + i + 1;
    const int32_t parts = (ctx + kPositionsPerPart - 1) / kPositionsPerPart;
    for (int32_t c = 0; c < chunks; ++c) {
      first_.push_back(num_partials);
      for (int32_t p = 0; p < parts; ++p) {
        items_.push_back({i, c, p * kPositionsPerPart, std::min(ctx, (p + 1) * kPositionsPerPart),
                          num_partials, parts});
        ++num_partials;
      }
    }
  }
  Grow(o_, int64_t{num_partials} * rkv * kLanes);
  Grow(ml_, int64_t{num_partials} * 2 * kLanes);
  Grow(scratch_, int64_t{threads} * kernels::MlaScratchFloats());
  const kernels::MlaKv mla_kv{kv.layers[layer], s.block_table, kv.block_size, static_cast<int>(lat),
                              static_cast<int>(rkv)};
  auto partial = [&](int32_t slot) {
    return kernels::AttentionPartial{o_.data() + int64_t{slot} * rkv * kLanes,
                                     ml_.data() + int64_t{slot} * kLanes,
                                     ml_.data() + (int64_t{num_partials} + slot) * kLanes};
  };
  pool.ParallelFor(
      static_cast<int64_t>(items_.size()), [&](int64_t begin, int64_t end, int thread) {
        for (int64_t k = begin; k < end; ++k) {
          const Item& it = items_[k];
          const float* q_t = q_t_.data() + (int64_t{it.token} * chunks + it.chunk) * lat * kLanes;
          kernels::MlaAttendRange(mla_kv, q_t, it.pos_begin, it.pos_end,
                                  scratch_.data() + thread * kernels::MlaScratchFloats(),
                                  partial(static_cast<int32_t>(k)));
        }
      });
  // 3. Merge the parts of every (token, chunk), then each head's latent through W_UV.
  Grow(lat_, n * chunks * rkv * kLanes);
  pool.ParallelFor(n * chunks, [&](int64_t begin, int64_t end, int) {
    for (int64_t tc = begin; tc < end; ++tc) {
      const int32_t first = first_[tc];
      kernels::MlaFinish(static_cast<int>(rkv), partial(first), items_[first].num_parts,
                         lat_.data() + tc * rkv * kLanes);
    }
  });
  pool.ParallelFor(n * nh, [&](int64_t begin, int64_t end, int thread) {
    float* olat = thread_scratch_.data() + thread * thread_stride_;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t i = item / nh, h = item % nh;
      const float* src = lat_.data() + (i * chunks + h / kLanes) * rkv * kLanes + h % kLanes;
      for (int64_t d = 0; d < rkv; ++d) olat[d] = src[d * kLanes];
      const float* wv = w.kv_b_f32.data() + h * head_rows * rkv + dn * rkv;
      float* out = out_all + ((s.token_offset + i) * nh + h) * dv;
      for (int64_t d = 0; d < dv; ++d) out[d] = kernels::Dot(wv + d * rkv, olat, rkv);
    }
  });
}

void MlaAttention::AttendExpanded(const MlaWeights& w, const SequenceSlice& s, KvCache& kv,
                                  int layer, const float* q_all, float* out_all,
                                  util::ThreadPool& pool) {
  const int64_t nh = nh_, dn = dn_, dr = rope_;
  const int64_t dv = dv_, qk = dn + dr, rkv = rank_;
  const int64_t head_rows = dn + dv;
  const int64_t ctx = s.start_pos + s.num_tokens;
  Grow(ctx_lat_, ctx * rkv);
  Grow(ctx_kv_, ctx * nh * head_rows);
  for (int64_t j = 0; j < ctx; ++j) {
    const float* slot = kv.Slot(layer, s.block_table[j / kv.block_size], j % kv.block_size);
    std::memcpy(ctx_lat_.data() + j * rkv, slot, rkv * sizeof(float));
  }
  // [ctx, heads * (k_nope | v)]
  kernels::MatMul(*w.kv_b, ctx_lat_.data(), ctx, ctx_kv_.data(), pool);
  const float scale = softmax_scale_;
  pool.ParallelFor(int64_t{s.num_tokens} * nh, [&](int64_t begin, int64_t end, int thread) {
    float* scores = thread_scratch_.data() + thread * thread_stride_;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t i = item / nh, h = item % nh;
      const int64_t t = s.token_offset + i;
      const int32_t pos = s.start_pos + static_cast<int32_t>(i);
      const float* q = q_all + (t * nh + h) * qk;
      for (int32_t j = 0; j <= pos; ++j) {
        const float* slot = kv.Slot(layer, s.block_table[j / kv.block_size], j % kv.block_size);
        const float* k_nope = ctx_kv_.data() + (j * nh + h) * head_rows;
        scores[j] = (kernels::Dot(q, k_nope, dn) + kernels::Dot(q + dn, slot + rkv, dr)) * scale;
      }
      kernels::SoftmaxInPlace(scores, pos + 1);
      float* out = out_all + (t * nh + h) * dv;
      std::fill(out, out + dv, 0.0f);
      for (int32_t j = 0; j <= pos; ++j) {
        kernels::Axpy(scores[j], ctx_kv_.data() + (j * nh + h) * head_rows + dn, out, dv);
      }
    }
  });
}

}  // namespace deepinfer::arch
