// DeepSeek-V4.1 forward pass over a paged per-token cache (see deepseek_v41.h). Shares its
// building blocks with V4 (deepseek_v4_ops.h); the CSA2 data flow — which layer's compressed
// entries and which selection a layer uses — is fixed at load from the config's source lists.

#include "arch/deepseek_v41.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "arch/deepseek_v41_attention.h"
#include "arch/deepseek_v4_blocks.h"
#include "arch/deepseek_v4_ops.h"
#include "arch/tensor_schema.h"
#include "arch/engram_block.h"
#include "arch/moe.h"
#include "arch/rope.h"
#include "arch/vision_tower.h"
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

using dsv4::AttentionLayer;
using dsv4::Grow;
using dsv4::MoeLayer;

// A layer (or DSpark stage): the shared attention layer (mHC sites, norms, attention weights),
// its CSA2 roles and slots (compressor, index queries), Engram, and the MoE.
struct Layer : AttentionLayer {
  dsv4::Csa2Layer csa;
  EngramWeights engram;
  MoeLayer moe;
};

// The DSpark drafter (research notes 5.5): stages mtp.0.. (window-only layers with their own
// MoE), the taps' projection main_proj [H, taps H] + main_norm, and on the last stage the Markov
// head (embed, head [vocab, rank]), the confidence head proj [1, H + rank] and the final norm.
struct Dspark {
  std::vector<Layer> stages;
  std::vector<int> taps;  // dspark_target_layer_ids
  const TensorView* main_proj = nullptr;
  std::vector<float> main_norm, norm;
  const TensorView* markov_embed = nullptr;
  const TensorView* markov_head = nullptr;
  const TensorView* confidence = nullptr;
  int32_t block = 0, noise = 0, rank = 0;
};

class DeepseekV41Impl final : public dsv4::DeepseekV4Base, public DraftHeads {
 public:
  // The QAT numerics are part of the model (deepseek_v41.h): on unless SetNumerics says kFast.
  DeepseekV41Impl(const model::Model& m, ExpertExchange* experts)
      : DeepseekV4Base(m, /*qat=*/true), experts_(experts) {
    moe_.set_exchange(experts);
  }

  absl::Status Init();
  KvLayout kv_layout(int32_t block_size) const override;
  Numerics default_numerics() const override { return Numerics::kDeepseekQat; }
  void Forward(const ForwardBatch& batch, KvCache& kv, float* logits,
               util::ThreadPool& pool) override;
  // The DSpark stages are its draft heads (a release without mtp.*: null).
  DraftHeads* draft_heads() override { return dspark_.stages.empty() ? nullptr : this; }
  Kind kind() const override { return Kind::kDspark; }
  int dspark_block_size() const override { return dspark_.stages.empty() ? 0 : dspark_.block; }
  bool EnableDspark() override {
    dspark_on_ = !dspark_.stages.empty();
    return dspark_on_;
  }
  void DsparkPropose(const ForwardBatch& batch, KvCache& kv, int32_t* drafts, float* confidence,
                     util::ThreadPool& pool) override;
  VisionTower* vision_tower() override { return vision_.get(); }

 private:
  // Main layer l, or DSpark stage l - num_layers.
  absl::StatusOr<Layer> LoadLayer(int l);
  absl::Status LoadDspark();
  // The vision tower when the config has a vision_config (its tensors then required).
  absl::Status LoadVision();
  // h_ rows of the batch's image-span tokens = batch.span_rows, in batch order.
  void WriteSpanRows(const ForwardBatch& batch);
  // The streams = h_ replicated hc times, pre_mix_ one-hot on stream 0 (the first layer's input).
  void StartStreams(int64_t T);
  // One mHC layer over the streams (pre_mix_ in, the FFN site's pre out); attention by `attend`.
  // token_types [T] (null: all text) routes image-span rows by the MoE's bias_vl.
  template <typename Attend>
  void RunLayer(const Layer& L, int64_t T, const int8_t* token_types, util::ThreadPool& pool,
                Attend&& attend);
  // DSpark: the stages' window KV from taps_ at the batch's positions.
  void DsparkAbsorb(const ForwardBatch& batch, KvCache& kv, util::ThreadPool& pool);
  // x_ [T, H] = the streams collapsed with `pre`.
  void Collapse(const float* pre, int64_t T) {
    Grow(x_, T * cfg_.hidden);
    mhc_.Collapse(pre, T, x_.data());
  }

