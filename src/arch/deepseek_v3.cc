// DeepSeek-V3 / V2 forward pass (MLA + MoE) over a paged latent KV cache. One call handles any
// mix of prefill chunks and decode tokens from many sequences; projections run once over all
// tokens of the step, routed experts once over the tokens sent to each expert.

#include "arch/deepseek_v3.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "arch/mla_attention.h"
#include "arch/moe.h"
#include "arch/rope.h"
#include "arch/tensor_schema.h"
#include "fmt/format.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "model/tensor_values.h"
#include "util/aligned_vector.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::arch {
namespace {

using tensor::TensorView;

struct Mlp {
  const TensorView* gate = nullptr;
  const TensorView* up = nullptr;
  const TensorView* down = nullptr;
  int64_t inner = 0;
};

struct Layer {
  std::vector<float> attn_norm, ffn_norm, q_a_norm, kv_a_norm;
  const TensorView* q_a = nullptr;  // q LoRA path
  const TensorView* q_b = nullptr;
  const TensorView* q = nullptr;  // direct path
  const TensorView* kv_a = nullptr;
  MlaWeights kv_b;
  const TensorView* o = nullptr;
  bool moe = false;
  Mlp dense;
  const TensorView* router = nullptr;
  std::vector<float> router_bias;  // e_score_correction_bias; empty when absent
  std::vector<Mlp> experts;
  Mlp shared;
  // MTP module extras.
  std::vector<float> enorm, hnorm, head_norm;
  const TensorView* eh_proj = nullptr;
  const TensorView* head = nullptr;
};

class DeepseekImpl final : public DeepseekV3Lm {
 public:
  DeepseekImpl(const model::Model& m, ExpertExchange* experts)
      : model_(m), cfg_(m.config), ds_(*m.config.deepseek), schema_(m), mla_(m.config),
        experts_(experts) {
    moe_.set_exchange(experts);
  }

  absl::Status Init();

  const model::ModelConfig& config() const override { return cfg_; }
  int64_t kv_floats_per_token() const override { return mla_.kv_floats_per_token(); }
  void set_attention_mode(AttentionMode mode) override { mode_ = mode; }
  int num_mtp_layers() const override { return static_cast<int>(mtp_.size()); }

  void Forward(const ForwardBatch& batch, KvCache& kv, float* logits,
               util::ThreadPool& pool) override;
  void FinalHidden(float* out) const override;
  void ForwardMtp(int k, const ForwardBatch& batch, const float* prev_hidden, KvCache& mtp_kv,
                  float* logits, float* hidden_out, util::ThreadPool& pool) override;

 private:
  absl::StatusOr<std::vector<float>> Vec(const std::string& name, int64_t n) {
    return schema_.Vec(name, {n});
  }
  absl::StatusOr<const TensorView*> Mat(const std::string& name, int64_t rows, int64_t cols,
                                        bool read_values = true) {
    return schema_.Mat(name, rows, cols, read_values);
  }
  // read_values false: another expert-parallel rank's expert (shapes checked, pages untouched).
  absl::StatusOr<Mlp> LoadMlp(const std::string& prefix, int64_t inner, bool read_values = true);
  absl::StatusOr<Layer> LoadLayer(int l);
  void InitRope();

  void Prepare(const ForwardBatch& batch);
  void RunLayer(const Layer& L, int kv_layer, const ForwardBatch& batch, KvCache& kv,
                util::ThreadPool& pool);
  void Attention(const Layer& L, int kv_layer, const ForwardBatch& batch, KvCache& kv,
                 util::ThreadPool& pool);
  void RopeRow(float* x, int64_t t) const;
  void RunMlp(const Mlp& m, const float* in, int64_t n, float* out, util::ThreadPool& pool);
  void Moe(const Layer& L, int64_t T, util::ThreadPool& pool);
  void Route(const Layer& L, const float* logits, int32_t* idx, float* w);
  void Logits(const ForwardBatch& batch, const float* norm, const TensorView& head, float* logits,
              util::ThreadPool& pool);

  const model::Model& model_;
  model::ModelConfig cfg_;
  model::DeepseekConfig ds_;
  // The DeepSeek-V3 schema: types with a CPU kernel, values checked for NaN/Inf.
  TensorSchema schema_;
  MlaAttention mla_;
  ExpertExchange* experts_;  // null: every routed expert runs here
  AttentionMode mode_ = AttentionMode::kAuto;
  std::vector<Layer> layers_;
  std::vector<Layer> mtp_;
  std::vector<float> final_norm_;
  const TensorView* embed_ = nullptr;
  const TensorView* lm_head_ = nullptr;
  std::vector<float> inv_freq_;
  float rope_mscale_ = 1.0f;  // YaRN attention_factor on cos/sin

