#pragma once

// The engine's side of prefix checkpoints (engine/prefix_checkpoint.h has the file format and
// the store): which file a prompt's prefix lives in, finding and verifying one for a new request,
// installing its blocks into the KV caches and the prefix cache, saving a computed prompt's
// blocks, and restoring the newest files at start-up. EngineImpl owns one when the engine has a
// checkpoint store.

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "arch/causal_lm.h"
#include "engine/block_manager.h"
#include "engine/engine.h"
#include "engine/image_spans.h"
#include "engine/prefix_checkpoint.h"
#include "engine/sequence.h"

namespace deepinfer::engine {

// The prefix cache's hash of the chain of the first `num_blocks` full blocks of `tokens`
// (BlockManager::HashBlock chained from 0, each block salted by BlockSalt with `cache_salt` and
// the image spans it overlaps): what names a prefix's checkpoint.
uint64_t ChainHash(const int32_t* tokens, int32_t num_blocks, int32_t block_size,
                   uint64_t cache_salt, const std::vector<ImageSpan>& spans);

// The caches a checkpoint copies, as the engine allocated them. Borrowed.
struct CheckpointCaches {
  arch::KvCache* kv = nullptr;      // main cache
  arch::KvCache* mtp_kv = nullptr;  // MTP modules' cache (num_layers 0 without MTP)
  arch::KvCache* window_kv = nullptr;
  BlockManager* blocks = nullptr;
  BlockManager* window_blocks = nullptr;  // null without a window cache
  int32_t window_tokens = 0;
  // arch::NumericsName, then "+" and CausalLm::kv_packing() where the cache packs values.
  std::string numerics;
  std::string architecture;
  // Called after a restore copied `bytes` bytes into `cache`'s layer `layer` at byte `offset`
  // (engine thread): expert parallelism mirrors them to the other ranks. Empty: nothing.
  std::function<void(arch::KvCache& cache, int layer, size_t offset, size_t bytes)> restored;
};

// Threads: Find and CheckpointFor run on caller threads; Install, Save and Forget on the engine
//   thread (Preload in Init, before it starts). The resident set is shared, under resident_mu_.
// Lifetime: borrows the options' store and the caches, which outlive it.
class Checkpointer {
 public:
  // The layout (what a file must match), the regions a file copies (main layers, MTP layers,
  // window layers) and the key mixed into file names (revision and layout).
  Checkpointer(const EngineOptions& options, const CheckpointCaches& caches);

  // The file and the tokens that a checkpoint of `prompt`'s full blocks would have.
  CheckpointRef CheckpointFor(const std::vector<int32_t>& prompt, uint64_t cache_salt) const;
  // A verified checkpoint of the longest saved chain `request`'s prompt starts with (or of the
  // file it names: the P/D decode side), unless this rank restored or saved that chain itself;
  // null otherwise. Caller thread.
  // `spans`: the request's image spans (PlanImageSpans), part of the chain and fingerprint.
  std::shared_ptr<const PrefixCheckpoint> Find(const GenerateRequest& request,
                                               const std::vector<ImageSpan>& spans);
  // Engine thread: copies `seq.restore`'s blocks into free blocks of the caches and commits them
  // to the prefix cache (all of them or none), so the lookup that follows finds them.
  void Install(Sequence& seq);
  // Engine thread (the scheduler's prompt-computed hook): copies the prompt's full blocks out
  // and queues them for the store's writer, with the images whose spans start among them.
  void Save(const Sequence& seq);
  // Restores the store's newest checkpoints until checkpoint_preload_tokens (Init, before the
  // engine thread starts).
  void Preload();
  // A chain whose last block was evicted is no longer resident: a later request reads its file
  // again instead of recomputing.
  void Forget(uint64_t chain_hash);

 private:
  // One cache layer as a checkpoint stores it: its storage, bytes per token slot, and whether
  // it is addressed by the window cache's blocks.
  struct Region {
    arch::KvCache* cache;
    int layer;
    int64_t bytes_per_token;
    bool window;
  };
  uint64_t Name(uint64_t chain_hash) const;
  bool InstallBlocks(const PrefixCheckpoint& c, uint64_t salt);
  std::shared_ptr<const PrefixCheckpoint> LoadResident(const GenerateRequest& r, uint64_t name,
                                                       uint64_t chain, int32_t num_tokens,
                                                       const std::vector<ImageSpan>& spans,
                                                       bool warn_missing);
  std::shared_ptr<const PrefixCheckpoint> LoadNamed(const GenerateRequest& request);
  void MarkResident(uint64_t chain_hash);

  const EngineOptions& options_;
  CheckpointCaches caches_;
  int32_t block_size_ = 0;
  CheckpointLayout layout_;
  // Mixed into every checkpoint's file name with the chain hash: servers of another revision or
  // layout sharing the folder neither find nor block each other's files.
  uint64_t key_ = 0;
  std::vector<Region> regions_;
  absl::Mutex resident_mu_;
  absl::flat_hash_set<uint64_t> resident_ ABSL_GUARDED_BY(resident_mu_);
};

}  // namespace deepinfer::engine