  std::vector<Layer> layers_;
  Dspark dspark_;          // stages empty: none in the checkpoint
  bool dspark_on_ = false;  // EnableDspark()
  bool keep_classes_ = false;  // Engram on: the cache keeps token classes
  util::AlignedVector<float> taps_;  // [T, taps, H] stream means at the target layers' inputs
  util::AlignedVector<float> draft_x_, draft_logits_, markov_row_, markov_logits_, draft_conf_;
  std::vector<int32_t> draft_tokens_;
  const TensorView* embed_ = nullptr;
  const TensorView* head_ = nullptr;
  std::vector<float> final_norm_;
  std::unique_ptr<VisionTower> vision_;  // null: text only
  int32_t window_tokens_ = 0;
  // Engram; each token's class is kept in the main cache's extra layer num_layers (one float)
  // for later positions' look-back.
  EngramBlock engram_;

  // The blocks, each with its scratch.
  dsv4::RopeTables rope_;
  dsv4::Csa2Attention attention_;
  dsv4::MoeBlock moe_;
  ExpertExchange* experts_;  // null: every routed expert runs here
  // Scratch, grown on demand.
  dsv4::MhcStreams mhc_;
  util::AlignedVector<float> pre_mix_, pre_attn_, pre_ffn_;
  util::AlignedVector<float> x_, h_, out_, rows_;
  std::vector<int32_t> positions_;
};

absl::StatusOr<Layer> DeepseekV41Impl::LoadLayer(int l) {
  const bool stage = l >= cfg_.num_layers;
  const std::string p = stage ? fmt::format("mtp.{}.", l - cfg_.num_layers)
                              : fmt::format("layers.{}.", l);
  const std::string f = p + "ffn.";
  const int64_t H = cfg_.hidden;
  Layer L;
  DI_ASSIGN_OR_RETURN(static_cast<AttentionLayer&>(L),
                      dsv4::LoadAttentionLayer(schema_, p, cfg_, ds_));
  DI_ASSIGN_OR_RETURN(L.csa, dsv4::LoadCsa2Layer(schema_, p, cfg_, ds_, l, stage));
  if (!stage) {
    DI_ASSIGN_OR_RETURN(L.engram, engram_.Load(schema_, model_, p + "engram.", l));
  }
  const int64_t E = stage ? ds_.dspark_n_routed_experts : ds_.n_routed_experts;
  DI_ASSIGN_OR_RETURN(L.moe,
                      dsv4::LoadMoeLayer(schema_, f, E, ds_.moe_intermediate_size, H,
                                         stage ? ds_.dspark_num_experts_per_tok
                                               : ds_.num_experts_per_tok,
                                         /*biased=*/true, ds_.n_shared_experts > 0, experts_));
  // The image-span routing bias (the stages have none): required with a vision tower; a text-
  // only checkpoint may carry it too (transformers saves it), and never routes by it.
  if (!stage && (ds_.vision.has_value() || schema_.Has(f + "gate.bias_vl"))) {
    DI_ASSIGN_OR_RETURN(L.moe.router_bias_vl, schema_.Vec(f + "gate.bias_vl", {E}));
  }
  return L;
}

