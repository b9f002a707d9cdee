#pragma once

// DeepSeek-V4.1's Engram as a block: per Engram layer an n-gram table read by hashed token
// classes, whose rows are projected to per-stream keys and a value and added to the mHC streams
// through a scalar gate per (token, stream). The block owns the layout (engram_hash.h), the
// tokenizer's token classes, the hashed rows of the step and its scratch; an architecture loads
// one EngramWeights per Engram layer and calls Hashes once per forward, Apply before the layer.
// The token classes live in the main cache's extra layer `class_layer` (one float per position)
// so later chunks and decode steps can look back at them.
// Float32 activations; tables F32 / BF16 or FP8 E4M3 rows with E8M0 scales per 32.
// Threads: not thread-safe (scratch); Apply uses the pool passed in.
// Source: transformers deepseek_v41 (commit 0a2080b4) DeepseekV41Engram, DeepseekV41NgramHashState.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "arch/causal_lm.h"
#include "arch/engram_hash.h"
#include "arch/tensor_schema.h"
#include "model/model.h"
#include "util/aligned_vector.h"
#include "util/thread_pool.h"

namespace deepinfer::arch {

// One Engram layer: the n-gram table [rows, engram_head_dim] (F32/BF16, or FP8 E4M3 with an E8M0
// scale per 32 columns), wkv [(hc + 1) H, columns engram_head_dim] and the gate weights' product
// q * k [hc, H] (the reference uses only the product).
struct EngramWeights {
  int index = -1;  // position in engram_layer_ids; -1: the layer has no Engram
  const tensor::TensorView* table = nullptr;
  const tensor::TensorView* table_scale = nullptr;  // FP8 tables only
  const tensor::TensorView* wkv = nullptr;
  std::vector<float> qk;
};

class EngramBlock {
 public:
  // Checks the config's Engram settings against the tokenizer's classes (model.
  // engram_token_classes) and builds the layout. A config without engram_layer_ids leaves the
  // block off (enabled() false). Errors: kUnsupportedConfig (no token classes), kBadConfig.
  absl::Status Init(const model::Model& model);
  bool enabled() const { return enabled_; }

  // Layer `layer`'s weights under `prefix` ("layers.N.engram."); index -1 when the layer has none.
  // Errors: kMissingTensor, kShapeMismatch, kUnsupportedDtype, non-finite weights.
  absl::StatusOr<EngramWeights> Load(TensorSchema& schema, const model::Model& model,
                                     const std::string& prefix, int layer) const;

  // Writes each batch token's class into its slot of cache layer `class_layer`, then hashes the
  // classes at p, p - 1, ..., p - (N - 1) of every position (those before this step read from
  // their slots) for every Engram layer. Token ids outside the tokenizer hash as the pad class.
  // Image spans (batch.token_types >= 0; null: all text) are DEAD: their slot holds class -1,
  // so the look-back of every later position stops there and hashes the pad class from there
  // on (EngramLayout::Hash's blocking is cumulative), in this step and all later ones.
  // Source: DeepSeek-V4.1-Flash inference/engram.py as the vision goldens ran it (README "Text
  // model with images").
  void Hashes(const ForwardBatch& batch, KvCache& kv, int class_layer);

  // streams [T, hc, H] += gate * value per (token, stream), with kv = wkv(rows) =
  // [keys (hc x H), value (H)], dot_k = sum(X_k q_k k_k key_k) rsqrt(mean X_k^2 + eps)
  // rsqrt(mean key_k^2 + eps) / sqrt(H), gate_k = sigmoid(sign(dot_k) sqrt(max(|dot_k|, 1e-6))).
  // Rows whose token_types entry is >= 0 (image spans; null: all text) get gate 0: their
  // streams are left as they are. Reads the rows Hashes chose for this step.
  // Source: DeepseekV41Engram.forward; the span gate from inference/engram.py (vision goldens).
  void Apply(const EngramWeights& e, int64_t T, float* streams, util::ThreadPool& pool,
             const int8_t* token_types = nullptr);

 private:
  bool enabled_ = false;
  int64_t hidden_ = 0, hc_ = 0, head_dim_ = 0, layers_ = 0;
  float eps_ = 0;
  EngramLayout layout_;
  std::vector<int32_t> token_class_;
  int32_t pad_class_ = 0;
  std::vector<int64_t> hash_ids_;  // [T, engram layers, columns]
  util::AlignedVector<float> rows_, kv_;
};

}  // namespace deepinfer::arch
