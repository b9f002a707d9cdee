#include "model/hf_config.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::model {
namespace {

using Json = nlohmann::json;

// The largest size or count a key may hold. Far above any real model (DeepSeek-V3's largest is
// vocab_size 129280), and small enough that the sums and products the config implies
// (qk_nope + qk_rope, heads x head dim, ...) never overflow.
constexpr int kMaxSize = 1 << 24;

// Reads config keys with HF's defaults and turns every type or range problem into one
// "bad_config" line naming the key.
class ConfigReader {
 public:
  ConfigReader(const Json& j, std::string label) : j_(j), label_(std::move(label)) {}

  bool Has(const char* key) const {
    auto it = j_.find(key);
    return it != j_.end() && !it->is_null();
  }
  absl::Status Error(const std::string& what) const {
    return InvalidArgumentError(util::codes::kBadConfig, fmt::format("{}: {}", label_, what));
  }
  absl::Status Unsupported(const std::string& what) const {
    return UnimplementedError(util::codes::kUnsupportedConfig, fmt::format("{}: {}", label_, what));
  }

  // An integer in [lo, hi]; `fallback` when absent or null (nullopt fallback: required).
  absl::StatusOr<int> Int(const char* key, std::optional<int> fallback, int lo = 1,
                          int hi = kMaxSize) const {
    if (!Has(key)) {
      if (fallback) return *fallback;
      return Error(fmt::format("'{}' is required", key));
    }
    const Json& v = j_.at(key);
    if (!v.is_number_integer()) return Error(fmt::format("'{}' must be an integer", key));
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) {
      return Error(fmt::format("'{}' = {} is out of range [{}, {}]", key, x, lo, hi));
    }
    return static_cast<int>(x);
  }
  absl::StatusOr<float> Float(const char* key, float fallback, bool positive = true) const {
    if (!Has(key)) return fallback;
    const Json& v = j_.at(key);
    if (!v.is_number()) return Error(fmt::format("'{}' must be a number", key));
    const double x = v.get<double>();
    if (!std::isfinite(x) || (positive && x <= 0) || std::fabs(x) > 3.4e38) {
      return Error(fmt::format("'{}' = {} is out of range", key, x));
    }
    return static_cast<float>(x);
  }
  absl::StatusOr<bool> Bool(const char* key, bool fallback) const {
    if (!Has(key)) return fallback;
    const Json& v = j_.at(key);
    if (!v.is_boolean()) return Error(fmt::format("'{}' must be true or false", key));
    return v.get<bool>();
  }
  absl::StatusOr<std::string> String(const char* key, const std::string& fallback) const {
    if (!Has(key)) return fallback;
    const Json& v = j_.at(key);
    if (!v.is_string()) return Error(fmt::format("'{}' must be a string", key));
    return v.get<std::string>();
  }

 private:
  const Json& j_;
  std::string label_;
};

absl::StatusOr<std::optional<YarnScaling>> ParseRope(const Json& j, const ConfigReader& top,
                                                     const std::string& label, int max_pos,
                                                     float* theta) {
  const Json* rope = nullptr;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = j.find(key);
    if (it != j.end() && !it->is_null()) {
      if (!it->is_object()) return top.Error(fmt::format("'{}' must be an object", key));
      rope = &*it;
      break;
    }
  }
  if (rope == nullptr) return std::optional<YarnScaling>();
  ConfigReader r(*rope, label + " rope_scaling");
  if (r.Has("rope_theta")) {
    DI_ASSIGN_OR_RETURN(*theta, r.Float("rope_theta", *theta));
  }
  DI_ASSIGN_OR_RETURN(std::string type, r.String("rope_type", ""));
  if (type.empty()) {
    DI_ASSIGN_OR_RETURN(type, r.String("type", "default"));
  }
  if (type == "default") return std::optional<YarnScaling>();
  if (type != "yarn") {
    return top.Unsupported(fmt::format("rope scaling type '{}' (supported: yarn)", type));
  }
  if (r.Has("partial_rotary_factor")) {
    return top.Unsupported("partial_rotary_factor in rope scaling");
  }
  YarnScaling y;
  DI_ASSIGN_OR_RETURN(y.original_max_position_embeddings,
                      r.Int("original_max_position_embeddings", max_pos));
  if (r.Has("factor")) {
    DI_ASSIGN_OR_RETURN(y.factor, r.Float("factor", 1.0f));
  } else {
    y.factor = static_cast<float>(max_pos) / y.original_max_position_embeddings;
  }
  // HF reads beta_* with `or`, so 0 / null mean the default.
  DI_ASSIGN_OR_RETURN(y.beta_fast, r.Float("beta_fast", 32.0f, /*positive=*/false));
  DI_ASSIGN_OR_RETURN(y.beta_slow, r.Float("beta_slow", 1.0f, /*positive=*/false));
  if (y.beta_fast == 0) y.beta_fast = 32.0f;
  if (y.beta_slow == 0) y.beta_slow = 1.0f;
  if (y.beta_fast < 0 || y.beta_slow < 0) return top.Error("negative YaRN beta");
  DI_ASSIGN_OR_RETURN(y.mscale, r.Float("mscale", 0.0f, /*positive=*/false));
  DI_ASSIGN_OR_RETURN(y.mscale_all_dim, r.Float("mscale_all_dim", 0.0f, /*positive=*/false));
  DI_ASSIGN_OR_RETURN(y.attention_factor, r.Float("attention_factor", 0.0f, false));
  DI_ASSIGN_OR_RETURN(y.truncate, r.Bool("truncate", true));
  return std::optional<YarnScaling>(y);
}

