#include "arch/deepseek_v4_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "fmt/format.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "model/tensor_values.h"
#include "arch/rope.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::arch::dsv4 {

absl::StatusOr<HcSite> LoadHcSite(TensorSchema& schema, const std::string& p, int64_t hc,
                                  int64_t hidden) {
  const int64_t mix = (2 + hc) * hc;
  HcSite s;
  DI_ASSIGN_OR_RETURN(s.fn, schema.Mat(p + "fn", mix, hc * hidden));
  DI_RETURN_IF_ERROR(model::CheckFinite(*s.fn, /*full=*/true));
  DI_ASSIGN_OR_RETURN(s.base, schema.Vec(p + "base", {mix}));
  DI_ASSIGN_OR_RETURN(s.scale, schema.Vec(p + "scale", {3}));
  return s;
}

void MhcStreams::Start(const float* h, int64_t T) {
  HcReplicate(h, T, hc_, hidden_, Reserve(T));
}

void MhcStreams::Mixes(const HcSite& site, int64_t T, float* pre, util::ThreadPool& pool) {
  const int64_t D = hc_ * hidden_, mix = (2 + hc_) * hc_;
  Grow(flat_, T * D);
  UnweightedRmsNorm(x_.data(), T, D, rms_eps_, flat_.data());
  Grow(mix_, T * mix);
  kernels::MatMul(*site.fn, flat_.data(), T, mix_.data(), pool);
  Grow(post_, T * hc_);
  Grow(comb_, T * hc_ * hc_);
  for (int64_t t = 0; t < T; ++t) {
    HcCoefficients(mix_.data() + t * mix, site.base.data(), site.scale.data(),
                   static_cast<int>(hc_), hc_eps_, iters_, pre + t * hc_, post_.data() + t * hc_,
                   comb_.data() + t * hc_ * hc_);
  }
}

void MhcStreams::Collapse(const float* pre, int64_t T, float* x) const {
  for (int64_t t = 0; t < T; ++t) {
    HcCollapse(x_.data() + t * hc_ * hidden_, pre + t * hc_, static_cast<int>(hc_), hidden_,
               x + t * hidden_);
  }
}

void MhcStreams::Expand(const float* y, int64_t T) {
  const int64_t D = hc_ * hidden_;
  Grow(next_, T * D);
  for (int64_t t = 0; t < T; ++t) {
    HcExpand(x_.data() + t * D, y + t * hidden_, post_.data() + t * hc_,
             comb_.data() + t * hc_ * hc_, static_cast<int>(hc_), hidden_, next_.data() + t * D);
  }
  std::swap(x_, next_);
}

absl::StatusOr<AttentionLayer> LoadAttentionLayer(TensorSchema& schema, const std::string& p,
                                                  const model::ModelConfig& cfg,
                                                  const model::DeepseekV4Config& ds) {
  const std::string a = p + "attn.";
  const int64_t H = cfg.hidden, nh = cfg.num_heads, hd = cfg.head_dim, hc = ds.hc_mult;
  const int64_t ow = int64_t{ds.o_groups} * ds.o_lora_rank;
  AttentionLayer L;
  DI_ASSIGN_OR_RETURN(L.hc_attn, LoadHcSite(schema, p + "hc_attn_", hc, H));
  DI_ASSIGN_OR_RETURN(L.hc_ffn, LoadHcSite(schema, p + "hc_ffn_", hc, H));
  DI_ASSIGN_OR_RETURN(L.attn_norm, schema.Vec(p + "attn_norm.weight", {H}));
  DI_ASSIGN_OR_RETURN(L.ffn_norm, schema.Vec(p + "ffn_norm.weight", {H}));
  DI_ASSIGN_OR_RETURN(L.sink, schema.Vec(a + "attn_sink", {nh}));
  DI_ASSIGN_OR_RETURN(L.wq_a, schema.Mat(a + "wq_a.weight", ds.q_lora_rank, H));
  DI_ASSIGN_OR_RETURN(L.q_norm, schema.Vec(a + "q_norm.weight", {ds.q_lora_rank}));
  DI_ASSIGN_OR_RETURN(L.wq_b, schema.Mat(a + "wq_b.weight", nh * hd, ds.q_lora_rank));
  DI_ASSIGN_OR_RETURN(L.wkv, schema.Mat(a + "wkv.weight", hd, H));
  DI_ASSIGN_OR_RETURN(L.kv_norm, schema.Vec(a + "kv_norm.weight", {hd}));
  DI_ASSIGN_OR_RETURN(L.wo_a, schema.Mat(a + "wo_a.weight", ow, nh * hd / ds.o_groups));
  DI_ASSIGN_OR_RETURN(L.wo_b, schema.Mat(a + "wo_b.weight", H, ow));
  DI_ASSIGN_OR_RETURN(L.wo_a_groups, OutputGroups(*L.wo_a, ds.o_groups, ds.o_lora_rank));
  return L;
}

