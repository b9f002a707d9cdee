// DeepSeek-V4 forward pass (mHC + sliding-window / compressed attention + MoE) over a paged
// per-token cache. One call handles any mix of prefill chunks and decode tokens from many
// sequences; projections run once over all tokens of the step, routed experts once over the
// tokens sent to each expert. Every per-token quantity lives in the token's own cache slot, so a
// sequence's logits do not depend on how its tokens were chunked or batched.

#include "arch/deepseek_v4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "arch/deepseek_v4_attention.h"
#include "arch/deepseek_v4_blocks.h"
#include "arch/deepseek_v4_ops.h"
#include "arch/moe.h"
#include "arch/tensor_schema.h"
#include "arch/rope.h"
#include "fmt/format.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "model/tensor_values.h"
#include "util/aligned_vector.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::arch {
namespace {

using tensor::TensorView;
using dsv4::UnweightedRmsNorm;

using dsv4::AttentionLayer;
using dsv4::HcSite;
using dsv4::MoeLayer;

// A block: the shared attention layer (mHC sites, norms, attention weights), its variant (window,
// HCA or CSA: compressors, indexer, cache slot), and the MoE (hash routed by tid2eid on the
// config's hash layers).
struct Layer : AttentionLayer {
  dsv4::CompressedAttentionLayer attn;
  MoeLayer moe;
  // MTP module extras: x0_k = e_proj(enorm(Emb(x))) + h_proj(hnorm(X_k)); its own hc head + norm.
  const TensorView* e_proj = nullptr;
  const TensorView* h_proj = nullptr;
  std::vector<float> enorm, hnorm, head_norm;
  HcSite hc_head;
};

class DeepseekV4Impl final : public dsv4::DeepseekV4Base, public DraftHeads {
 public:
  DeepseekV4Impl(const model::Model& m, ExpertExchange* experts)
      : DeepseekV4Base(m, /*qat=*/false), experts_(experts) {
    moe_.set_exchange(experts);
  }

  absl::Status Init();
  void Forward(const ForwardBatch& batch, KvCache& kv, float* logits,
               util::ThreadPool& pool) override;
  // The MTP modules are its draft heads (none: null).
  DraftHeads* draft_heads() override { return mtp_.empty() ? nullptr : this; }
  Kind kind() const override { return Kind::kMtp; }
  int num_mtp_layers() const override { return static_cast<int>(mtp_.size()); }
  KvLayout kv_layout(int32_t block_size) const override;
  Numerics default_numerics() const override {
    return released_formats_ ? Numerics::kDeepseekQat : Numerics::kFast;
  }
  int64_t mtp_hidden_size() const override { return int64_t{ds_.hc_mult} * cfg_.hidden; }
  void FinalHidden(float* out) const override;
  void ForwardMtp(int k, const ForwardBatch& batch, const float* prev_hidden, KvCache& mtp_kv,
                  float* logits, float* hidden_out, util::ThreadPool& pool) override;

 private:
  absl::StatusOr<std::vector<float>> Vec(const std::string& name, std::vector<int64_t> shape) {
    return schema_.Vec(name, std::move(shape));
  }
  absl::StatusOr<const TensorView*> Mat(const std::string& name, int64_t rows, int64_t cols) {
    return schema_.Mat(name, rows, cols);
  }
  absl::StatusOr<Layer> LoadLayer(const std::string& prefix, int l);
  absl::StatusOr<HcSite> LoadHead(const std::string& prefix);
  void RunBlock(const Layer& L, int kv_layer, const ForwardBatch& batch, KvCache& kv,
                util::ThreadPool& pool);
  void Logits(const ForwardBatch& batch, const HcSite& head, const std::vector<float>& norm,
              float* logits, util::ThreadPool& pool);

  void Prepare(const ForwardBatch& batch);
  void HcPre(const HcSite& site, int64_t T, util::ThreadPool& pool);

  std::vector<Layer> layers_;
  std::vector<Layer> mtp_;
  int64_t last_tokens_ = 0;  // tokens of the last Forward (FinalHidden)
  int32_t window_tokens_ = 0;  // KvLayout::window_tokens
  const TensorView* embed_ = nullptr;
  const TensorView* head_ = nullptr;
  std::vector<float> final_norm_;
  HcSite hc_head_;  // fn [hc, hc H], base [hc], scale [1]
  bool released_formats_ = false;  // some weights are FP8 / FP4 with E8M0 scales