// Parses the config.json text into `j`, which must be a JSON object.
absl::Status ParseObject(const std::string& json_text, const std::string& label, Json* j) {
  *j = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j->is_discarded() || !j->is_object()) {
    return InvalidArgumentError(util::codes::kBadConfig,
                                fmt::format("{}: not a JSON object", label));
  }
  return absl::OkStatus();
}

// A list of strings (`key` absent: empty).
absl::StatusOr<std::vector<std::string>> StringList(const Json& j, const ConfigReader& r,
                                                    const char* key) {
  std::vector<std::string> out;
  if (!r.Has(key)) return out;
  const Json& v = j.at(key);
  if (!v.is_array()) return r.Error(fmt::format("'{}' must be a list", key));
  for (const Json& e : v) {
    if (!e.is_string()) return r.Error(fmt::format("'{}' must hold strings", key));
    out.push_back(e.get<std::string>());
  }
  return out;
}

// The per-layer attention schedule of DeepSeek-V4: `layer_types` with `compress_rates`
// (transformers' names) or the release's `compress_ratios` (0 / 4 / 128 per layer, MTP last).
absl::Status ParseV4Layers(const Json& j, const ConfigReader& r, int num_layers, int mtp,
                           DeepseekV4Config* d) {
  using A = DeepseekV4Config::Attention;
  const int total = num_layers + mtp;
  DI_ASSIGN_OR_RETURN(std::vector<std::string> types, StringList(j, r, "layer_types"));
  if (!types.empty()) {
    int csa = 4, hca = 128;
    if (r.Has("compress_rates")) {
      const Json& rates = j.at("compress_rates");
      if (!rates.is_object()) return r.Error("'compress_rates' must be an object");
      ConfigReader rr(rates, "compress_rates");
      DI_ASSIGN_OR_RETURN(csa, rr.Int("compressed_sparse_attention", 4, 1, 1 << 16));
      DI_ASSIGN_OR_RETURN(hca, rr.Int("heavily_compressed_attention", 128, 1, 1 << 16));
    }
    if (static_cast<int>(types.size()) < num_layers) {
      return r.Error(fmt::format("'layer_types' has {} entries for {} layers", types.size(),
                                 num_layers));
    }
    for (int l = 0; l < num_layers; ++l) {
      const std::string& t = types[l];
      if (t == "sliding_attention") {
        d->attention.push_back(A::kSliding);
        d->compress_ratio.push_back(0);
      } else if (t == "compressed_sparse_attention") {
        d->attention.push_back(A::kCsa);
        d->compress_ratio.push_back(csa);
      } else if (t == "heavily_compressed_attention") {
        d->attention.push_back(A::kHca);
        d->compress_ratio.push_back(hca);
      } else {
        return r.Unsupported(fmt::format("layer type '{}' (layer {})", t, l));
      }
    }
  } else if (r.Has("compress_ratios")) {
    const Json& v = j.at("compress_ratios");
    if (!v.is_array() || static_cast<int>(v.size()) < num_layers) {
      return r.Error(fmt::format("'compress_ratios' must list one ratio for each of {} layers",
                                 num_layers));
    }
    for (int l = 0; l < num_layers; ++l) {
      if (!v[l].is_number_integer()) return r.Error("'compress_ratios' must hold integers");
      const int64_t ratio = v[l].get<int64_t>();
      if (ratio != 0 && ratio != 4 && ratio != 128) {
        return r.Unsupported(fmt::format(
            "compress_ratios[{}] = {} (supported: 0 window only, 4 CSA, 128 HCA)", l, ratio));
      }
      d->attention.push_back(ratio == 0 ? A::kSliding : ratio == 4 ? A::kCsa : A::kHca);
      d->compress_ratio.push_back(static_cast<int>(ratio));
    }
  } else {
    // transformers' default: two HCA layers, then CSA and HCA alternating.
    for (int l = 0; l < num_layers; ++l) {
      const bool csa = l >= 2 && (l - 2) % 2 == 1;
      d->attention.push_back(csa ? A::kCsa : A::kHca);
      d->compress_ratio.push_back(csa ? 4 : 128);
    }
  }
  // MTP modules attend through the window only.
  while (static_cast<int>(d->attention.size()) < total) {
    d->attention.push_back(A::kSliding);
    d->compress_ratio.push_back(0);
  }
  DI_ASSIGN_OR_RETURN(std::vector<std::string> mlp, StringList(j, r, "mlp_layer_types"));
  if (!mlp.empty()) {
    if (static_cast<int>(mlp.size()) < num_layers) {
      return r.Error(fmt::format("'mlp_layer_types' has {} entries for {} layers", mlp.size(),
                                 num_layers));
    }
    for (int l = 0; l < num_layers; ++l) {
      if (mlp[l] != "hash_moe" && mlp[l] != "moe") {
        return r.Unsupported(fmt::format("mlp layer type '{}' (layer {})", mlp[l], l));
      }
      d->hash_routed.push_back(mlp[l] == "hash_moe");
    }
  } else {
    DI_ASSIGN_OR_RETURN(int num_hash, r.Int("num_hash_layers", 3, 0));
    for (int l = 0; l < num_layers; ++l) d->hash_routed.push_back(l < num_hash);
  }
  return absl::OkStatus();
}

