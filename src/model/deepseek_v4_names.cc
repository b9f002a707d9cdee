#include "model/deepseek_v4_names.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "model/tensor_values.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::model {
namespace {

// transformers' name (after "model.layers.L.") -> native name (after "layers.L.").
constexpr std::pair<std::string_view, std::string_view> kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"attn_hc.fn", "hc_attn_fn"},
    {"attn_hc.base", "hc_attn_base"},
    {"attn_hc.scale", "hc_attn_scale"},
    {"ffn_hc.fn", "hc_ffn_fn"},
    {"ffn_hc.base", "hc_ffn_base"},
    {"ffn_hc.scale", "hc_ffn_scale"},
    {"self_attn.sinks", "attn.attn_sink"},
    {"self_attn.q_a_proj.weight", "attn.wq_a.weight"},
    {"self_attn.q_a_norm.weight", "attn.q_norm.weight"},
    {"self_attn.q_b_proj.weight", "attn.wq_b.weight"},
    {"self_attn.kv_proj.weight", "attn.wkv.weight"},
    {"self_attn.kv_norm.weight", "attn.kv_norm.weight"},
    {"self_attn.o_a_proj.weight", "attn.wo_a.weight"},
    {"self_attn.o_b_proj.weight", "attn.wo_b.weight"},
    {"self_attn.compressor.kv_proj.weight", "attn.compressor.wkv.weight"},
    {"self_attn.compressor.gate_proj.weight", "attn.compressor.wgate.weight"},
    {"self_attn.compressor.position_bias", "attn.compressor.ape"},
    {"self_attn.compressor.kv_norm.weight", "attn.compressor.norm.weight"},
    {"self_attn.compressor.indexer.q_b_proj.weight", "attn.indexer.wq_b.weight"},
    {"self_attn.compressor.indexer.scorer.weights_proj.weight", "attn.indexer.weights_proj.weight"},
    {"self_attn.compressor.indexer.kv_proj.weight", "attn.indexer.compressor.wkv.weight"},
    {"self_attn.compressor.indexer.gate_proj.weight", "attn.indexer.compressor.wgate.weight"},
    {"self_attn.compressor.indexer.position_bias", "attn.indexer.compressor.ape"},
    {"self_attn.compressor.indexer.kv_norm.weight", "attn.indexer.compressor.norm.weight"},
    {"mlp.gate.weight", "ffn.gate.weight"},
    {"mlp.gate.e_score_correction_bias", "ffn.gate.bias"},
    {"mlp.gate.tid2eid", "ffn.gate.tid2eid"},
    {"mlp.shared_experts.gate_proj.weight", "ffn.shared_experts.w1.weight"},
    {"mlp.shared_experts.down_proj.weight", "ffn.shared_experts.w2.weight"},
    {"mlp.shared_experts.up_proj.weight", "ffn.shared_experts.w3.weight"},
};

constexpr std::pair<std::string_view, std::string_view> kTopNames[] = {
    {"model.embed_tokens.weight", "embed.weight"},
    {"lm_head.weight", "head.weight"},
    {"model.norm.weight", "norm.weight"},
    {"model.hc_head.hc_fn", "hc_head_fn"},
    {"model.hc_head.hc_base", "hc_head_base"},
    {"model.hc_head.hc_scale", "hc_head_scale"},
};

// Expert e's [rows, cols] matrix inside a fused [E, ...] tensor, starting at row `row0` of it.
TensorView ExpertView(const TensorView& fused, const std::string& name, int64_t e, int64_t row0,
                      int64_t rows) {
  TensorView v;
  v.name = name;
  v.dtype = fused.dtype;
  const int64_t cols = fused.shape[2];
  v.shape = {rows, cols};
  const size_t row_bytes = RowBytes(fused.dtype, cols);
  v.data = fused.data + (static_cast<size_t>(e * fused.shape[1] + row0)) * row_bytes;
  v.size_bytes = static_cast<size_t>(rows) * row_bytes;
  return v;
}

// The native name of a transformers name, or "" when it is not one.
std::string NativeName(const std::string& name, bool* fused_gate_up, bool* fused_down,
                       std::string* layer) {
  for (const auto& [hf, native] : kTopNames) {
    if (name == hf) return std::string(native);
  }
  constexpr std::string_view kPrefix = "model.layers.";
  if (name.rfind(kPrefix, 0) != 0) return "";
  const size_t dot = name.find('.', kPrefix.size());
  if (dot == std::string::npos) return "";
  *layer = name.substr(kPrefix.size(), dot - kPrefix.size());
  const std::string_view rest = std::string_view(name).substr(dot + 1);
  if (rest == "mlp.experts.gate_up_proj") *fused_gate_up = true;
  if (rest == "mlp.experts.down_proj") *fused_down = true;
  for (const auto& [hf, native] : kLayerNames) {
    if (rest == hf) return fmt::format("layers.{}.{}", *layer, native);
  }
  return "";
}

}  // namespace

absl::Status NormalizeDeepseekV4Names(Model& m) {
  std::vector<std::string> names;
  for (const auto& [name, t] : m.tensors) {
    if (name.rfind("model.", 0) == 0 || name == "lm_head.weight") names.push_back(name);
  }
  for (const std::string& name : names) {
    bool gate_up = false, down = false;
    std::string layer;
    const std::string native = NativeName(name, &gate_up, &down, &layer);
    const TensorView t = m.tensors.at(name);
    std::vector<TensorView> out;
    if (gate_up || down) {
      if (t.shape.size() != 3 || (gate_up && t.shape[1] % 2 != 0) ||
          RowBytes(t.dtype, t.shape[2]) == 0) {
        return InvalidArgumentError(
            util::codes::kShapeMismatch,
            fmt::format("fused expert tensor '{}' has shape {}", name, ShapeString(t.shape)));
      }
      for (int64_t e = 0; e < t.shape[0]; ++e) {
        const std::string p = fmt::format("layers.{}.ffn.experts.{}.", layer, e);
        if (gate_up) {
          const int64_t inner = t.shape[1] / 2;
          out.push_back(ExpertView(t, p + "w1.weight", e, 0, inner));
          out.push_back(ExpertView(t, p + "w3.weight", e, inner, inner));
        } else {
          out.push_back(ExpertView(t, p + "w2.weight", e, 0, t.shape[1]));
        }
      }
    } else if (!native.empty()) {
      TensorView v = t;
      v.name = native;
      out.push_back(std::move(v));
    } else {
      continue;
    }
    m.tensors.erase(name);
    for (TensorView& v : out) {
      const std::string key = v.name;
      if (!m.tensors.emplace(key, std::move(v)).second) {
        return DataLossError(
            util::codes::kBadHeader,
            fmt::format("tensor '{}' is stored under two names ('{}')", key, name));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status StripDeepseekV41ModelPrefix(Model& m) {
  constexpr std::string_view kPrefix = "model.";
  std::vector<std::string> names;
  for (const auto& [name, t] : m.tensors) {
    if (name.rfind(kPrefix, 0) == 0) names.push_back(name);
  }
  for (const std::string& name : names) {
    TensorView v = m.tensors.at(name);
    v.name = name.substr(kPrefix.size());
    m.tensors.erase(name);
    const std::string key = v.name;
    if (!m.tensors.emplace(key, std::move(v)).second) {
      return DataLossError(util::codes::kBadHeader,
                           fmt::format("tensor '{}' is stored under two names ('{}')", key, name));
    }
  }
  return absl::OkStatus();
}

}  // namespace deepinfer::model
