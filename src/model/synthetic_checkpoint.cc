#include "model/synthetic_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "fmt/format.h"
#include "model/block_scales.h"
#include "tensor/dtype.h"
#include "model/fp8.h"
#include "util/error_codes.h"
#include "util/mapped_file.h"
#include "util/status.h"

// This file is compiled with -ffp-contract=off: the float64 `center + half_width * x` must be a
// rounded multiply then a rounded add, as in numpy, never a fused multiply-add.

namespace deepinfer::model {
namespace {

namespace fs = std::filesystem;

constexpr char kGenerator[] = "splitmix64-uniform/1";
constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;

uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

absl::Status BadRecipe(const std::string& what) {
  return InvalidArgumentError(util::codes::kBadRecipe, "synthetic checkpoint recipe: " + what);
}

template <typename T>
void Append(std::vector<uint8_t>& out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.insert(out.end(), b, b + sizeof(T));
}

// DeepSeek's block quantization of one BF16 [rows, cols] weight (see the header).
void QuantizeFp8(const SafetensorsEntry& w, int block, SafetensorsEntry& q, SafetensorsEntry& s) {
  const int64_t rows = w.shape[0], cols = w.shape[1];
  const int64_t br = (rows + block - 1) / block, bc = (cols + block - 1) / block;
  q = {w.name, "F8_E4M3", w.shape, std::vector<uint8_t>(rows * cols)};
  s = {w.name + "_scale_inv", "F32", {br, bc}, {}};
  const auto value = [&](int64_t r, int64_t c) {
    uint16_t h;
    std::memcpy(&h, w.bytes.data() + 2 * (r * cols + c), 2);
    return Bf16ToFp32(h);
  };
  for (int64_t bi = 0; bi < br; ++bi) {
    for (int64_t bj = 0; bj < bc; ++bj) {
      const int64_t r0 = bi * block, r1 = std::min(rows, r0 + block);
      const int64_t c0 = bj * block, c1 = std::min(cols, c0 + block);
      float amax = 0;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(value(r, c)));
      }
      const float scale = static_cast<float>(std::max<double>(amax, 1e-12) / 448.0);
      Append(s.bytes, scale);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c)
          q.bytes[r * cols + c] = Fp32ToFp8E4M3(value(r, c) / scale);
      }
    }
  }
}

// Float value of a drawn BF16 / F32 element.
float DrawnValue(const SafetensorsEntry& w, int64_t i) {
  if (w.dtype == "BF16") {
    uint16_t h;
    std::memcpy(&h, w.bytes.data() + 2 * i, 2);
    return Bf16ToFp32(h);
  }
  float f;
  std::memcpy(&f, w.bytes.data() + 4 * i, 4);
  return f;
}

// The recipe's "quant" section (DeepSeek-V4 / V4.1 release formats): "fp8_e4m3_ue8m0_RxC",
// "engram_fp8_e4m3_ue8m0_1x32" and "fp4_e2m1_ue8m0_1x32" entries, each {"tensors": [names]};
// other keys are notes. A quantized tensor's E8M0 scales replace a recipe tensor of the same
// name (the Engram tables' F32 ones).
struct ReleaseQuant {
  absl::flat_hash_map<std::string, std::pair<int64_t, int64_t>> fp8;  // name -> block
  absl::flat_hash_set<std::string> fp4;
};

absl::StatusOr<ReleaseQuant> ParseReleaseQuant(const nlohmann::json& recipe) {
  ReleaseQuant q;
  if (!recipe.contains("quant")) return q;
  for (const auto& [key, v] : recipe.at("quant").items()) {
    int64_t br = 0, bc = 0;
    bool fp4 = false;
    if (key == "fp4_e2m1_ue8m0_1x32") {
      fp4 = true;
    } else if (key == "engram_fp8_e4m3_ue8m0_1x32") {
      br = 1;  // V4.1's Engram tables: FP8 rows with one scale per 32 values
      bc = 32;
    } else if (std::sscanf(key.c_str(), "fp8_e4m3_ue8m0_%ldx%ld", &br, &bc) == 2) {
      if (br <= 0 || bc <= 0 || key != fmt::format("fp8_e4m3_ue8m0_{}x{}", br, bc)) {
        return BadRecipe("bad quant block " + key);
      }
    } else {
      continue;  // notes, checksums, formats this writer does not make
    }
    for (const auto& n : v.at("tensors")) {
      if (fp4) {
        q.fp4.insert(n.get<std::string>());
      } else {
        q.fp8[n.get<std::string>()] = {br, bc};
      }
    }
  }
  return q;
}

// "<prefix>.weight" -> "<prefix>.scale".
std::string ScaleName(const std::string& weight) {
  constexpr std::string_view kWeight = ".weight";
  if (weight.size() > kWeight.size() &&
      weight.compare(weight.size() - kWeight.size(), kWeight.size(), kWeight) == 0) {
    return weight.substr(0, weight.size() - kWeight.size()) + ".scale";
  }
  return weight + ".scale";
}

}  // namespace