  // Scratch, grown on demand and reused across steps.
  int64_t last_tokens_ = 0;
  util::AlignedVector<float> x_, h_, qa_, q_, kva_, attn_, tmp_, gate_, up_, cos_, sin_, rows_;
  util::AlignedVector<float> router_logits_, moe_out_;
  util::AlignedVector<float> route_w_;
  std::vector<int32_t> positions_, token_seq_, route_idx_;
  MoeDispatch moe_;
  SwiGluExperts swiglu_;
  std::vector<SwiGluWeights> expert_weights_;
  util::AlignedVector<float> route_score_, route_choice_, route_gscore_;
  std::vector<int> route_order_;
  std::vector<char> route_keep_;
};

absl::StatusOr<Mlp> DeepseekImpl::LoadMlp(const std::string& p, int64_t inner, bool read_values) {
  Mlp m;
  m.inner = inner;
  DI_ASSIGN_OR_RETURN(m.gate, Mat(p + "gate_proj.weight", inner, cfg_.hidden, read_values));
  DI_ASSIGN_OR_RETURN(m.up, Mat(p + "up_proj.weight", inner, cfg_.hidden, read_values));
  DI_ASSIGN_OR_RETURN(m.down, Mat(p + "down_proj.weight", cfg_.hidden, inner, read_values));
  return m;
}

absl::StatusOr<Layer> DeepseekImpl::LoadLayer(int l) {
  const std::string p = fmt::format("model.layers.{}.", l);
  const std::string a = p + "self_attn.";
  const int64_t H = cfg_.hidden, nh = cfg_.num_heads;
  const int64_t qk = ds_.qk_nope_head_dim + ds_.qk_rope_head_dim;
  Layer L;
  DI_ASSIGN_OR_RETURN(L.attn_norm, Vec(p + "input_layernorm.weight", H));
  DI_ASSIGN_OR_RETURN(L.ffn_norm, Vec(p + "post_attention_layernorm.weight", H));
  if (ds_.q_lora_rank > 0) {
    DI_ASSIGN_OR_RETURN(L.q_a, Mat(a + "q_a_proj.weight", ds_.q_lora_rank, H));
    DI_ASSIGN_OR_RETURN(L.q_a_norm, Vec(a + "q_a_layernorm.weight", ds_.q_lora_rank));
    DI_ASSIGN_OR_RETURN(L.q_b, Mat(a + "q_b_proj.weight", nh * qk, ds_.q_lora_rank));
  } else {
    DI_ASSIGN_OR_RETURN(L.q, Mat(a + "q_proj.weight", nh * qk, H));
  }
  DI_ASSIGN_OR_RETURN(
      L.kv_a, Mat(a + "kv_a_proj_with_mqa.weight", ds_.kv_lora_rank + ds_.qk_rope_head_dim, H));
  DI_ASSIGN_OR_RETURN(L.kv_a_norm, Vec(a + "kv_a_layernorm.weight", ds_.kv_lora_rank));
  DI_ASSIGN_OR_RETURN(L.kv_b, LoadMlaWeights(schema_, a + "kv_b_proj.weight", cfg_));
  DI_ASSIGN_OR_RETURN(L.o, Mat(a + "o_proj.weight", H, nh * ds_.v_head_dim));
  const std::string f = p + "mlp.";
  L.moe = ds_.IsMoeLayer(l);
  if (!L.moe) {
    DI_ASSIGN_OR_RETURN(L.dense, LoadMlp(f, cfg_.ffn_hidden));
    return L;
  }
  DI_ASSIGN_OR_RETURN(L.router, Mat(f + "gate.weight", ds_.n_routed_experts, H));
  if (model_.Find(f + "gate.e_score_correction_bias") != nullptr) {
    DI_ASSIGN_OR_RETURN(L.router_bias,
                        Vec(f + "gate.e_score_correction_bias", ds_.n_routed_experts));
  } else if (ds_.topk_method == "noaux_tc") {
    return NotFoundError(util::codes::kMissingTensor,
                         f + "gate.e_score_correction_bias is required by "
                             "topk_method noaux_tc");
  }
  for (int e = 0; e < ds_.n_routed_experts; ++e) {
    const bool local = experts_ == nullptr || experts_->Owns(e, ds_.n_routed_experts);
    DI_ASSIGN_OR_RETURN(Mlp m, LoadMlp(fmt::format("{}experts.{}.", f, e),
                                       ds_.moe_intermediate_size, local));
    L.experts.push_back(m);
  }
  if (ds_.n_shared_experts > 0) {
    DI_ASSIGN_OR_RETURN(L.shared, LoadMlp(f + "shared_experts.", int64_t{ds_.n_shared_experts} *
                                                                     ds_.moe_intermediate_size));
  }
  return L;
}

// Inverse frequencies and scales exactly as transformers computes them (arch/rope.h), so
// positions far into the YaRN range still agree.
void DeepseekImpl::InitRope() {
  const RopeFrequencies f = ComputeRopeFrequencies(ds_.qk_rope_head_dim, cfg_.rope_theta, ds_.yarn);
  inv_freq_ = f.inv_freq;
  rope_mscale_ = f.attention_factor;
}

absl::Status DeepseekImpl::Init() {
  const int64_t H = cfg_.hidden;
  if (ds_.kv_lora_rank <= 0 || ds_.qk_rope_head_dim % 2 != 0 || ds_.v_head_dim <= 0 ||
      (ds_.n_routed_experts > 0 && ds_.num_experts_per_tok <= 0)) {
    return InvalidArgumentError(util::codes::kBadConfig, "inconsistent MLA or MoE dimensions");
  }
  DI_ASSIGN_OR_RETURN(embed_, Mat("model.embed_tokens.weight", cfg_.vocab, H));
  DI_ASSIGN_OR_RETURN(final_norm_, Vec("model.norm.weight", H));
  if (cfg_.tied_embeddings && model_.Find("lm_head.weight") == nullptr) {
    lm_head_ = embed_;  // checked above
  } else {
    DI_ASSIGN_OR_RETURN(lm_head_, Mat("lm_head.weight", cfg_.vocab, H));
  }
  for (int l = 0; l < cfg_.num_layers; ++l) {
    DI_ASSIGN_OR_RETURN(Layer L, LoadLayer(l));
    layers_.push_back(std::move(L));
  }
  for (int k = 0; k < ds_.num_nextn_predict_layers; ++k) {
    const int l = cfg_.num_layers + k;
    const std::string p = fmt::format("model.layers.{}.", l);
    if (model_.Find(p + "enorm.weight") == nullptr) break;
    DI_ASSIGN_OR_RETURN(Layer L, LoadLayer(l));
    DI_ASSIGN_OR_RETURN(L.enorm, Vec(p + "enorm.weight", H));
    DI_ASSIGN_OR_RETURN(L.hnorm, Vec(p + "hnorm.weight", H));
    DI_ASSIGN_OR_RETURN(L.head_norm, Vec(p + "shared_head.norm.weight", H));
    DI_ASSIGN_OR_RETURN(L.eh_proj, Mat(p + "eh_proj.weight", H, 2 * H));
    // The module's own copy of the embedding is not read (the main one serves), but a copy
    // that is there must match the config like every other tensor.
    if (model_.Find(p + "embed_tokens.weight") != nullptr) {
      DI_RETURN_IF_ERROR(Mat(p + "embed_tokens.weight", cfg_.vocab, H).status());
    }
    L.head = model_.Find(p + "shared_head.head.weight");
    if (L.head == nullptr) {
      L.head = lm_head_;
    } else {
      DI_ASSIGN_OR_RETURN(L.head, Mat(p + "shared_head.head.weight", cfg_.vocab, H));
    }
    mtp_.push_back(std::move(L));
  }
  InitRope();
  return absl::OkStatus();
}

void DeepseekImpl::Prepare(const ForwardBatch& batch) {
  auto grow = [](auto& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  };
  const int64_t T = batch.num_tokens, H = cfg_.hidden, nh = cfg_.num_heads;
  const int64_t qk = ds_.qk_nope_head_dim + ds_.qk_rope_head_dim;
  const int64_t lat = kv_floats_per_token();
  int64_t ffn = cfg_.ffn_hidden;
  if (ds_.n_routed_experts > 0) {
    ffn = std::max<int64_t>(ffn,
                            int64_t{std::max(1, ds_.n_shared_experts)} * ds_.moe_intermediate_size);
  }
  grow(x_, T * H);
  grow(h_, T * 2 * H);  // MTP concatenates two hidden vectors here
  grow(qa_, T * std::max(ds_.q_lora_rank, 1));
  grow(q_, T * nh * qk);
  grow(kva_, T * lat);
  grow(attn_, T * nh * ds_.v_head_dim);
  grow(tmp_, T * H);
  grow(gate_, T * ffn);
  grow(up_, T * ffn);
  grow(cos_, T * ds_.qk_rope_head_dim / 2);
  grow(sin_, T * ds_.qk_rope_head_dim / 2);
  grow(positions_, T);
  grow(token_seq_, T);
  BatchPositions(batch, positions_.data(), token_seq_.data());
  const int half = ds_.qk_rope_head_dim / 2;
  for (int64_t t = 0; t < T; ++t) {
    const float p = static_cast<float>(positions_[t]);
    for (int i = 0; i < half; ++i) {
      const float angle = p * inv_freq_[i];
      cos_[t * half + i] = static_cast<float>(std::cos(static_cast<double>(angle))) * rope_mscale_;
      sin_[t * half + i] = static_cast<float>(std::sin(static_cast<double>(angle))) * rope_mscale_;
    }
  }
  last_tokens_ = T;
}

// Rotates one rope slice of qk_rope_head_dim values of token t.
void DeepseekImpl::RopeRow(float* x, int64_t t) const {
  const int half = ds_.qk_rope_head_dim / 2;
  const float* c = cos_.data() + t * half;
  const float* s = sin_.data() + t * half;
  if (ds_.rope_interleave) {
    for (int i = 0; i < half; ++i) {
      const float a = x[2 * i], b = x[2 * i + 1];
      x[2 * i] = a * c[i] - b * s[i];
      x[2 * i + 1] = b * c[i] + a * s[i];
    }
  } else {
    for (int i = 0; i < half; ++i) {
      const float a = x[i], b = x[i + half];
      x[i] = a * c[i] - b * s[i];
      x[i + half] = b * c[i] + a * s[i];
    }
  }
}

void DeepseekImpl::Forward(const ForwardBatch& batch, KvCache& kv, float* logits,
                           util::ThreadPool& pool) {
  DI_CHECK(kv.floats_per_token == kv_floats_per_token() && kv.num_layers >= cfg_.num_layers);
  Prepare(batch);
  kernels::EmbeddingLookup(*embed_, batch.tokens, batch.num_tokens, x_.data());
  for (int l = 0; l < cfg_.num_layers; ++l) RunLayer(layers_[l], l, batch, kv, pool);
  Logits(batch, final_norm_.data(), *lm_head_, logits, pool);
}

void DeepseekImpl::FinalHidden(float* out) const {
  kernels::RmsNorm(x_.data(), final_norm_.data(), last_tokens_, cfg_.hidden, cfg_.rms_norm_eps,
                   out);
}

void DeepseekImpl::ForwardMtp(int k, const ForwardBatch& batch, const float* prev_hidden,
                              KvCache& mtp_kv, float* logits, float* hidden_out,
                              util::ThreadPool& pool) {
  DI_CHECK(k >= 0 && k < num_mtp_layers());
  DI_CHECK(mtp_kv.floats_per_token == kv_floats_per_token() && mtp_kv.num_layers > k);
  const Layer& L = mtp_[k];
  const int64_t T = batch.num_tokens, H = cfg_.hidden;
  Prepare(batch);
  kernels::EmbeddingLookup(*embed_, batch.tokens, T, tmp_.data());
  for (int64_t t = 0; t < T; ++t) {
    float* e = tmp_.data() + t * H;
    if (positions_[t] == 0) std::fill(e, e + H, 0.0f);
    kernels::RmsNorm(e, L.enorm.data(), 1, H, cfg_.rms_norm_eps, h_.data() + t * 2 * H);
    kernels::RmsNorm(prev_hidden + t * H, L.hnorm.data(), 1, H, cfg_.rms_norm_eps,
                     h_.data() + t * 2 * H + H);
  }
  kernels::MatMul(*L.eh_proj, h_.data(), T, x_.data(), pool);
  RunLayer(L, k, batch, mtp_kv, pool);
  if (hidden_out != nullptr) std::memcpy(hidden_out, x_.data(), T * H * sizeof(float));
  Logits(batch, L.head_norm.data(), *L.head, logits, pool);
}

void DeepseekImpl::Logits(const ForwardBatch& batch, const float* norm, const TensorView& head,
                          float* logits, util::ThreadPool& pool) {
  // Only the rows that need logits go through the final norm and the output matmul.
  const int64_t H = cfg_.hidden;
  const int32_t num_rows = batch.num_logit_rows();
  if (num_rows == 0) return;
  if (static_cast<int64_t>(rows_.size()) < int64_t{num_rows} * H) rows_.resize(num_rows * H);
  GatherLogitRows(batch, x_.data(), H, rows_.data());
  kernels::RmsNorm(rows_.data(), norm, num_rows, H, cfg_.rms_norm_eps, rows_.data());
  kernels::MatMul(head, rows_.data(), num_rows, logits, pool);
}

void DeepseekImpl::RunLayer(const Layer& L, int kv_layer, const ForwardBatch& batch, KvCache& kv,
                            util::ThreadPool& pool) {
  const int64_t T = batch.num_tokens, H = cfg_.hidden;
  float* x = x_.data();
  kernels::RmsNorm(x, L.attn_norm.data(), T, H, cfg_.rms_norm_eps, h_.data());
  Attention(L, kv_layer, batch, kv, pool);
  kernels::MatMul(*L.o, attn_.data(), T, tmp_.data(), pool);
  kernels::AddInPlace(x, tmp_.data(), T * H);

  kernels::RmsNorm(x, L.ffn_norm.data(), T, H, cfg_.rms_norm_eps, h_.data());
  if (L.moe) {
    Moe(L, T, pool);
  } else {
    RunMlp(L.dense, h_.data(), T, tmp_.data(), pool);
  }
  kernels::AddInPlace(x, tmp_.data(), T * H);
}

void DeepseekImpl::Attention(const Layer& L, int kv_layer, const ForwardBatch& batch, KvCache& kv,
                             util::ThreadPool& pool) {
  const int64_t T = batch.num_tokens, nh = cfg_.num_heads;
  const int64_t dn = ds_.qk_nope_head_dim, dr = ds_.qk_rope_head_dim, qk = dn + dr;
  const int64_t rkv = ds_.kv_lora_rank, lat = rkv + dr;
  if (L.q_a != nullptr) {
    kernels::MatMul(*L.q_a, h_.data(), T, qa_.data(), pool);
    kernels::RmsNorm(qa_.data(), L.q_a_norm.data(), T, ds_.q_lora_rank, cfg_.rms_norm_eps,
                     qa_.data());
    kernels::MatMul(*L.q_b, qa_.data(), T, q_.data(), pool);
  } else {
    kernels::MatMul(*L.q, h_.data(), T, q_.data(), pool);
  }
  kernels::MatMul(*L.kv_a, h_.data(), T, kva_.data(), pool);
  for (int64_t t = 0; t < T; ++t) {
    float* row = kva_.data() + t * lat;
    kernels::RmsNorm(row, L.kv_a_norm.data(), 1, rkv, cfg_.rms_norm_eps, row);
    RopeRow(row + rkv, t);
    for (int64_t h = 0; h < nh; ++h) RopeRow(q_.data() + (t * nh + h) * qk + dn, t);
  }
  // Append this step's latents before attending, so a token sees itself and the earlier tokens
  // of its own chunk.
  mla_.Store(batch, kv, kv_layer, kva_.data());
  mla_.Attend(L.kv_b, batch, kv, kv_layer, q_.data(), attn_.data(), mode_, pool);
}

void DeepseekImpl::RunMlp(const Mlp& m, const float* in, int64_t n, float* out,
                          util::ThreadPool& pool) {
  kernels::MatMul(*m.gate, in, n, gate_.data(), pool);
  kernels::MatMul(*m.up, in, n, up_.data(), pool);
  kernels::SiluMul(gate_.data(), up_.data(), n * m.inner, gate_.data());
  kernels::MatMul(*m.down, gate_.data(), n, out, pool);
}

// Picks num_experts_per_tok experts for one token and their weights.
// V3 (noaux_tc): sigmoid scores, the correction bias only for selection, group score = sum of
// the two best biased scores, other groups masked to -inf, weights = unbiased scores,
// renormalized (norm_topk_prob) then times routed_scaling_factor.
// V2 (greedy / group_limited_greedy): softmax scores, group score = max; weights renormalized
// when norm_topk_prob and k > 1 (DeepSeek-V2's own modeling code), else scaled.
void DeepseekImpl::Route(const Layer& L, const float* logits, int32_t* idx, float* w) {
  const int E = ds_.n_routed_experts, K = ds_.num_experts_per_tok;
  auto& score = route_score_;
  auto& choice = route_choice_;
  std::vector<int>& order = route_order_;
  score.resize(E);
  choice.resize(E);
  if (ds_.scoring_func == "softmax") {
    std::memcpy(score.data(), logits, E * sizeof(float));
    kernels::SoftmaxInPlace(score.data(), E);
  } else {
    for (int e = 0; e < E; ++e) score[e] = 1.0f / (1.0f + std::exp(-logits[e]));
  }
  for (int e = 0; e < E; ++e) {
    choice[e] = score[e] + (L.router_bias.empty() ? 0.0f : L.router_bias[e]);
  }
  const bool noaux = ds_.topk_method == "noaux_tc";
  if (ds_.n_group > 1 && ds_.topk_method != "greedy") {
    const int G = ds_.n_group, per = E / G;
    auto& gscore = route_gscore_;
    gscore.resize(G);
    for (int g = 0; g < G; ++g) {
      const float* c = choice.data() + g * per;
      if (noaux) {
        float a = -std::numeric_limits<float>::infinity(), b = a;
        for (int i = 0; i < per; ++i) {
          if (c[i] > a) {
            b = a;
            a = c[i];
          } else if (c[i] > b) {
            b = c[i];
          }
        }
        gscore[g] = a + b;
      } else {
        gscore[g] = *std::max_element(c, c + per);
      }
    }
    order.resize(G);
    for (int g = 0; g < G; ++g) order[g] = g;
    std::partial_sort(
        order.begin(), order.begin() + ds_.topk_group, order.end(),
        [&](int a, int b) { return gscore[a] > gscore[b] || (gscore[a] == gscore[b] && a < b); });
    std::vector<char>& keep = route_keep_;
    keep.assign(G, 0);
    for (int i = 0; i < ds_.topk_group; ++i) keep[order[i]] = 1;
    for (int e = 0; e < E; ++e) {
      if (!keep[e / per]) choice[e] = -std::numeric_limits<float>::infinity();
    }
  }
  order.resize(E);
  for (int e = 0; e < E; ++e) order[e] = e;
  std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int a, int b) {
    return choice[a] > choice[b] || (choice[a] == choice[b] && a < b);
  });
  float sum = 0;
  for (int i = 0; i < K; ++i) {
    idx[i] = order[i];
    w[i] = score[order[i]];
    sum += w[i];
  }
  const bool renorm = ds_.norm_topk_prob && (noaux || K > 1);
  for (int i = 0; i < K; ++i) {
    if (renorm) w[i] /= sum + 1e-20f;
    if (noaux || !renorm) w[i] *= ds_.routed_scaling_factor;
  }
}

