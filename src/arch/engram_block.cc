#include "arch/engram_block.h"

#include <algorithm>
#include <cmath>

#include "arch/deepseek_v4_blocks.h"
#include "fmt/format.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "model/tensor_values.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::arch {

using dsv4::Grow;

absl::Status EngramBlock::Init(const model::Model& model) {
  const model::DeepseekV4Config& ds = *model.config.deepseek_v4;
  if (ds.engram_layer_ids.empty()) return absl::OkStatus();
  if (model.engram_token_classes.empty()) {
    return UnimplementedError(util::codes::kUnsupportedConfig,
                              "DeepSeek-V4.1 Engram layers (engram_layer_ids) need the "
                              "tokenizer's token classes, which serving does not supply yet");
  }
  // Bounds keep the prime search at load short (the release: 4-grams, 8 heads).
  if (ds.engram_max_ngram_size < 2 || ds.engram_max_ngram_size > 16 || ds.engram_n_heads <= 0 ||
      ds.engram_n_heads > 256 || ds.engram_head_dim <= 0 || ds.engram_layer_ids.size() > 64 ||
      ds.engram_compressed_vocab_size <= 0 ||
      ds.engram_num_embeddings.size() != ds.engram_layer_ids.size()) {
    return InvalidArgumentError(util::codes::kBadConfig,
                                "inconsistent DeepSeek-V4.1 Engram settings");
  }
  layout_ = EngramLayout::Make(ds.engram_layer_ids, ds.engram_max_ngram_size, ds.engram_n_heads,
                               ds.engram_vocab_size, ds.engram_compressed_vocab_size);
  for (size_t e = 0; e < ds.engram_layer_ids.size(); ++e) {
    if (layout_.table_rows[e] != ds.engram_num_embeddings[e]) {
      return InvalidArgumentError(
          util::codes::kBadConfig,
          fmt::format("engram_num_embeddings[{}] is {}; its primes sum to {}", e,
                      ds.engram_num_embeddings[e], layout_.table_rows[e]));
    }
  }
  token_class_ = model.engram_token_classes;
  int32_t classes = 0;
  for (int32_t c : token_class_) classes = std::max(classes, c + 1);
  if (classes != ds.engram_compressed_vocab_size) {
    return InvalidArgumentError(
        util::codes::kBadConfig,
        fmt::format("the tokenizer gives {} Engram token classes; the config's "
                    "engram_compressed_vocab_size is {}",
                    classes, ds.engram_compressed_vocab_size));
  }
  if (ds.engram_pad_id < 0 || ds.engram_pad_id >= static_cast<int>(token_class_.size())) {
    return InvalidArgumentError(util::codes::kBadConfig,
                                "engram_pad_id is not a token of the tokenizer");
  }
  pad_class_ = token_class_[ds.engram_pad_id];
  hidden_ = model.config.hidden;
  hc_ = ds.hc_mult;
  head_dim_ = ds.engram_head_dim;
  layers_ = static_cast<int64_t>(ds.engram_layer_ids.size());
  eps_ = model.config.rms_norm_eps;
  enabled_ = true;
  return absl::OkStatus();
}

absl::StatusOr<EngramWeights> EngramBlock::Load(TensorSchema& schema, const model::Model& model,
                                                const std::string& g, int layer) const {
  EngramWeights e;
  const std::vector<int>& ids = model.config.deepseek_v4->engram_layer_ids;
  const auto it = std::find(ids.begin(), ids.end(), layer);
  if (!enabled_ || it == ids.end()) return e;
  e.index = static_cast<int>(it - ids.begin());
  const int64_t rows = layout_.table_rows[e.index], hd = head_dim_;
  e.table = model.Find(g + "embed.weight");
  if (e.table == nullptr) {
    return NotFoundError(util::codes::kMissingTensor,
                         fmt::format("tensor '{}embed.weight' is missing", g));
  }
  schema.MarkUsed(g + "embed.weight");
  if (e.table->shape != std::vector<int64_t>{rows, hd}) {
    return InvalidArgumentError(util::codes::kShapeMismatch,
                                fmt::format("{}embed.weight is {}, expected [{}, {}]", g,
                                            model::ShapeString(e.table->shape), rows, hd));
  }
  if (e.table->dtype == tensor::DType::kF8E4M3) {
    e.table_scale = model.Find(g + "embed.scale");
    if (e.table_scale == nullptr) {
      return NotFoundError(util::codes::kMissingTensor,
                           fmt::format("tensor '{}embed.scale' is missing", g));
    }
    schema.MarkUsed(g + "embed.scale");
    if (e.table_scale->dtype != tensor::DType::kE8M0 ||
        e.table_scale->shape != std::vector<int64_t>{rows, hd / 32} || hd % 32 != 0) {
      return InvalidArgumentError(
          util::codes::kShapeMismatch,
          fmt::format("{}embed.scale must be E8M0 [{}, {}]", g, rows, hd / 32));
    }
    // The release's tables are ~98 GB each: sampled rows only, as for every large matrix.
    DI_RETURN_IF_ERROR(model::CheckFinite(*e.table, /*full=*/false));
    DI_RETURN_IF_ERROR(model::CheckFinite(*e.table_scale, /*full=*/false));
  } else if (e.table->dtype != tensor::DType::kF32 && e.table->dtype != tensor::DType::kBF16) {
    return UnimplementedError(
        util::codes::kUnsupportedDtype,
        fmt::format("{}embed.weight has dtype {}", g, tensor::DTypeName(e.table->dtype)));
  } else {
    DI_RETURN_IF_ERROR(schema.Mat(g + "embed.weight", rows, hd).status());
    if (schema.Has(g + "embed.scale")) schema.MarkUsed(g + "embed.scale");  // unused ones
  }
  DI_ASSIGN_OR_RETURN(e.wkv, schema.Mat(g + "wkv.weight", (hc_ + 1) * hidden_,
                                        int64_t{layout_.columns()} * hd));
  DI_ASSIGN_OR_RETURN(std::vector<float> q, schema.Vec(g + "q_weight", {hc_, hidden_}));
  DI_ASSIGN_OR_RETURN(std::vector<float> k, schema.Vec(g + "k_weight", {hc_, hidden_}));
  e.qk.resize(q.size());
  for (size_t i = 0; i < q.size(); ++i) e.qk[i] = q[i] * k[i];
  return e;
}

