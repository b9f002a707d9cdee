#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"

namespace deepinfer::engine {

// Allocates fixed-size KV blocks and keeps full blocks as a prefix cache.
//
// A full block is identified by a hash chain: hash(parent block hash, the block's token ids,
// salt), so equal prefixes map to equal block sequences. Blocks are reference counted; a cached
// block whose count drops to zero stays findable until it is evicted (least recently freed
// first). Sequences free their blocks last-to-first, so a prefix's tail is evicted before its
// head. Matches compare the stored token ids too, so a hash collision can never return wrong KV.
//
// Threads: engine thread only.
// Source: vLLM v1 KVCacheManager (block hashing, free-queue LRU); Kwon et al. 2023.
class BlockManager {
 public:
  BlockManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching);

  int32_t num_blocks() const { return num_blocks_; }
  int32_t block_size() const { return block_size_; }
  // Blocks that can be handed out now: never used plus cached-but-unreferenced.
  int32_t num_available() const { return num_free_ + num_evictable_; }
  int32_t num_in_use() const { return num_blocks_ - num_available(); }

  // Appends `n` new blocks (ref count 1) to `out`; all or nothing. Returns false when fewer than
  // `n` are available.
  bool Allocate(int32_t n, std::vector<int32_t>& out);

  // Drops one reference to each block, iterating from the back; entries of -1 are skipped.
  void Free(const std::vector<int32_t>& blocks);
  // Drops one reference to `block`.
  void FreeBlock(int32_t block);

  // The cached block that Commit registered under `hash` for these block_size `tokens`, or -1.
  int32_t Find(uint64_t hash, const int32_t* tokens) const;
  // Takes a reference on a block that Find returned.
  void Acquire(int32_t block);

  // Finds the longest cached run of full blocks for `tokens` (at most `max_blocks` blocks),
  // takes a reference on each, appends them to `blocks` and their hashes to `hashes`.
  // Returns the number of blocks matched.
  // salt_of(i) is block i's salt (the request's cache_salt, mixed with its images' hashes:
  // engine/image_spans.h BlockSalt).
  int32_t MatchPrefix(const int32_t* tokens, int32_t max_blocks,
                      absl::FunctionRef<uint64_t(int32_t)> salt_of, std::vector<int32_t>& blocks,
                      std::vector<uint64_t>& hashes);
  int32_t MatchPrefix(const int32_t* tokens, int32_t max_blocks, uint64_t salt,
                      std::vector<int32_t>& blocks, std::vector<uint64_t>& hashes) {
    return MatchPrefix(tokens, max_blocks, [salt](int32_t) { return salt; }, blocks, hashes);
  }

  // Registers a block that has just become full. `tokens` are its block_size token ids.
  // Returns the block's hash (for chaining the next block).
  uint64_t Commit(int32_t block, uint64_t parent_hash, const int32_t* tokens, uint64_t salt);

  static uint64_t HashBlock(uint64_t parent_hash, const int32_t* tokens, int32_t n, uint64_t salt);

  // Called with a cached block's hash when Allocate evicts it (the engine forgets restored
  // prefix checkpoints whose last block is gone). Same thread as Allocate.
  void set_evict_hook(std::function<void(uint64_t)> hook) { evict_hook_ = std::move(hook); }

 private:
  void LinkEvictable(int32_t b);
  void UnlinkEvictable(int32_t b);
  void Uncache(int32_t b);

  const int32_t num_blocks_;
  const int32_t block_size_;
  const bool enable_prefix_caching_;
  std::vector<int32_t> ref_;
  std::vector<uint64_t> hash_;
  std::function<void(uint64_t)> evict_hook_;
  std::vector<bool> cached_;
  std::vector<int32_t> tokens_;     // [num_blocks, block_size], valid for cached blocks
  std::vector<int32_t> free_list_;  // never-cached free blocks
  int32_t num_free_ = 0;
  // Doubly linked LRU of cached blocks with ref 0; head is evicted first.
  std::vector<int32_t> prev_, next_;
  int32_t lru_head_ = -1, lru_tail_ = -1;
  int32_t num_evictable_ = 0;
  absl::flat_hash_map<uint64_t, int32_t> by_hash_;
};

}  // namespace deepinfer::engine