absl::StatusOr<std::vector<tensor::TensorView>> OutputGroups(const tensor::TensorView& wo_a,
                                                             int64_t groups, int64_t olr) {
  // Block scales cover B = scale_block_rows rows each and the kernels find row r's at r / B, so a
  // group's view starts at the scale row of its first row: right when groups start on scale rows
  // (olr a multiple of B) or when a group lies within one scale block (small models).
  const bool scaled = kernels::IsBlockScaled(wo_a.dtype);
  const int64_t B = scaled ? wo_a.scale_block_rows : 1;
  const int64_t scale_cols =
      scaled ? (wo_a.cols() + wo_a.scale_block_cols - 1) / wo_a.scale_block_cols : 0;
  std::vector<tensor::TensorView> out;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t first = g * olr;
    if (scaled && olr % B != 0 && first % B + olr > B) {
      return InvalidArgumentError(
          util::codes::kShapeMismatch,
          fmt::format("tensor '{}': output group {} (rows {} to {}) straddles its {}-row scale "
                      "blocks",
                      wo_a.name, g, first, first + olr - 1, B));
    }
    tensor::TensorView v = wo_a;
    v.shape = {olr, wo_a.cols()};
    v.data = wo_a.row(first);
    v.size_bytes = static_cast<size_t>(olr) * wo_a.row_bytes();
    if (scaled) v.scale = wo_a.scale + first / B * scale_cols;
    out.push_back(std::move(v));
  }
  return out;
}

void RopeTables::Init(const model::ModelConfig& cfg, const model::DeepseekV4Config& ds) {
  rope_dim = cfg.rope_dim;
  inv_freq_main = ComputeRopeFrequencies(cfg.rope_dim, cfg.rope_theta, std::nullopt).inv_freq;
  inv_freq_comp =
      ComputeRopeFrequencies(cfg.rope_dim, ds.compress_rope_theta, ds.compress_yarn).inv_freq;
  comp_mscale = ds.compress_rope_mscale;
}

void RopeTables::Compute(const int32_t* positions, int64_t T) {
  const int64_t half = rope_dim / 2;
  Grow(cos_main, T * half);
  Grow(sin_main, T * half);
  Grow(cos_comp, T * half);
  Grow(sin_comp, T * half);
  for (int64_t t = 0; t < T; ++t) {
    RopeAt(inv_freq_main, 1.0f, positions[t], cos_main.data() + t * half,
           sin_main.data() + t * half);
    RopeAt(inv_freq_comp, comp_mscale, positions[t], cos_comp.data() + t * half,
           sin_comp.data() + t * half);
  }
}

void SharedKvAttention::Queries(const AttentionLayer& w, const float* h, int64_t T,
                                int64_t heads, int64_t head_dim, int rope_dim, float eps,
                                bool head_norm, const float* cos, const float* sin,
                                util::ThreadPool& pool) {
  const int64_t rank = w.wq_a->rows(), nh = heads, hd = head_dim, half = rope_dim / 2;
  Grow(qr_, T * rank);
  Grow(q_, T * nh * hd);
  kernels::MatMul(*w.wq_a, h, T, qr_.data(), pool);
  kernels::RmsNorm(qr_.data(), w.q_norm.data(), T, rank, eps, qr_.data());
  kernels::MatMul(*w.wq_b, qr_.data(), T, q_.data(), pool);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t hh = 0; hh < nh; ++hh) {
      float* q = q_.data() + (t * nh + hh) * hd;
      if (head_norm) UnweightedRmsNorm(q, 1, hd, eps, q);
      RopeInterleaved(q + hd - rope_dim, cos + t * half, sin + t * half, static_cast<int>(half),
                      false);
    }
  }
}

void SharedKvAttention::WindowKv(const tensor::TensorView& wkv, const std::vector<float>& kv_norm,
                                 const float* in, int64_t T, int rope_dim, float eps,
                                 const float* cos, const float* sin,
                                 absl::FunctionRef<void(float*)> quantize,
                                 util::ThreadPool& pool) {
  const int64_t hd = wkv.rows(), half = rope_dim / 2;
  Grow(kv_, T * hd);
  kernels::MatMul(wkv, in, T, kv_.data(), pool);
  kernels::RmsNorm(kv_.data(), kv_norm.data(), T, hd, eps, kv_.data());
  for (int64_t t = 0; t < T; ++t) {
    float* k = kv_.data() + t * hd;
    RopeInterleaved(k + hd - rope_dim, cos + t * half, sin + t * half, static_cast<int>(half),
                    false);
    quantize(k);
  }
}

