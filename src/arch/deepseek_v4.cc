// DeepSeek-V4 forward pass (mHC + sliding-window / compressed attention + MoE) over a paged
// per-token cache. One call handles any mix of prefill chunks and decode tokens from many
// sequences; projections run once over all tokens of the step, routed experts once over the
// tokens sent to each expert. Every per-token quantity lives in the token's own cache slot, so a
// sequence's logits do not depend on how its tokens were chunked or batched.

#include "arch/deepseek_v4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "arch/deepseek_v4_ops.h"
#include "arch/tensor_schema.h"
#include "arch/moe.h"
#include "arch/rope.h"
#include "fmt/format.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "model/block_scales.h"
#include "model/fp8.h"
#include "model/tensor_values.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::arch {
namespace {

using model::TensorView;
using Attn = model::DeepseekV4Config::Attention;
using dsv4::AttendSharedKv;
using dsv4::FakeQuantFp4;
using dsv4::FakeQuantFp8;
using dsv4::Hadamard;
using dsv4::HcCoefficients;
using dsv4::HcCollapse;
using dsv4::HcExpand;
using dsv4::RopeAt;
using dsv4::RopeInterleaved;
using dsv4::SqrtSoftplus;
using dsv4::UnweightedRmsNorm;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One mHC site: fn [(2 + hc) hc, hc H] f32, base [(2 + hc) hc], scale [3].
struct HcSite {
  const TensorView* fn = nullptr;
  std::vector<float> base, scale;
};

// A compressor: a = wkv x, z = wgate x ([coff * dim] each); ape [ratio, coff * dim]; norm [dim].
struct Compressor {
  const TensorView* wkv = nullptr;
  const TensorView* wgate = nullptr;
  std::vector<float> ape, norm;
  int dim = 0;
  int coff = 1;  // 2: overlapping windows (CSA)
};

struct Expert {
  const TensorView* w1 = nullptr;  // gate [I, H]
  const TensorView* w3 = nullptr;  // up [I, H]
  const TensorView* w2 = nullptr;  // down [H, I]
};

struct Layer {
  Attn kind = Attn::kSliding;
  int ratio = 0;
  HcSite hc_attn, hc_ffn;
  std::vector<float> attn_norm, ffn_norm, q_norm, kv_norm, sink;
  const TensorView* wq_a = nullptr;
  const TensorView* wq_b = nullptr;
  const TensorView* wkv = nullptr;
  const TensorView* wo_a = nullptr;
  const TensorView* wo_b = nullptr;
  Compressor comp, index_comp;
  const TensorView* index_wq_b = nullptr;
  const TensorView* index_weights = nullptr;
  const TensorView* router = nullptr;
  std::vector<float> router_bias;   // non-hash layers
  std::vector<int32_t> tid2eid;     // hash layers: [vocab, k]
  std::vector<Expert> experts;
  Expert shared;
  bool has_shared = false;
  // MTP module extras: x0_k = e_proj(enorm(Emb(x))) + h_proj(hnorm(X_k)); its own hc head + norm.
  const TensorView* e_proj = nullptr;
  const TensorView* h_proj = nullptr;
  std::vector<float> enorm, hnorm, head_norm;
  HcSite hc_head;
  // Float offsets inside a token's cache slot.
  int64_t off_a = 0, off_z = 0, off_entry = 0, off_ia = 0, off_iz = 0, off_ikey = 0;
  int64_t slot_floats = 0;
};

class DeepseekV4Impl final : public CausalLm {
 public:
  explicit DeepseekV4Impl(const model::Model& m)
      : model_(m), cfg_(m.config), ds_(*m.config.deepseek_v4), schema_(m, {.matrices = MatrixTypes::kBlockScaled}) {}

  absl::Status Init();
  const model::ModelConfig& config() const override { return cfg_; }
  int64_t kv_floats_per_token() const override { return kv_floats_; }
  void Forward(const ForwardBatch& batch, KvCache& kv, float* logits,
               util::ThreadPool& pool) override;
  int num_mtp_layers() const override { return static_cast<int>(mtp_.size()); }
  bool SetNumerics(Numerics numerics) override {
    if (numerics != Numerics::kFast && numerics != Numerics::kDeepseekQat) return false;
    qat_ = numerics == Numerics::kDeepseekQat;
    return true;
  }
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
  absl::StatusOr<HcSite> LoadHc(const std::string& prefix, int64_t mix_rows);
  absl::StatusOr<Compressor> LoadCompressor(const std::string& prefix, int dim, int coff,
                                            int ratio);
  absl::StatusOr<std::vector<int32_t>> LoadTid2eid(const std::string& name);
  absl::StatusOr<Layer> LoadLayer(const std::string& prefix, int l);
  absl::StatusOr<HcSite> LoadHead(const std::string& prefix);
  void RunBlock(const Layer& L, int kv_layer, const ForwardBatch& batch, KvCache& kv,
                util::ThreadPool& pool);
  void Logits(const ForwardBatch& batch, const HcSite& head, const std::vector<float>& norm,
              float* logits, util::ThreadPool& pool);