BlockQuantized QuantizeFp8E8M0(const float* w, int64_t rows, int64_t cols, int64_t br, int64_t bc) {
  const int64_t nbr = (rows + br - 1) / br, nbc = (cols + bc - 1) / bc;
  BlockQuantized q;
  q.codes.resize(static_cast<size_t>(rows * cols));
  q.scales.resize(static_cast<size_t>(nbr * nbc));
  q.dequant.resize(static_cast<size_t>(rows * cols));
  for (int64_t bi = 0; bi < nbr; ++bi) {
    for (int64_t bj = 0; bj < nbc; ++bj) {
      const int64_t r0 = bi * br, r1 = std::min(rows, r0 + br);
      const int64_t c0 = bj * bc, c1 = std::min(cols, c0 + bc);
      float amax = 0;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      }
      amax = std::max(amax, std::ldexp(1.0f, -100));
      const int e = PowerOfTwoCeilExponent(amax * (1.0f / 448.0f));
      q.scales[bi * nbc + bj] = static_cast<uint8_t>(e + 127);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          const uint8_t code = Fp32ToFp8E4M3(std::ldexp(w[r * cols + c], -e));
          q.codes[r * cols + c] = code;
          q.dequant[r * cols + c] = std::ldexp(Fp8E4M3ToFp32(code), e);
        }
      }
    }
  }
  return q;
}

BlockQuantized QuantizeFp4E8M0(const float* w, int64_t rows, int64_t cols) {
  BlockQuantized q;
  q.codes.assign(static_cast<size_t>(rows * cols / 2), 0);
  q.scales.resize(static_cast<size_t>(rows * cols / 32));
  q.dequant.resize(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / 32; ++b) {
      const float* x = w + r * cols + b * 32;
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
      amax = std::max(amax, 6.0f * std::ldexp(1.0f, -126));
      const int e = PowerOfTwoCeilExponent(amax * (1.0f / 6.0f));
      q.scales[r * (cols / 32) + b] = static_cast<uint8_t>(e + 127);
      for (int i = 0; i < 32; ++i) {
        const int64_t c = b * 32 + i;
        const uint8_t code = Fp32ToFp4E2M1(std::clamp(std::ldexp(x[i], -e), -6.0f, 6.0f));
        q.codes[(r * cols + c) / 2] |= static_cast<uint8_t>(code << (4 * (c & 1)));
        q.dequant[r * cols + c] = std::ldexp(Fp4E2M1ToFp32(code), e);
      }
    }
  }
  return q;
}

absl::StatusOr<std::vector<SafetensorsEntry>> DrawSyntheticTensors(const nlohmann::json& recipe) {
  try {
    if (recipe.at("generator").get<std::string>() != kGenerator) {
      return BadRecipe("unknown generator " + recipe.at("generator").dump());
    }
    const uint64_t seed = recipe.at("seed").get<uint32_t>();
    std::vector<SafetensorsEntry> out;
    absl::flat_hash_map<std::string, uint64_t> index_of;  // for "draw_as"
    uint64_t index = 0;
    for (const auto& t : recipe.at("tensors")) {
      SafetensorsEntry e{t.at("name").get<std::string>(),
                         t.at("dtype").get<std::string>(),
                         t.at("shape").get<std::vector<int64_t>>(),
                         {}};
      if (e.dtype != "BF16" && e.dtype != "F32" && e.dtype != "I64") {
        return BadRecipe("unsupported dtype " + e.dtype);
      }
      int64_t n = 1;
      for (int64_t d : e.shape) {
        if (d <= 0 || d > (int64_t{1} << 30) / n) return BadRecipe("bad shape of " + e.name);
        n *= d;
      }
      uint64_t draw_index = index;
      if (t.contains("draw_as")) {
        // The draws of an earlier tensor (a scaled copy when its centre and half-width differ).
        const auto it = index_of.find(t.at("draw_as").get<std::string>());
        if (it == index_of.end()) return BadRecipe("draw_as names no earlier tensor: " + e.name);
        draw_index = it->second;
      }
      index_of[e.name] = index++;
      const uint64_t key = Mix64((seed << 32) | draw_index);
      if (e.dtype == "I64") {
        // Row r holds (b_r + j) mod m, b_r = draw of the row's first element >> 40.
        const int64_t m = t.at("modulus").get<int64_t>();
        if (e.shape.size() != 2 || m <= 0) return BadRecipe("bad I64 table " + e.name);
        const int64_t k = e.shape[1];
        e.bytes.reserve(n * 8);
        for (int64_t r = 0; r < e.shape[0]; ++r) {
          const uint64_t z = Mix64(key + static_cast<uint64_t>(r * k + 1) * kGoldenGamma);
          const int64_t base = static_cast<int64_t>(z >> 40);
          for (int64_t j = 0; j < k; ++j) Append(e.bytes, static_cast<int64_t>((base + j) % m));
        }
        out.push_back(std::move(e));
        continue;
      }
      const double center = t.at("center").get<double>();
      const double half_width = t.at("half_width").get<double>();
      e.bytes.reserve(n * (e.dtype == "BF16" ? 2 : 4));
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t z = Mix64(key + static_cast<uint64_t>(i + 1) * kGoldenGamma);
        const double x = (static_cast<double>(z >> 40) - 8388608.0) / 8388608.0;
        const float v = static_cast<float>(center + half_width * x);
        if (e.dtype == "BF16") {
          Append(e.bytes, Fp32ToBf16(v));
        } else {
          Append(e.bytes, v);
        }
      }
      out.push_back(std::move(e));
    }
    return out;
  } catch (const nlohmann::json::exception& e) {
    return BadRecipe(e.what());
  }
}

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<const SafetensorsEntry*>& tensors) {
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  size_t offset = 0;
  for (const SafetensorsEntry* t : tensors) {
    header[t->name] = {{"dtype", t->dtype},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + t->bytes.size()}}};
    offset += t->bytes.size();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string file;
  file.reserve(8 + h.size() + offset);
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) file.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  file += h;
  for (const SafetensorsEntry* t : tensors) {
    file.append(reinterpret_cast<const char*>(t->bytes.data()), t->bytes.size());
  }
  return util::WriteFileAtomically(path, file);
}

