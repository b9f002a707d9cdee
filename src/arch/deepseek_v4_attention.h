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

#include <algorithm>
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

// One layer's variant, its compressors and indexer, and its cache slots (KvLayout: a window
// cache and a main cache, as V4.1's).
// Window cache slot, what only the last window_tokens positions are read for:
//   [window key/value (head_dim) | a, z (coff head_dim each) | index a, z (2 index_head_dim each)],
//   the compressor projections on HCA / CSA layers and the indexer's on CSA layers only.
// Main cache, what every later position may read: compressed entry j (ratio r) and, on CSA, its
//   index key, [head_dim | index_head_dim], placed over group j's slots as EntryCache says.
// An MTP module's cache has no window cache: its (window-only) key/value sits in the main slot.
struct CompressedAttentionLayer {
  model::DeepseekV4Config::Attention kind = model::DeepseekV4Config::Attention::kSliding;
  int ratio = 0;
  Compressor comp, index_comp;
  const tensor::TensorView* index_wq_b = nullptr;
  const tensor::TensorView* index_weights = nullptr;
  // Float offsets inside the window slot, and the slots' sizes.
  int64_t off_a = 0, off_z = 0, off_ia = 0, off_iz = 0;
  int64_t window_floats = 0;  // the window slot
  int64_t entry_floats = 0;   // an entry with its index key (0: window only)
  // Positions a step must still find in the window cache behind its first: the window, or the
  // 2 x ratio (CSA) / ratio (HCA) tokens a compressed entry pools, whichever is longer.
  int32_t window_tokens(int32_t sliding_window) const {
    return std::max(sliding_window, comp.coff * ratio);
  }
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
  // rows, closed entries and index keys are written to layer kv_layer's slots. kv has a window
  // cache (kv_layout) unless L is window only. h [T, H] is the
  // normed layer input; positions [T] and rope the batch's (rope.Compute done). qat: DeepSeek's
  // fake quantization of cached keys (FP8 per 64) and index vectors (Hadamard, FP4 per 32).
  void Run(const AttentionLayer& w, const CompressedAttentionLayer& L, int kv_layer,
           const ForwardBatch& batch, const int32_t* positions, const RopeTables& rope,
           const float* h, bool qat, KvCache& kv, float* out, util::ThreadPool& pool);

 private:
  void EmitEntries(const CompressedAttentionLayer& L, const Compressor& c, int64_t off_a,
                   int64_t off_z, bool index_keys, const EntryCache& entries, int kv_layer,
                   const SequenceSlice& s, const RopeTables& rope, bool qat, KvCache& kv);
  // Layer kv_layer's window slot of position pos: in the window cache, or the main slot of a
  // cache without one (MTP modules).
  static float* WindowSlot(KvCache& kv, int kv_layer, const SequenceSlice& s, int32_t pos) {
    if (kv.window == nullptr) {
      return kv.Slot(kv_layer, s.block_table[pos / kv.block_size], pos % kv.block_size);
    }
    return kv.window->Slot(kv_layer, s.window_block_table[pos / kv.block_size],
                           pos % kv.block_size);
  }
  void SelectIndexed(const CompressedAttentionLayer& L, const EntryCache& entries,
                     const ForwardBatch& batch,
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