  void Prepare(const ForwardBatch& batch);
  void HcPre(const HcSite& site, int64_t T, util::ThreadPool& pool);
  void HcPost(int64_t T);
  void RopeRow(float* x, const float* cos, const float* sin, bool inverse) const;
  void Attention(const Layer& L, int kv_layer, const ForwardBatch& batch, KvCache& kv,
                 util::ThreadPool& pool);
  void EmitEntries(const Layer& L, const Compressor& c, int64_t off_a, int64_t off_z,
                   int64_t off_out, bool index_keys, int kv_layer, const SequenceSlice& s,
                   KvCache& kv);
  void QuantizeKv(float* x, int64_t dim) const;
  void QuantizeIndex(float* x) const;
  void SelectIndexed(const Layer& L, int kv_layer, const ForwardBatch& batch, KvCache& kv,
                     util::ThreadPool& pool);
  void Moe(const Layer& L, const int32_t* tokens, int64_t T, util::ThreadPool& pool);
  void RunExpert(const Expert& e, const float* in, int64_t n, float* out, util::ThreadPool& pool);

  const model::Model& model_;
  model::ModelConfig cfg_;
  model::DeepseekV4Config ds_;
  TensorSchema schema_;
  std::vector<Layer> layers_;
  std::vector<Layer> mtp_;
  int64_t last_tokens_ = 0;  // tokens of the last Forward (FinalHidden)
  const TensorView* embed_ = nullptr;
  const TensorView* head_ = nullptr;
  std::vector<float> final_norm_;
  HcSite hc_head_;  // fn [hc, hc H], base [hc], scale [1]
  std::vector<float> inv_freq_main_, inv_freq_compress_;
  float compress_mscale_ = 1.0f;
  int64_t kv_floats_ = 0;
  bool qat_ = false;               // Numerics::kDeepseekQat
  bool released_formats_ = false;  // some weights are FP8 / FP4 with E8M0 scales

  // Scratch, grown on demand.
  std::vector<float> streams_, streams_next_, hc_mix_, hc_post_, hc_comb_, x_, h_, qr_, q_, kvrow_;
  std::vector<float> ca_, cz_, ia_, iz_, iq_, iw_, attn_, out_, tmp_;
  std::vector<float> cos_main_, sin_main_, cos_comp_, sin_comp_, rows_;
  std::vector<float> router_logits_, route_w_, moe_out_;
  std::vector<float> thread_scratch_;
  std::vector<int32_t> thread_order_;
  std::vector<float> index_keys_, index_scores_;
  std::vector<const float*> thread_keys_;
  std::vector<int32_t> positions_, route_idx_;
  MoeDispatch moe_;
  dsv4::Scratch out_scratch_, expert_scratch_;
  // Selected compressed entries per token of a CSA layer: [T, index_topk], -1 padded.
  std::vector<int32_t> selected_;
  int64_t thread_stride_ = 0;
};

template <typename V>
void Grow(V& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

absl::StatusOr<HcSite> DeepseekV4Impl::LoadHc(const std::string& p, int64_t mix_rows) {
  HcSite s;
  const int64_t hc = ds_.hc_mult;
  DI_ASSIGN_OR_RETURN(s.fn, Mat(p + "fn", mix_rows, hc * cfg_.hidden));
  DI_RETURN_IF_ERROR(model::CheckFinite(*s.fn, /*full=*/true));
  DI_ASSIGN_OR_RETURN(s.base, Vec(p + "base", {mix_rows}));
  DI_ASSIGN_OR_RETURN(s.scale, Vec(p + "scale", {mix_rows == hc ? 1 : 3}));
  return s;
}

absl::StatusOr<Compressor> DeepseekV4Impl::LoadCompressor(const std::string& p, int dim, int coff,
                                                          int ratio) {
  Compressor c;
  c.dim = dim;
  c.coff = coff;
  DI_ASSIGN_OR_RETURN(c.wkv, Mat(p + "wkv.weight", int64_t{coff} * dim, cfg_.hidden));
  DI_ASSIGN_OR_RETURN(c.wgate, Mat(p + "wgate.weight", int64_t{coff} * dim, cfg_.hidden));
  DI_ASSIGN_OR_RETURN(c.ape, Vec(p + "ape", {ratio, int64_t{coff} * dim}));
  DI_ASSIGN_OR_RETURN(c.norm, Vec(p + "norm.weight", {dim}));
  return c;
}

// The hash-routing table: int64 in the release, F32/BF16 (integral values) accepted too.
absl::StatusOr<std::vector<int32_t>> DeepseekV4Impl::LoadTid2eid(const std::string& name) {
  DI_ASSIGN_OR_RETURN(const TensorView* t, model_.Get(name));
  const int64_t k = ds_.num_experts_per_tok;
  if (t->shape != std::vector<int64_t>{cfg_.vocab, k}) {
    return InvalidArgumentError(
        util::codes::kShapeMismatch,
        fmt::format("tensor '{}' has shape {}, the config implies {}", name,
                    model::ShapeString(t->shape), model::ShapeString({cfg_.vocab, k})));
  }
  const int64_t n = t->num_elements();
  std::vector<int32_t> out(static_cast<size_t>(n));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < cfg_.vocab; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      double v = 0;
      if (t->dtype == model::DType::kI64) {
        int64_t x;
        std::memcpy(&x, t->data + (r * k + j) * 8, 8);
        v = static_cast<double>(x);
      } else if (kernels::HasCpuKernel(t->dtype) && !model::IsQuantized(t->dtype)) {
        if (j == 0) kernels::DequantizeRow(t->dtype, t->row(r), row.data(), k);
        v = row[j];
      } else {
        return UnimplementedError(
            util::codes::kUnsupportedDtype,
            fmt::format("tensor '{}' has dtype {}", name, model::DTypeName(t->dtype)));
      }
      if (!(v >= 0 && v < ds_.n_routed_experts) || v != std::floor(v)) {
        return InvalidArgumentError(util::codes::kBadTensor,
                                    fmt::format("tensor '{}' row {} names expert {} (experts: {})",
                                                name, r, v, ds_.n_routed_experts));
      }
      out[r * k + j] = static_cast<int32_t>(v);
    }
  }
  schema_.MarkUsed(name);
  return out;
}

