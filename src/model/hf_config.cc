#include "model/hf_config.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "model/safetensors.h"
#include "model/tensor_values.h"
#include "nlohmann/json.hpp"
#include "util/mapped_file.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace deepinfer::model {
namespace {

namespace fs = std::filesystem;
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
    return InvalidArgumentError("bad_config", fmt::format("{}: {}", label_, what));
  }
  absl::Status Unsupported(const std::string& what) const {
    return UnimplementedError("unsupported_config", fmt::format("{}: {}", label_, what));
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

}  // namespace

absl::StatusOr<ModelConfig> ParseHfConfig(const std::string& json_text, const std::string& label) {
  Json j = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgumentError("bad_config", fmt::format("{}: not a JSON object", label));
  }
  ConfigReader r(j, label);
  DI_ASSIGN_OR_RETURN(std::string type, r.String("model_type", ""));
  if (type != "deepseek_v3" && type != "deepseek_v2") {
    return r.Unsupported(
        fmt::format("model_type '{}' (supported: deepseek_v3, deepseek_v2)", type));
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

namespace {

// Weight block sizes from quantization_config; 0 when the checkpoint is not FP8.
struct QuantInfo {
  int64_t block_rows = 0;
  int64_t block_cols = 0;
};

absl::StatusOr<QuantInfo> ParseQuant(const std::string& json_text, const std::string& label) {
  Json j = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  QuantInfo q;
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
  q.block_rows = q.block_cols = 128;
  auto b = it->find("weight_block_size");
  if (b != it->end() && !b->is_null()) {
    if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() ||
        !(*b)[1].is_number_integer() || (*b)[0].get<int64_t>() <= 0 ||
        (*b)[1].get<int64_t>() <= 0) {
      return r.Error("'weight_block_size' must be two positive integers");
    }
    q.block_rows = (*b)[0].get<int64_t>();
    q.block_cols = (*b)[1].get<int64_t>();
  }
  return q;
}

// Replaces every F8_E4M3 weight by its BF16 dequantization (see LoadHfModel) and drops the
// scale tensors.
// Drops the resident pages of a mapped range that is no longer read (the FP8 bytes once their
// BF16 copy exists), so they stop counting in RSS. Only whole pages inside the range: neighbours
// may belong to tensors still in use. Advisory: a read-only file mapping simply refaults.
void ReleasePages(const uint8_t* data, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

// `release_pages`: the FP8 bytes are a file mapping (not memory the caller owns).
absl::Status DequantizeFp8Weights(Model& m, const QuantInfo& q, bool release_pages) {
  std::vector<std::string> fp8;
  for (const auto& [name, t] : m.tensors) {
    if (t.dtype == DType::kF8E4M3) fp8.push_back(name);
  }
  if (fp8.empty()) return absl::OkStatus();
  const int64_t br = q.block_rows > 0 ? q.block_rows : 128;
  const int64_t bc = q.block_cols > 0 ? q.block_cols : 128;
  std::sort(fp8.begin(), fp8.end());
  util::ThreadPool pool(std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
  for (const std::string& name : fp8) {
    TensorView& t = m.tensors.at(name);
    if (t.shape.size() != 2) {
      return UnimplementedError("unsupported_dtype",
                                fmt::format("tensor '{}' is F8_E4M3 but not a matrix", name));
    }
    const std::string scale_name = name + "_scale_inv";
    const TensorView* s = m.Find(scale_name);
    if (s == nullptr) {
      return NotFoundError("missing_tensor",
                           fmt::format("FP8 tensor '{}' has no '{}'", name, scale_name));
    }
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const std::vector<int64_t> want = {(rows + br - 1) / br, (cols + bc - 1) / bc};
    if (s->shape != want) {
      return InvalidArgumentError("shape_mismatch",
                                  fmt::format("tensor '{}' has shape {}, expected {} for {} "
                                              "with {}x{} blocks",
                                              scale_name, ShapeString(s->shape), ShapeString(want),
                                              ShapeString(t.shape), br, bc));
    }
    if (s->dtype != DType::kF32 && s->dtype != DType::kBF16) {
      return UnimplementedError("unsupported_dtype",
                                fmt::format("scale '{}' is not F32 or BF16", scale_name));
    }
    DI_RETURN_IF_ERROR(CheckFinite(*s, /*full=*/true));
    std::vector<float> scale(static_cast<size_t>(s->num_elements()));
    for (size_t i = 0; i < scale.size(); ++i) {
      if (s->dtype == DType::kF32) {
        std::memcpy(&scale[i], s->data + 4 * i, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, s->data + 2 * i, 2);
        scale[i] = Bf16ToFp32(h);
      }
    }
    DI_RETURN_IF_ERROR(CheckFinite(t, /*full=*/false));
    std::vector<uint8_t> buf(static_cast<size_t>(rows * cols) * 2);
    uint16_t* out = reinterpret_cast<uint16_t*>(buf.data());
    const uint8_t* w = t.data;
    pool.ParallelFor(rows, [&](int64_t begin, int64_t end, int) {
      DequantizeFp8BlockToBf16(w, rows, cols, scale.data(), br, bc, begin, end, out);
    });
    if (release_pages) ReleasePages(w, static_cast<size_t>(rows * cols));
    t.dtype = DType::kBF16;
    t.data = buf.data();
    t.size_bytes = buf.size();
    m.owned.push_back(std::move(buf));
  }
  for (auto it = m.tensors.begin(); it != m.tensors.end();) {
    const std::string& n = it->first;
    const bool is_scale = n.size() > 10 && n.compare(n.size() - 10, 10, "_scale_inv") == 0;
    if (is_scale) {
      m.tensors.erase(it++);
    } else {
      ++it;
    }
  }
  return absl::OkStatus();
}

// The kernels read F32 / F16 / BF16 elements in place; safetensors only promises byte offsets.
void AlignTensors(Model& m) {
  for (auto& [name, t] : m.tensors) {
    const size_t align = BlockBytes(t.dtype);
    if (align <= 1 || reinterpret_cast<uintptr_t>(t.data) % align == 0) continue;
    std::vector<uint8_t> buf(t.data, t.data + t.size_bytes);
    t.data = buf.data();
    m.owned.push_back(std::move(buf));
  }
}

absl::StatusOr<std::vector<std::string>> ShardList(const fs::path& dir) {
  const fs::path index = dir / "model.safetensors.index.json";
  std::error_code ec;
  if (!fs::exists(index, ec)) {
    if (!fs::exists(dir / "model.safetensors", ec)) {
      return NotFoundError("missing_shard", fmt::format("{}: neither model.safetensors nor "
                                                        "model.safetensors.index.json",
                                                        dir.string()));
    }
    return std::vector<std::string>{"model.safetensors"};
  }
  DI_ASSIGN_OR_RETURN(std::string text, util::ReadFile(index.string()));
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto wm = j.is_object() ? j.find("weight_map") : j.end();
  if (j.is_discarded() || !j.is_object() || wm == j.end() || !wm->is_object()) {
    return DataLossError("bad_header", fmt::format("{}: no weight_map object", index.string()));
  }
  std::set<std::string> files;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string()) {
      return DataLossError("bad_header", fmt::format("{}: weight_map['{}'] is not a file name",
                                                     index.string(), it.key()));
    }
    const std::string f = it->get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "..") {
      return DataLossError("bad_header", fmt::format("{}: bad shard name '{}'", index.string(), f));
    }
    files.insert(f);
  }
  for (const std::string& f : files) {
    if (!fs::exists(dir / f, ec)) {
      return NotFoundError("missing_shard",
                           fmt::format("{}: shard '{}' named by model.safetensors.index.json is "
                                       "missing",
                                       dir.string(), f));
    }
  }
  return std::vector<std::string>(files.begin(), files.end());
}