// The defaults of a V4-family config that differ between V4 and V4.1 (the released values).
struct V4Defaults {
  int hidden, layers, q_lora_rank, index_n_heads, n_routed_experts, moe_intermediate_size, mtp;
  float rms_norm_eps;
};
constexpr V4Defaults kV4Defaults{4096, 43, 1024, 64, 256, 2048, 1, 1e-6f};
constexpr V4Defaults kV41Defaults{5120, 40, 1280, 32, 384, 2304, 0, 1e-20f};

// The keys V4 and V4.1 share: dimensions, mHC, indexer, MoE, rotary dims; checked for
// consistency.
absl::Status ReadV4Family(const ConfigReader& r, const V4Defaults& def, ModelConfig* c,
                          DeepseekV4Config* d) {
  DI_ASSIGN_OR_RETURN(c->vocab, r.Int("vocab_size", 129280));
  DI_ASSIGN_OR_RETURN(c->hidden, r.Int("hidden_size", def.hidden));
  DI_ASSIGN_OR_RETURN(c->num_layers, r.Int("num_hidden_layers", def.layers));
  DI_ASSIGN_OR_RETURN(c->num_heads, r.Int("num_attention_heads", 64));
  DI_ASSIGN_OR_RETURN(c->num_kv_heads, r.Int("num_key_value_heads", 1));
  if (c->num_kv_heads != 1) return r.Unsupported("num_key_value_heads other than 1 (shared KV)");
  DI_ASSIGN_OR_RETURN(c->head_dim, r.Int("head_dim", 512));
  DI_ASSIGN_OR_RETURN(c->max_context, r.Int("max_position_embeddings", 1048576));
  DI_ASSIGN_OR_RETURN(c->rms_norm_eps, r.Float("rms_norm_eps", def.rms_norm_eps));
  DI_ASSIGN_OR_RETURN(c->rope_theta, r.Float("rope_theta", 10000.0f));
  DI_ASSIGN_OR_RETURN(c->tied_embeddings, r.Bool("tie_word_embeddings", false));
  DI_ASSIGN_OR_RETURN(d->q_lora_rank, r.Int("q_lora_rank", def.q_lora_rank));
  DI_ASSIGN_OR_RETURN(d->o_lora_rank, r.Int("o_lora_rank", 1024));
  DI_ASSIGN_OR_RETURN(d->o_groups, r.Int("o_groups", 8));
  DI_ASSIGN_OR_RETURN(d->sliding_window, r.Int("sliding_window", 128));
  DI_ASSIGN_OR_RETURN(d->index_n_heads, r.Int("index_n_heads", def.index_n_heads));
  DI_ASSIGN_OR_RETURN(d->index_head_dim, r.Int("index_head_dim", 128));
  DI_ASSIGN_OR_RETURN(d->index_topk, r.Int("index_topk", 512));
  DI_ASSIGN_OR_RETURN(d->hc_mult, r.Int("hc_mult", 4, 1, 64));
  DI_ASSIGN_OR_RETURN(d->hc_sinkhorn_iters, r.Int("hc_sinkhorn_iters", 20, 1, 1000));
  DI_ASSIGN_OR_RETURN(d->hc_eps, r.Float("hc_eps", 1e-6f));
  DI_ASSIGN_OR_RETURN(d->n_routed_experts, r.Int("n_routed_experts", def.n_routed_experts));
  DI_ASSIGN_OR_RETURN(d->n_shared_experts, r.Int("n_shared_experts", 1, 0, 1));
  DI_ASSIGN_OR_RETURN(d->num_experts_per_tok, r.Int("num_experts_per_tok", 6));
  DI_ASSIGN_OR_RETURN(d->moe_intermediate_size,
                      r.Int("moe_intermediate_size", def.moe_intermediate_size));
  DI_ASSIGN_OR_RETURN(d->routed_scaling_factor, r.Float("routed_scaling_factor", 1.5f));
  DI_ASSIGN_OR_RETURN(d->swiglu_limit, r.Float("swiglu_limit", 10.0f, /*positive=*/false));
  DI_ASSIGN_OR_RETURN(d->compress_rope_theta, r.Float("compress_rope_theta", 160000.0f));
  DI_ASSIGN_OR_RETURN(d->num_nextn_predict_layers,
                      r.Int("num_nextn_predict_layers", def.mtp, 0, 16));
  DI_ASSIGN_OR_RETURN(std::string act, r.String("hidden_act", "silu"));
  if (act != "silu") return r.Unsupported(fmt::format("hidden_act '{}' (supported: silu)", act));
  DI_ASSIGN_OR_RETURN(std::string scoring, r.String("scoring_func", "sqrtsoftplus"));
  if (scoring != "sqrtsoftplus") {
    return r.Unsupported(fmt::format("scoring_func '{}' (supported: sqrtsoftplus)", scoring));
  }
  DI_ASSIGN_OR_RETURN(bool attention_bias, r.Bool("attention_bias", false));
  DI_ASSIGN_OR_RETURN(bool mlp_bias, r.Bool("mlp_bias", false));
  if (attention_bias || mlp_bias) return r.Unsupported("attention_bias / mlp_bias = true");
  if (d->num_experts_per_tok > d->n_routed_experts) {
    return r.Error(fmt::format("top-{} routing over {} experts", d->num_experts_per_tok,
                               d->n_routed_experts));
  }
  // Rotary dims: the release's qk_rope_head_dim, else transformers' partial_rotary_factor.
  if (r.Has("qk_rope_head_dim")) {
    DI_ASSIGN_OR_RETURN(c->rope_dim, r.Int("qk_rope_head_dim", 64));
  } else {
    DI_ASSIGN_OR_RETURN(float factor, r.Float("partial_rotary_factor", 0.125f));
    c->rope_dim = static_cast<int>(static_cast<double>(c->head_dim) * factor);
  }
  if (c->rope_dim % 2 != 0 || c->rope_dim <= 0 || c->rope_dim > c->head_dim ||
      c->rope_dim > d->index_head_dim) {
    return r.Error(fmt::format("rotary dims {} must be even and fit head_dim {} and "
                               "index_head_dim {}",
                               c->rope_dim, c->head_dim, d->index_head_dim));
  }
  if (c->num_heads % d->o_groups != 0) {
    return r.Error(fmt::format("{} heads do not split into {} output groups", c->num_heads,
                               d->o_groups));
  }
  c->rope_style = RopeStyle::kAdjacentPairs;
  c->ffn_hidden = d->moe_intermediate_size;
  return absl::OkStatus();
}