// Block `l` (main layers, then MTP modules) under `p` ("layers.N." or "mtp.K.").
absl::StatusOr<Layer> DeepseekV4Impl::LoadLayer(const std::string& p, int l) {
  const std::string a = p + "attn.", f = p + "ffn.";
  const int64_t H = cfg_.hidden, nh = cfg_.num_heads, hd = cfg_.head_dim;
  const int64_t hc = ds_.hc_mult, mix = (2 + hc) * hc;
  Layer L;
  L.kind = ds_.attention[l];
  L.ratio = ds_.compress_ratio[l];
  DI_ASSIGN_OR_RETURN(L.hc_attn, LoadHc(p + "hc_attn_", mix));
  DI_ASSIGN_OR_RETURN(L.hc_ffn, LoadHc(p + "hc_ffn_", mix));
  DI_ASSIGN_OR_RETURN(L.attn_norm, Vec(p + "attn_norm.weight", {H}));
  DI_ASSIGN_OR_RETURN(L.ffn_norm, Vec(p + "ffn_norm.weight", {H}));
  DI_ASSIGN_OR_RETURN(L.sink, Vec(a + "attn_sink", {nh}));
  DI_ASSIGN_OR_RETURN(L.wq_a, Mat(a + "wq_a.weight", ds_.q_lora_rank, H));
  DI_ASSIGN_OR_RETURN(L.q_norm, Vec(a + "q_norm.weight", {ds_.q_lora_rank}));
  DI_ASSIGN_OR_RETURN(L.wq_b, Mat(a + "wq_b.weight", nh * hd, ds_.q_lora_rank));
  DI_ASSIGN_OR_RETURN(L.wkv, Mat(a + "wkv.weight", hd, H));
  DI_ASSIGN_OR_RETURN(L.kv_norm, Vec(a + "kv_norm.weight", {hd}));
  DI_ASSIGN_OR_RETURN(L.wo_a, Mat(a + "wo_a.weight", int64_t{ds_.o_groups} * ds_.o_lora_rank,
                                  nh * hd / ds_.o_groups));
  DI_ASSIGN_OR_RETURN(L.wo_b, Mat(a + "wo_b.weight", H, int64_t{ds_.o_groups} * ds_.o_lora_rank));
  int64_t off = hd;
  if (L.kind != Attn::kSliding) {
    const int coff = L.kind == Attn::kCsa ? 2 : 1;
    DI_ASSIGN_OR_RETURN(L.comp, LoadCompressor(a + "compressor.", static_cast<int>(hd), coff,
                                               L.ratio));
    L.off_a = off;
    L.off_z = off + coff * hd;
    L.off_entry = off + 2 * coff * hd;
    off = L.off_entry + hd;
  }
  if (L.kind == Attn::kCsa) {
    const int64_t ih = ds_.index_n_heads, ihd = ds_.index_head_dim;
    DI_ASSIGN_OR_RETURN(L.index_wq_b, Mat(a + "indexer.wq_b.weight", ih * ihd, ds_.q_lora_rank));
    DI_ASSIGN_OR_RETURN(L.index_weights, Mat(a + "indexer.weights_proj.weight", ih, H));
    DI_ASSIGN_OR_RETURN(L.index_comp, LoadCompressor(a + "indexer.compressor.",
                                                     static_cast<int>(ihd), 2, L.ratio));
    L.off_ia = off;
    L.off_iz = off + 2 * ihd;
    L.off_ikey = off + 4 * ihd;
    off = L.off_ikey + ihd;
  }
  L.slot_floats = off;
  const int64_t E = ds_.n_routed_experts, I = ds_.moe_intermediate_size;
  DI_ASSIGN_OR_RETURN(L.router, Mat(f + "gate.weight", E, H));
  if (l < cfg_.num_layers && ds_.hash_routed[l]) {
    DI_ASSIGN_OR_RETURN(L.tid2eid, LoadTid2eid(f + "gate.tid2eid"));
  } else {
    DI_ASSIGN_OR_RETURN(L.router_bias, Vec(f + "gate.bias", {E}));
  }
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = fmt::format("{}experts.{}.", f, e);
    Expert ex;
    DI_ASSIGN_OR_RETURN(ex.w1, Mat(x + "w1.weight", I, H));
    DI_ASSIGN_OR_RETURN(ex.w3, Mat(x + "w3.weight", I, H));
    DI_ASSIGN_OR_RETURN(ex.w2, Mat(x + "w2.weight", H, I));
    L.experts.push_back(ex);
  }
  if (ds_.n_shared_experts > 0) {
    const std::string x = f + "shared_experts.";
    DI_ASSIGN_OR_RETURN(L.shared.w1, Mat(x + "w1.weight", I, H));
    DI_ASSIGN_OR_RETURN(L.shared.w3, Mat(x + "w3.weight", I, H));
    DI_ASSIGN_OR_RETURN(L.shared.w2, Mat(x + "w2.weight", H, I));
    L.has_shared = true;
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
        fmt::format("embed.weight has dtype {}", model::DTypeName(embed_->dtype)));
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
    kv_floats_ = std::max(kv_floats_, L.slot_floats);
    layers_.push_back(std::move(L));
  }
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
    kv_floats_ = std::max(kv_floats_, L.slot_floats);
    mtp_.push_back(std::move(L));
  }
  for (const auto& [name, t] : model_.tensors) released_formats_ |= t.scale != nullptr;
  // Every tensor must have a place.
  DI_RETURN_IF_ERROR(schema_.CheckAllPlaced("DeepSeek-V4"));
  inv_freq_main_ = ComputeRopeFrequencies(cfg_.rope_dim, cfg_.rope_theta, std::nullopt).inv_freq;
  inv_freq_compress_ =
      ComputeRopeFrequencies(cfg_.rope_dim, ds_.compress_rope_theta, ds_.compress_yarn).inv_freq;
  compress_mscale_ = ds_.compress_rope_mscale;
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

