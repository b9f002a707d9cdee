#include "model/safetensors.h"

#include <bit>
#include <cstring>
#include <limits>
#include <utility>

#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::model {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors is read as little endian");

// Headers of real checkpoints are well under 10 MB (DeepSeek-V3 shards: ~100 KB); the cap keeps
// a corrupt length from making the JSON parser walk gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr int kMaxDims = 8;

absl::Status BadHeader(const std::string& label, const std::string& what) {
  return DataLossError(util::codes::kBadHeader, fmt::format("{}: {}", label, what));
}

DType DTypeFromName(const std::string& s) {
  if (s == "F32") return DType::kF32;
  if (s == "F16") return DType::kF16;
  if (s == "BF16") return DType::kBF16;
  if (s == "F8_E4M3") return DType::kF8E4M3;
  if (s == "I64") return DType::kI64;
  if (s == "I8") return DType::kI8;
  if (s == "F8_E8M0") return DType::kE8M0;
  return DType::kInvalid;
}

bool AsU64(const nlohmann::json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer() && j.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(j.get<int64_t>());
    return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  DI_ASSIGN_OR_RETURN(auto file, util::MappedFile::Open(path));
  DI_ASSIGN_OR_RETURN(auto st, Parse(file->data(), file->size(), path));
  st->file_ = std::move(file);
  return st;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Parse(const uint8_t* data,
                                                                        size_t size,
                                                                        const std::string& label) {
  if (size < 8) {
    return DataLossError(util::codes::kTruncatedFile,
                         fmt::format("{}: shorter than the 8-byte header length", label));
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, data, 8);
  if (header_len > size - 8) {
    return DataLossError(
        util::codes::kTruncatedFile,
        fmt::format("{}: header of {} bytes but the file has {}", label, header_len, size));
  }
  if (header_len < 2 || header_len > kMaxHeaderBytes) {
    return BadHeader(label, fmt::format("header length {} is implausible", header_len));
  }
  const char* text = reinterpret_cast<const char*>(data + 8);
  nlohmann::json header = nlohmann::json::parse(text, text + header_len, nullptr,
                                                /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return BadHeader(label, "header is not a JSON object");
  }
  const uint8_t* base = data + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  auto st = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  st->tensors_.reserve(header.size());
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) return BadHeader(label, "__metadata__ is not an object");
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (m.value().is_string()) {
          st->metadata_.emplace_back(m.key(), m.value().get<std::string>());
        }
      }
      continue;
    }
    if (!e.is_object()) return BadHeader(label, fmt::format("entry '{}' is not an object", name));
    auto dt = e.find("dtype");
    auto sh = e.find("shape");
    auto off = e.find("data_offsets");
    if (dt == e.end() || !dt->is_string() || sh == e.end() || !sh->is_array() || off == e.end() ||
        !off->is_array() || off->size() != 2) {
      return BadHeader(label, fmt::format("tensor '{}' lacks dtype, shape or data_offsets", name));
    }
    TensorView t;
    t.name = name;
    const std::string dtype_name = dt->get<std::string>();
    t.dtype = DTypeFromName(dtype_name);
    if (t.dtype == DType::kInvalid) {
      return UnimplementedError(util::codes::kUnsupportedDtype,
                                fmt::format("{}: tensor '{}' has dtype {} (supported: F32, F16, "
                                            "BF16, F8_E4M3, F8_E8M0, I8, I64)",
                                            label, name, dtype_name));
    }
    if (sh->size() > static_cast<size_t>(kMaxDims)) {
      return BadHeader(label, fmt::format("tensor '{}' has {} dimensions", name, sh->size()));
    }
    uint64_t elements = 1;
    for (const auto& d : *sh) {
      uint64_t v = 0;
      if (!AsU64(d, &v) || v > (1ull << 40)) {
        return BadHeader(label, fmt::format("tensor '{}' has a bad extent", name));
      }
      if (v != 0 && elements > std::numeric_limits<uint64_t>::max() / v) {
        return BadHeader(label, fmt::format("tensor '{}' is too large", name));
      }
      elements *= v;
      t.shape.push_back(static_cast<int64_t>(v));
    }
    if (t.shape.empty()) t.shape.push_back(1);
    uint64_t begin = 0, end = 0;
    if (!AsU64((*off)[0], &begin) || !AsU64((*off)[1], &end) || begin > end) {
      return BadHeader(label, fmt::format("tensor '{}' has bad data_offsets", name));
    }
    const uint64_t elem = BlockBytes(t.dtype);
    if (elements > std::numeric_limits<uint64_t>::max() / elem || end - begin != elements * elem) {
      return BadHeader(label, fmt::format("tensor '{}' holds {} bytes, its shape needs {}", name,
                                          end - begin, elements * elem));
    }
    if (end > data_size) {
      return DataLossError(util::codes::kTruncatedFile,
                           fmt::format("{}: tensor '{}' ends at byte {} of a {}-byte data section",
                                       label, name, end, data_size));
    }
    t.data = base + begin;
    t.size_bytes = static_cast<size_t>(end - begin);
    st->tensors_.push_back(std::move(t));
  }
  return st;
}

}  // namespace deepinfer::model
