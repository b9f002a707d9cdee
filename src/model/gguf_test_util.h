#pragma once

// Test-only helpers: a tiny GGUF writer for building valid and deliberately malformed files.
// Used by the model tests and the fuzz seed generator; not part of the library.

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "model/dtype.h"
#include "model/gguf.h"

namespace deepinfer::model::testing {

inline std::string U8(uint8_t v) { return std::string(1, static_cast<char>(v)); }
inline std::string U32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
inline std::string U64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }
inline std::string F32(float v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
inline std::string GStr(const std::string& s) { return U64(s.size()) + s; }
inline std::string TypeId(GgufType t) { return U32(static_cast<uint32_t>(t)); }

// Builds a GGUF byte string: header, metadata in insertion order, tensor infos, padding and
// tensor data (zeros or the given bytes). Offsets are assigned automatically (aligned) unless
// overridden.
class GgufBuilder {
 public:
  GgufBuilder& SetVersion(uint32_t v) {
    version_ = v;
    return *this;
  }
  GgufBuilder& SetAlignment(uint32_t a) {
    alignment_ = a;
    return *this;
  }

  // `value` is the encoded payload of a value of type `type` (without key and type).
  GgufBuilder& Raw(const std::string& key, GgufType type, const std::string& value) {
    kv_ += GStr(key) + TypeId(type) + value;
    ++num_kv_;
    return *this;
  }
  GgufBuilder& Str(const std::string& key, const std::string& v) {
    return Raw(key, GgufType::kString, GStr(v));
  }
  GgufBuilder& U32Kv(const std::string& key, uint32_t v) {
    return Raw(key, GgufType::kUint32, U32(v));
  }
  GgufBuilder& I32Kv(const std::string& key, int32_t v) {
    return Raw(key, GgufType::kInt32, U32(static_cast<uint32_t>(v)));
  }
  GgufBuilder& U64Kv(const std::string& key, uint64_t v) {
    return Raw(key, GgufType::kUint64, U64(v));
  }
  GgufBuilder& F32Kv(const std::string& key, float v) {
    return Raw(key, GgufType::kFloat32, F32(v));
  }
  GgufBuilder& BoolKv(const std::string& key, bool v) { return Raw(key, GgufType::kBool, U8(v)); }
  GgufBuilder& StrArray(const std::string& key, const std::vector<std::string>& v) {
    std::string payload = TypeId(GgufType::kString) + U64(v.size());
    for (const auto& s : v) payload += GStr(s);
    return Raw(key, GgufType::kArray, payload);
  }
  GgufBuilder& I32Array(const std::string& key, const std::vector<int32_t>& v) {
    std::string payload = TypeId(GgufType::kInt32) + U64(v.size());
    for (int32_t x : v) payload += U32(static_cast<uint32_t>(x));
    return Raw(key, GgufType::kArray, payload);
  }
  GgufBuilder& F32Array(const std::string& key, const std::vector<float>& v) {
    std::string payload = TypeId(GgufType::kFloat32) + U64(v.size());
    for (float x : v) payload += F32(x);
    return Raw(key, GgufType::kArray, payload);
  }

  // Adds a tensor with GGUF extents `ne` (innermost first). Its data is `data` when given, else
  // a deterministic byte pattern of the right size. `offset` overrides the computed offset; such
  // a tensor's data is not written (it is meant for malformed files).
  GgufBuilder& Tensor(const std::string& name, uint32_t ggml_type, std::vector<int64_t> ne,
                      std::string data = "", int64_t offset = -1) {
    TensorSpec t{name, ggml_type, std::move(ne), std::move(data), offset};
    if (t.data.empty()) {
      const DType dt = DTypeFromGgml(ggml_type);
      int64_t n = 1;
      for (int64_t d : t.ne) n *= d;
      size_t bytes = dt == DType::kInvalid ? 32 : RowBytes(dt, n);
      for (size_t i = 0; i < bytes; ++i) t.data.push_back(static_cast<char>(i * 7 % 251));
    }
    tensors_.push_back(std::move(t));
    return *this;
  }

  std::string Build() const {
    std::string out = "GGUF" + U32(version_) + U64(tensors_.size()) + U64(num_kv_) + kv_;
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const auto& t : tensors_) {
      offsets.push_back(t.offset >= 0 ? static_cast<uint64_t>(t.offset) : next);
      next = Align(offsets.back() + t.data.size());
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      out += GStr(t.name) + U32(static_cast<uint32_t>(t.ne.size()));
      for (int64_t d : t.ne) out += U64(static_cast<uint64_t>(d));
      out += U32(t.ggml_type) + U64(offsets[i]);
    }
    out.resize(Align(out.size()), '\0');
    const size_t data_start = out.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (tensors_[i].offset >= 0) continue;  // forced offsets are for malformed files: no data
      const size_t at = data_start + static_cast<size_t>(offsets[i]);
      if (out.size() < at + tensors_[i].data.size()) out.resize(at + tensors_[i].data.size(), '\0');
      std::memcpy(out.data() + at, tensors_[i].data.data(), tensors_[i].data.size());
    }
    return out;
  }

 private:
  struct TensorSpec {
    std::string name;
    uint32_t ggml_type;
    std::vector<int64_t> ne;
    std::string data;
    int64_t offset;
  };
  uint64_t Align(uint64_t x) const { return (x + alignment_ - 1) / alignment_ * alignment_; }

  uint32_t version_ = 3;
  uint32_t alignment_ = 32;
  uint64_t num_kv_ = 0;
  std::string kv_;
  std::vector<TensorSpec> tensors_;
};

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace deepinfer::model::testing