void DeepseekV4Impl::Prepare(const ForwardBatch& batch) {
  const int64_t T = batch.num_tokens, half = cfg_.rope_dim / 2;
  Grow(positions_, T);
  for (const auto& s : batch.seqs) {
    for (int32_t i = 0; i < s.num_tokens; ++i) positions_[s.token_offset + i] = s.start_pos + i;
  }
  Grow(cos_main_, T * half);
  Grow(sin_main_, T * half);
  Grow(cos_comp_, T * half);
  Grow(sin_comp_, T * half);
  for (int64_t t = 0; t < T; ++t) {
    RopeAt(inv_freq_main_, 1.0f, positions_[t], cos_main_.data() + t * half,
           sin_main_.data() + t * half);
    RopeAt(inv_freq_compress_, compress_mscale_, positions_[t], cos_comp_.data() + t * half,
           sin_comp_.data() + t * half);
  }
}

// Interleaved RoPE on the last rope_dim values of x (head_dim long): pairs (2i, 2i+1) of the
// rotary slice; `inverse` rotates by the conjugate (-sin), as transformers undoes the rotation
// that V picked up.
void DeepseekV4Impl::RopeRow(float* x, const float* c, const float* s, bool inverse) const {
  RopeInterleaved(x, c, s, cfg_.rope_dim / 2, inverse);
}

// A cached key/value (window or compressed entry) under kDeepseekQat: its non-rotary part as FP8
// per 64 values (the rotary tail stays float, as DeepSeek stores it).
void DeepseekV4Impl::QuantizeKv(float* x, int64_t dim) const {
  if (qat_) FakeQuantFp8(x, dim - cfg_.rope_dim, 64, 1e-4f);
}

// An indexer query head or key under kDeepseekQat: Hadamard-rotated (when index_head_dim is a
// power of two), then FP4 per 32.
void DeepseekV4Impl::QuantizeIndex(float* x) const {
  if (!qat_) return;
  const int64_t n = ds_.index_head_dim;
  if ((n & (n - 1)) == 0) Hadamard(x, n);
  FakeQuantFp4(x, n, 32);
}

// mHC at one site: from the streams X [T, hc, H] computes post [T, hc], comb [T, hc, hc] (in
// hc_post_ / hc_comb_) and the collapsed input x_ [T, H] = sum_j pre_j X_j.
void DeepseekV4Impl::HcPre(const HcSite& site, int64_t T, util::ThreadPool& pool) {
  const int64_t hc = ds_.hc_mult, H = cfg_.hidden, D = hc * H, mix = (2 + hc) * hc;
  const float eps = cfg_.rms_norm_eps, heps = ds_.hc_eps;
  Grow(tmp_, T * D);
  UnweightedRmsNorm(streams_.data(), T, D, eps, tmp_.data());
  Grow(hc_mix_, T * mix);
  kernels::MatMul(*site.fn, tmp_.data(), T, hc_mix_.data(), pool);
  Grow(hc_post_, T * hc);
  Grow(hc_comb_, T * hc * hc);
  Grow(x_, T * H);
  for (int64_t t = 0; t < T; ++t) {
    float pre[64];
    HcCoefficients(hc_mix_.data() + t * mix, site.base.data(), site.scale.data(),
                   static_cast<int>(hc), heps, ds_.hc_sinkhorn_iters, pre, hc_post_.data() + t * hc,
                   hc_comb_.data() + t * hc * hc);
    HcCollapse(streams_.data() + t * D, pre, static_cast<int>(hc), H, x_.data() + t * H);
  }
}

// X'_k = post_k * y + sum_j comb[j][k] X_j with the sublayer output y in out_ [T, H].
void DeepseekV4Impl::HcPost(int64_t T) {
  const int64_t hc = ds_.hc_mult, H = cfg_.hidden, D = hc * H;
  Grow(streams_next_, T * D);
  for (int64_t t = 0; t < T; ++t) {
    HcExpand(streams_.data() + t * D, out_.data() + t * H, hc_post_.data() + t * hc,
             hc_comb_.data() + t * hc * hc, static_cast<int>(hc), H, streams_next_.data() + t * D);
  }
  std::swap(streams_, streams_next_);
}