absl::Status DeepseekV41Impl::Init() {
  const int64_t H = cfg_.hidden;
  DI_RETURN_IF_ERROR(engram_.Init(model_));
  if (ds_.hc_mult > 64 || cfg_.rope_dim > cfg_.head_dim || ds_.n_routed_experts <= 0 ||
      ds_.index_topk <= 0 || ds_.candidate_block_size <= 0) {
    return InvalidArgumentError(util::codes::kBadConfig, "inconsistent DeepSeek-V4.1 dimensions");
  }
  DI_ASSIGN_OR_RETURN(embed_, schema_.Mat("embed.weight", cfg_.vocab, H));
  if (!kernels::HasCpuKernel(embed_->dtype)) {
    return UnimplementedError(
        util::codes::kUnsupportedDtype,
        fmt::format("embed.weight has dtype {}", tensor::DTypeName(embed_->dtype)));
  }
  DI_ASSIGN_OR_RETURN(final_norm_, schema_.Vec("norm.weight", {H}));
  const char* head = schema_.Has("lm_head.weight") ? "lm_head.weight" : "head.weight";
  if (cfg_.tied_embeddings && !schema_.Has(head)) {
    head_ = embed_;
  } else {
    DI_ASSIGN_OR_RETURN(head_, schema_.Mat(head, cfg_.vocab, H));
  }
  // Before the layers: a vision_config without vision tensors is bad_config, not the layers'
  // missing gate.bias_vl.
  DI_RETURN_IF_ERROR(LoadVision());
  int kv_src = -1;
  for (int l = 0; l < cfg_.num_layers; ++l) {
    DI_ASSIGN_OR_RETURN(Layer L, LoadLayer(l));
    if (L.csa.kv_source) kv_src = l;
    L.csa.kv_src = L.csa.ratio > 0 ? kv_src : -1;
    kv_floats_ = std::max(kv_floats_, L.csa.entry_floats);
    if (L.csa.kv_source) window_tokens_ = std::max(window_tokens_, L.csa.ratio);
    layers_.push_back(std::move(L));
  }
  window_tokens_ = std::max(window_tokens_, ds_.sliding_window);
  keep_classes_ = engram_.enabled();
  if (keep_classes_) kv_floats_ = std::max<int64_t>(kv_floats_, 1);
  DI_RETURN_IF_ERROR(LoadDspark());
  // DSpark stages a config does not declare are not read.
  if (dspark_.stages.empty()) {
    for (const auto& [name, t] : model_.tensors) {
      if (name.rfind("mtp.", 0) == 0) schema_.MarkUsed(name);
    }
  }
  DI_RETURN_IF_ERROR(schema_.CheckAllPlaced("DeepSeek-V4.1"));
  rope_.Init(cfg_, ds_);
  attention_.Init(cfg_, ds_);
  mhc_.Init(ds_.hc_mult, H, cfg_.rms_norm_eps, ds_.hc_eps, ds_.hc_sinkhorn_iters);
  return absl::OkStatus();
}

// The vision tower, aligner and span vectors (vision.*, aligner.*, image_{start,end,newline})
// come with the config's vision_config: one without the other is a broken checkpoint (images
// would be refused, or their tensors silently ignored), so both directions are bad_config.
absl::Status DeepseekV41Impl::LoadVision() {
  std::string vision_tensor;
  for (const auto& [name, t] : model_.tensors) {
    for (const char* prefix : {"vision.", "aligner.", "image_start", "image_end", "image_newline"}) {
      if (name.rfind(prefix, 0) == 0 && vision_tensor.empty()) vision_tensor = name;
    }
  }
  if (!ds_.vision.has_value()) {
    if (vision_tensor.empty()) return absl::OkStatus();
    return InvalidArgumentError(
        util::codes::kBadConfig,
        fmt::format("checkpoint has vision tensors ('{}') but config.json has no vision_config",
                    vision_tensor));
  }
  if (vision_tensor.empty()) {
    return InvalidArgumentError(util::codes::kBadConfig,
                                "config.json has a vision_config but the checkpoint has no "
                                "vision tensors (vision.*, aligner.*, image_*)");
  }
  DI_ASSIGN_OR_RETURN(vision_, VisionTower::Load(schema_, *ds_.vision, cfg_.hidden));
  return absl::OkStatus();
}

