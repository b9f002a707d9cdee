// Llama-architecture forward pass (llama2.c checkpoints and GGUF "llama" models) over a paged
// KV cache. One call handles any mix of prefill chunks and decode tokens from many sequences;
// every matmul runs once over all tokens of the step.

#include <algorithm>
#include <cmath>
#include <cstring>

#include "arch/llama.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "util/status.h"

namespace deepinfer::arch {
namespace {

using model::TensorView;

// Query tokens per attention work item: K/V rows are read once per tile.
constexpr int kAttentionTile = 16;

class LlamaLm final : public CausalLm {
 public:
  struct Layer {
    const float* attn_norm;
    const TensorView* wq;
    const TensorView* wk;
    const TensorView* wv;
    const TensorView* wo;
    const float* ffn_norm;
    const TensorView* w_gate;
    const TensorView* w_up;
    const TensorView* w_down;
  };

  LlamaLm(const model::Model& m) : model_(m), cfg_(m.config) {}

  absl::Status Init() {
    auto norm = [&](const std::string& name) -> absl::StatusOr<const float*> {
      DI_ASSIGN_OR_RETURN(const TensorView* t, model_.Get(name));
      if (t->num_elements() != cfg_.hidden) {
        return InvalidArgumentError("shape_mismatch", name + " has the wrong size");
      }
      if (t->dtype == model::DType::kF32) return reinterpret_cast<const float*>(t->data);
      owned_norms_.emplace_back(cfg_.hidden);
      kernels::DequantizeRow(t->dtype, t->data, owned_norms_.back().data(), cfg_.hidden);
      return owned_norms_.back().data();
    };
    auto mat = [&](const std::string& name, int64_t rows, int64_t cols)
        -> absl::StatusOr<const TensorView*> {
      DI_ASSIGN_OR_RETURN(const TensorView* t, model_.Get(name));
      if (t->rows() != rows || t->cols() != cols) {
        return InvalidArgumentError("shape_mismatch", name + " has the wrong shape");
      }
      return t;
    };
    const int64_t h = cfg_.hidden, qd = int64_t{cfg_.num_heads} * cfg_.head_dim,
                  kvd = int64_t{cfg_.num_kv_heads} * cfg_.head_dim, f = cfg_.ffn_hidden;
    owned_norms_.reserve(2 * cfg_.num_layers + 1);
    for (int l = 0; l < cfg_.num_layers; ++l) {
      std::string p = "blk." + std::to_string(l) + ".";
      Layer L;
      DI_ASSIGN_OR_RETURN(L.attn_norm, norm(p + "attn_norm.weight"));
      DI_ASSIGN_OR_RETURN(L.wq, mat(p + "attn_q.weight", qd, h));
      DI_ASSIGN_OR_RETURN(L.wk, mat(p + "attn_k.weight", kvd, h));
      DI_ASSIGN_OR_RETURN(L.wv, mat(p + "attn_v.weight", kvd, h));
      DI_ASSIGN_OR_RETURN(L.wo, mat(p + "attn_output.weight", h, qd));
      DI_ASSIGN_OR_RETURN(L.ffn_norm, norm(p + "ffn_norm.weight"));
      DI_ASSIGN_OR_RETURN(L.w_gate, mat(p + "ffn_gate.weight", f, h));
      DI_ASSIGN_OR_RETURN(L.w_up, mat(p + "ffn_up.weight", f, h));
      DI_ASSIGN_OR_RETURN(L.w_down, mat(p + "ffn_down.weight", h, f));
      layers_.push_back(L);
    }
    DI_ASSIGN_OR_RETURN(output_norm_, norm("output_norm.weight"));
    DI_ASSIGN_OR_RETURN(embed_, mat("token_embd.weight", cfg_.vocab, h));
    const TensorView* out = model_.Find("output.weight");
    if (out == nullptr) out = embed_;
    if (out->rows() != cfg_.vocab || out->cols() != h) {
      return InvalidArgumentError("shape_mismatch", "output.weight has the wrong shape");
    }
    output_ = out;
    if (cfg_.num_heads % cfg_.num_kv_heads != 0 || cfg_.rope_dim > cfg_.head_dim ||
        cfg_.rope_dim % 2 != 0) {
      return InvalidArgumentError("bad_config", "inconsistent head or rope dimensions");
    }
    return absl::OkStatus();
  }

  const model::ModelConfig& config() const override { return cfg_; }
  int64_t kv_floats_per_token() const override {
    return 2 * int64_t{cfg_.num_kv_heads} * cfg_.head_dim;
  }