// Writes the entries that the slice's tokens close: entry j (ratio r) pools the tokens of
// window j (and, overlapping, the first halves of window j - 1) by a per-channel softmax of
// z + ape over those tokens, then kv norm and RoPE at position r j; stored in the slot of
// position r (j + 1) - 1 at `off_out`.
void DeepseekV4Impl::EmitEntries(const Layer& L, const Compressor& c, int64_t off_a,
                                 int64_t off_z, int64_t off_out, bool index_keys, int kv_layer,
                                 const SequenceSlice& s, KvCache& kv) {
  const int r = L.ratio, dim = c.dim, coff = c.coff;
  const int half = cfg_.rope_dim / 2;
  std::vector<float>& buf = rows_;
  Grow(buf, int64_t{4} * dim + 2 * half);
  float* num = buf.data();
  float* den = num + dim;
  float* mx = den + dim;
  float* cs = mx + dim + dim;
  float* sn = cs + half;
  auto slot = [&](int32_t pos) {
    return kv.Slot(kv_layer, s.block_table[pos / kv.block_size], pos % kv.block_size);
  };
  for (int32_t i = 0; i < s.num_tokens; ++i) {
    const int32_t p = s.start_pos + i;
    if ((p + 1) % r != 0) continue;
    const int32_t j = (p + 1) / r - 1, first = r * j;
    // Members: (position, channel offset within a/z, ape row offset).
    std::fill(mx, mx + dim, kNegInf);
    auto visit = [&](auto&& fn) {
      if (coff == 2 && j > 0) {
        for (int t = 0; t < r; ++t) fn(first - r + t, 0, t * coff * dim);
      }
      for (int t = 0; t < r; ++t) fn(first + t, coff == 2 ? dim : 0, t * coff * dim + (coff - 1) * dim);
    };
    visit([&](int32_t pos, int64_t ch, int64_t ape) {
      const float* z = slot(pos) + off_z + ch;
      for (int d = 0; d < dim; ++d) mx[d] = std::max(mx[d], z[d] + c.ape[ape + d]);
    });
    std::fill(num, num + dim, 0.0f);
    std::fill(den, den + dim, 0.0f);
    // Softmax weights first (as transformers: normalized, then the weighted sum).
    visit([&](int32_t pos, int64_t ch, int64_t ape) {
      const float* z = slot(pos) + off_z + ch;
      for (int d = 0; d < dim; ++d) den[d] += std::exp(z[d] + c.ape[ape + d] - mx[d]);
    });
    visit([&](int32_t pos, int64_t ch, int64_t ape) {
      const float* z = slot(pos) + off_z + ch;
      const float* a = slot(pos) + off_a + ch;
      for (int d = 0; d < dim; ++d) {
        num[d] += a[d] * (std::exp(z[d] + c.ape[ape + d] - mx[d]) / den[d]);
      }
    });
    float* out = slot(p) + off_out;
    kernels::RmsNorm(num, c.norm.data(), 1, dim, cfg_.rms_norm_eps, out);
    RopeAt(inv_freq_compress_, compress_mscale_, first, cs, sn);
    RopeRow(out + dim - cfg_.rope_dim, cs, sn, /*inverse=*/false);
    if (index_keys) {
      QuantizeIndex(out);
    } else {
      QuantizeKv(out, dim);
    }
  }
}

