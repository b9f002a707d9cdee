#include "engine/block_manager.h"

#include <algorithm>
#include <cstring>

#include "util/status.h"
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include "xxhash.h"

namespace deepinfer::engine {

BlockManager::BlockManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      enable_prefix_caching_(enable_prefix_caching),
      ref_(num_blocks, 0),
      hash_(num_blocks, 0),
      cached_(num_blocks, false),
      tokens_(static_cast<size_t>(num_blocks) * block_size, 0),
      prev_(num_blocks, -1),
      next_(num_blocks, -1) {
  free_list_.reserve(num_blocks);
  // Hand out low block ids first, which keeps early KV pages close together.
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_list_.push_back(b);
  num_free_ = num_blocks;
}

uint64_t BlockManager::HashBlock(uint64_t parent_hash, const int32_t* tokens, int32_t n,
                                 uint64_t salt) {
  XXH3_state_t state;
  XXH3_64bits_reset_withSeed(&state, salt);
  XXH3_64bits_update(&state, &parent_hash, sizeof(parent_hash));
  XXH3_64bits_update(&state, tokens, sizeof(int32_t) * static_cast<size_t>(n));
  return XXH3_64bits_digest(&state);
}

void BlockManager::LinkEvictable(int32_t b) {
  prev_[b] = lru_tail_;
  next_[b] = -1;
  if (lru_tail_ >= 0) next_[lru_tail_] = b; else lru_head_ = b;
  lru_tail_ = b;
  ++num_evictable_;
}

void BlockManager::UnlinkEvictable(int32_t b) {
  if (prev_[b] >= 0) next_[prev_[b]] = next_[b]; else lru_head_ = next_[b];
  if (next_[b] >= 0) prev_[next_[b]] = prev_[b]; else lru_tail_ = prev_[b];
  prev_[b] = next_[b] = -1;
  --num_evictable_;
}

void BlockManager::Uncache(int32_t b) {
  auto it = by_hash_.find(hash_[b]);
  if (it != by_hash_.end() && it->second == b) by_hash_.erase(it);
  cached_[b] = false;
}

bool BlockManager::Allocate(int32_t n, std::vector<int32_t>& out) {
  if (n > num_available()) return false;
  for (int32_t i = 0; i < n; ++i) {
    int32_t b;
    if (num_free_ > 0) {
      b = free_list_.back();
      free_list_.pop_back();
      --num_free_;
    } else {
      b = lru_head_;
      UnlinkEvictable(b);
      if (evict_hook_ && cached_[b]) evict_hook_(hash_[b]);
      Uncache(b);
    }
    DI_CHECK(ref_[b] == 0);
    ref_[b] = 1;
    out.push_back(b);
  }
  return true;
}

void BlockManager::Free(const std::vector<int32_t>& blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    if (*it >= 0) FreeBlock(*it);
  }
}

void BlockManager::FreeBlock(int32_t b) {
  DI_CHECK(ref_[b] > 0);
  if (--ref_[b] > 0) return;
  if (cached_[b]) {
    LinkEvictable(b);
  } else {
    free_list_.push_back(b);
    ++num_free_;
  }
}

int32_t BlockManager::Find(uint64_t hash, const int32_t* tokens) const {
  if (!enable_prefix_caching_) return -1;
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return -1;
  const int32_t b = it->second;
  if (std::memcmp(&tokens_[static_cast<size_t>(b) * block_size_], tokens,
                  sizeof(int32_t) * block_size_) != 0) {
    return -1;
  }
  return b;
}

void BlockManager::Acquire(int32_t b) {
  if (ref_[b] == 0) UnlinkEvictable(b);
  ++ref_[b];
}

int32_t BlockManager::MatchPrefix(const int32_t* tokens, int32_t max_blocks,
                                  absl::FunctionRef<uint64_t(int32_t)> salt_of,
                                  std::vector<int32_t>& blocks, std::vector<uint64_t>& hashes) {
  if (!enable_prefix_caching_) return 0;
  uint64_t parent = 0;
  int32_t matched = 0;
  for (int32_t i = 0; i < max_blocks; ++i) {
    const int32_t* t = tokens + static_cast<size_t>(i) * block_size_;
    const uint64_t h = HashBlock(parent, t, block_size_, salt_of(i));
    const int32_t b = Find(h, t);
    if (b < 0) break;
    Acquire(b);
    blocks.push_back(b);
    hashes.push_back(h);
    parent = h;
    ++matched;
  }
  return matched;
}

uint64_t BlockManager::Commit(int32_t block, uint64_t parent_hash, const int32_t* tokens,
                              uint64_t salt) {
  uint64_t h = HashBlock(parent_hash, tokens, block_size_, salt);
  if (!enable_prefix_caching_ || cached_[block]) return h;
  // A block with the same content computed concurrently by another sequence keeps its place;
  // this one stays private and returns to the free list when released.
  if (by_hash_.contains(h)) return h;
  by_hash_[h] = block;
  hash_[block] = h;
  cached_[block] = true;
  std::memcpy(&tokens_[static_cast<size_t>(block) * block_size_], tokens,
              sizeof(int32_t) * block_size_);
  return h;
}

}  // namespace deepinfer::engine