// The two rotary tables of V4 / V4.1: transformers nests {"main", "compress"} in
// rope_parameters; the release has one flat rope_scaling, which applies to the compress rope
// only. transformers sets attention_factor = 1.0 for the compress rope unless the config gives
// one (DeepSeek's reference does not scale cos/sin by YaRN's mscale).
absl::Status ReadV4Rope(const Json& j, const ConfigReader& r, const std::string& label,
                        ModelConfig* c, DeepseekV4Config* d) {
  const Json* rp = nullptr;
  auto it = j.find("rope_parameters");
  if (it != j.end() && it->is_object() && it->contains("compress")) rp = &*it;
  float main_theta = c->rope_theta;
  if (rp != nullptr) {
    auto main_it = rp->find("main");
    if (main_it == rp->end()) return r.Error("'rope_parameters' has 'compress' but no 'main'");
    const Json& main = *main_it;
    const Json& compress = (*rp)["compress"];
    if (!main.is_object() || !compress.is_object()) {
      return r.Error("'rope_parameters' main / compress must be objects");
    }
    // Their partial_rotary_factor is the rotary share already read.
    Json wrap_main = {{"rope_parameters", main}}, wrap = {{"rope_parameters", compress}};
    wrap_main["rope_parameters"].erase("partial_rotary_factor");
    wrap["rope_parameters"].erase("partial_rotary_factor");
    DI_ASSIGN_OR_RETURN(auto main_yarn, ParseRope(wrap_main, r, label, c->max_context, &main_theta));
    if (main_yarn) return r.Unsupported("YaRN on the main (window-only) rope");
    DI_ASSIGN_OR_RETURN(d->compress_yarn,
                        ParseRope(wrap, r, label, c->max_context, &d->compress_rope_theta));
    c->rope_theta = main_theta;
  } else {
    float unused_theta = d->compress_rope_theta;
    DI_ASSIGN_OR_RETURN(d->compress_yarn, ParseRope(j, r, label, c->max_context, &unused_theta));
  }
  if (d->compress_yarn && d->compress_yarn->attention_factor > 0) {
    d->compress_rope_mscale = d->compress_yarn->attention_factor;
  }
  return absl::OkStatus();
}

// DeepSeek-V4: hyperparameters, layer schedule and the two rotary tables.
absl::StatusOr<ModelConfig> ParseDeepseekV4(const Json& j, const ConfigReader& r,
                                            const std::string& label) {
  ModelConfig c;
  c.architecture = "deepseek_v4";
  DeepseekV4Config d;
  DI_RETURN_IF_ERROR(ReadV4Family(r, kV4Defaults, &c, &d));
  DI_RETURN_IF_ERROR(ParseV4Layers(j, r, c.num_layers, d.num_nextn_predict_layers, &d));
  DI_RETURN_IF_ERROR(ReadV4Rope(j, r, label, &c, &d));
  c.deepseek_v4 = std::move(d);
  return c;
}