// CSA: the lightning indexer's choice of compressed entries for every token of the batch, into
// selected_ [T, index_topk] (-1 padded).
void DeepseekV4Impl::SelectIndexed(const Layer& L, int kv_layer, const ForwardBatch& batch,
                                   KvCache& kv, util::ThreadPool& pool) {
  const int64_t T = batch.num_tokens, ih = ds_.index_n_heads, ihd = ds_.index_head_dim;
  const int64_t K = ds_.index_topk, half = cfg_.rope_dim / 2;
  Grow(iq_, T * ih * ihd);
  Grow(iw_, T * ih);
  kernels::MatMul(*L.index_wq_b, qr_.data(), T, iq_.data(), pool);
  kernels::MatMul(*L.index_weights, h_.data(), T, iw_.data(), pool);
  const float wscale = 1.0f / std::sqrt(static_cast<float>(ih));
  const float qscale = 1.0f / std::sqrt(static_cast<float>(ihd));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < ih; ++h) {
      float* q = iq_.data() + (t * ih + h) * ihd;
      RopeRow(q + ihd - cfg_.rope_dim, cos_comp_.data() + t * half, sin_comp_.data() + t * half,
              false);
      QuantizeIndex(q);
      iw_[t * ih + h] *= wscale;
    }
  }
  Grow(selected_, T * K);
  // Per slice: the index keys its tokens can see, gathered once into a dense [V, ihd] matrix,
  // scored against kIndexTokens tokens' heads at a time by the matmul kernel (the lightning
  // indexer is quadratic in the context; as a matmul it runs at the kernel's speed). Each score
  // is one matmul output, so its value does not depend on the batch.
  constexpr int64_t kIndexTokens = 16;
  for (const auto& s : batch.seqs) {
    const int64_t V = (s.start_pos + s.num_tokens) / L.ratio;
    for (int32_t i = 0; i < s.num_tokens; ++i) {
      int32_t* sel = selected_.data() + (s.token_offset + i) * K;
      std::fill(sel, sel + K, -1);
      const int32_t visible = (s.start_pos + i + 1) / L.ratio;
      for (int32_t j = 0; j < std::min<int64_t>(visible, K); ++j) sel[j] = j;
    }
    if (V <= K) continue;  // every token keeps all it sees
    Grow(index_keys_, V * ihd);
    for (int64_t j = 0; j < V; ++j) {
      const int64_t pos = L.ratio * (j + 1) - 1;
      std::memcpy(index_keys_.data() + j * ihd,
                  kv.Slot(kv_layer, s.block_table[pos / kv.block_size], pos % kv.block_size) +
                      L.off_ikey,
                  ihd * sizeof(float));
    }
    TensorView keys;
    keys.name = "index_keys";
    keys.dtype = model::DType::kF32;
    keys.shape = {V, ihd};
    keys.data = reinterpret_cast<const uint8_t*>(index_keys_.data());
    keys.size_bytes = static_cast<size_t>(V * ihd) * sizeof(float);
    Grow(index_scores_, kIndexTokens * ih * V);
    Grow(thread_scratch_, int64_t{pool.num_threads()} * V);
    Grow(thread_order_, int64_t{pool.num_threads()} * V);
    // Only tokens that see more than K entries need scores.
    const int32_t first = std::max<int32_t>(0, static_cast<int32_t>((K + 1) * L.ratio - 1) -
                                                    s.start_pos);
    for (int32_t i0 = first; i0 < s.num_tokens; i0 += kIndexTokens) {
      const int32_t n = std::min<int32_t>(kIndexTokens, s.num_tokens - i0);
      const int64_t t0 = s.token_offset + i0;
      kernels::MatMul(keys, iq_.data() + t0 * ih * ihd, n * ih, index_scores_.data(), pool);
      pool.ParallelFor(n, [&](int64_t begin, int64_t end, int thread) {
        float* score = thread_scratch_.data() + thread * V;
        int32_t* order = thread_order_.data() + thread * V;
        for (int64_t i = begin; i < end; ++i) {
          const int64_t t = t0 + i;
          const int32_t visible = (positions_[t] + 1) / L.ratio;
          if (visible <= K) continue;
          const float* w = iw_.data() + t * ih;
          const float* sh = index_scores_.data() + i * ih * V;
          for (int32_t j = 0; j < visible; ++j) {
            float acc = 0;
            for (int64_t h = 0; h < ih; ++h) acc += std::max(sh[h * V + j], 0.0f) * qscale * w[h];
            score[j] = acc;
            order[j] = j;
          }
          std::partial_sort(order, order + K, order + visible, [&](int32_t a, int32_t b) {
            return score[a] > score[b] || (score[a] == score[b] && a < b);
          });
          std::copy(order, order + K, selected_.data() + t * K);
        }
      });
    }
  }
}