absl::Status WriteSyntheticWeights(const std::string& recipe_path, const std::string& out_dir) {
  DI_ASSIGN_OR_RETURN(std::string text, util::ReadFile(recipe_path));
  const nlohmann::json recipe = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (recipe.is_discarded() || !recipe.is_object()) return BadRecipe(recipe_path + " is not JSON");
  DI_ASSIGN_OR_RETURN(std::vector<SafetensorsEntry> drawn, DrawSyntheticTensors(recipe));

  // FP8: quantized weights with their scales right after them, the rest unchanged.
  std::vector<SafetensorsEntry> tensors;
  try {
    absl::flat_hash_set<std::string> fp8;
    int block = 0;
    if (recipe.contains("fp8")) {
      const auto& f = recipe["fp8"];
      if (f.at("format").get<std::string>() != "e4m3fn") return BadRecipe("unknown fp8 format");
      block = f.at("block").get<int>();
      if (block <= 0) return BadRecipe("bad fp8 block");
      for (const auto& n : f.at("tensors")) fp8.insert(n.get<std::string>());
    }
    DI_ASSIGN_OR_RETURN(ReleaseQuant release, ParseReleaseQuant(recipe));
    absl::flat_hash_set<std::string> replaced_scales;
    for (const auto& [name, block] : release.fp8) replaced_scales.insert(ScaleName(name));
    for (const auto& name : release.fp4) replaced_scales.insert(ScaleName(name));
    for (auto& t : drawn) {
      if (replaced_scales.contains(t.name)) continue;
      auto fp8_block = release.fp8.find(t.name);
      if (fp8_block != release.fp8.end() || release.fp4.contains(t.name)) {
        if ((t.dtype != "BF16" && t.dtype != "F32") || t.shape.size() != 2) {
          return BadRecipe("release quantization needs a 2-D float tensor: " + t.name);
        }
        const int64_t rows = t.shape[0], cols = t.shape[1];
        std::vector<float> w(static_cast<size_t>(rows * cols));
        for (int64_t i = 0; i < rows * cols; ++i) w[i] = DrawnValue(t, i);
        BlockQuantized q;
        SafetensorsEntry qt{t.name, "F8_E4M3", t.shape, {}},
            st{ScaleName(t.name), "F8_E8M0", {}, {}};
        if (fp8_block != release.fp8.end()) {
          const auto [br, bc] = fp8_block->second;
          q = QuantizeFp8E8M0(w.data(), rows, cols, br, bc);
          st.shape = {(rows + br - 1) / br, (cols + bc - 1) / bc};
        } else {
          if (cols % 32 != 0) return BadRecipe("FP4 needs columns in multiples of 32: " + t.name);
          q = QuantizeFp4E8M0(w.data(), rows, cols);
          qt.dtype = "I8";
          qt.shape = {rows, cols / 2};
          st.shape = {rows, cols / 32};
        }
        qt.bytes = std::move(q.codes);
        st.bytes = std::move(q.scales);
        tensors.push_back(std::move(qt));
        tensors.push_back(std::move(st));
        continue;
      }
      if (!fp8.contains(t.name)) {
        tensors.push_back(std::move(t));
        continue;
      }
      if (t.dtype != "BF16" || t.shape.size() != 2)
        return BadRecipe("fp8 needs a 2-D BF16 " + t.name);
      SafetensorsEntry q, s;
      QuantizeFp8(t, block, q, s);
      tensors.push_back(std::move(q));
      tensors.push_back(std::move(s));
    }
    const int shards = recipe.value("shards", 1);
    if (shards < 1 || shards > static_cast<int>(tensors.size())) return BadRecipe("bad shards");
    if (shards == 1) {
      std::vector<const SafetensorsEntry*> all;
      for (const auto& t : tensors) all.push_back(&t);
      return WriteSafetensors(out_dir + "/model.safetensors", all);
    }
    const size_t per = (tensors.size() + shards - 1) / shards;
    nlohmann::json weight_map = nlohmann::json::object();
    size_t total = 0;
    for (int s = 0; s < shards; ++s) {
      char name[64];
      std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", s + 1, shards);
      std::vector<const SafetensorsEntry*> part;
      for (size_t i = s * per; i < std::min(tensors.size(), (s + 1) * per); ++i) {
        part.push_back(&tensors[i]);
        weight_map[tensors[i].name] = name;
        total += tensors[i].bytes.size();
      }
      DI_RETURN_IF_ERROR(WriteSafetensors(out_dir + "/" + name, part));
    }
    nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    return util::WriteFileAtomically(out_dir + "/model.safetensors.index.json", index.dump(2));
  } catch (const nlohmann::json::exception& e) {
    return BadRecipe(e.what());
  }
}