// A list of integers (`key` absent: empty).
absl::StatusOr<std::vector<int>> IntList(const Json& j, const ConfigReader& r, const char* key) {
  std::vector<int> out;
  if (!r.Has(key)) return out;
  const Json& v = j.at(key);
  if (!v.is_array()) return r.Error(fmt::format("'{}' must be a list", key));
  for (const Json& e : v) {
    if (!e.is_number_integer() || e.get<int64_t>() < -1 || e.get<int64_t>() > kMaxSize) {
      return r.Error(fmt::format("'{}' must hold small integers", key));
    }
    out.push_back(e.get<int>());
  }
  return out;
}

// DeepSeek-V4.1's vision_config (absent or null: a text-only model) and the top-level
// image_token_id (-1 when absent). The tower's own constraints are checked here so that a bad
// config fails at load: the width splits into heads whose dimension the 2-D rotary halves twice
// (the reference raises for head_dim % 4 != 0).
absl::StatusOr<std::optional<DeepseekV41VisionConfig>> ParseV41Vision(const Json& top,
                                                                      const ConfigReader& top_reader,
                                                                      const std::string& label,
                                                                      int vocab) {
  auto it = top.find("vision_config");
  if (it == top.end() || it->is_null()) return std::optional<DeepseekV41VisionConfig>();
  if (!it->is_object()) return top_reader.Error("'vision_config' must be an object");
  ConfigReader r(*it, label + " vision_config");
  DeepseekV41VisionConfig v;
  DI_ASSIGN_OR_RETURN(v.num_layers, r.Int("num_hidden_layers", std::nullopt));
  DI_ASSIGN_OR_RETURN(v.hidden, r.Int("hidden_size", std::nullopt, 4, 1 << 16));
  DI_ASSIGN_OR_RETURN(v.num_heads, r.Int("num_attention_heads", std::nullopt, 1, 1024));
  DI_ASSIGN_OR_RETURN(v.intermediate, r.Int("intermediate_size", std::nullopt, 1, 1 << 20));
  DI_ASSIGN_OR_RETURN(v.patch_size, r.Int("patch_size", 14, 1, 1024));
  DI_ASSIGN_OR_RETURN(v.rope_theta, r.Float("rope_theta", 10000.0f));
  DI_ASSIGN_OR_RETURN(v.downsample_ratio, r.Int("downsample_ratio", 3, 1, 64));
  DI_ASSIGN_OR_RETURN(v.max_image_tokens, r.Int("max_image_tokens", 1024, 3));
  DI_ASSIGN_OR_RETURN(v.min_pixels, r.Int("min_pixels", 0, 0));
  if (r.Has("max_wh_ratio")) {
    DI_ASSIGN_OR_RETURN(float ratio, r.Float("max_wh_ratio", 1.0f));
    v.max_wh_ratio = ratio;
  }
  if (v.hidden % v.num_heads != 0 || v.head_dim() % 4 != 0) {
    return r.Error(fmt::format("hidden_size {} must split into {} heads of a dimension divisible "
                               "by 4",
                               v.hidden, v.num_heads));
  }
  DI_ASSIGN_OR_RETURN(v.image_token_id, top_reader.Int("image_token_id", -1, 0, vocab - 1));
  return std::optional<DeepseekV41VisionConfig>(v);
}