void DeepseekV4Impl::Attention(const Layer& L, int kv_layer, const ForwardBatch& batch,
                               KvCache& kv, util::ThreadPool& pool) {
  const int64_t T = batch.num_tokens, nh = cfg_.num_heads, hd = cfg_.head_dim;
  const int64_t H = cfg_.hidden, half = cfg_.rope_dim / 2, rd = cfg_.rope_dim;
  const bool compressed = L.kind != Attn::kSliding;
  const float* cosv = compressed ? cos_comp_.data() : cos_main_.data();
  const float* sinv = compressed ? sin_comp_.data() : sin_main_.data();
  // Queries: q LoRA, per-head weightless RMS norm, RoPE.
  Grow(qr_, T * ds_.q_lora_rank);
  Grow(q_, T * nh * hd);
  kernels::MatMul(*L.wq_a, h_.data(), T, qr_.data(), pool);
  kernels::RmsNorm(qr_.data(), L.q_norm.data(), T, ds_.q_lora_rank, cfg_.rms_norm_eps, qr_.data());
  kernels::MatMul(*L.wq_b, qr_.data(), T, q_.data(), pool);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < nh; ++h) {
      float* q = q_.data() + (t * nh + h) * hd;
      UnweightedRmsNorm(q, 1, hd, cfg_.rms_norm_eps, q);
      RopeRow(q + hd - rd, cosv + t * half, sinv + t * half, false);
    }
  }
  // This step's key/values (and compressor projections) into the tokens' slots.
  Grow(kvrow_, T * hd);
  kernels::MatMul(*L.wkv, h_.data(), T, kvrow_.data(), pool);
  kernels::RmsNorm(kvrow_.data(), L.kv_norm.data(), T, hd, cfg_.rms_norm_eps, kvrow_.data());
  for (int64_t t = 0; t < T; ++t) {
    RopeRow(kvrow_.data() + t * hd + hd - rd, cosv + t * half, sinv + t * half, false);
    QuantizeKv(kvrow_.data() + t * hd, hd);
  }
  const int64_t ca_width = compressed ? int64_t{L.comp.coff} * hd : 0;
  const int64_t ia_width = L.kind == Attn::kCsa ? 2 * int64_t{ds_.index_head_dim} : 0;
  if (compressed) {
    Grow(ca_, T * ca_width);
    Grow(cz_, T * ca_width);
    const TensorView* ws[2] = {L.comp.wkv, L.comp.wgate};
    float* ys[2] = {ca_.data(), cz_.data()};
    kernels::MatMulGroup(ws, ys, 2, h_.data(), T, pool);
  }
  if (ia_width > 0) {
    Grow(ia_, T * ia_width);
    Grow(iz_, T * ia_width);
    const TensorView* ws[2] = {L.index_comp.wkv, L.index_comp.wgate};
    float* ys[2] = {ia_.data(), iz_.data()};
    kernels::MatMulGroup(ws, ys, 2, h_.data(), T, pool);
  }
  for (const auto& s : batch.seqs) {
    for (int32_t i = 0; i < s.num_tokens; ++i) {
      const int32_t pos = s.start_pos + i;
      const int64_t t = s.token_offset + i;
      float* slot = kv.Slot(kv_layer, s.block_table[pos / kv.block_size], pos % kv.block_size);
      std::memcpy(slot, kvrow_.data() + t * hd, hd * sizeof(float));
      if (compressed) {
        std::memcpy(slot + L.off_a, ca_.data() + t * ca_width, ca_width * sizeof(float));
        std::memcpy(slot + L.off_z, cz_.data() + t * ca_width, ca_width * sizeof(float));
      }
      if (ia_width > 0) {
        std::memcpy(slot + L.off_ia, ia_.data() + t * ia_width, ia_width * sizeof(float));
        std::memcpy(slot + L.off_iz, iz_.data() + t * ia_width, ia_width * sizeof(float));
      }
    }
  }
  if (compressed) {
    for (const auto& s : batch.seqs) {
      EmitEntries(L, L.comp, L.off_a, L.off_z, L.off_entry, false, kv_layer, s, kv);
      if (L.kind == Attn::kCsa) {
        EmitEntries(L, L.index_comp, L.off_ia, L.off_iz, L.off_ikey, true, kv_layer, s, kv);
      }
    }
  }
  if (L.kind == Attn::kCsa) SelectIndexed(L, kv_layer, batch, kv, pool);

  // Attention of every token over its window and compressed entries, kHeadGroup heads at a time:
  // the heads share one key/value per entry (MQA), so each entry is read once per group while it
  // is hot, for every head's score and then every head's weighted sum. The per-head arithmetic
  // is the same whatever the batch.
  constexpr int64_t kHeadGroup = 8;
  const int64_t groups = (nh + kHeadGroup - 1) / kHeadGroup;
  std::vector<int32_t> token_seq(static_cast<size_t>(T));
  int64_t max_keys = 0;
  for (size_t si = 0; si < batch.seqs.size(); ++si) {
    const auto& s = batch.seqs[si];
    for (int32_t i = 0; i < s.num_tokens; ++i) token_seq[s.token_offset + i] = static_cast<int32_t>(si);
    const int64_t ctx = s.start_pos + s.num_tokens;
    max_keys = std::max<int64_t>(max_keys, ds_.sliding_window + (compressed ? ctx / L.ratio : 0));
  }
  Grow(attn_, T * nh * hd);
  const int64_t stride = kHeadGroup * (max_keys + 1);
  Grow(thread_scratch_, int64_t{pool.num_threads()} * stride);
  Grow(thread_keys_, int64_t{pool.num_threads()} * (max_keys + 1));
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t K = ds_.index_topk;
  pool.ParallelFor(T * groups, [&](int64_t begin, int64_t end, int thread) {
    float* scores = thread_scratch_.data() + thread * stride;  // [head in group][entry]
    const float** keys = thread_keys_.data() + thread * (max_keys + 1);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / groups, h0 = (item % groups) * kHeadGroup;
      const int64_t heads = std::min(kHeadGroup, nh - h0);
      const SequenceSlice& s = batch.seqs[token_seq[t]];
      const int32_t p = positions_[t];
      int64_t n = 0;
      const int32_t lo = std::max(0, p - ds_.sliding_window + 1);
      auto slot = [&](int32_t pos) {
        return kv.Slot(kv_layer, s.block_table[pos / kv.block_size], pos % kv.block_size);
      };
      for (int32_t j = lo; j <= p; ++j) keys[n++] = slot(j);
      if (L.kind == Attn::kHca) {
        const int32_t visible = (p + 1) / L.ratio;
        for (int32_t j = 0; j < visible; ++j) keys[n++] = slot(L.ratio * (j + 1) - 1) + L.off_entry;
      } else if (L.kind == Attn::kCsa) {
        const int32_t* sel = selected_.data() + t * K;
        for (int64_t k = 0; k < K && sel[k] >= 0; ++k) {
          keys[n++] = slot(L.ratio * (sel[k] + 1) - 1) + L.off_entry;
        }
      }
      float* o = attn_.data() + (t * nh + h0) * hd;
      AttendSharedKv(q_.data() + (t * nh + h0) * hd, heads, keys, n, hd, scale,
                     L.sink.data() + h0, scores, o);
      for (int64_t h = 0; h < heads; ++h) {
        RopeRow(o + h * hd + hd - rd, cosv + t * half, sinv + t * half, /*inverse=*/true);
      }
    }
  });
  Grow(out_, T * H);
  dsv4::GroupedOutput(*L.wo_a, *L.wo_b, ds_.o_groups, ds_.o_lora_rank, attn_.data(), T, nh * hd,
                      out_scratch_, out_.data(), pool);
}

// One expert on n rows: w2(silu(min(w1 x, limit)) * clamp(w3 x, -limit, limit)); transformers
// clamps with the configured limit whatever it is.
void DeepseekV4Impl::RunExpert(const Expert& e, const float* in, int64_t n, float* out,
                               util::ThreadPool& pool) {
  dsv4::SwiGluExpert(*e.w1, *e.w3, *e.w2, in, n, ds_.swiglu_limit, /*clamp=*/true, nullptr,
                     expert_scratch_, out, pool);
}