// The DSpark stages, when the config declares them (num_nextn_predict_layers) and the
// checkpoint holds them (a release without mtp.* serves without the drafter).
absl::Status DeepseekV41Impl::LoadDspark() {
  const int n = ds_.num_nextn_predict_layers;
  if (n == 0 || !schema_.Has("mtp.0.main_proj.weight")) return absl::OkStatus();
  const int64_t H = cfg_.hidden, V = cfg_.vocab, R = ds_.dspark_markov_rank;
  Dspark d;
  d.taps = ds_.dspark_target_layer_ids;
  d.block = ds_.dspark_block_size;
  d.noise = ds_.dspark_noise_token_id;
  d.rank = static_cast<int32_t>(R);
  const int64_t taps = static_cast<int64_t>(d.taps.size());
  DI_ASSIGN_OR_RETURN(d.main_proj, schema_.Mat("mtp.0.main_proj.weight", H, taps * H));
  DI_ASSIGN_OR_RETURN(d.main_norm, schema_.Vec("mtp.0.main_norm.weight", {H}));
  const std::string last = fmt::format("mtp.{}.", n - 1);
  DI_ASSIGN_OR_RETURN(d.markov_embed, schema_.Mat(last + "markov_head.embed.weight", V, R));
  // Read by row (an embedding lookup), which needs a dtype with a CPU row decoder.
  if (!kernels::HasCpuKernel(d.markov_embed->dtype)) {
    return UnimplementedError(util::codes::kUnsupportedDtype,
                              fmt::format("{}markov_head.embed.weight has dtype {}", last,
                                          tensor::DTypeName(d.markov_embed->dtype)));
  }
  DI_ASSIGN_OR_RETURN(d.markov_head, schema_.Mat(last + "markov_head.head.weight", V, R));
  DI_ASSIGN_OR_RETURN(d.confidence, schema_.Mat(last + "confidence_head.proj.weight", 1, H + R));
  DI_ASSIGN_OR_RETURN(d.norm, schema_.Vec(last + "norm.weight", {H}));
  for (int s = 0; s < n; ++s) {
    DI_ASSIGN_OR_RETURN(Layer L, LoadLayer(cfg_.num_layers + s));
    d.stages.push_back(std::move(L));
  }
  dspark_ = std::move(d);
  return absl::OkStatus();
}

KvLayout DeepseekV41Impl::kv_layout(int32_t block_size) const {
  KvLayout layout;
  // A proposal's first row (position p + 1) reads the stages' windows from p - W + 1 (research
  // notes 5.5: positions max(0, p - 127) .. p), one position further back than the main layers.
  layout.window_tokens = dspark_on_ ? std::max(window_tokens_, ds_.sliding_window + 1)
                                    : window_tokens_;
  for (const Layer& layer : layers_) {
    const dsv4::Csa2Layer& L = layer.csa;
    layout.window_floats.push_back(L.window_floats);
    layout.floats.push_back(L.entry_floats /
                            dsv4::EntryCache::Slots(L.ratio, L.entry_floats, block_size));
  }
  if (keep_classes_) layout.floats.push_back(1);
  if (dspark_on_) {  // each stage's window key/value, after the main layers'
    for (size_t s = 0; s < dspark_.stages.size(); ++s) layout.window_floats.push_back(cfg_.head_dim);
  }
  return layout;
}

void DeepseekV41Impl::StartStreams(int64_t T) {
  const int64_t hc = ds_.hc_mult;
  mhc_.Start(h_.data(), T);
  // The first layer's attention collapses stream 0 alone.
  Grow(pre_mix_, T * hc);
  Grow(pre_attn_, T * hc);
  Grow(pre_ffn_, T * hc);
  std::fill(pre_mix_.begin(), pre_mix_.begin() + T * hc, 0.0f);
  for (int64_t t = 0; t < T; ++t) pre_mix_[t * hc] = 1.0f;
}

