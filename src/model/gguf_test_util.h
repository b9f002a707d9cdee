#pragma once

// Test-only helpers: a tiny GGUF writer for building valid and deliberately malformed files.
// Used by the model and arch tests and the fuzz seed generator; not part of the library.

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tensor/dtype.h"
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

// A tiny llama GGUF (2 layers, hidden 32, 4 heads of 8, 2 KV heads, 8 tokens) that tests damage
// on purpose: `omit` drops tensors, `overrides` changes a tensor's ggml type and extents.
struct TinyLlama {
  std::string arch = "llama";
  int num_tokens = 8;
  std::set<std::string> omit;
  std::map<std::string, std::pair<uint32_t, std::vector<int64_t>>> overrides;  // ggml type, ne
  bool with_output = false;
  std::vector<std::string> extra_tokens;

  std::string Build() const {
    constexpr int kHidden = 32, kQ = 32, kKv = 16, kFfn = 64, kVocab = 8;
    GgufBuilder b;
    b.Str("general.architecture", arch)
        .U32Kv("llama.block_count", 2)
        .U32Kv("llama.context_length", 128)
        .U32Kv("llama.embedding_length", kHidden)
        .U32Kv("llama.feed_forward_length", kFfn)
        .U32Kv("llama.attention.head_count", 4)
        .U32Kv("llama.attention.head_count_kv", 2)
        .F32Kv("llama.attention.layer_norm_rms_epsilon", 1e-6f)
        .Str("tokenizer.ggml.model", "gpt2");
    std::vector<std::string> tokens = {"<|endoftext|>", "a", "b", "ab",
                                       "<|im_end|>",    "c", "d", "e"};
    tokens.resize(static_cast<size_t>(num_tokens), "x");
    for (size_t i = 0; i < extra_tokens.size() && i < tokens.size(); ++i) {
      tokens[tokens.size() - 1 - i] = extra_tokens[i];
    }
    b.StrArray("tokenizer.ggml.tokens", tokens)
        .StrArray("tokenizer.ggml.merges", {"a b"})
        .U32Kv("tokenizer.ggml.eos_token_id", 0)
        .U32Kv("tokenizer.ggml.bos_token_id", 99);  // out of range: ignored
    auto add = [&](const std::string& name, uint32_t type, std::vector<int64_t> ne) {
      if (omit.count(name)) return;
      if (auto it = overrides.find(name); it != overrides.end()) {
        type = it->second.first;
        ne = it->second.second;
      }
      b.Tensor(name, type, ne);
    };
    add("token_embd.weight", 8, {kHidden, kVocab});
    for (int l = 0; l < 2; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      add(p + "attn_norm.weight", 0, {kHidden});
      add(p + "attn_q.weight", 2, {kHidden, kQ});
      add(p + "attn_k.weight", 3, {kHidden, kKv});
      add(p + "attn_v.weight", 1, {kHidden, kKv});
      add(p + "attn_output.weight", 30, {kQ, kHidden});
      add(p + "ffn_norm.weight", 0, {kHidden});
      add(p + "ffn_gate.weight", 0, {kHidden, kFfn});
      add(p + "ffn_up.weight", 8, {kHidden, kFfn});
      add(p + "ffn_down.weight", 3, {kFfn, kHidden});
    }
    add("output_norm.weight", 0, {kHidden});
    if (with_output) add("output.weight", 8, {kHidden, kVocab});
    return b.Build();
  }
};

}  // namespace deepinfer::model::testing