// What config.json says: the model config, FP8 block sizes and the special ids.
struct ConfigParts {
  ModelConfig config;
  QuantInfo quant;
  std::optional<int32_t> bos_id, eos_id;
};

absl::StatusOr<ConfigParts> ParseConfigParts(const std::string& text, const std::string& label) {
  ConfigParts parts;
  DI_ASSIGN_OR_RETURN(parts.config, ParseHfConfig(text, label));
  DI_ASSIGN_OR_RETURN(parts.quant, ParseQuant(text, label));
  // The tokenizer (tokenizer.json) is read by the tokenizer layer; only special ids come from
  // config.json.
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  for (auto [key, out] :
       {std::pair{"bos_token_id", &parts.bos_id}, std::pair{"eos_token_id", &parts.eos_id}}) {
    auto it = j.find(key);
    if (it != j.end() && it->is_number_integer()) *out = it->get<int32_t>();
  }
  return parts;
}

// Everything after the files are read: collects the shards' tensors, dequantizes FP8 weights,
// aligns and validates them against the config.
absl::StatusOr<std::unique_ptr<Model>> Assemble(
    ConfigParts parts, std::string name, std::vector<std::unique_ptr<SafetensorsFile>> shards) {
  auto model = std::make_unique<Model>();
  model->config = std::move(parts.config);
  model->config.name = std::move(name);
  bool mapped = true;
  for (auto& st : shards) {
    for (const TensorView& t : st->tensors()) {
      if (!model->tensors.emplace(t.name, t).second) {
        return DataLossError("bad_header",
                             fmt::format("tensor '{}' appears in more than one shard", t.name));
      }
    }
    auto file = st->TakeFile();
    if (file == nullptr) {
      mapped = false;
    } else {
      model->files.push_back(std::move(file));
    }
  }
  DI_RETURN_IF_ERROR(DequantizeFp8Weights(*model, parts.quant, /*release_pages=*/mapped));
  AlignTensors(*model);
  if (parts.bos_id) model->tokenizer.bos_id = *parts.bos_id;
  if (parts.eos_id) model->tokenizer.eos_id = *parts.eos_id;
  if (model->tokenizer.eos_id >= 0) model->tokenizer.eog_ids = {model->tokenizer.eos_id};
  return model;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadHfModel(const std::string& path) {
  std::error_code ec;
  fs::path dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const fs::path config_path = dir / "config.json";
  DI_ASSIGN_OR_RETURN(std::string text, util::ReadFile(config_path.string()));
  DI_ASSIGN_OR_RETURN(ConfigParts parts, ParseConfigParts(text, config_path.string()));
  std::string name = fs::absolute(dir, ec).lexically_normal().filename().string();
  if (name.empty()) name = dir.string();

  DI_ASSIGN_OR_RETURN(std::vector<std::string> shard_names, ShardList(dir));
  std::vector<std::unique_ptr<SafetensorsFile>> shards;
  for (const std::string& shard : shard_names) {
    DI_ASSIGN_OR_RETURN(auto st, SafetensorsFile::Open((dir / shard).string()));
    shards.push_back(std::move(st));
  }
  DI_ASSIGN_OR_RETURN(auto model, Assemble(std::move(parts), std::move(name), std::move(shards)));
  model->source = {ModelFormat::kHuggingFace, path, dir.string()};
  return model;
}

absl::StatusOr<std::unique_ptr<Model>> HfModelFromParts(
    const std::string& config_json, std::vector<std::unique_ptr<SafetensorsFile>> shards,
    const std::string& label) {
  DI_ASSIGN_OR_RETURN(ConfigParts parts, ParseConfigParts(config_json, label));
  return Assemble(std::move(parts), label, std::move(shards));
}

bool IsHfCheckpointPath(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return true;
  const fs::path p(path);
  return p.filename() == "config.json" || p.extension() == ".safetensors";
}

}  // namespace deepinfer::model