template <typename Attend>
void DeepseekV41Impl::RunLayer(const Layer& L, int64_t T, const int8_t* token_types,
                               util::ThreadPool& pool, Attend&& attend) {
  const int64_t H = cfg_.hidden;
  mhc_.Mixes(L.hc_attn, T, pre_attn_.data(), pool);
  Collapse(pre_mix_.data(), T);
  kernels::RmsNorm(x_.data(), L.attn_norm.data(), T, H, cfg_.rms_norm_eps, h_.data());
  attend();
  mhc_.Expand(out_.data(), T);
  mhc_.Mixes(L.hc_ffn, T, pre_ffn_.data(), pool);
  Collapse(pre_attn_.data(), T);
  kernels::RmsNorm(x_.data(), L.ffn_norm.data(), T, H, cfg_.rms_norm_eps, h_.data());
  // The reference scales each routed expert's activation before w2, and clamps only for a
  // positive limit.
  const dsv4::MoeOptions moe{.gate_temp = ds_.gate_temp,
                             .normalize = ds_.norm_topk_prob && L.moe.top_k > 1,
                             .routed_scaling = ds_.routed_scaling_factor,
                             .weight_before_w2 = true,
                             .swiglu_limit = ds_.swiglu_limit,
                             .clamp = ds_.swiglu_limit > 0};
  Grow(out_, T * H);
  moe_.Run(L.moe, moe, h_.data(), nullptr, T, H, out_.data(), pool, token_types);
  mhc_.Expand(out_.data(), T);
  std::swap(pre_mix_, pre_ffn_);
}

// main_x = main_norm(main_proj(taps)); each stage's window slot at the position gets
// fp8(RoPE(kv_norm(wkv(main_x)))) (research notes 5.5; the notes apply the stage's wkv to
// main_x directly, without its attn_norm).
void DeepseekV41Impl::DsparkAbsorb(const ForwardBatch& batch, KvCache& kv,
                                   util::ThreadPool& pool) {
  const int64_t T = batch.num_tokens, H = cfg_.hidden;
  Grow(draft_x_, T * H);
  kernels::MatMul(*dspark_.main_proj, taps_.data(), T, draft_x_.data(), pool);
  kernels::RmsNorm(draft_x_.data(), dspark_.main_norm.data(), T, H, cfg_.rms_norm_eps,
                   draft_x_.data());
  for (size_t st = 0; st < dspark_.stages.size(); ++st) {
    attention_.StoreWindowKv(dspark_.stages[st], cfg_.num_layers + static_cast<int>(st), batch,
                             draft_x_.data(), rope_, qat_, kv, pool);
  }
}