void DeepseekImpl::Moe(const Layer& L, int64_t T, util::ThreadPool& pool) {
  const int64_t H = cfg_.hidden;
  const int E = ds_.n_routed_experts, K = ds_.num_experts_per_tok;
  auto grow = [](auto& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  };
  grow(router_logits_, T * E);
  grow(route_idx_, T * K);
  grow(route_w_, T * K);
  // Router in f32 on the normalized hidden state (HF keeps the gate in fp32).
  kernels::MatMul(*L.router, h_.data(), T, router_logits_.data(), pool);
  for (int64_t t = 0; t < T; ++t) {
    Route(L, router_logits_.data() + t * E, route_idx_.data() + t * K, route_w_.data() + t * K);
  }
  grow(moe_out_, T * H);
  moe_.Run(route_idx_.data(), route_w_.data(), T, K, E, h_.data(), H, moe_out_.data(),
           [&](const ExpertRows* rows, int count) {
             expert_weights_.clear();
             for (int i = 0; i < count; ++i) {
               const Mlp& m = L.experts[rows[i].expert];
               expert_weights_.push_back({m.gate, m.up, m.down});
             }
             swiglu_.Run(expert_weights_.data(), rows, count, 0.0f, false, pool);
           });
  if (L.shared.gate != nullptr) {
    RunMlp(L.shared, h_.data(), T, tmp_.data(), pool);
    kernels::AddInPlace(tmp_.data(), moe_out_.data(), T * H);
  } else {
    std::memcpy(tmp_.data(), moe_out_.data(), T * H * sizeof(float));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeepseekV3Lm>> CreateDeepseekV3(const model::Model& model,
                                                               ExpertExchange* experts) {
  if (!model.config.deepseek) {
    return InvalidArgumentError(util::codes::kBadConfig, "model has no DeepSeek hyperparameters");
  }
  auto lm = std::make_unique<DeepseekImpl>(model, experts);
  DI_RETURN_IF_ERROR(lm->Init());
  return std::unique_ptr<DeepseekV3Lm>(std::move(lm));
}

}  // namespace deepinfer::arch