  // The blocks, each with its scratch.
  dsv4::RopeTables rope_;
  dsv4::CompressedAttention attention_;
  dsv4::MoeBlock moe_;
  ExpertExchange* experts_;  // null: every routed expert runs here
  // Scratch, grown on demand.
  dsv4::MhcStreams mhc_;
  util::AlignedVector<float> hc_pre_, hc_mix_, x_, h_;
  util::AlignedVector<float> out_, tmp_, rows_;
  std::vector<int32_t> positions_;
};

using dsv4::Grow;

// Block `l` (main layers, then MTP modules) under `p` ("layers.N." or "mtp.K.").
absl::StatusOr<Layer> DeepseekV4Impl::LoadLayer(const std::string& p, int l) {
  const std::string f = p + "ffn.";
  const int64_t H = cfg_.hidden;
  Layer L;
  DI_ASSIGN_OR_RETURN(static_cast<AttentionLayer&>(L),
                      dsv4::LoadAttentionLayer(schema_, p, cfg_, ds_));
  // The config lists the MTP modules too (window only).
  DI_ASSIGN_OR_RETURN(L.attn, dsv4::LoadCompressedAttention(schema_, p, cfg_, ds_,
                                                            ds_.attention[l],
                                                            ds_.compress_ratio[l]));
  const bool hash = l < cfg_.num_layers && ds_.hash_routed[l];
  DI_ASSIGN_OR_RETURN(L.moe, dsv4::LoadMoeLayer(schema_, f, ds_.n_routed_experts,
                                                 ds_.moe_intermediate_size, H,
                                                 ds_.num_experts_per_tok, /*biased=*/!hash,
                                                 ds_.n_shared_experts > 0, experts_));
  if (hash) {
    DI_ASSIGN_OR_RETURN(L.moe.tid2eid,
                        dsv4::LoadTid2eid(schema_, model_, f + "gate.tid2eid", cfg_.vocab,
                                          ds_.num_experts_per_tok, ds_.n_routed_experts));
  }
  return L;
}

absl::Status DeepseekV4Impl::Init() {
  const int64_t H = cfg_.hidden;
  if (cfg_.head_dim % 2 != 0 || cfg_.rope_dim > cfg_.head_dim || ds_.n_routed_experts <= 0 ||
      static_cast<int>(ds_.attention.size()) < cfg_.num_layers ||
      static_cast<int>(ds_.hash_routed.size()) < cfg_.num_layers || ds_.index_topk <= 0) {
    return InvalidArgumentError(util::codes::kBadConfig, "inconsistent DeepSeek-V4 dimensions");
  }
  DI_ASSIGN_OR_RETURN(embed_, Mat("embed.weight", cfg_.vocab, H));
  if (!kernels::HasCpuKernel(embed_->dtype)) {  // rows are looked up one by one, unscaled
    return UnimplementedError(
        util::codes::kUnsupportedDtype,
        fmt::format("embed.weight has dtype {}", tensor::DTypeName(embed_->dtype)));
  }
  DI_ASSIGN_OR_RETURN(final_norm_, Vec("norm.weight", {H}));
  if (cfg_.tied_embeddings && model_.Find("head.weight") == nullptr) {
    head_ = embed_;
  } else {
    DI_ASSIGN_OR_RETURN(head_, Mat("head.weight", cfg_.vocab, H));
  }
  DI_ASSIGN_OR_RETURN(hc_head_, LoadHead(""));
  for (int l = 0; l < cfg_.num_layers; ++l) {
    DI_ASSIGN_OR_RETURN(Layer L, LoadLayer(fmt::format("layers.{}.", l), l));
    window_tokens_ = std::max(window_tokens_, L.attn.window_tokens(ds_.sliding_window));
    layers_.push_back(std::move(L));
  }
  // The MTP modules' cache (no window cache: a window key/value per token).
  kv_floats_ = cfg_.head_dim;
  // MTP modules present in the checkpoint (a checkpoint may leave them out).
  for (int k = 0; k < ds_.num_nextn_predict_layers; ++k) {
    const std::string p = fmt::format("mtp.{}.", k);
    if (model_.Find(p + "e_proj.weight") == nullptr) break;
    DI_ASSIGN_OR_RETURN(Layer L, LoadLayer(p, cfg_.num_layers + k));
    DI_ASSIGN_OR_RETURN(L.e_proj, Mat(p + "e_proj.weight", H, H));
    DI_ASSIGN_OR_RETURN(L.h_proj, Mat(p + "h_proj.weight", H, H));
    DI_ASSIGN_OR_RETURN(L.enorm, Vec(p + "enorm.weight", {H}));
    DI_ASSIGN_OR_RETURN(L.hnorm, Vec(p + "hnorm.weight", {H}));
    DI_ASSIGN_OR_RETURN(L.head_norm, Vec(p + "norm.weight", {H}));
    DI_ASSIGN_OR_RETURN(L.hc_head, LoadHead(p));
    DI_CHECK(L.attn.window_floats == kv_floats_);  // the config makes MTP modules window only
    mtp_.push_back(std::move(L));
  }
  for (const auto& [name, t] : model_.tensors) released_formats_ |= t.scale != nullptr;
  // Every tensor must have a place.
  DI_RETURN_IF_ERROR(schema_.CheckAllPlaced("DeepSeek-V4"));
  rope_.Init(cfg_, ds_);
  attention_.Init(cfg_, ds_);
  mhc_.Init(ds_.hc_mult, H, cfg_.rms_norm_eps, ds_.hc_eps, ds_.hc_sinkhorn_iters);
  return absl::OkStatus();
}

// An hc head (fn [hc, hc H], base [hc], scale [1]) under `p` ("" or "mtp.K.").
absl::StatusOr<HcSite> DeepseekV4Impl::LoadHead(const std::string& p) {
  const int64_t hc = ds_.hc_mult;
  HcSite h;
  DI_ASSIGN_OR_RETURN(h.fn, Mat(p + "hc_head_fn", hc, hc * cfg_.hidden));
  DI_RETURN_IF_ERROR(model::CheckFinite(*h.fn, /*full=*/true));
  DI_ASSIGN_OR_RETURN(h.base, Vec(p + "hc_head_base", {hc}));
  DI_ASSIGN_OR_RETURN(h.scale, Vec(p + "hc_head_scale", {1}));
  return h;
}

KvLayout DeepseekV4Impl::kv_layout(int32_t block_size) const {
  KvLayout layout;
  layout.window_tokens = window_tokens_;
  for (const Layer& layer : layers_) {
    const dsv4::CompressedAttentionLayer& L = layer.attn;
    layout.window_floats.push_back(L.window_floats);
    layout.floats.push_back(L.entry_floats /
                            dsv4::EntryCache::Slots(L.ratio, L.entry_floats, block_size));
  }
  return layout;
}

void DeepseekV4Impl::Prepare(const ForwardBatch& batch) {
  const int64_t T = batch.num_tokens;
  Grow(positions_, T);
  BatchPositions(batch, positions_.data());
  rope_.Compute(positions_.data(), T);
}

// mHC at one site: post and comb (kept in mhc_ for the Expand after the sublayer) and the
// collapsed input x_ [T, H] = sum_j pre_j X_j with this site's own pre.
void DeepseekV4Impl::HcPre(const HcSite& site, int64_t T, util::ThreadPool& pool) {
  Grow(hc_pre_, T * ds_.hc_mult);
  mhc_.Mixes(site, T, hc_pre_.data(), pool);
  Grow(x_, T * cfg_.hidden);
  mhc_.Collapse(hc_pre_.data(), T, x_.data());
}

void DeepseekV4Impl::RunBlock(const Layer& L, int kv_layer, const ForwardBatch& batch,
                              KvCache& kv, util::ThreadPool& pool) {
  const int64_t T = batch.num_tokens, H = cfg_.hidden;
  HcPre(L.hc_attn, T, pool);
  kernels::RmsNorm(x_.data(), L.attn_norm.data(), T, H, cfg_.rms_norm_eps, h_.data());
  Grow(out_, T * H);
  attention_.Run(L, L.attn, kv_layer, batch, positions_.data(), rope_, h_.data(), qat_, kv,
                 out_.data(), pool);
  mhc_.Expand(out_.data(), T);
  HcPre(L.hc_ffn, T, pool);
  kernels::RmsNorm(x_.data(), L.ffn_norm.data(), T, H, cfg_.rms_norm_eps, h_.data());
  // transformers clamps with the configured limit whatever it is, and applies the routing
  // weight after w2.
  const dsv4::MoeOptions moe{.routed_scaling = ds_.routed_scaling_factor,
                             .swiglu_limit = ds_.swiglu_limit};
  Grow(out_, T * H);
  moe_.Run(L.moe, moe, h_.data(), batch.tokens, T, H, out_.data(), pool);
  mhc_.Expand(out_.data(), T);
}

void DeepseekV4Impl::Forward(const ForwardBatch& batch, KvCache& kv, float* logits,
                             util::ThreadPool& pool) {
  DI_CHECK(kv.window != nullptr && kv.num_layers >= cfg_.num_layers);
  const int64_t T = batch.num_tokens, H = cfg_.hidden;
  Prepare(batch);
  Grow(h_, T * H);
  kernels::EmbeddingLookup(*embed_, batch.tokens, T, h_.data());
  mhc_.Start(h_.data(), T);
  for (int l = 0; l < cfg_.num_layers; ++l) RunBlock(layers_[l], l, batch, kv, pool);
  last_tokens_ = T;
  Logits(batch, hc_head_, final_norm_, logits, pool);
}

void DeepseekV4Impl::FinalHidden(float* out) const {
  std::memcpy(out, mhc_.data(), last_tokens_ * mtp_hidden_size() * sizeof(float));
}

// The MTP module (DeepSeek's MTPBlock): stream k of token x_{p+1} at position p starts as
// e_proj(enorm(Emb(x_{p+1}))) + h_proj(hnorm(X_k)) with X the main model's final streams at p,
// runs one window-only block, and predicts x_{p+2} through its own hc head and norm and the
// shared output head. hidden_out is the block's output streams (for chaining drafts).
void DeepseekV4Impl::ForwardMtp(int k, const ForwardBatch& batch, const float* prev_hidden,
                                KvCache& mtp_kv, float* logits, float* hidden_out,
                                util::ThreadPool& pool) {
  DI_CHECK(k >= 0 && k < num_mtp_layers());
  DI_CHECK(mtp_kv.floats_per_token == kv_floats_ && mtp_kv.num_layers > k);
  const Layer& L = mtp_[k];
  const int64_t T = batch.num_tokens, H = cfg_.hidden, hc = ds_.hc_mult, D = hc * H;
  Prepare(batch);
  Grow(h_, T * H);
  Grow(tmp_, T * D);
  Grow(x_, T * H);
  kernels::EmbeddingLookup(*embed_, batch.tokens, T, h_.data());
  kernels::RmsNorm(h_.data(), L.enorm.data(), T, H, cfg_.rms_norm_eps, h_.data());
  kernels::MatMul(*L.e_proj, h_.data(), T, x_.data(), pool);
  kernels::RmsNorm(prev_hidden, L.hnorm.data(), T * hc, H, cfg_.rms_norm_eps, tmp_.data());
  kernels::MatMul(*L.h_proj, tmp_.data(), T * hc, mhc_.Reserve(T), pool);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < hc; ++j) {
      kernels::AddInPlace(mhc_.data() + t * D + j * H, x_.data() + t * H, H);
    }
  }
  RunBlock(L, k, batch, mtp_kv, pool);
  if (hidden_out != nullptr) std::memcpy(hidden_out, mhc_.data(), T * D * sizeof(float));
  Logits(batch, L.hc_head, L.head_norm, logits, pool);
}

