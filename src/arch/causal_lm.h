#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "arch/moe.h"
#include "kernels/cpu/attention.h"
#include "model/model.h"
#include "util/thread_pool.h"

namespace deepinfer::arch {

// Paged KV storage: for every layer, `num_blocks` blocks of `block_size` token slots, each block
// holding block_size * layer_floats[layer] f32 values whose layout belongs to the architecture
// (kernels::GqaKvLayout for grouped-query attention; [block_size, latent] for MLA). The engine
// only moves block ids, never their contents. A layer with 0 floats keeps nothing here.
//
// Architectures with sliding-window attention (DeepSeek-V4.1) use a second cache, `window`,
// addressed by a second block table (SequenceSlice::window_block_table): it holds what only the
// last KvLayout::window_tokens positions need (window keys/values, pending compressor inputs), so
// a sequence keeps a few window blocks however long it grows. The owner sets the pointer.
//
// `dtype` is the element type of the main cache (set before Allocate; the window cache is always
// f32): f32, or a 16-bit type for architectures whose SupportsKvDtype accepts it, whose layers
// are then addressed in bytes (layer_bytes) with the layout the architecture documents.
//
// Shapes: layers[l] is [num_blocks, block_size * layer_floats[l]] values of `dtype` (float* only
//   meaningful for f32); Slot() addresses the token-major f32 layout.
// Units: block_size in tokens; memory = num_blocks * block_size * sum(layer_floats) *
//   KvDtypeBytes(dtype) bytes.
// Threads: written only by the forward pass on the engine thread.
// Source: Kwon et al. 2023, "Efficient Memory Management for LLM Serving with PagedAttention".
struct KvCache {
  int num_layers = 0;
  int block_size = 16;
  int num_blocks = 0;
  int64_t floats_per_token = 0;        // the largest layer_floats entry
  std::vector<int64_t> layer_floats;   // [num_layers]
  std::vector<float*> layers;
  KvCache* window = nullptr;           // not owned; null for architectures without one
  kernels::KvDtype dtype = kernels::KvDtype::kF32;

  KvCache() = default;
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // Reserves storage with anonymous mmap: pages are committed only when first written, so a
  // large cache costs memory only for the blocks actually used. Every layer gets `per_token`.
  // Errors: ResourceExhausted "out_of_memory" when the address space cannot be reserved.
  absl::Status Allocate(int layers_count, int block_size_tokens, int blocks, int64_t per_token);
  // As Allocate, with layer l holding per_layer[l] floats per token.
  absl::Status AllocateLayers(int block_size_tokens, int blocks,
                              const std::vector<int64_t>& per_layer);
  // Start of layer l's storage whatever the dtype.
  uint8_t* layer_bytes(int l) const { return reinterpret_cast<uint8_t*>(layers[l]); }
  float* Slot(int layer, int32_t block, int32_t offset) {
    return layers[layer] +
           (static_cast<int64_t>(block) * block_size + offset) * layer_floats[layer];
  }
  // Bytes held per token slot across all layers.
  int64_t bytes_per_token() const;
};

// How an architecture lays out its KV cache (see KvCache).
//
// Units: floats per token slot; window_tokens in positions.
struct KvLayout {
  std::vector<int64_t> floats;         // per layer of the main cache (every position is kept)
  std::vector<int64_t> window_floats;  // per layer of the window cache; empty: no window cache
  // A step starting at position p reads window slots of positions >= p - window_tokens + 1 only,
  // so the engine may release window blocks wholly below that.
  int32_t window_tokens = 0;
  bool has_window() const { return !window_floats.empty(); }
};

// One sequence's part of a forward batch.
//
// The sequence already has `start_pos` tokens in the KV cache; this step appends `num_tokens`
// tokens (a prefill chunk, one decode token, or a speculative draft) at positions
// start_pos .. start_pos + num_tokens - 1, stored in the blocks listed by `block_table`.
// Logits are produced for the last `num_logits` of those tokens (0 for a non-final prefill chunk).
struct SequenceSlice {
  int32_t token_offset = 0;  // index of the first token in ForwardBatch::tokens
  int32_t num_tokens = 0;
  int32_t start_pos = 0;
  int32_t num_logits = 1;
  const int32_t* block_table = nullptr;  // covers positions [0, start_pos + num_tokens)
  int32_t num_blocks = 0;
  // Blocks of KvCache::window, indexed as block_table; entries of blocks wholly below
  // start_pos - KvLayout::window_tokens + 1 may be -1 (released). Null without a window cache.
  const int32_t* window_block_table = nullptr;
};

// A step's worth of tokens from one or more sequences (continuous batching).
//
// Shapes: tokens [num_tokens]; logits written by Forward are [sum(num_logits), vocab] f32,
//   in sequence order.
struct ForwardBatch {
  const int32_t* tokens = nullptr;
  int32_t num_tokens = 0;
  std::vector<SequenceSlice> seqs;
  // Image spans (DeepSeek-V4.1, arch/vision_tower.h): per batch token its ImageTokenType
  // (0 start, 1 image, 2 newline, 3 end), -1 for text; null when no token of the step is in a
  // span. span_rows holds one row [hidden] per token whose type is >= 0, in batch order: the
  // vision tower's span rows, which replace those tokens' embeddings. An architecture without a
  // vision tower never receives them (the engine refuses image requests first).
  const int8_t* token_types = nullptr;
  const float* span_rows = nullptr;