void EngramBlock::Hashes(const ForwardBatch& batch, KvCache& kv, int class_layer) {
  const int N = layout_.max_ngram_size, cols = layout_.columns();
  const int64_t T = batch.num_tokens;
  auto class_of = [&](int32_t token) {
    return token >= 0 && token < static_cast<int32_t>(token_class_.size()) ? token_class_[token]
                                                                           : pad_class_;
  };
  auto slot = [&](const SequenceSlice& s, int32_t pos) {
    return kv.Slot(class_layer, s.block_table[pos / kv.block_size], pos % kv.block_size);
  };
  Grow(hash_ids_, T * layers_ * cols);
  std::vector<int32_t> classes(static_cast<size_t>(N));
  for (const auto& s : batch.seqs) {
    for (int32_t i = 0; i < s.num_tokens; ++i) {
      const int64_t t = s.token_offset + i;
      // A span position is DEAD (class -1): it blocks the look-back of the positions after it.
      const bool dead = batch.token_types != nullptr && batch.token_types[t] >= 0;
      *slot(s, s.start_pos + i) = dead ? -1.0f : static_cast<float>(class_of(batch.tokens[t]));
    }
    for (int32_t i = 0; i < s.num_tokens; ++i) {
      const int32_t p = s.start_pos + i;
      for (int k = 0; k < N; ++k) {
        const int32_t q = p - k;
        classes[k] = q < 0 ? -1 : static_cast<int32_t>(*slot(s, q));
      }
      for (int64_t e = 0; e < layers_; ++e) {
        layout_.Hash(static_cast<int>(e), classes.data(), pad_class_,
                     hash_ids_.data() + ((s.token_offset + i) * layers_ + e) * cols);
      }
    }
  }
}

void EngramBlock::Apply(const EngramWeights& e, int64_t T, float* streams,
                        util::ThreadPool& pool, const int8_t* token_types) {
  const int cols = layout_.columns();
  const int64_t hd = head_dim_, H = hidden_, hc = hc_;
  const int64_t in = cols * hd;
  Grow(rows_, T * in);
  for (int64_t t = 0; t < T; ++t) {
    for (int c = 0; c < cols; ++c) {
      const int64_t row = hash_ids_[(t * layers_ + e.index) * cols + c];
      float* out = rows_.data() + t * in + c * hd;
      if (e.table_scale != nullptr) {
        const uint8_t* codes = e.table->data + row * hd;
        const uint8_t* scales = e.table_scale->data + row * (hd / 32);
        for (int64_t d = 0; d < hd; ++d) {
          out[d] = tensor::Fp8E4M3ToFp32(codes[d]) * tensor::E8M0ToFp32(scales[d / 32]);
        }
      } else {
        const int32_t id = static_cast<int32_t>(row);
        kernels::EmbeddingLookup(*e.table, &id, 1, out);
      }
    }
  }
  Grow(kv_, T * (hc + 1) * H);
  kernels::MatMul(*e.wkv, rows_.data(), T, kv_.data(), pool);
  const float inv_sqrt_h = 1.0f / std::sqrt(static_cast<float>(H));
  for (int64_t t = 0; t < T; ++t) {
    if (token_types != nullptr && token_types[t] >= 0) continue;  // span: gate 0
    const float* key = kv_.data() + t * (hc + 1) * H;
    const float* value = key + hc * H;
    for (int64_t k = 0; k < hc; ++k) {
      float* x = streams + (t * hc + k) * H;
      const float* kk = key + k * H;
      const float* w = e.qk.data() + k * H;
      float xx = 0, key2 = 0, dot = 0;
      for (int64_t d = 0; d < H; ++d) {
        xx += x[d] * x[d];
        key2 += kk[d] * kk[d];
        dot += x[d] * w[d] * kk[d];
      }
      const float rstd = (1.0f / std::sqrt(xx / H + eps_)) * (1.0f / std::sqrt(key2 / H + eps_));
      const float g = dot * rstd * inv_sqrt_h;
      const float gate =
          1.0f / (1.0f + std::exp(-std::copysign(std::sqrt(std::max(std::fabs(g), 1e-6f)), g)));
      for (int64_t d = 0; d < H; ++d) x[d] += gate * value[d];
    }
  }
}

}  // namespace deepinfer::arch