// Rows [y, noise x (B - 1)] at positions start_pos .. start_pos + B - 1 through the stages
// (non-causal inside the block), x = the final collapse, logits = lm_head(norm(x)); then the
// Markov chain: out_0 = y, logits_r += markov_embed[out_r] . markov_head^T, out_{r+1} = argmax,
// confidence_r = sigmoid(proj . [x_r, markov_embed[out_r]]). Research notes 5.5; greedy drafts
// (a request's sampling is the verifier's: speculative.h).
void DeepseekV41Impl::DsparkPropose(const ForwardBatch& batch, KvCache& kv, int32_t* drafts,
                                    float* confidence, util::ThreadPool& pool) {
  DI_CHECK(dspark_on_);
  const int64_t B = dspark_.block, n = static_cast<int64_t>(batch.seqs.size()), T = n * B;
  const int64_t H = cfg_.hidden, V = cfg_.vocab, R = dspark_.rank;
  if (n == 0) return;
  Grow(positions_, T);
  Grow(draft_tokens_, T);
  for (int64_t i = 0; i < n; ++i) {
    const SequenceSlice& s = batch.seqs[i];
    for (int64_t r = 0; r < B; ++r) {
      positions_[i * B + r] = s.start_pos + static_cast<int32_t>(r);
      draft_tokens_[i * B + r] = r == 0 ? batch.tokens[s.token_offset] : dspark_.noise;
    }
  }
  rope_.Compute(positions_.data(), T);
  Grow(h_, T * H);
  kernels::EmbeddingLookup(*embed_, draft_tokens_.data(), T, h_.data());
  StartStreams(T);
  for (size_t st = 0; st < dspark_.stages.size(); ++st) {
    const Layer& L = dspark_.stages[st];
    const int l = cfg_.num_layers + static_cast<int>(st);
    // Proposal rows are text (generated tokens): the stages have no image routing.
    RunLayer(L, T, /*token_types=*/nullptr, pool, [&] {
      Grow(out_, T * H);
      attention_.BlockAttention(L, l, batch, B, rope_, h_.data(), qat_, kv, out_.data(), pool);
    });
  }
  Grow(draft_x_, T * H);  // x per row (the confidence head reads it)
  Grow(rows_, T * H);
  mhc_.Collapse(pre_mix_.data(), T, draft_x_.data());
  kernels::RmsNorm(draft_x_.data(), dspark_.norm.data(), T, H, cfg_.rms_norm_eps, rows_.data());
  Grow(draft_logits_, T * V);
  kernels::MatMul(*head_, rows_.data(), T, draft_logits_.data(), pool);
  // The Markov chain, one row position at a time across the sequences (each matrix is read
  // once per position, not once per sequence).
  Grow(markov_logits_, n * V);
  Grow(markov_row_, n * (H + R));
  Grow(draft_tokens_, n);  // each sequence's previous guess (out_r); the block's ids are done
  Grow(draft_conf_, n);
  for (int64_t i = 0; i < n; ++i) draft_tokens_[i] = batch.tokens[batch.seqs[i].token_offset];
  Grow(rows_, n * R);
  for (int64_t r = 0; r < B; ++r) {
    // rows_ [n, R] = markov_embed[out_r]; markov_row_ [n, H + R] = [x_r, markov_embed[out_r]],
    // the confidence head's input.
    kernels::EmbeddingLookup(*dspark_.markov_embed, draft_tokens_.data(), n, rows_.data());
    for (int64_t i = 0; i < n; ++i) {
      float* row = markov_row_.data() + i * (H + R);
      std::memcpy(row, draft_x_.data() + (i * B + r) * H, H * sizeof(float));
      std::memcpy(row + H, rows_.data() + i * R, R * sizeof(float));
    }
    kernels::MatMul(*dspark_.confidence, markov_row_.data(), n, draft_conf_.data(), pool);
    kernels::MatMul(*dspark_.markov_head, rows_.data(), n, markov_logits_.data(), pool);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = i * B + r;
      float* lg = draft_logits_.data() + t * V;
      const float* mk = markov_logits_.data() + i * V;
      for (int64_t v = 0; v < V; ++v) lg[v] += mk[v];
      confidence[t] = 1.0f / (1.0f + std::exp(-draft_conf_[i]));
      draft_tokens_[i] = kernels::ArgMax(lg, static_cast<int32_t>(V));
      drafts[t] = draft_tokens_[i];
    }
  }
}

// The reference overwrites the token embeddings of every span position (START / END / NEWLINE
// by the learned vectors, IMAGE by the aligner rows) before the hc streams start; the span's
// token ids (image_token_id) are looked up and then discarded.
void DeepseekV41Impl::WriteSpanRows(const ForwardBatch& batch) {
  // Only a model with a vision tower routes by bias_vl (the engine refuses images otherwise).
  DI_CHECK(vision_ != nullptr);
  const int64_t H = cfg_.hidden;
  int64_t r = 0;
  for (int64_t t = 0; t < batch.num_tokens; ++t) {
    if (batch.token_types[t] < 0) continue;
    DI_CHECK(batch.span_rows != nullptr);
    std::memcpy(h_.data() + t * H, batch.span_rows + r * H, H * sizeof(float));
    ++r;
  }
}