  int32_t num_logit_rows() const {
    int32_t n = 0;
    for (const auto& s : seqs) n += s.num_logits;
    return n;
  }
};

// Copies the rows of the tokens that get logits (the last num_logits of each slice, in sequence
// order) from src [batch.num_tokens, width] to dst [batch.num_logit_rows(), width] (f32).
void GatherLogitRows(const ForwardBatch& batch, const float* src, int64_t width, float* dst);

// Each batch token's position (its slice's start_pos plus its index in the slice) and, when
// token_seq is not null, the index of its slice. Shapes: positions, token_seq [batch.num_tokens].
void BatchPositions(const ForwardBatch& batch, int32_t* positions, int32_t* token_seq = nullptr);

// Float arithmetic of a forward pass.
enum class Numerics {
  // The engine's own kernels: fastest, and batch invariant (a sequence gets the same logits
  // alone or batched, in one prefill chunk or several).
  kFast,
  // Bit-identical to llama.cpp's CPU backend (llama-cpp-python 0.3.36, AVX-512 build, flash
  // attention off), so greedy decoding is token-identical to it. Slower, and like llama.cpp not
  // batch invariant: attention sums V in one order for a one-token step and another for longer
  // steps (a Forward batch plays the part of one llama.cpp ubatch). See docs/parity.md and
  // kernels/cpu/ggml_numerics.h. Supported by the Llama architecture.
  kGgml,
  // DeepSeek's own inference numerics for DeepSeek-V4: the cached values are fake-quantized as
  // its released inference code stores them (window and compressed KV as FP8 E4M3 with a
  // power-of-two scale per 64 values, indexer queries and keys Hadamard-rotated and FP4 E2M1 per
  // 32), which the model was trained for (QAT). Batch invariant. arch/deepseek_v4.h.
  kDeepseekQat,
};

// "fast", "ggml", "deepseek-qat"; nullopt for another name.
std::optional<Numerics> NumericsFromName(std::string_view name);
const char* NumericsName(Numerics numerics);

// The speculative-draft heads a checkpoint carries, behind one interface for the two kinds the
// DeepSeek family ships:
//   kMtp    multi-token prediction modules (DeepSeek-V3, V4): module k predicts one token further
//           from the next token and the main model's final state, chained for deeper drafts;
//   kDspark DeepSeek-V4.1's DSpark stages: one proposal of a block of guesses with confidences,
//           from the stages' own window caches, which the main Forward keeps up to date.
// The engine asks CausalLm::draft_heads() and drives the kind it gets (engine/speculative.h).
// Threads: as CausalLm (the heads share its scratch).
class VisionTower;  // arch/vision_tower.h

class DraftHeads {
 public:
  enum class Kind { kMtp, kDspark };
  virtual ~DraftHeads() = default;
  virtual Kind kind() const = 0;

  // --- kMtp (arch/deepseek_v3.h has the full contract) ---
  // Number of MTP modules the checkpoint holds.
  virtual int num_mtp_layers() const { return 0; }
  // f32 values per token of the state an MTP module reads (FinalHidden, ForwardMtp's prev_hidden
  // and hidden_out): the hidden size, or hc_mult * hidden for DeepSeek-V4's residual streams.
  virtual int64_t mtp_hidden_size() const { return 0; }
  // Final hidden states [num_tokens of the last Forward call, mtp_hidden_size()] f32.
  virtual void FinalHidden(float* out) const {}
  // Runs MTP module k over `batch` (token i at position p is x_{p+1}, prev_hidden row i is the
  // main model's final hidden state at p) writing draft logits for the last num_logits tokens
  // of each slice, and (if non-null) the module's hidden states for chaining.
  virtual void ForwardMtp(int k, const ForwardBatch& batch, const float* prev_hidden,
                          KvCache& mtp_kv, float* logits, float* hidden_out,
                          util::ThreadPool& pool) {}

