#pragma once

// DeepSeek-V2/V3's multi-head latent attention over the paged KV cache, as a block that owns a
// layer's slot layout and its scratch: the builder projects the queries and the latent row
// (q LoRA or q_proj; kv_a_proj, kv_a_layernorm, RoPE on the rope parts), then calls Store (the
// step's latent rows into the sequences' slots) and Attend. Used by DeepSeek-V3 / V2
// (arch/deepseek_v3.cc), its MTP modules included.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "arch/causal_lm.h"
#include "arch/tensor_schema.h"
#include "model/model.h"
#include "util/aligned_vector.h"
#include "util/thread_pool.h"

namespace deepinfer::arch {

// What attention reads of a layer's kv_b_proj [heads * (nope + v), rank]: the matrix as stored
// (the expanded form's matmul) and its f32 copy (the absorbed form's W_UK and W_UV rows).
struct MlaWeights {
  const tensor::TensorView* kv_b = nullptr;
  std::vector<float> kv_b_f32;
};

// kv_b_proj `name` shaped by the config, with its f32 copy.
// Errors: as TensorSchema::Mat.
// Cost: V3: 64 MiB of f32 per layer.
absl::StatusOr<MlaWeights> LoadMlaWeights(TensorSchema& schema, const std::string& name,
                                          const model::ModelConfig& cfg);

// One layer's MLA with num_heads heads (config().num_heads) of queries [nope | rope], keys
// [k_nope | k_pe], values of v_head_dim; k_nope and v come from the cached latent through
// kv_b_proj; k_pe is shared by every head. Softmax scale 1 / sqrt(nope + rope), times YaRN's
// mscale(factor, mscale_all_dim)^2 when the config has one.
//
// KV cache: per token and layer the latent row [c_kv (kv_lora_rank) | k_pe (qk_rope_head_dim)]
//   (KvCache::Slot's token-major f32 layout), i.e. kv_floats_per_token() = rank + rope.
// Attention has two equivalent forms. Expanded: k_nope / v of every context token are rebuilt
//   from the latents with kv_b_proj, then ordinary attention (one kv_b matmul over the context
//   per slice; cheap per query). Absorbed: q_nope is folded through kv_b's key part so scores are
//   dot products with the cached latent (heads as the lanes of kernels::MlaAttendRange, the
//   context split into parts of 256 positions that are merged), and the attended latent is mapped
//   through its value part (cheap per context token). kAuto picks per slice by a flop estimate:
//   decode and short speculative slices absorbed, long prefill chunks expanded unless the
//   context's expanded keys/values would exceed 256 MiB. Both agree to f32 rounding; each is
//   batch invariant.
// Shapes: latents [T, rank + rope]; q [T, heads, nope + rope] (rope parts rotated);
//   out [T, heads, v] f32, T the batch's tokens in batch order.
// Threads: not thread-safe (scratch); Attend uses the pool passed in.
// Source: DeepSeek-AI 2024, "DeepSeek-V2" section 2.1 (MLA, absorbing W^UK and W^UV);
//   transformers modeling_deepseek_v3.py (the expanded form's reference); vLLM MLACommonImpl.
class MlaAttention {
 public:
  enum class Mode { kAuto, kExpanded, kAbsorbed };

  // REQUIRES: cfg.deepseek set.
  explicit MlaAttention(const model::ModelConfig& cfg);

  // Values one token occupies in one layer of the cache.
  int64_t kv_floats_per_token() const { return rank_ + rope_; }

  // Writes every batch token's latent row into its slot of layer `layer`. Call before Attend,
  // so a token sees itself and the earlier tokens of its own chunk.
  void Store(const ForwardBatch& batch, KvCache& kv, int layer, const float* latents) const;

  // out = attention of every query over positions [0, pos] of its sequence, in `mode`'s form.
  void Attend(const MlaWeights& w, const ForwardBatch& batch, KvCache& kv, int layer,
              const float* q, float* out, Mode mode, util::ThreadPool& pool);

 private:
  void AttendAbsorbed(const MlaWeights& w, const SequenceSlice& s, KvCache& kv, int layer,
                      const float* q, float* out, util::ThreadPool& pool);
  void AttendExpanded(const MlaWeights& w, const SequenceSlice& s, KvCache& kv, int layer,
                      const float* q, float* out, util::ThreadPool& pool);

  int64_t nh_, dn_, rope_, dv_, rank_;
  float softmax_scale_ = 1.0f;

  // Per thread: scores over the context, the absorbed query and the attended latent.
  int64_t thread_stride_ = 0;
  util::AlignedVector<float> thread_scratch_, ctx_lat_, ctx_kv_;
  // Absorbed form: transposed queries [token][chunk][lat][16], partial states per item,
  // attended latents [token][chunk][rank][16].
  struct Item {
    int32_t token, chunk, pos_begin, pos_end, first_part, num_parts;
  };
  std::vector<Item> items_;
  std::vector<int32_t> first_;  // [token][chunk] index of its first item
  util::AlignedVector<float> q_t_, o_, ml_, lat_, scratch_;
};

}  // namespace deepinfer::arch
