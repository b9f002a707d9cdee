#pragma once

// DeepSeek-V4's three attention variants as one block over the paged cache: sliding window (the
// last sliding_window positions), HCA (heavily compressed: the window plus every compressed entry
// the token sees) and CSA (compressed sparse: the window plus the lightning indexer's top-k
// entries). The block owns the layer's cache slot layout and its scratch; deepseek_v4.cc loads it
// per layer and calls Run. DeepSeek-V4.1's CSA2 (entries in their own cache, shared sources) is
// a different block (deepseek_v41.cc).
// Float32 activations; weights as the TensorSchema reads them.
// Threads: not thread-safe (scratch); Run uses the pool passed in.
// Source: transformers models/deepseek_v4 (5.24): DeepseekV4Attention, DeepseekV4Compressor,
// DeepseekV4Indexer.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "arch/causal_lm.h"
#include "arch/deepseek_v4_blocks.h"
#include "arch/tensor_schema.h"
#include "model/model.h"
#include "util/aligned_vector.h"
#include "util/thread_pool.h"

namespace deepinfer::arch::dsv4 {

// A compressor: a = wkv x, z = wgate x ([coff * dim] each); ape [ratio, coff * dim]; norm [dim].
struct Compressor {
  const tensor::TensorView* wkv = nullptr;
  const tensor::TensorView* wgate = nullptr;
  std::vector<float> ape, norm;
  int dim = 0;
  int coff = 1;  // 2: overlapping windows (CSA)
};

// One layer's variant, its compressors and indexer, and its cache slot. A token's slot holds
// [window key/value (head_dim) | a, z (coff head_dim each) | entry (head_dim) |
//  index a, z (2 index_head_dim each) | index key (index_head_dim)],
// the compressed parts on HCA / CSA layers and the index parts on CSA layers only. Compressed
// entry j (ratio r) and its index key live in the slot of position r (j + 1) - 1, the token that
// closes window j.
struct CompressedAttentionLayer {
  model::DeepseekV4Config::Attention kind = model::DeepseekV4Config::Attention::kSliding;
  int ratio = 0;
  Compressor comp, index_comp;
  const tensor::TensorView* index_wq_b = nullptr;
  const tensor::TensorView* index_weights = nullptr;
  // Float offsets inside a token's cache slot.
  int64_t off_a = 0, off_z = 0, off_entry = 0, off_ia = 0, off_iz = 0, off_ikey = 0;
  int64_t slot_floats = 0;  // floats of the slot
};

// A layer's variant `kind` with compression `ratio` (the config's attention / compress_ratio)
// with attn.compressor.* and attn.indexer.* under `prefix` ("layers.N." or "mtp.K.").
// Errors: the schema's (missing tensor, shape_mismatch, unsupported_dtype).
absl::StatusOr<CompressedAttentionLayer> LoadCompressedAttention(
    TensorSchema& schema, const std::string& prefix, const model::ModelConfig& cfg,
    const model::DeepseekV4Config& ds, model::DeepseekV4Config::Attention kind, int ratio);

class CompressedAttention {
 public:
  // cfg and ds must outlive the block.
  void Init(const model::ModelConfig& cfg, const model::DeepseekV4Config& ds) {
    cfg_ = &cfg;
    ds_ = &ds;
  }
  // out [T, H] = the attention of every batch row over its window and the compressed entries it
  // sees (w's queries, sink and grouped output), after this step's window key/values, compressor
  // rows, closed entries and index keys are written to layer kv_layer's slots. h [T, H] is the
  // normed layer input; positions [T] and rope the batch's (rope.Compute done). qat: DeepSeek's
  // fake quantization of cached keys (FP8 per 64) and index vectors (Hadamard, FP4 per 32).
  void Run(const AttentionLayer& w, const CompressedAttentionLayer& L, int kv_layer,
           const ForwardBatch& batch, const int32_t* positions, const RopeTables& rope,
           const float* h, bool qat, KvCache& kv, float* out, util::ThreadPool& pool);

 private:
  void EmitEntries(const CompressedAttentionLayer& L, const Compressor& c, int64_t off_a,
                   int64_t off_z, int64_t off_out, bool index_keys, int kv_layer,
                   const SequenceSlice& s, const RopeTables& rope, bool qat, KvCache& kv);
  void SelectIndexed(const CompressedAttentionLayer& L, int kv_layer, const ForwardBatch& batch,
                     const int32_t* positions, const RopeTables& rope, const float* h, bool qat,
                     KvCache& kv, util::ThreadPool& pool);
  void QuantizeKv(float* x, int64_t dim, bool qat) const;
  void QuantizeIndex(float* x, bool qat) const;

  const model::ModelConfig* cfg_ = nullptr;
  const model::DeepseekV4Config* ds_ = nullptr;
  SharedKvAttention attn_;
  LightningIndexer indexer_;
  // Scratch, grown on demand.
  util::AlignedVector<float> ca_, cz_, ia_, iz_, rows_;
  std::vector<int32_t> token_seq_;
  // Selected compressed entries per token of a CSA layer: [T, index_topk], -1 padded.
  std::vector<int32_t> selected_;
};

}  // namespace deepinfer::arch::dsv4