// DeepSeek-V4.1: the composite config's text_config (or a bare deepseek_v41_text config).
absl::StatusOr<ModelConfig> ParseDeepseekV41(const Json& top, const ConfigReader& top_reader,
                                             const std::string& label) {
  const Json* tj = &top;
  auto it = top.find("text_config");
  if (it != top.end() && !it->is_null()) {
    if (!it->is_object()) return top_reader.Error("'text_config' must be an object");
    tj = &*it;
  }
  const Json& j = *tj;
  ConfigReader r(j, label + " text_config");
  using A = DeepseekV4Config::Attention;
  ModelConfig c;
  c.architecture = "deepseek_v41";
  DeepseekV4Config d;
  d.v41 = true;
  DI_RETURN_IF_ERROR(ReadV4Family(r, kV41Defaults, &c, &d));
  DI_ASSIGN_OR_RETURN(d.gate_temp, r.Float("gate_temp", 1.0f));
  DI_ASSIGN_OR_RETURN(d.norm_topk_prob, r.Bool("norm_topk_prob", true));
  DI_ASSIGN_OR_RETURN(d.candidate_source_layer_id, r.Int("candidate_source_layer_id", -1, -1));
  DI_ASSIGN_OR_RETURN(d.candidate_topk_blocks, r.Int("candidate_topk_blocks", 2048));
  DI_ASSIGN_OR_RETURN(d.candidate_block_size, r.Int("candidate_block_size", 8));
  DI_ASSIGN_OR_RETURN(d.kv_source_layer_ids, IntList(j, r, "kv_source_layer_ids"));
  DI_ASSIGN_OR_RETURN(d.index_source_layer_ids, IntList(j, r, "index_source_layer_ids"));
  DI_ASSIGN_OR_RETURN(d.engram_layer_ids, IntList(j, r, "engram_layer_ids"));
  if (!d.engram_layer_ids.empty()) {
    DI_ASSIGN_OR_RETURN(d.engram_max_ngram_size, r.Int("engram_max_ngram_size", std::nullopt, 2));
    DI_ASSIGN_OR_RETURN(d.engram_n_heads, r.Int("engram_n_heads", std::nullopt));
    DI_ASSIGN_OR_RETURN(d.engram_head_dim, r.Int("engram_head_dim", std::nullopt));
    DI_ASSIGN_OR_RETURN(d.engram_vocab_size, r.Int("engram_vocab_size", std::nullopt));
    DI_ASSIGN_OR_RETURN(d.engram_compressed_vocab_size,
                        r.Int("engram_compressed_vocab_size", std::nullopt));
    DI_ASSIGN_OR_RETURN(d.engram_pad_id, r.Int("engram_pad_id", 2, 0));
    DI_ASSIGN_OR_RETURN(d.engram_num_embeddings, IntList(j, r, "engram_num_embeddings"));
  }
  if (d.num_nextn_predict_layers > 0) {
    DI_ASSIGN_OR_RETURN(d.dspark_block_size, r.Int("dspark_block_size", 5, 1, 16));
    DI_ASSIGN_OR_RETURN(d.dspark_noise_token_id,
                        r.Int("dspark_noise_token_id", std::nullopt, 0, c.vocab - 1));
    DI_ASSIGN_OR_RETURN(d.dspark_markov_rank, r.Int("dspark_markov_rank", 256, 1, 65536));
    DI_ASSIGN_OR_RETURN(d.dspark_n_routed_experts,
                        r.Int("dspark_n_routed_experts", d.n_routed_experts, 1, 4096));
    DI_ASSIGN_OR_RETURN(d.dspark_num_experts_per_tok,
                        r.Int("dspark_num_experts_per_tok", d.num_experts_per_tok, 1,
                              d.dspark_n_routed_experts));
    DI_ASSIGN_OR_RETURN(d.dspark_target_layer_ids, IntList(j, r, "dspark_target_layer_ids"));
    if (d.dspark_target_layer_ids.empty()) {
      return r.Error("DSpark stages (num_nextn_predict_layers > 0) need dspark_target_layer_ids");
    }
    for (int l : d.dspark_target_layer_ids) {
      if (l < 0 || l >= c.num_layers) {
        return r.Error(fmt::format("dspark_target_layer_ids: {} is not a layer", l));
      }
    }
  }
  DI_ASSIGN_OR_RETURN(std::vector<int> ratios, IntList(j, r, "compress_ratios"));
  if (static_cast<int>(ratios.size()) < c.num_layers) {
    return r.Error(fmt::format("'compress_ratios' must list one ratio for each of {} layers",
                               c.num_layers));
  }
  for (int l = 0; l < c.num_layers; ++l) {
    if (ratios[l] < 0 || ratios[l] > 2) {
      return r.Unsupported(
          fmt::format("compress_ratios[{}] = {} (supported: 0 window only, 1, 2)", l, ratios[l]));
    }
    d.attention.push_back(ratios[l] == 0 ? A::kSliding : A::kCsa);
    d.compress_ratio.push_back(ratios[l]);
    d.hash_routed.push_back(false);
  }
  // The CSA2 schedule: every source a compressed layer, KV sources also index sources, every
  // compressed layer behind a KV source and an index source of its ratio, sources in order.
  auto in = [](const std::vector<int>& v, int x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  for (const auto* ids : {&d.kv_source_layer_ids, &d.index_source_layer_ids}) {
    for (size_t i = 0; i < ids->size(); ++i) {
      const int l = (*ids)[i];
      if (l < 0 || l >= c.num_layers || d.compress_ratio[l] == 0 || (i > 0 && l <= (*ids)[i - 1])) {
        return r.Error(fmt::format("source layer {} must be a compressed layer, listed in order", l));
      }
    }
  }
  for (int l : d.kv_source_layer_ids) {
    if (!in(d.index_source_layer_ids, l)) {
      return r.Unsupported(fmt::format("KV source layer {} that is not an index source", l));
    }
  }
  int kv_source = -1, index_source = -1;
  for (int l = 0; l < c.num_layers; ++l) {
    if (in(d.kv_source_layer_ids, l)) kv_source = l;
    if (in(d.index_source_layer_ids, l)) index_source = l;
    if (d.compress_ratio[l] == 0) continue;
    if (kv_source < 0 || index_source < 0 || d.compress_ratio[kv_source] != d.compress_ratio[l]) {
      return r.Error(fmt::format("compressed layer {} (ratio {}) has no KV source and index "
                                 "source of its ratio before it",
                                 l, d.compress_ratio[l]));
    }
  }
  if (d.candidate_source_layer_id >= 0 &&
      !in(d.index_source_layer_ids, d.candidate_source_layer_id)) {
    return r.Error(fmt::format("candidate_source_layer_id {} is not an index source",
                               d.candidate_source_layer_id));
  }
  DI_RETURN_IF_ERROR(ReadV4Rope(j, r, label, &c, &d));
  DI_ASSIGN_OR_RETURN(d.vision, ParseV41Vision(top, top_reader, label, c.vocab));
  c.deepseek_v4 = std::move(d);
  return c;
}

absl::StatusOr<ModelConfig> ParseModelConfig(const Json& j, const std::string& label) {
  ConfigReader r(j, label);
  DI_ASSIGN_OR_RETURN(std::string type, r.String("model_type", ""));
  if (type == "deepseek_v4") return ParseDeepseekV4(j, r, label);
  if (type == "deepseek_v41" || type == "deepseek_v41_text") return ParseDeepseekV41(j, r, label);
  if (type != "deepseek_v3" && type != "deepseek_v2") {
    return r.Unsupported(
        fmt::format("model_type '{}' (supported: deepseek_v3, deepseek_v2, deepseek_v4, "
                    "deepseek_v41)",
                    type));
  }
  const bool v3 = type == "deepseek_v3";
  ModelConfig c;
  c.architecture = type;
  DeepseekConfig d;
  DI_ASSIGN_OR_RETURN(c.vocab, r.Int("vocab_size", std::nullopt));
  DI_ASSIGN_OR_RETURN(c.hidden, r.Int("hidden_size", std::nullopt));
  DI_ASSIGN_OR_RETURN(c.ffn_hidden, r.Int("intermediate_size", std::nullopt));
  DI_ASSIGN_OR_RETURN(c.num_layers, r.Int("num_hidden_layers", std::nullopt));
  DI_ASSIGN_OR_RETURN(c.num_heads, r.Int("num_attention_heads", std::nullopt));
  DI_ASSIGN_OR_RETURN(c.max_context, r.Int("max_position_embeddings", v3 ? 4096 : 2048));
  DI_ASSIGN_OR_RETURN(c.rms_norm_eps, r.Float("rms_norm_eps", 1e-6f));
  DI_ASSIGN_OR_RETURN(c.rope_theta, r.Float("rope_theta", 10000.0f));
  DI_ASSIGN_OR_RETURN(c.tied_embeddings, r.Bool("tie_word_embeddings", false));
  if (!r.Has("q_lora_rank") && j.find("q_lora_rank") == j.end()) {
    return r.Error("'q_lora_rank' is required (null for a direct q_proj)");
  }
  DI_ASSIGN_OR_RETURN(d.q_lora_rank, r.Int("q_lora_rank", 0, 0));
  DI_ASSIGN_OR_RETURN(d.kv_lora_rank, r.Int("kv_lora_rank", std::nullopt));
  DI_ASSIGN_OR_RETURN(d.qk_nope_head_dim, r.Int("qk_nope_head_dim", std::nullopt, 0));
  DI_ASSIGN_OR_RETURN(d.qk_rope_head_dim, r.Int("qk_rope_head_dim", std::nullopt));
  DI_ASSIGN_OR_RETURN(d.v_head_dim, r.Int("v_head_dim", std::nullopt));
  DI_ASSIGN_OR_RETURN(d.n_routed_experts, r.Int("n_routed_experts", v3 ? 256 : 64, 0));
  DI_ASSIGN_OR_RETURN(d.n_shared_experts, r.Int("n_shared_experts", v3 ? 1 : 2, 0));
  DI_ASSIGN_OR_RETURN(d.moe_intermediate_size, r.Int("moe_intermediate_size", v3 ? 2048 : 1407));
  DI_ASSIGN_OR_RETURN(d.first_k_dense_replace, r.Int("first_k_dense_replace", v3 ? 3 : 0, 0));
  DI_ASSIGN_OR_RETURN(d.moe_layer_freq, r.Int("moe_layer_freq", 1));
  DI_ASSIGN_OR_RETURN(d.n_group, r.Int("n_group", v3 ? 8 : 1));
  DI_ASSIGN_OR_RETURN(d.topk_group, r.Int("topk_group", v3 ? 4 : 1));
  DI_ASSIGN_OR_RETURN(d.routed_scaling_factor, r.Float("routed_scaling_factor", v3 ? 2.5f : 1.0f));
  DI_ASSIGN_OR_RETURN(d.norm_topk_prob, r.Bool("norm_topk_prob", v3));
  DI_ASSIGN_OR_RETURN(d.scoring_func, r.String("scoring_func", v3 ? "sigmoid" : "softmax"));
  DI_ASSIGN_OR_RETURN(d.topk_method, r.String("topk_method", v3 ? "noaux_tc" : "greedy"));
  DI_ASSIGN_OR_RETURN(d.rope_interleave, r.Bool("rope_interleave", true));
  if (!v3) d.rope_interleave = true;  // V2 rotates complex pairs regardless of the key
  DI_ASSIGN_OR_RETURN(d.num_nextn_predict_layers, r.Int("num_nextn_predict_layers", 0, 0, 16));
  if (r.Has("num_mtp_layers") && !r.Has("num_nextn_predict_layers")) {
    DI_ASSIGN_OR_RETURN(d.num_nextn_predict_layers, r.Int("num_mtp_layers", 0, 0, 16));
  }
  if (d.n_routed_experts > 0) {
    DI_ASSIGN_OR_RETURN(d.num_experts_per_tok,
                        r.Int("num_experts_per_tok", v3 ? std::optional<int>(8) : std::nullopt));
  }
  DI_ASSIGN_OR_RETURN(d.yarn, ParseRope(j, r, label, c.max_context, &c.rope_theta));

  DI_ASSIGN_OR_RETURN(std::string act, r.String("hidden_act", "silu"));
  if (act != "silu") return r.Unsupported(fmt::format("hidden_act '{}' (supported: silu)", act));
  DI_ASSIGN_OR_RETURN(bool attention_bias, r.Bool("attention_bias", false));
  DI_ASSIGN_OR_RETURN(bool mlp_bias, r.Bool("mlp_bias", false));
  if (attention_bias || mlp_bias) return r.Unsupported("attention_bias / mlp_bias = true");
  if (d.scoring_func != "sigmoid" && d.scoring_func != "softmax") {
    return r.Unsupported(
        fmt::format("scoring_func '{}' (supported: sigmoid, softmax)", d.scoring_func));
  }
  if (d.topk_method != "noaux_tc" && d.topk_method != "greedy" &&
      d.topk_method != "group_limited_greedy") {
    return r.Unsupported(fmt::format(
        "topk_method '{}' (supported: noaux_tc, greedy, group_limited_greedy)", d.topk_method));
  }
  if (d.topk_method == "greedy") d.n_group = d.topk_group = 1;
  if (d.n_routed_experts > 0) {
    if (d.n_routed_experts % d.n_group != 0 || d.topk_group > d.n_group) {
      return r.Unsupported(fmt::format("{} experts in {} groups keeping {}", d.n_routed_experts,
                                       d.n_group, d.topk_group));
    }
    const int per_group = d.n_routed_experts / d.n_group;
    if (d.num_experts_per_tok > d.topk_group * per_group ||
        (d.topk_method == "noaux_tc" && per_group < 2)) {
      return r.Unsupported(fmt::format("top-{} routing over {} groups of {} experts keeping {}",
                                       d.num_experts_per_tok, d.n_group, per_group, d.topk_group));
    }
  }
  if (d.qk_rope_head_dim % 2 != 0) return r.Error("'qk_rope_head_dim' must be even");
  c.num_kv_heads = c.num_heads;  // MLA: every head reads the shared latent
  c.head_dim = d.qk_nope_head_dim + d.qk_rope_head_dim;
  c.rope_dim = d.qk_rope_head_dim;
  c.rope_style = d.rope_interleave ? RopeStyle::kAdjacentPairs : RopeStyle::kHalfSplit;
  c.deepseek = std::move(d);
  return c;
}

// The FP8 weight blocks of quantization_config (the defaults when it is absent).
absl::StatusOr<Fp8Blocks> ParseQuant(const Json& j, const std::string& label) {
  Fp8Blocks q;
  auto it = j.find("quantization_config");
  if (it == j.end() || it->is_null()) return q;
  ConfigReader r(*it, label + " quantization_config");
  if (!it->is_object()) return r.Error("not an object");
  DI_ASSIGN_OR_RETURN(std::string method, r.String("quant_method", ""));
  DI_ASSIGN_OR_RETURN(std::string format, r.String("fmt", "e4m3"));
  if (method != "fp8" || format != "e4m3") {
    return r.Unsupported(
        fmt::format("quant_method '{}' fmt '{}' (supported: fp8 e4m3)", method, format));
  }
  auto b = it->find("weight_block_size");
  if (b != it->end() && !b->is_null()) {
    if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() ||
        !(*b)[1].is_number_integer() || (*b)[0].get<int64_t>() <= 0 ||
        (*b)[1].get<int64_t>() <= 0) {
      return r.Error("'weight_block_size' must be two positive integers");
    }
    q.rows = (*b)[0].get<int64_t>();
    q.cols = (*b)[1].get<int64_t>();
  }
  return q;
}

}  // namespace

absl::StatusOr<ModelConfig> ParseHfConfig(const std::string& json_text, const std::string& label) {
  Json j;
  DI_RETURN_IF_ERROR(ParseObject(json_text, label, &j));
  return ParseModelConfig(j, label);
}

absl::StatusOr<HfCheckpointConfig> ParseHfCheckpointConfig(const std::string& json_text,
                                                           const std::string& label) {
  Json j;
  DI_RETURN_IF_ERROR(ParseObject(json_text, label, &j));
  HfCheckpointConfig parts;
  DI_ASSIGN_OR_RETURN(parts.config, ParseModelConfig(j, label));
  DI_ASSIGN_OR_RETURN(parts.fp8, ParseQuant(j, label));
  for (auto [key, out] :
       {std::pair{"bos_token_id", &parts.bos_id}, std::pair{"eos_token_id", &parts.eos_id}}) {
    auto it = j.find(key);
    if (it != j.end() && it->is_number_integer()) *out = it->get<int32_t>();
  }
  return parts;
}

}  // namespace deepinfer::model