void DeepseekV41Impl::Forward(const ForwardBatch& batch, KvCache& kv, float* logits,
                              util::ThreadPool& pool) {
  const int stages = dspark_on_ ? static_cast<int>(dspark_.stages.size()) : 0;
  DI_CHECK(kv.window != nullptr && kv.num_layers >= cfg_.num_layers + (keep_classes_ ? 1 : 0) &&
           kv.window->num_layers >= cfg_.num_layers + stages &&
           kv.window->block_size == kv.block_size);
  attention_.BindCache(cfg_.num_layers, [&](int l) -> const dsv4::Csa2Layer& {
    return layers_[l].csa;
  }, kv);
  const int64_t T = batch.num_tokens, H = cfg_.hidden, hc = ds_.hc_mult;
  Grow(positions_, T);
  BatchPositions(batch, positions_.data());
  rope_.Compute(positions_.data(), T);
  Grow(h_, T * H);
  kernels::EmbeddingLookup(*embed_, batch.tokens, T, h_.data());
  if (batch.token_types != nullptr) WriteSpanRows(batch);
  StartStreams(T);
  if (keep_classes_) engram_.Hashes(batch, kv, cfg_.num_layers);
  const int64_t num_taps = dspark_on_ ? static_cast<int64_t>(dspark_.taps.size()) : 0;
  if (num_taps > 0) Grow(taps_, T * num_taps * H);
  const std::vector<float> stream_mean(static_cast<size_t>(hc), 1.0f / static_cast<float>(hc));
  for (int l = 0; l < cfg_.num_layers; ++l) {
    const Layer& L = layers_[l];
    for (int64_t k = 0; k < num_taps; ++k) {
      if (dspark_.taps[k] != l) continue;
      // DSpark tap: the mean of the streams entering layer l (research notes 5.5).
      for (int64_t t = 0; t < T; ++t) {
        dsv4::HcCollapse(mhc_.data() + t * hc * H, stream_mean.data(), static_cast<int>(hc),
                         H, taps_.data() + (t * num_taps + k) * H);
      }
    }
    if (L.engram.index >= 0) engram_.Apply(L.engram, T, mhc_.data(), pool, batch.token_types);
    RunLayer(L, T, batch.token_types, pool, [&] {
      Grow(out_, T * H);
      attention_.Run(L, L.csa, l, batch, positions_.data(), rope_, h_.data(), qat_, kv,
                     out_.data(), pool);
    });
  }
  if (num_taps > 0) DsparkAbsorb(batch, kv, pool);
  const int32_t num_rows = batch.num_logit_rows();
  if (num_rows == 0 || logits == nullptr) return;
  Grow(rows_, int64_t{num_rows} * H);
  int32_t r = 0;
  for (const auto& s : batch.seqs) {
    for (int32_t i = s.num_tokens - s.num_logits; i < s.num_tokens; ++i) {
      const int64_t t = s.token_offset + i;
      dsv4::HcCollapse(mhc_.data() + t * hc * H, pre_mix_.data() + t * hc, static_cast<int>(hc),
                       H, rows_.data() + int64_t{r} * H);
      ++r;
    }
  }
  kernels::RmsNorm(rows_.data(), final_norm_.data(), num_rows, H, cfg_.rms_norm_eps, rows_.data());
  kernels::MatMul(*head_, rows_.data(), num_rows, logits, pool);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CausalLm>> CreateDeepseekV41(const model::Model& model,
                                                            ExpertExchange* experts) {
  if (!model.config.deepseek_v4 || !model.config.deepseek_v4->v41) {
    return InvalidArgumentError(util::codes::kBadConfig,
                                "model has no DeepSeek-V4.1 hyperparameters");
  }
  auto lm = std::make_unique<DeepseekV41Impl>(model, experts);
  DI_RETURN_IF_ERROR(lm->Init());
  return std::unique_ptr<CausalLm>(std::move(lm));
}

}  // namespace deepinfer::arch
