#include "model/hf_checkpoint.h"

#include <filesystem>
#include <set>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "model/block_scales.h"
#include "model/deepseek_v4_names.h"
#include "model/fp8.h"
#include "model/hf_config.h"
#include "nlohmann/json.hpp"
#include "util/error_codes.h"
#include "util/mapped_file.h"
#include "util/status.h"

namespace deepinfer::model {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

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

// The shard files of the checkpoint in `dir`, sorted: model.safetensors alone, or every file the
// index's weight_map names, each checked to exist.
absl::StatusOr<std::vector<std::string>> ShardList(const fs::path& dir) {
  const fs::path index = dir / "model.safetensors.index.json";
  std::error_code ec;
  if (!fs::exists(index, ec)) {
    if (!fs::exists(dir / "model.safetensors", ec)) {
      return NotFoundError(util::codes::kMissingShard,
                           fmt::format("{}: neither model.safetensors nor "
                                       "model.safetensors.index.json",
                                       dir.string()));
    }
    return std::vector<std::string>{"model.safetensors"};
  }
  DI_ASSIGN_OR_RETURN(std::string text, util::ReadFile(index.string()));
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto wm = j.is_object() ? j.find("weight_map") : j.end();
  if (j.is_discarded() || !j.is_object() || wm == j.end() || !wm->is_object()) {
    return DataLossError(util::codes::kBadHeader,
                         fmt::format("{}: no weight_map object", index.string()));
  }
  std::set<std::string> files;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string()) {
      return DataLossError(
          util::codes::kBadHeader,
          fmt::format("{}: weight_map['{}'] is not a file name", index.string(), it.key()));
    }
    const std::string f = it->get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "..") {
      return DataLossError(util::codes::kBadHeader,
                           fmt::format("{}: bad shard name '{}'", index.string(), f));
    }
    files.insert(f);
  }
  for (const std::string& f : files) {
    if (!fs::exists(dir / f, ec)) {
      return NotFoundError(util::codes::kMissingShard,
                           fmt::format("{}: shard '{}' named by model.safetensors.index.json is "
                                       "missing",
                                       dir.string(), f));
    }
  }
  return std::vector<std::string>(files.begin(), files.end());
}

// Everything after the files are read: collects the shards' tensors into the name -> view map,
// dequantizes FP8 weights and aligns the rest. Which tensors there are is the architecture's to
// check.
absl::StatusOr<std::unique_ptr<Model>> Assemble(
    HfCheckpointConfig parts, std::string name,
    std::vector<std::unique_ptr<SafetensorsFile>> shards, const UnreadTensors& unread = nullptr) {
  auto model = std::make_unique<Model>();
  model->config = std::move(parts.config);
  model->config.name = std::move(name);
  bool mapped = true;
  for (auto& st : shards) {
    for (const TensorView& t : st->tensors()) {
      if (!model->tensors.emplace(t.name, t).second) {
        return DataLossError(util::codes::kBadHeader,
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
  if (model->config.architecture == "deepseek_v4" || model->config.architecture == "deepseek_v41") {
    // V4 / V4.1 keep their FP8 / FP4 weights as released; the kernels read them with their
    // scales. (V4.1's transformers names are the native ones under "model.".)
    if (model->config.architecture == "deepseek_v4") {
      DI_RETURN_IF_ERROR(NormalizeDeepseekV4Names(*model));
    } else {
      DI_RETURN_IF_ERROR(StripDeepseekV41ModelPrefix(*model));
    }
    DI_RETURN_IF_ERROR(AttachBlockScales(*model, parts.fp8));
  } else {
    DI_RETURN_IF_ERROR(
        DequantizeFp8Weights(*model, parts.fp8, /*release_pages=*/mapped, unread));
  }
  AlignTensors(*model);
  if (parts.bos_id) model->tokenizer.bos_id = *parts.bos_id;
  if (parts.eos_id) model->tokenizer.eos_id = *parts.eos_id;
  if (model->tokenizer.eos_id >= 0) model->tokenizer.eog_ids = {model->tokenizer.eos_id};
  return model;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadHfModel(const std::string& path,
                                                   const UnreadTensors& unread) {
  std::error_code ec;
  fs::path dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const fs::path config_path = dir / "config.json";
  DI_ASSIGN_OR_RETURN(std::string text, util::ReadFile(config_path.string()));
  DI_ASSIGN_OR_RETURN(HfCheckpointConfig parts,
                      ParseHfCheckpointConfig(text, config_path.string()));
  std::string name = fs::absolute(dir, ec).lexically_normal().filename().string();
  if (name.empty()) name = dir.string();

  DI_ASSIGN_OR_RETURN(std::vector<std::string> shard_names, ShardList(dir));
  std::vector<std::unique_ptr<SafetensorsFile>> shards;
  for (const std::string& shard : shard_names) {
    DI_ASSIGN_OR_RETURN(auto st, SafetensorsFile::Open((dir / shard).string()));
    shards.push_back(std::move(st));
  }
  DI_ASSIGN_OR_RETURN(auto model,
                      Assemble(std::move(parts), std::move(name), std::move(shards), unread));
  model->source = {ModelFormat::kHuggingFace, path, dir.string()};
  return model;
}

absl::StatusOr<std::unique_ptr<Model>> HfModelFromParts(
    const std::string& config_json, std::vector<std::unique_ptr<SafetensorsFile>> shards,
    const std::string& label) {
  DI_ASSIGN_OR_RETURN(HfCheckpointConfig parts, ParseHfCheckpointConfig(config_json, label));
  return Assemble(std::move(parts), label, std::move(shards));
}

bool IsHfCheckpointPath(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return true;
  const fs::path p(path);
  return p.filename() == "config.json" || p.extension() == ".safetensors";
}

}  // namespace deepinfer::model
