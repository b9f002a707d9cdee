#pragma once

// DeepSeek-V4.1's attention as one block: CSA2. Every layer attends its sliding window (a ring
// in the window cache); a layer with ratio > 0 also attends the index_topk compressed entries of
// its KV source that the latest index source selected. KV sources compress groups of `ratio`
// tokens into entries (with an index key each) in the main cache; index sources score them with
// the lightning indexer; the candidate source first keeps candidate_topk_blocks blocks of
// entries, and later index sources score only inside them. Which layer plays which role is fixed
// at load from the config's source lists. The block owns the layers' slot layouts, the
// selection carried from one layer to the next within a forward, and the scratch; it also runs
// the DSpark stages' window attention (block rows over the window and their own block).
// Float32 activations; weights as the TensorSchema reads them.
// Threads: not thread-safe (scratch and selection state); calls use the pool passed in.
// Source: transformers models/deepseek_v41 (commit 0a2080b4); research notes 5.5 (DSpark).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "arch/causal_lm.h"
#include "arch/deepseek_v4_blocks.h"
#include "arch/tensor_schema.h"
#include "model/model.h"
#include "util/aligned_vector.h"
#include "util/thread_pool.h"

namespace deepinfer::arch::dsv4 {

// One layer's CSA2 roles, its source weights and its cache slots.
// Window cache slot: [window key/value (head_dim), a, z (head_dim each, ratio > 1 KV sources)].
// Main cache slot of a KV source: entry j and its index key, [head_dim + index_head_dim], placed
// as EntryCache says (spread over the group's slots when the block size allows).
struct Csa2Layer {
  int ratio = 0;
  bool kv_source = false, index_source = false, candidate_source = false, uses_candidates = false;
  int kv_src = -1;  // the layer whose compressed entries this layer reads (ratio > 0)
  // KV source: the compressor (wgate only at ratio 2) and the index keys' wk / k_norm.
  const tensor::TensorView* c_wkv = nullptr;
  const tensor::TensorView* c_wgate = nullptr;
  std::vector<float> c_norm, k_norm;
  const tensor::TensorView* i_wk = nullptr;
  // Index source: its queries and head weights.
  const tensor::TensorView* i_wq_b = nullptr;
  const tensor::TensorView* i_weights = nullptr;
  int64_t off_a = 0, off_z = 0, window_floats = 0, entry_floats = 0;
};

// Main layer `l`'s roles (from the config's source lists; kv_src is the caller's: the latest KV
// source at or before l) and weights under `prefix` ("layers.N."); `stage`: a DSpark stage
// (window only, no roles).
// Errors: the schema's (missing tensor, shape_mismatch, unsupported_dtype).
absl::StatusOr<Csa2Layer> LoadCsa2Layer(TensorSchema& schema, const std::string& prefix,
                                        const model::ModelConfig& cfg,
                                        const model::DeepseekV4Config& ds, int l, bool stage);

class Csa2Attention {
 public:
  // cfg and ds must outlive the block.
  void Init(const model::ModelConfig& cfg, const model::DeepseekV4Config& ds) {
    cfg_ = &cfg;
    ds_ = &ds;
  }
  // Before each forward over `kv`: checks the cache's slot sizes against layer(l) for the
  // num_layers main layers and notes where each KV source's entries sit (spread or whole).
  void BindCache(int num_layers, absl::FunctionRef<const Csa2Layer&(int)> layer,
                 const KvCache& kv);
  // out [T, H] = main layer l's attention of every batch row over its window and (ratio > 0)
  // the selected entries of its KV source, after this step's window key/values (and, for a
  // source, the entries its groups close and the new selection) are written. h [T, H] is the
  // normed layer input; positions [T] and rope the batch's (rope.Compute done). qat: DeepSeek's
  // fake quantization (window keys FP8 per 32, entries FP4 with E4M3 scales per 16, index keys
  // and queries FP4 per 32).
  void Run(const AttentionLayer& w, const Csa2Layer& L, int l, const ForwardBatch& batch,
           const int32_t* positions, const RopeTables& rope, const float* h, bool qat,
           KvCache& kv, float* out, util::ThreadPool& pool);
  // DSpark absorb: window layer l's key/values of in [T, H] (w's wkv, kv_norm, main RoPE) into
  // the window slots of the batch's positions.
  void StoreWindowKv(const AttentionLayer& w, int l, const ForwardBatch& batch, const float* in,
                     const RopeTables& rope, bool qat, KvCache& kv, util::ThreadPool& pool);
  // DSpark stage l over proposal rows: slice i's rows [i B, i B + B) (h [n B, H], main RoPE of
  // rope) each see the slice's window of positions < start_pos and all B rows of the block.
  void BlockAttention(const AttentionLayer& w, int l, const ForwardBatch& batch, int64_t B,
                      const RopeTables& rope, const float* h, bool qat, KvCache& kv, float* out,
                      util::ThreadPool& pool);

 private:
  // The window key/value rows of `in` (kv_norm, RoPE, FP8 under QAT) into attn_.kv().
  void WindowKv(const AttentionLayer& w, const float* in, int64_t T, const float* cosv,
                const float* sinv, bool qat, util::ThreadPool& pool);
  void Compress(const Csa2Layer& L, int l, const ForwardBatch& batch, const RopeTables& rope,
                const float* h, bool qat, KvCache& kv, util::ThreadPool& pool);
  void Select(const Csa2Layer& L, const ForwardBatch& batch, const int32_t* positions,
              const RopeTables& rope, const float* h, bool qat, KvCache& kv,
              util::ThreadPool& pool);
  // Layer l's window-cache slot of position pos (within the slice's window).
  static float* WindowSlot(KvCache& kv, const SequenceSlice& s, int l, int32_t pos) {
    return kv.window->Slot(l, s.window_block_table[pos / kv.block_size], pos % kv.block_size);
  }
  // Layer l's window keys for a query at position p (the last sliding_window positions up to p)
  // into keys; returns their count.
  int64_t WindowKeys(KvCache& kv, const SequenceSlice& s, int l, int32_t p,
                     const float** keys) const;
  const model::ModelConfig* cfg_ = nullptr;
  const model::DeepseekV4Config* ds_ = nullptr;
  SharedKvAttention attn_;
  LightningIndexer indexer_;
  // Per main layer (BindCache): where a KV source keeps its entries (layer -1 otherwise).
  std::vector<EntryCache> entries_;
  // Per token: the entries the latest index source selected [T, index_topk] (-1 padded), and the
  // candidate source's blocks [T, blocks] (1 kept).
  std::vector<int32_t> selected_;
  std::vector<uint8_t> candidates_;
  int64_t candidate_stride_ = 0;
  // Scratch, grown on demand.
  util::AlignedVector<float> ca_, cz_, latent_, ikey_, cs_;
  std::vector<int32_t> token_seq_;
  // Compress: the groups a step closes, (slice, closing position) in batch order.
  std::vector<std::pair<const SequenceSlice*, int32_t>> groups_;
};

}  // namespace deepinfer::arch::dsv4