// The hc head on the rows that need logits (pre_j = sigmoid(m_j scale + base_j) + eps, collapse),
// the final norm and the output head.
void DeepseekV4Impl::Logits(const ForwardBatch& batch, const HcSite& head,
                            const std::vector<float>& norm, float* logits,
                            util::ThreadPool& pool) {
  const int64_t H = cfg_.hidden, hc = ds_.hc_mult, D = hc * H;
  const int32_t num_rows = batch.num_logit_rows();
  if (num_rows == 0 || logits == nullptr) return;
  Grow(rows_, int64_t{num_rows} * D);
  GatherLogitRows(batch, mhc_.data(), D, rows_.data());
  Grow(tmp_, int64_t{num_rows} * D);
  UnweightedRmsNorm(rows_.data(), num_rows, D, cfg_.rms_norm_eps, tmp_.data());
  Grow(hc_mix_, int64_t{num_rows} * hc);
  kernels::MatMul(*head.fn, tmp_.data(), num_rows, hc_mix_.data(), pool);
  Grow(x_, int64_t{num_rows} * H);
  for (int64_t t = 0; t < num_rows; ++t) {
    float pre[64];
    for (int64_t j = 0; j < hc; ++j) {
      pre[j] = 1.0f / (1.0f + std::exp(-(hc_mix_[t * hc + j] * head.scale[0] + head.base[j]))) +
               ds_.hc_eps;
    }
    const float* xs = rows_.data() + t * D;
    for (int64_t i = 0; i < H; ++i) {
      float acc = 0;
      for (int64_t j = 0; j < hc; ++j) acc += pre[j] * xs[j * H + i];
      x_[t * H + i] = acc;
    }
  }
  kernels::RmsNorm(x_.data(), norm.data(), num_rows, H, cfg_.rms_norm_eps, x_.data());
  kernels::MatMul(*head_, x_.data(), num_rows, logits, pool);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CausalLm>> CreateDeepseekV4(const model::Model& model,
                                                           ExpertExchange* experts) {
  if (!model.config.deepseek_v4) {
    return InvalidArgumentError(util::codes::kBadConfig,
                                "model has no DeepSeek-V4 hyperparameters");
  }
  if (model.config.deepseek_v4->hc_mult > 64) {
    return InvalidArgumentError(util::codes::kBadConfig, "hc_mult above 64");
  }
  auto lm = std::make_unique<DeepseekV4Impl>(model, experts);
  DI_RETURN_IF_ERROR(lm->Init());
  return std::unique_ptr<CausalLm>(std::move(lm));
}

}  // namespace deepinfer::arch