void LightningIndexer::Queries(const tensor::TensorView& wq_b,
                               const tensor::TensorView& weights_proj, const float* qr,
                               const float* h, int64_t T, int64_t ih, int64_t ihd, int rope_dim,
                               const float* cos, const float* sin,
                               absl::FunctionRef<void(float*)> quantize,
                               util::ThreadPool& pool) {
  const int64_t half = rope_dim / 2;
  Grow(iq_, T * ih * ihd);
  Grow(iw_, T * ih);
  kernels::MatMul(wq_b, qr, T, iq_.data(), pool);
  kernels::MatMul(weights_proj, h, T, iw_.data(), pool);
  const float wscale = 1.0f / std::sqrt(static_cast<float>(ih));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t hh = 0; hh < ih; ++hh) {
      float* q = iq_.data() + (t * ih + hh) * ihd;
      RopeInterleaved(q + ihd - rope_dim, cos + t * half, sin + t * half, static_cast<int>(half),
                      false);
      quantize(q);
      iw_[t * ih + hh] *= wscale;
    }
  }
}

int EntryCache::Slots(int ratio, int64_t floats, int32_t block_size) {
  if (ratio <= 1 || block_size <= 0) return 1;
  const int slots = std::min(ratio, static_cast<int>(block_size));
  const bool aligned = ratio % block_size == 0 || block_size % ratio == 0;
  return aligned && floats % slots == 0 ? slots : 1;
}

EntryCache EntryCache::Bind(const KvCache& kv, int layer, int ratio, int64_t floats) {
  const int slots = Slots(ratio, floats, kv.block_size);
  DI_CHECK(kv.layer_floats[layer] * slots == floats);
  return {.layer = layer, .ratio = ratio, .shift = ratio - slots};
}

void SortTopK(const float* score, int32_t* order, int32_t m, int32_t keep) {
  std::partial_sort(order, order + keep, order + m, [&](int32_t a, int32_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
}

absl::StatusOr<MoeLayer> LoadMoeLayer(TensorSchema& schema, const std::string& f, int64_t E,
                                      int64_t I, int64_t H, int top_k, bool biased, bool shared,
                                      const ExpertExchange* experts) {
  MoeLayer L;
  L.top_k = top_k;
  DI_ASSIGN_OR_RETURN(L.router, schema.Mat(f + "gate.weight", E, H));
  if (biased) {
    DI_ASSIGN_OR_RETURN(L.router_bias, schema.Vec(f + "gate.bias", {E}));
  }
  auto load = [&](const std::string& x, bool read) -> absl::StatusOr<Expert> {
    Expert ex;
    DI_ASSIGN_OR_RETURN(ex.w1, schema.Mat(x + "w1.weight", I, H, read));
    DI_ASSIGN_OR_RETURN(ex.w3, schema.Mat(x + "w3.weight", I, H, read));
    DI_ASSIGN_OR_RETURN(ex.w2, schema.Mat(x + "w2.weight", H, I, read));
    return ex;
  };
  for (int64_t e = 0; e < E; ++e) {
    const bool local = experts == nullptr || experts->Owns(static_cast<int>(e), static_cast<int>(E));
    DI_ASSIGN_OR_RETURN(Expert ex, load(fmt::format("{}experts.{}.", f, e), local));
    L.experts.push_back(ex);
  }
  if (shared) {
    DI_ASSIGN_OR_RETURN(L.shared, load(f + "shared_experts.", true));
    L.has_shared = true;
  }
  return L;
}

absl::StatusOr<std::vector<int32_t>> LoadTid2eid(TensorSchema& schema, const model::Model& model,
                                                 const std::string& name, int64_t vocab, int k,
                                                 int experts) {
  DI_ASSIGN_OR_RETURN(const tensor::TensorView* t, model.Get(name));
  if (t->shape != std::vector<int64_t>{vocab, k}) {
    return InvalidArgumentError(
        util::codes::kShapeMismatch,
        fmt::format("tensor '{}' has shape {}, the config implies {}", name,
                    model::ShapeString(t->shape), model::ShapeString({vocab, k})));
  }
  std::vector<int32_t> out(static_cast<size_t>(t->num_elements()));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < vocab; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      double v = 0;
      if (t->dtype == tensor::DType::kI64) {
        int64_t x;
        std::memcpy(&x, t->data + (r * k + j) * 8, 8);
        v = static_cast<double>(x);
      } else if (kernels::HasCpuKernel(t->dtype) && !tensor::IsQuantized(t->dtype)) {
        if (j == 0) kernels::DequantizeRow(t->dtype, t->row(r), row.data(), k);
        v = row[j];
      } else {
        return UnimplementedError(
            util::codes::kUnsupportedDtype,
            fmt::format("tensor '{}' has dtype {}", name, tensor::DTypeName(t->dtype)));
      }
      if (!(v >= 0 && v < experts) || v != std::floor(v)) {
        return InvalidArgumentError(util::codes::kBadTensor,
                                    fmt::format("tensor '{}' row {} names expert {} (experts: {})",
                                                name, r, v, experts));
      }
      out[r * k + j] = static_cast<int32_t>(v);
    }
  }
  schema.MarkUsed(name);
  return out;
}