  void Forward(const ForwardBatch& batch, KvCache& kv, float* logits,
               util::ThreadPool& pool) override;

 private:
  void Attention(const ForwardBatch& batch, int layer, KvCache& kv, util::ThreadPool& pool);
  void Reserve(int64_t num_tokens, int64_t max_ctx, int num_threads);

  const model::Model& model_;
  model::ModelConfig cfg_;
  std::vector<Layer> layers_;
  std::vector<std::vector<float>> owned_norms_;
  const float* output_norm_ = nullptr;
  const TensorView* embed_ = nullptr;
  const TensorView* output_ = nullptr;

  // Scratch, grown on demand and reused across steps.
  std::vector<float> x_, h_, q_, k_, v_, attn_, tmp_, gate_, up_, cos_, sin_, scores_, rows_;
  std::vector<int32_t> positions_, token_seq_;
  std::vector<std::pair<int32_t, int32_t>> tiles_;  // (slice, first token) per attention tile
};

void LlamaLm::Reserve(int64_t t, int64_t max_ctx, int num_threads) {
  auto grow = [](std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  };
  const int64_t h = cfg_.hidden, qd = int64_t{cfg_.num_heads} * cfg_.head_dim,
                kvd = int64_t{cfg_.num_kv_heads} * cfg_.head_dim;
  grow(x_, t * h);
  grow(h_, t * h);
  grow(q_, t * qd);
  grow(k_, t * kvd);
  grow(v_, t * kvd);
  grow(attn_, t * qd);
  grow(tmp_, t * std::max(h, qd));
  grow(gate_, t * cfg_.ffn_hidden);
  grow(up_, t * cfg_.ffn_hidden);
  grow(cos_, t * (cfg_.rope_dim / 2));
  grow(sin_, t * (cfg_.rope_dim / 2));
  grow(scores_, int64_t{num_threads} * max_ctx * kAttentionTile * (cfg_.num_heads / cfg_.num_kv_heads));
  if (static_cast<int64_t>(positions_.size()) < t) {
    positions_.resize(t);
    token_seq_.resize(t);
  }
}

void LlamaLm::Forward(const ForwardBatch& batch, KvCache& kv, float* logits,
                      util::ThreadPool& pool) {
  const int64_t T = batch.num_tokens;
  const int64_t H = cfg_.hidden, kvd = int64_t{cfg_.num_kv_heads} * cfg_.head_dim;
  int64_t max_ctx = 0;
  for (const auto& s : batch.seqs) max_ctx = std::max<int64_t>(max_ctx, s.start_pos + s.num_tokens);
  Reserve(T, max_ctx, pool.num_threads());
  for (int32_t si = 0; si < static_cast<int32_t>(batch.seqs.size()); ++si) {
    const auto& s = batch.seqs[si];
    for (int32_t i = 0; i < s.num_tokens; ++i) {
      positions_[s.token_offset + i] = s.start_pos + i;
      token_seq_[s.token_offset + i] = si;
    }
  }
  float* x = x_.data();
  float* h = h_.data();
  kernels::EmbeddingLookup(*embed_, batch.tokens, T, x);
  kernels::RopeTables(positions_.data(), T, cfg_.rope_dim, cfg_.rope_theta, cos_.data(),
                      sin_.data());

  for (int l = 0; l < cfg_.num_layers; ++l) {
    const Layer& L = layers_[l];
    kernels::RmsNorm(x, L.attn_norm, T, H, cfg_.rms_norm_eps, h);
    {
      const TensorView* ws[3] = {L.wq, L.wk, L.wv};
      float* ys[3] = {q_.data(), k_.data(), v_.data()};
      kernels::MatMulGroup(ws, ys, 3, h, T, pool);
    }
    kernels::ApplyRope(q_.data(), T, cfg_.num_heads, cfg_.head_dim, cfg_.rope_dim,
                       cfg_.rope_style, cos_.data(), sin_.data());
    kernels::ApplyRope(k_.data(), T, cfg_.num_kv_heads, cfg_.head_dim, cfg_.rope_dim,
                       cfg_.rope_style, cos_.data(), sin_.data());
    // Append this step's K and V to each sequence's blocks before attending, so a token sees
    // itself and the earlier tokens of its own chunk.
    for (const auto& s : batch.seqs) {
      for (int32_t i = 0; i < s.num_tokens; ++i) {
        int32_t pos = s.start_pos + i;
        float* slot = kv.Slot(l, s.block_table[pos / kv.block_size], pos % kv.block_size);
        int64_t t = s.token_offset + i;
        std::memcpy(slot, k_.data() + t * kvd, kvd * sizeof(float));
        std::memcpy(slot + kvd, v_.data() + t * kvd, kvd * sizeof(float));
      }
    }
    Attention(batch, l, kv, pool);
    kernels::MatMul(*L.wo, attn_.data(), T, tmp_.data(), pool);
    kernels::AddInPlace(x, tmp_.data(), T * H);

    kernels::RmsNorm(x, L.ffn_norm, T, H, cfg_.rms_norm_eps, h);
    {
      const TensorView* ws[2] = {L.w_gate, L.w_up};
      float* ys[2] = {gate_.data(), up_.data()};
      kernels::MatMulGroup(ws, ys, 2, h, T, pool);
    }
    kernels::SiluMul(gate_.data(), up_.data(), T * cfg_.ffn_hidden, gate_.data());
    kernels::MatMul(*L.w_down, gate_.data(), T, tmp_.data(), pool);
    kernels::AddInPlace(x, tmp_.data(), T * H);
  }

  // Only the rows that need logits go through the final norm and the (large) output matmul.
  int32_t num_rows = batch.num_logit_rows();
  if (num_rows == 0) return;
  if (static_cast<int64_t>(rows_.size()) < int64_t{num_rows} * H) rows_.resize(int64_t{num_rows} * H);
  int32_t r = 0;
  for (const auto& s : batch.seqs) {
    for (int32_t i = s.num_tokens - s.num_logits; i < s.num_tokens; ++i) {
      std::memcpy(rows_.data() + int64_t{r} * H, x + (s.token_offset + i) * H, H * sizeof(float));
      ++r;
    }
  }
  kernels::RmsNorm(rows_.data(), output_norm_, num_rows, H, cfg_.rms_norm_eps, rows_.data());
  kernels::MatMul(*output_, rows_.data(), num_rows, logits, pool);
}

void LlamaLm::Attention(const ForwardBatch& batch, int layer, KvCache& kv,
                        util::ThreadPool& pool) {
  const int num_heads = cfg_.num_heads, head_dim = cfg_.head_dim;
  const int num_kv_heads = cfg_.num_kv_heads, group = num_heads / num_kv_heads;
  const int64_t kvd = int64_t{num_kv_heads} * head_dim;
  const int64_t token_stride = int64_t{num_heads} * head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int64_t per_thread = scores_.size() / pool.num_threads();
  // Work items: (slice, query tile of up to kAttentionTile tokens, KV head).
  tiles_.clear();
  for (int32_t si = 0; si < static_cast<int32_t>(batch.seqs.size()); ++si) {
    for (int32_t i = 0; i < batch.seqs[si].num_tokens; i += kAttentionTile) tiles_.push_back({si, i});
  }
  // Few tiles (decode): one item per query head balances the threads better than one per KV
  // group, at the cost of reading each K/V row once per head instead of once per group.
  const int heads_per_item =
      static_cast<int64_t>(tiles_.size()) * num_kv_heads >= 4 * pool.num_threads() ? group : 1;
  const int items_per_tile = num_heads / heads_per_item;
  pool.ParallelFor(static_cast<int64_t>(tiles_.size()) * items_per_tile,
                   [&](int64_t begin, int64_t end, int thread) {
    float* scores = scores_.data() + thread * per_thread;
    for (int64_t item = begin; item < end; ++item) {
      const auto [si, first] = tiles_[item / items_per_tile];
      const int head0 = static_cast<int>(item % items_per_tile) * heads_per_item;
      const int g = head0 / group;  // KV head
      const SequenceSlice& s = batch.seqs[si];
      const int n = std::min(kAttentionTile, s.num_tokens - first);
      const int64_t offset = (int64_t{s.token_offset} + first) * token_stride + int64_t{head0} * head_dim;
      kernels::AttendTile(q_.data() + offset, token_stride, n, s.start_pos + first, heads_per_item,
                          head_dim, scale, kv.layers[layer], s.block_table, kv.block_size,
                          kv.floats_per_token, int64_t{g} * head_dim, kvd + int64_t{g} * head_dim,
                          scores, attn_.data() + offset);
    }
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<CausalLm>> CreateLlama(const model::Model& model) {
  auto lm = std::make_unique<LlamaLm>(model);
  DI_RETURN_IF_ERROR(lm->Init());
  return std::unique_ptr<CausalLm>(std::move(lm));
}


}  // namespace deepinfer::arch
