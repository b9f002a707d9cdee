// DeepSeek-V4.1's CSA2 attention block (deepseek_v41_attention.h).

#include "arch/deepseek_v41_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "arch/deepseek_v4_ops.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "util/status.h"

namespace deepinfer::arch::dsv4 {
namespace {

using tensor::TensorView;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

bool Contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

absl::StatusOr<Csa2Layer> LoadCsa2Layer(TensorSchema& schema, const std::string& prefix,
                                        const model::ModelConfig& cfg,
                                        const model::DeepseekV4Config& ds, int l, bool stage) {
  const std::string a = prefix + "attn.";
  const int64_t H = cfg.hidden, hd = cfg.head_dim;
  const int64_t ih = ds.index_n_heads, ihd = ds.index_head_dim;
  Csa2Layer L;
  if (!stage) {  // DSpark stages: window only, no sources
    L.ratio = ds.compress_ratio[l];
    L.kv_source = Contains(ds.kv_source_layer_ids, l);
    L.index_source = Contains(ds.index_source_layer_ids, l);
    L.candidate_source = l == ds.candidate_source_layer_id;
    L.uses_candidates = ds.candidate_source_layer_id >= 0 && ds.candidate_source_layer_id < l;
  }
  L.window_floats = hd;
  if (L.kv_source) {
    DI_ASSIGN_OR_RETURN(L.c_wkv, schema.Mat(a + "compressor.wkv.weight", hd, H));
    if (L.ratio > 1) {
      DI_ASSIGN_OR_RETURN(L.c_wgate, schema.Mat(a + "compressor.wgate.weight", hd, H));
      L.off_a = hd;
      L.off_z = 2 * hd;
      L.window_floats = 3 * hd;
    }
    DI_ASSIGN_OR_RETURN(L.c_norm, schema.Vec(a + "compressor.norm.weight", {hd}));
    DI_ASSIGN_OR_RETURN(L.i_wk, schema.Mat(a + "indexer.wk.weight", ihd, hd));
    DI_ASSIGN_OR_RETURN(L.k_norm, schema.Vec(a + "indexer.k_norm.weight", {ihd}));
    L.entry_floats = hd + ihd;
  }
  if (L.index_source) {
    DI_ASSIGN_OR_RETURN(L.i_wq_b, schema.Mat(a + "indexer.wq_b.weight", ih * ihd, ds.q_lora_rank));
    DI_ASSIGN_OR_RETURN(L.i_weights, schema.Mat(a + "indexer.weights_proj.weight", ih, H));
  }
  return L;
}

void Csa2Attention::BindCache(int num_layers, absl::FunctionRef<const Csa2Layer&(int)> layer,
                              const KvCache& kv) {
  entries_.assign(static_cast<size_t>(num_layers), EntryCache{});
  for (int l = 0; l < num_layers; ++l) {
    const Csa2Layer& L = layer(l);
    DI_CHECK(kv.window->layer_floats[l] == L.window_floats);
    if (L.kv_source) entries_[l] = EntryCache::Bind(kv, l, L.ratio, L.entry_floats);
  }
}

int64_t Csa2Attention::WindowKeys(KvCache& kv, const SequenceSlice& s, int l, int32_t p,
                                  const float** keys) const {
  int64_t n = 0;
  for (int32_t j = std::max(0, p - ds_->sliding_window + 1); j <= p; ++j) {
    keys[n++] = WindowSlot(kv, s, l, j);
  }
  return n;
}

// A KV source: the groups its slices' tokens complete become compressed entries and index keys.
// latent_j = norm(sum over the group's tokens of softmax_t(z_t) * a_t) at ratio 2 (per channel,
// fp32), norm(wkv x_t) at ratio 1; index key = fp4(RoPE(k_norm(wk latent_j), r j)); entry =
// fp4e4m3(RoPE(latent_j, r j)); both in the slot of the group's last token.
void Csa2Attention::Compress(const Csa2Layer& L, int l, const ForwardBatch& batch,
                             const RopeTables& rope, const float* h, bool qat, KvCache& kv,
                             util::ThreadPool& pool) {
  const model::ModelConfig& cfg = *cfg_;
  const int64_t T = batch.num_tokens, hd = cfg.head_dim, ihd = ds_->index_head_dim;
  const int r = L.ratio, half = cfg.rope_dim / 2;
  auto slot = [&](const SequenceSlice& s, int32_t pos) { return WindowSlot(kv, s, l, pos); };
  Grow(ca_, T * hd);
  if (r > 1) {
    Grow(cz_, T * hd);
    const TensorView* ws[2] = {L.c_wkv, L.c_wgate};
    float* ys[2] = {ca_.data(), cz_.data()};
    kernels::MatMulGroup(ws, ys, 2, h, T, pool);
  } else {
    kernels::MatMul(*L.c_wkv, h, T, ca_.data(), pool);
  }
  // The latents of every group completed here, in batch order.
  Grow(latent_, T * hd);
  auto& groups = groups_;  // (slice, closing position)
  groups.clear();
  for (const auto& s : batch.seqs) {
    for (int32_t i = 0; i < s.num_tokens; ++i) {
      const int32_t p = s.start_pos + i;
      const int64_t t = s.token_offset + i;
      if (r > 1) {
        float* sl = slot(s, p);
        std::memcpy(sl + L.off_a, ca_.data() + t * hd, hd * sizeof(float));
        std::memcpy(sl + L.off_z, cz_.data() + t * hd, hd * sizeof(float));
      }
      if ((p + 1) % r != 0) continue;
      float* lat = latent_.data() + static_cast<int64_t>(groups.size()) * hd;
      if (r == 1) {
        std::memcpy(lat, ca_.data() + t * hd, hd * sizeof(float));
      } else {
        const int32_t first = p + 1 - r;
        for (int64_t d = 0; d < hd; ++d) {
          float mx = kNegInf;
          for (int32_t u = first; u <= p; ++u) mx = std::max(mx, slot(s, u)[L.off_z + d]);
          float den = 0;
          for (int32_t u = first; u <= p; ++u) den += std::exp(slot(s, u)[L.off_z + d] - mx);
          float acc = 0;
          for (int32_t u = first; u <= p; ++u) {
            const float* su = slot(s, u);
            acc += su[L.off_a + d] * (std::exp(su[L.off_z + d] - mx) / den);
          }
          lat[d] = acc;
        }
      }
      groups.emplace_back(&s, p);
    }
  }
  const int64_t G = static_cast<int64_t>(groups.size());
  if (G == 0) return;
  kernels::RmsNorm(latent_.data(), L.c_norm.data(), G, hd, cfg.rms_norm_eps, latent_.data());
  Grow(ikey_, G * ihd);
  kernels::MatMul(*L.i_wk, latent_.data(), G, ikey_.data(), pool);
  kernels::RmsNorm(ikey_.data(), L.k_norm.data(), G, ihd, cfg.rms_norm_eps, ikey_.data());
  Grow(cs_, int64_t{2} * half);
  for (int64_t g = 0; g < G; ++g) {
    const auto [s, p] = groups[g];
    rope.CompressedAt(p + 1 - r, cs_.data(), cs_.data() + half);
    float* entry = entries_[l].Entry(kv, *s, (p + 1) / r - 1);
    float* key = entry + hd;
    std::memcpy(key, ikey_.data() + g * ihd, ihd * sizeof(float));
    RopeInterleaved(key + ihd - cfg.rope_dim, cs_.data(), cs_.data() + half, half, false);
    if (qat && ihd % 32 == 0) FakeQuantFp4(key, ihd, 32);
    if (PackedIndexKeys(qat, ihd)) {
      kernels::PackFp4IndexKey(key, static_cast<int>(ihd), reinterpret_cast<uint8_t*>(key));
    }
    std::memcpy(entry, latent_.data() + g * hd, hd * sizeof(float));
    RopeInterleaved(entry + hd - cfg.rope_dim, cs_.data(), cs_.data() + half, half, false);
    if (qat && hd % 16 == 0) FakeQuantFp4E4M3Scale(entry, hd, 16);
  }
}

// An index source: for every token, the index_topk entries of its KV source it attends (all it
// sees when fewer), scored sum_h w_h relu(q_h . k_j) / sqrt(index_head_dim) with its own queries;
// the candidate source first keeps candidate_topk_blocks blocks (block score = max, the block of
// the newest visible entry pinned) for later index sources, which score only inside them.
void Csa2Attention::Select(const Csa2Layer& L, const ForwardBatch& batch,
                           const int32_t* positions, const RopeTables& rope, const float* h,
                           bool qat, KvCache& kv, util::ThreadPool& pool) {
  const model::DeepseekV4Config& ds = *ds_;
  const int64_t T = batch.num_tokens, ih = ds.index_n_heads, ihd = ds.index_head_dim;
  const int64_t K = ds.index_topk, bs = ds.candidate_block_size;
  indexer_.Queries(*L.i_wq_b, *L.i_weights, attn_.qr(), h, T, ih, ihd, cfg_->rope_dim,
                   rope.cos_comp.data(), rope.sin_comp.data(),
                   [&](float* q) {
                     if (qat && ihd % 32 == 0) FakeQuantFp4(q, ihd, 32);
                   },
                   pool);
  Grow(selected_, T * K);
  std::fill(selected_.begin(), selected_.begin() + T * K, -1);
  int64_t max_visible = 0;
  for (const auto& s : batch.seqs) {
    max_visible = std::max<int64_t>(max_visible, (s.start_pos + s.num_tokens) / L.ratio);
  }
  if (L.candidate_source) {
    candidate_stride_ = (max_visible + bs - 1) / bs;
    Grow(candidates_, T * std::max<int64_t>(candidate_stride_, 1));
    std::fill(candidates_.begin(), candidates_.end(), 0);
  }
  for (const auto& s : batch.seqs) {
    const int64_t V = (s.start_pos + s.num_tokens) / L.ratio;
    if (V == 0) continue;
    // Per thread: V entry scores, then (candidate source) the block scores after them.
    const int64_t scratch = V + (V + bs - 1) / bs + 1;
    indexer_.Score(
        s, V, ih, ihd, PackedIndexKeys(qat, ihd), L.ratio, /*first=*/0, /*min_visible=*/0, scratch,
        positions,
        [&](int64_t j) { return entries_[L.kv_src].IndexKeys(kv, s, j, cfg_->head_dim); },
        [&](int64_t t, int64_t j) {
          // A source inside the candidates reads only their scores.
          return !L.uses_candidates || candidates_[t * candidate_stride_ + j / bs] != 0;
        },
        [&](int64_t t, int32_t visible, float* score, int32_t* order) {
          if (L.candidate_source) {
            // Blocks of bs entries, score = max; the newest block pinned; keep the best.
            const int32_t nb = static_cast<int32_t>((visible + bs - 1) / bs);
            float* bscore = score + V;
            for (int32_t b = 0; b < nb; ++b) {
              float m = kNegInf;
              for (int64_t j = b * bs; j < std::min<int64_t>(visible, (b + 1) * bs); ++j) {
                m = std::max(m, score[j]);
              }
              bscore[b] = b == nb - 1 ? std::numeric_limits<float>::infinity() : m;
              order[b] = b;
            }
            const int32_t keep =
                static_cast<int32_t>(std::min<int64_t>(ds.candidate_topk_blocks, nb));
            SortTopK(bscore, order, nb, keep);
            uint8_t* cand = candidates_.data() + t * candidate_stride_;
            for (int32_t b = 0; b < keep; ++b) cand[order[b]] = 1;
          }
          int32_t m = 0;
          for (int32_t j = 0; j < visible; ++j) {
            if (L.uses_candidates && !candidates_[t * candidate_stride_ + j / bs]) continue;
            order[m++] = j;
          }
          const int32_t keep = static_cast<int32_t>(std::min<int64_t>(K, m));
          SortTopK(score, order, m, keep);
          std::copy(order, order + keep, selected_.data() + t * K);
        },
        pool);
  }
}

void Csa2Attention::WindowKv(const AttentionLayer& w, const float* in, int64_t T,
                             const float* cosv, const float* sinv, bool qat,
                             util::ThreadPool& pool) {
  const int64_t hd = cfg_->head_dim;
  attn_.WindowKv(*w.wkv, w.kv_norm, in, T, cfg_->rope_dim, cfg_->rms_norm_eps, cosv, sinv,
                 [&](float* k) {
                   if (qat && hd % 32 == 0) FakeQuantFp8(k, hd, 32, 1e-4f);
                 },
                 pool);
}

void Csa2Attention::Run(const AttentionLayer& w, const Csa2Layer& L, int l,
                        const ForwardBatch& batch, const int32_t* positions,
                        const RopeTables& rope, const float* h, bool qat, KvCache& kv,
                        float* out, util::ThreadPool& pool) {
  const model::ModelConfig& cfg = *cfg_;
  const int64_t T = batch.num_tokens, hd = cfg.head_dim;
  const float* cosv = L.ratio > 0 ? rope.cos_comp.data() : rope.cos_main.data();
  const float* sinv = L.ratio > 0 ? rope.sin_comp.data() : rope.sin_main.data();
  attn_.Queries(w, h, T, cfg.num_heads, hd, cfg.rope_dim, cfg.rms_norm_eps,
                /*head_norm=*/false, cosv, sinv, pool);
  WindowKv(w, h, T, cosv, sinv, qat, pool);
  for (const auto& s : batch.seqs) {
    for (int32_t i = 0; i < s.num_tokens; ++i) {
      const int32_t pos = s.start_pos + i;
      std::memcpy(WindowSlot(kv, s, l, pos), attn_.kv() + (s.token_offset + i) * hd,
                  hd * sizeof(float));
    }
  }
  if (L.kv_source) Compress(L, l, batch, rope, h, qat, kv, pool);
  if (L.index_source) Select(L, batch, positions, rope, h, qat, kv, pool);

  // Every token over its window and the selected entries of its KV source.
  const int64_t K = ds_->index_topk;
  Grow(token_seq_, T);
  for (size_t si = 0; si < batch.seqs.size(); ++si) {
    const auto& s = batch.seqs[si];
    for (int32_t i = 0; i < s.num_tokens; ++i)
      token_seq_[s.token_offset + i] = static_cast<int32_t>(si);
  }
  const int64_t max_keys = ds_->sliding_window + (L.ratio > 0 ? K : 0);
  attn_.Attend(w, T, cfg.num_heads, hd, cfg.rope_dim, ds_->o_groups, ds_->o_lora_rank, max_keys,
               cosv, sinv, out, pool, [&](int64_t t, const float** keys) {
                 const SequenceSlice& s = batch.seqs[token_seq_[t]];
                 int64_t n = WindowKeys(kv, s, l, positions[t], keys);
                 if (L.ratio > 0) {
                   const int32_t* sel = selected_.data() + t * K;
                   for (int64_t k = 0; k < K && sel[k] >= 0; ++k) {
                     keys[n++] = entries_[L.kv_src].Entry(kv, s, sel[k]);
                   }
                 }
                 return n;
               });
}

void Csa2Attention::StoreWindowKv(const AttentionLayer& w, int l, const ForwardBatch& batch,
                                  const float* in, const RopeTables& rope, bool qat,
                                  KvCache& kv, util::ThreadPool& pool) {
  const int64_t hd = cfg_->head_dim;
  WindowKv(w, in, batch.num_tokens, rope.cos_main.data(), rope.sin_main.data(), qat, pool);
  for (const auto& s : batch.seqs) {
    for (int32_t i = 0; i < s.num_tokens; ++i) {
      std::memcpy(WindowSlot(kv, s, l, s.start_pos + i), attn_.kv() + (s.token_offset + i) * hd,
                  hd * sizeof(float));
    }
  }
}

void Csa2Attention::BlockAttention(const AttentionLayer& w, int l, const ForwardBatch& batch,
                                   int64_t B, const RopeTables& rope, const float* h, bool qat,
                                   KvCache& kv, float* out, util::ThreadPool& pool) {
  const model::ModelConfig& cfg = *cfg_;
  const int64_t n = static_cast<int64_t>(batch.seqs.size()), T = n * B;
  const int64_t hd = cfg.head_dim;
  const float* cosv = rope.cos_main.data();
  const float* sinv = rope.sin_main.data();
  attn_.Queries(w, h, T, cfg.num_heads, hd, cfg.rope_dim, cfg.rms_norm_eps,
                /*head_norm=*/false, cosv, sinv, pool);
  WindowKv(w, h, T, cosv, sinv, qat, pool);
  const float* block_kv = attn_.kv();
  attn_.Attend(w, T, cfg.num_heads, hd, cfg.rope_dim, ds_->o_groups, ds_->o_lora_rank,
               ds_->sliding_window + B, cosv, sinv, out, pool,
               [&](int64_t t, const float** keys) {
                 const int64_t i = t / B;
                 const SequenceSlice& s = batch.seqs[i];
                 // The window up to the newest position it holds, then the block.
                 int64_t m = WindowKeys(kv, s, l, s.start_pos - 1, keys);
                 for (int64_t r = 0; r < B; ++r) keys[m++] = block_kv + (i * B + r) * hd;
                 return m;
               });
}

}  // namespace deepinfer::arch::dsv4