void DeepseekV4Impl::Moe(const Layer& L, const int32_t* tokens, int64_t T,
                         util::ThreadPool& pool) {
  const int64_t H = cfg_.hidden;
  const int E = ds_.n_routed_experts, K = ds_.num_experts_per_tok;
  Grow(router_logits_, T * E);
  Grow(route_idx_, T * K);
  Grow(route_w_, T * K);
  kernels::MatMul(*L.router, h_.data(), T, router_logits_.data(), pool);
  std::vector<float> score(E);
  std::vector<int> order;
  for (int64_t t = 0; t < T; ++t) {
    const float* lg = router_logits_.data() + t * E;
    for (int e = 0; e < E; ++e) score[e] = SqrtSoftplus(lg[e]);
    int32_t* idx = route_idx_.data() + t * K;
    if (!L.tid2eid.empty()) {
      for (int k = 0; k < K; ++k) idx[k] = L.tid2eid[int64_t{tokens[t]} * K + k];
    } else {
      dsv4::SelectExperts(score.data(), L.router_bias.data(), E, K, order, idx);
    }
    float* w = route_w_.data() + t * K;
    float sum = 0;
    for (int k = 0; k < K; ++k) {
      w[k] = score[idx[k]];
      sum += w[k];
    }
    for (int k = 0; k < K; ++k) w[k] = w[k] / (sum + 1e-20f) * ds_.routed_scaling_factor;
  }
  Grow(moe_out_, T * H);
  // transformers applies the routing weight after w2 (MoeDispatch scales each expert's output).
  moe_.Run(route_idx_.data(), route_w_.data(), T, K, E, h_.data(), H, moe_out_.data(),
           [&](int e, const float* in, int64_t n, const float*, float* result) {
             RunExpert(L.experts[e], in, n, result, pool);
           });
  Grow(out_, T * H);
  if (L.has_shared) {
    RunExpert(L.shared, h_.data(), T, out_.data(), pool);
    // routed + shared, in transformers' order of the sum.
    for (int64_t i = 0; i < T * H; ++i) out_[i] = moe_out_[i] + out_[i];
  } else {
    std::memcpy(out_.data(), moe_out_.data(), T * H * sizeof(float));
  }
}

void DeepseekV4Impl::RunBlock(const Layer& L, int kv_layer, const ForwardBatch& batch,
                              KvCache& kv, util::ThreadPool& pool) {
  const int64_t T = batch.num_tokens, H = cfg_.hidden;
  HcPre(L.hc_attn, T, pool);
  kernels::RmsNorm(x_.data(), L.attn_norm.data(), T, H, cfg_.rms_norm_eps, h_.data());
  Attention(L, kv_layer, batch, kv, pool);
  HcPost(T);
  HcPre(L.hc_ffn, T, pool);
  kernels::RmsNorm(x_.data(), L.ffn_norm.data(), T, H, cfg_.rms_norm_eps, h_.data());
  Moe(L, batch.tokens, T, pool);
  HcPost(T);
}

void DeepseekV4Impl::Forward(const ForwardBatch& batch, KvCache& kv, float* logits,
                             util::ThreadPool& pool) {
  DI_CHECK(kv.floats_per_token == kv_floats_ && kv.num_layers >= cfg_.num_layers);
  const int64_t T = batch.num_tokens, H = cfg_.hidden, hc = ds_.hc_mult;
  Prepare(batch);
  Grow(h_, T * H);
  kernels::EmbeddingLookup(*embed_, batch.tokens, T, h_.data());
  Grow(streams_, T * hc * H);
  dsv4::HcReplicate(h_.data(), T, hc, H, streams_.data());
  for (int l = 0; l < cfg_.num_layers; ++l) RunBlock(layers_[l], l, batch, kv, pool);
  last_tokens_ = T;
  Logits(batch, hc_head_, final_norm_, logits, pool);
}

void DeepseekV4Impl::FinalHidden(float* out) const {
  std::memcpy(out, streams_.data(), last_tokens_ * mtp_hidden_size() * sizeof(float));
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
  Grow(streams_, T * D);
  kernels::MatMul(*L.h_proj, tmp_.data(), T * hc, streams_.data(), pool);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < hc; ++j) {
      kernels::AddInPlace(streams_.data() + t * D + j * H, x_.data() + t * H, H);
    }
  }
  RunBlock(L, k, batch, mtp_kv, pool);
  if (hidden_out != nullptr) std::memcpy(hidden_out, streams_.data(), T * D * sizeof(float));
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
  int32_t r = 0;
  for (const auto& s : batch.seqs) {
    for (int32_t i = s.num_tokens - s.num_logits; i < s.num_tokens; ++i) {
      std::memcpy(rows_.data() + int64_t{r} * D, streams_.data() + (s.token_offset + i) * D,
                  D * sizeof(float));
      ++r;
    }
  }
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

absl::StatusOr<std::unique_ptr<CausalLm>> CreateDeepseekV4(const model::Model& model) {
  if (!model.config.deepseek_v4) {
    return InvalidArgumentError(util::codes::kBadConfig,
                                "model has no DeepSeek-V4 hyperparameters");
  }
  if (model.config.deepseek_v4->hc_mult > 64) {
    return InvalidArgumentError(util::codes::kBadConfig, "hc_mult above 64");
  }
  auto lm = std::make_unique<DeepseekV4Impl>(model);
  DI_RETURN_IF_ERROR(lm->Init());
  return std::unique_ptr<CausalLm>(std::move(lm));
}

}  // namespace deepinfer::arch