  // --- kDspark (arch/deepseek_v41.h has the model's contract) ---
  // Positions one proposal covers (the config's dspark_block_size).
  virtual int dspark_block_size() const { return 0; }
  // Turns the drafter's state on for later calls: kv_layout then adds one window layer per
  // stage, and Forward writes the stages' window KV at every position it computes (so the
  // windows follow the main cache: prefix-cache hits, chunks and rejected drafts included).
  // Call once, before kv_layout and the first Forward. Returns false (nothing changes) when the
  // stages cannot run.
  virtual bool EnableDspark() { return false; }
  // One block per slice: slice i holds one token, the sequence's newest (not in the cache yet)
  // at start_pos, and the stages' windows hold the positions before it (num_logits ignored).
  // Writes drafts [slices, block] (guesses for positions start_pos + 1 .. start_pos + block)
  // and confidence [slices, block] in (0, 1). REQUIRES: EnableDspark() returned true.
  virtual void DsparkPropose(const ForwardBatch& batch, KvCache& kv, int32_t* drafts,
                             float* confidence, util::ThreadPool& pool) {}
};

// A decoder-only language model's forward pass over a paged KV cache.
//
// Threads: not thread-safe (owns scratch buffers); drive it from one thread, which must also own
//   the ThreadPool passed in.
// Lifetime: borrows the Model, which must outlive it.
class CausalLm {
 public:
  virtual ~CausalLm() = default;
  virtual const model::ModelConfig& config() const = 0;
  // f32 values one token occupies in one layer of the KV cache.
  virtual int64_t kv_floats_per_token() const = 0;
  // The caches Forward expects for blocks of `block_size` tokens: by default num_layers layers
  // of kv_floats_per_token() and no window cache.
  virtual KvLayout kv_layout(int32_t block_size) const {
    KvLayout layout;
    layout.floats.assign(static_cast<size_t>(config().num_layers), kv_floats_per_token());
    return layout;
  }
  // Runs the batch: writes new tokens' KV into `kv` and their logits into `logits`.
  // REQUIRES: token ids in [0, vocab); block tables cover all positions; slices disjoint.
  virtual void Forward(const ForwardBatch& batch, KvCache& kv, float* logits,
                       util::ThreadPool& pool) = 0;
  // Selects the arithmetic of later Forward calls; returns false (and keeps the current one) where
  // the architecture has no such mode. Not thread-safe; set it before the first Forward.
  virtual bool SetNumerics(Numerics numerics) { return numerics == Numerics::kFast; }
  // Whether Forward reads and writes a main KV cache of `dtype` under the numerics set now.
  // Every architecture takes f32; Llama with fast numerics also f16 and bf16.
  virtual bool SupportsKvDtype(kernels::KvDtype dtype) const {
    return dtype == kernels::KvDtype::kF32;
  }
  // The arithmetic a model runs with unless told otherwise: kFast, or kDeepseekQat for a
  // DeepSeek-V4 checkpoint in the released (FP8 / FP4) formats.
  virtual Numerics default_numerics() const { return Numerics::kFast; }
  // How the cache holds values in other than the dtype's elements under the numerics set now
  // (empty: it does not), e.g. "fp4-index-keys". Prefix checkpoints and P/D record it with the
  // numerics, so a cache written one way is never read the other.
  virtual std::string kv_packing() const { return ""; }

  // The checkpoint's speculative-draft heads, or null when it has none (arch/causal_lm.h's
  // DraftHeads). The heads live as long as this object.
  virtual DraftHeads* draft_heads() { return nullptr; }

  // The checkpoint's vision tower (arch/vision_tower.h), or null when the model takes text only.
  // It lives as long as this object; like Forward, called from the engine thread only.
  virtual VisionTower* vision_tower() { return nullptr; }
};

// Builds the forward pass for `model.config.architecture`, after checking the model's tensors
// against the architecture's schema (names, shapes, types the kernels read; DeepSeek also
// NaN/Inf: every element of norms and biases, 4 sampled rows of matrices; MTP layers only when
// present). The schemas live here, in arch/llama.cc and arch/deepseek_v3.cc; model/'s loaders
// only map the files.
// Errors: Unimplemented "unsupported_architecture"; NotFound "missing_tensor"; InvalidArgument
//   "shape_mismatch" (against the config); Unimplemented "unsupported_dtype"; DataLoss
//   "nan_in_weights"; InvalidArgument "bad_config" (inconsistent dimensions); Llama also
//   "vocab_mismatch" (token_embd against the tokenizer) and "bad_metadata" (misaligned data).
// With `experts` of more than one rank (expert parallelism, arch/moe.h) this process reads and
// runs only its share of every MoE layer's routed experts; InvalidArgument "bad_option" for a
// model without them. Not owned; must outlive the model.
absl::StatusOr<std::unique_ptr<CausalLm>> CreateCausalLm(const model::Model& model,
                                                         ExpertExchange* experts = nullptr);

}  // namespace deepinfer::arch