namespace {

// The case's inputs: config, recipe, tokenizer files; not its goldens (golden.json,
// logits.json.gz).
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> CaseInputs(
    const fs::path& case_dir) {
  std::vector<std::pair<std::string, std::string>> inputs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(case_dir, ec)) {
    const std::string f = entry.path().filename().string();
    if (!entry.is_regular_file() || f == "golden.json" || entry.path().extension() != ".json") {
      continue;
    }
    DI_ASSIGN_OR_RETURN(std::string text, util::ReadFile(entry.path().string()));
    inputs.emplace_back(f, std::move(text));
  }
  if (ec) {
    return NotFoundError(util::codes::kFileNotFound,
                         "cannot list " + case_dir.string() + ": " + ec.message());
  }
  return inputs;
}

absl::Status WriteCase(const std::vector<std::pair<std::string, std::string>>& inputs,
                       const fs::path& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return InternalError(util::codes::kIoError, "cannot create " + out_dir.string());
  for (const auto& [f, text] : inputs) {
    DI_RETURN_IF_ERROR(util::WriteFileAtomically((out_dir / f).string(), text));
  }
  return WriteSyntheticWeights((out_dir / "weights.json").string(), out_dir.string());
}

}  // namespace

absl::Status WriteSyntheticCheckpoint(const std::string& case_dir, const std::string& out_dir) {
  std::error_code ec;
  if (fs::equivalent(case_dir, out_dir, ec)) {
    return WriteSyntheticWeights(case_dir + "/weights.json", out_dir);
  }
  DI_ASSIGN_OR_RETURN(auto inputs, CaseInputs(case_dir));
  return WriteCase(inputs, out_dir);
}

absl::StatusOr<std::string> SyntheticCheckpoint(const std::string& case_dir,
                                                const std::string& cache_dir) {
  const fs::path src = fs::path(case_dir).lexically_normal();
  const std::string name = (src.has_filename() ? src : src.parent_path()).filename().string();
  DI_ASSIGN_OR_RETURN(auto inputs, CaseInputs(src));
  const fs::path target = fs::path(cache_dir) / name;
  const auto up_to_date = [&] {
    for (const auto& [f, text] : inputs) {
      auto have = util::ReadFile((target / f).string());
      if (!have.ok() || *have != text) return false;
    }
    return fs::exists(target / "weights.json");
  };
  if (up_to_date()) return target.string();

  std::error_code ec;
  const fs::path tmp = fs::path(cache_dir) / ("." + name + "." + std::to_string(getpid()) + "." +
                                              std::to_string(std::random_device{}()));
  absl::Status st = WriteCase(inputs, tmp);
  if (!st.ok()) {
    fs::remove_all(tmp, ec);
    return st;
  }
  if (fs::exists(target) && !up_to_date()) {  // stale: move it aside first
    const fs::path old = tmp.string() + ".old";
    fs::rename(target, old, ec);
    fs::remove_all(old, ec);
  }
  fs::rename(tmp, target, ec);
  if (ec) {  // another process put an up-to-date copy there first
    fs::remove_all(tmp, ec);
    if (!up_to_date())
      return InternalError(util::codes::kIoError, "cannot create " + target.string());
  }
  return target.string();
}

}  // namespace deepinfer::model