void MoeBlock::Run(const MoeLayer& L, const MoeOptions& opt, const float* x,
                   const int32_t* tokens, int64_t T, int64_t H, float* out,
                   util::ThreadPool& pool, const int8_t* token_types) {
  const int E = static_cast<int>(L.experts.size()), K = L.top_k;
  DI_CHECK(token_types == nullptr || !L.router_bias_vl.empty());
  Grow(router_logits_, T * E);
  Grow(route_idx_, T * K);
  Grow(route_w_, T * K);
  kernels::MatMul(*L.router, x, T, router_logits_.data(), pool);
  std::vector<float> score(E);
  std::vector<int> order;
  for (int64_t t = 0; t < T; ++t) {
    const float* lg = router_logits_.data() + t * E;
    for (int e = 0; e < E; ++e) score[e] = SqrtSoftplus(lg[e] / opt.gate_temp);
    int32_t* idx = route_idx_.data() + t * K;
    if (!L.tid2eid.empty()) {
      for (int k = 0; k < K; ++k) idx[k] = L.tid2eid[int64_t{tokens[t]} * K + k];
    } else {
      // Image-span rows select with their own bias (the reference's Gate.bias_vl).
      const bool image = token_types != nullptr && token_types[t] >= 0;
      SelectExperts(score.data(), image ? L.router_bias_vl.data() : L.router_bias.data(), E, K,
                    order, idx);
    }
    float* w = route_w_.data() + t * K;
    float sum = 0;
    for (int k = 0; k < K; ++k) {
      w[k] = score[idx[k]];
      sum += w[k];
    }
    for (int k = 0; k < K; ++k) {
      if (opt.normalize) w[k] = w[k] / (sum + 1e-20f);
      w[k] *= opt.routed_scaling;
    }
  }
  // The shared expert joins the first batch of routed experts (a decode step has one), so its
  // matrices share their parallel regions; it writes its own buffer since `out` may be `x`.
  const ExpertRows shared{-1, x, T, nullptr, nullptr};
  bool shared_done = !L.has_shared;
  if (L.has_shared) Grow(shared_out_, T * H);
  auto run_experts = [&](const ExpertRows* rows, int count) {
    expert_rows_.clear();
    expert_weights_.clear();
    if (!shared_done) {
      expert_rows_.push_back(shared);
      expert_rows_.back().result = shared_out_.data();
      expert_weights_.push_back(L.shared);
      shared_done = true;
    }
    for (int i = 0; i < count; ++i) {
      expert_rows_.push_back(rows[i]);
      expert_weights_.push_back(L.experts[rows[i].expert]);
    }
    experts_.Run(expert_weights_.data(), expert_rows_.data(), static_cast<int>(expert_rows_.size()),
                 opt.swiglu_limit, opt.clamp, pool);
  };
  Grow(moe_out_, T * H);
  dispatch_.Run(route_idx_.data(), route_w_.data(), T, K, E, x, H, moe_out_.data(), run_experts,
                opt.weight_before_w2);
  if (!shared_done) run_experts(nullptr, 0);  // no routed rows on this rank
  if (L.has_shared) {
    // routed + shared, in the reference's order of the sum.
    for (int64_t i = 0; i < T * H; ++i) out[i] = moe_out_[i] + shared_out_[i];
  } else {
    std::memcpy(out, moe_out_.data(), T * H * sizeof(float));
  }
}

}  // namespace deepinfer::arch::dsv4
