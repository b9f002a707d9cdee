#include "engine/checkpointer.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>

#include "fmt/format.h"
#include "kernels/cpu/attention.h"
#include "spdlog/spdlog.h"
#include "util/status.h"
#include "xxhash.h"

namespace deepinfer::engine {

namespace {

// The spans that start inside the first num_tokens positions, as a checkpoint records them.
std::vector<CheckpointImage> ImagesWithin(const std::vector<ImageSpan>& spans, int32_t num_tokens) {
  std::vector<CheckpointImage> images;
  for (const ImageSpan& s : spans) {
    if (s.position < num_tokens) images.push_back({s.position, s.length, s.content_hash});
  }
  return images;
}

// A checkpoint's images as the spans BlockSalt reads.
std::vector<ImageSpan> SpansOf(const std::vector<CheckpointImage>& images) {
  std::vector<ImageSpan> spans;
  for (const CheckpointImage& im : images) {
    ImageSpan s;
    s.position = im.position;
    s.length = im.length;
    s.content_hash = im.content_hash;
    spans.push_back(s);
  }
  return spans;
}

}  // namespace

uint64_t ChainHash(const int32_t* tokens, int32_t num_blocks, int32_t block_size,
                   uint64_t cache_salt, const std::vector<ImageSpan>& spans) {
  uint64_t chain = 0;
  for (int32_t i = 0; i < num_blocks; ++i) {
    chain = BlockManager::HashBlock(chain, tokens + static_cast<size_t>(i) * block_size,
                                    block_size, BlockSalt(cache_salt, spans, i, block_size));
  }
  return chain;
}

Checkpointer::Checkpointer(const EngineOptions& options, const CheckpointCaches& caches)
    : options_(options), caches_(caches), block_size_(caches.kv->block_size) {
  CheckpointLayout& l = layout_;
  l.architecture = caches_.architecture;
  l.kv_dtype = kernels::KvDtypeName(caches_.kv->dtype);
  l.numerics = caches_.numerics;
  l.block_size = block_size_;
  l.window_tokens = caches_.window_tokens;
  auto add = [&](arch::KvCache& cache, bool window) {
    for (int i = 0; i < cache.num_layers; ++i) {
      const int64_t bytes = cache.layer_floats[i] * kernels::KvDtypeBytes(cache.dtype);
      regions_.push_back({&cache, i, bytes, window});
      (window ? l.window_layer_bytes : l.layer_bytes).push_back(bytes);
    }
  };
  add(*caches_.kv, false);
  if (caches_.mtp_kv != nullptr && caches_.mtp_kv->num_layers > 0) {
    add(*caches_.mtp_kv, false);  // the MTP drafter reads the prefix's too
  }
  if (caches_.window_blocks != nullptr) add(*caches_.window_kv, true);
  std::string key = fmt::format("{}|{}|{}|{}|{}|{}|{}|", options_.model_revision, l.architecture,
                                l.kv_dtype, l.numerics, l.block_size, l.window_tokens,
                                l.window_layer_bytes.size());
  for (int64_t b : l.layer_bytes) key += fmt::format("{},", b);
  for (int64_t b : l.window_layer_bytes) key += fmt::format("{},", b);
  key_ = XXH3_64bits(key.data(), key.size());
}

uint64_t Checkpointer::Name(uint64_t chain_hash) const {
  return XXH3_64bits_withSeed(&chain_hash, sizeof(chain_hash), key_);
}

void Checkpointer::Forget(uint64_t chain_hash) {
  absl::MutexLock lock(&resident_mu_);
  resident_.erase(chain_hash);
}

void Checkpointer::MarkResident(uint64_t chain_hash) {
  absl::MutexLock lock(&resident_mu_);
  if (resident_.size() >= 65536) resident_.clear();  // a hint only: forgetting costs a reload
  resident_.insert(chain_hash);
}

CheckpointRef Checkpointer::CheckpointFor(const std::vector<int32_t>& prompt,
                                       uint64_t cache_salt) const {
  const int32_t bs = block_size_;
  const size_t k = prompt.size() / static_cast<size_t>(bs);
  if (options_.checkpoint_store == nullptr || k == 0) return {};
  // P/D carries text prompts only (images are refused there), so no spans.
  const uint64_t chain = ChainHash(prompt.data(), static_cast<int32_t>(k), bs, cache_salt, {});
  return {CheckpointFileName(Name(chain)), static_cast<int32_t>(k) * bs};
}

std::shared_ptr<const PrefixCheckpoint> Checkpointer::LoadNamed(const GenerateRequest& r) {
  const int32_t bs = block_size_;
  const int32_t n = r.checkpoint_tokens;
  std::optional<uint64_t> name = ParseCheckpointFileName(r.checkpoint_file);
  if (!name || n <= 0 || n % bs != 0 || n > static_cast<int32_t>(r.prompt.size())) {
    spdlog::warn("request {}: '{}' ({} tokens) is not a checkpoint file of whole blocks within "
                 "its {}-token prompt; the prompt is computed here",
                 r.request_id, r.checkpoint_file.substr(0, 64), n, r.prompt.size());
    return nullptr;
  }
  return LoadResident(r, *name, ChainHash(r.prompt.data(), n / bs, bs, r.cache_salt, {}), n, {},
                      /*warn_missing=*/true);
}

std::shared_ptr<const PrefixCheckpoint> Checkpointer::LoadResident(const GenerateRequest& r,
                                                                  uint64_t name, uint64_t chain,
                                                                  int32_t num_tokens,
                                                                  const std::vector<ImageSpan>& spans,
                                                                  bool warn_missing) {
  {
    absl::MutexLock lock(&resident_mu_);
    if (resident_.contains(chain)) return nullptr;
  }
  CheckpointStore& store = *options_.checkpoint_store;
  CheckpointExpect expect;
  expect.model_revision = options_.model_revision;
  expect.layout = layout_;
  expect.cache_salt = r.cache_salt;
  expect.tokens_sha256 = TokensSha256(r.prompt.data(), static_cast<size_t>(num_tokens));
  expect.images = ImagesWithin(spans, num_tokens);
  absl::StatusOr<PrefixCheckpoint> c = store.Load(name, expect);
  if (!c.ok()) {
    if (warn_missing || !absl::IsNotFound(c.status())) {
      spdlog::warn("request {}: prefix checkpoint {} ignored, the prefix is computed here: {}",
                   r.request_id, store.PathOf(name), OneLineError(c.status()));
    }
    return nullptr;
  }
  MarkResident(chain);
  return std::make_shared<const PrefixCheckpoint>(*std::move(c));
}

std::shared_ptr<const PrefixCheckpoint> Checkpointer::Find(const GenerateRequest& r,
                                                           const std::vector<ImageSpan>& spans) {
  CheckpointStore* store = options_.checkpoint_store.get();
  if (store == nullptr || !options_.enable_prefix_caching) return nullptr;
  if (!r.checkpoint_file.empty()) return LoadNamed(r);
  const int32_t bs = block_size_;
  // Every full block of the prompt: a checkpoint is saved with them all, and one that ends with
  // the prompt's last token still serves the blocks before it (the lookup recomputes the last).
  const int32_t max_blocks = static_cast<int32_t>(r.prompt.size()) / bs;
  const int32_t min_blocks = std::max(1, (options_.checkpoint_min_tokens + bs - 1) / bs);
  if (max_blocks < min_blocks) return nullptr;
  std::vector<uint64_t> hashes(static_cast<size_t>(max_blocks));
  uint64_t parent = 0;
  for (int32_t i = 0; i < max_blocks; ++i) {
    parent = BlockManager::HashBlock(parent, r.prompt.data() + static_cast<size_t>(i) * bs, bs,
                                     BlockSalt(r.cache_salt, spans, i, bs));
    hashes[static_cast<size_t>(i)] = parent;
  }
  std::vector<uint64_t> names(hashes.size());
  for (size_t i = 0; i < hashes.size(); ++i) names[i] = Name(hashes[i]);
  const int32_t k = store->Longest(names, min_blocks);
  if (k == 0) return nullptr;
  // A file that vanished since the listing is forgotten quietly (another process evicted it).
  return LoadResident(r, names[static_cast<size_t>(k - 1)], hashes[static_cast<size_t>(k - 1)],
                      k * bs, spans, /*warn_missing=*/false);
}

void Checkpointer::Install(Sequence& seq) {
  const std::shared_ptr<const PrefixCheckpoint> c = std::move(seq.restore);
  if (InstallBlocks(*c, seq.req.cache_salt)) return;
  // Not restored after all: forget it, so that a later request reads the file again.
  const uint64_t chain = ChainHash(c->tokens.data(), c->header.num_blocks(), block_size_,
                                   seq.req.cache_salt, SpansOf(c->header.images));
  absl::MutexLock lock(&resident_mu_);
  resident_.erase(chain);
}

bool Checkpointer::InstallBlocks(const PrefixCheckpoint& checkpoint, uint64_t salt) {
  const PrefixCheckpoint* c = &checkpoint;
  const int32_t bs = block_size_;
  const int32_t k = c->header.num_blocks();
  const int32_t window_first = c->header.window_first_block;
  // Room for every block at once: a prefix is restored whole or not at all (then recomputed).
  if (caches_.blocks->num_available() < k ||
      (caches_.window_blocks != nullptr && caches_.window_blocks->num_available() < k - window_first)) {
    return false;
  }
  const std::vector<ImageSpan> spans = SpansOf(c->header.images);
  const char* payload = c->payload.data();
  std::vector<int32_t> main(static_cast<size_t>(k)), window(static_cast<size_t>(k), -1);
  std::vector<int32_t> fresh;
  uint64_t parent = 0;
  for (int32_t i = 0; i < k; ++i) {
    const int32_t* t = c->tokens.data() + static_cast<size_t>(i) * bs;
    const uint64_t block_salt = BlockSalt(salt, spans, i, bs);
    const uint64_t h = BlockManager::HashBlock(parent, t, bs, block_salt);
    // Hold every block until the end, so that allocating one never evicts another of the chain.
    auto take = [&](BlockManager& pool, int32_t& slot) {
      slot = pool.Find(h, t);
      if (slot >= 0) {
        pool.Acquire(slot);
        return false;
      }
      fresh.clear();
      pool.Allocate(1, fresh);  // room checked above
      slot = fresh[0];
      return true;
    };
    const bool copy_main = take(*caches_.blocks, main[static_cast<size_t>(i)]);
    const bool copy_window =
        caches_.window_blocks != nullptr && i >= window_first && take(*caches_.window_blocks, window[static_cast<size_t>(i)]);
    size_t offset = 0;
    for (const Region& r : regions_) {
      const int64_t block_bytes = r.bytes_per_token * bs;
      const int32_t first = r.window ? window_first : 0;
      const bool copy = r.window ? copy_window : copy_main;
      if (copy) {
        const int32_t b = r.window ? window[static_cast<size_t>(i)] : main[static_cast<size_t>(i)];
        std::memcpy(r.cache->layer_bytes(r.layer) + static_cast<size_t>(b) * block_bytes,
                    payload + offset + static_cast<size_t>(i - first) * block_bytes,
                    static_cast<size_t>(block_bytes));
        if (caches_.restored) {
          caches_.restored(*r.cache, r.layer, static_cast<size_t>(b) * block_bytes,
                           static_cast<size_t>(block_bytes));
        }
      }
      offset += static_cast<size_t>(block_bytes) * static_cast<size_t>(k - first);
    }
    if (copy_main) caches_.blocks->Commit(main[static_cast<size_t>(i)], parent, t, block_salt);
    if (copy_window) {
      caches_.window_blocks->Commit(window[static_cast<size_t>(i)], parent, t, block_salt);
    }
    parent = h;
  }
  caches_.blocks->Free(main);
  if (caches_.window_blocks != nullptr) caches_.window_blocks->Free(window);
  return true;
}

void Checkpointer::Preload() {
  CheckpointStore& store = *options_.checkpoint_store;
  const int32_t bs = block_size_;
  // At most half the cache, whatever was asked: requests need room too.
  const int64_t budget = std::min<int64_t>(options_.checkpoint_preload_tokens,
                                           int64_t{caches_.kv->num_blocks} * bs / 2);
  int64_t restored = 0;
  int32_t files = 0;
  // A file's tokens from its size, before reading it: at most size / (4 bytes of token id + the
  // main cache's bytes per token), since the header and window blocks only add bytes.
  int64_t per_token = 4;
  for (int64_t b : layout_.layer_bytes) per_token += b;
  for (const auto& [name, size] : store.NewestFirst()) {
    if (restored + size / per_token > budget) break;
    CheckpointExpect expect;  // no fingerprint: whatever prefix the file holds
    expect.model_revision = options_.model_revision;
    expect.layout = layout_;
    absl::StatusOr<PrefixCheckpoint> c = store.Load(name, expect);
    if (!c.ok()) continue;  // another revision or layout, salted, or damaged: counted by Load
    if (restored + c->header.num_tokens > budget) break;
    if (!InstallBlocks(*c, 0)) break;
    MarkResident(ChainHash(c->tokens.data(), c->header.num_blocks(), bs, 0, SpansOf(c->header.images)));
    restored += c->header.num_tokens;
    ++files;
  }
  if (files > 0) {
    spdlog::info("prefix checkpoints: {} restored at start ({} tokens)", files, restored);
  }
}

void Checkpointer::Save(const Sequence& seq) {
  const int32_t bs = block_size_;
  const int32_t k = seq.prompt_len / bs;
  // A P/D prefill is saved whatever its length, and whenever its file is missing now: the
  // decode side reads the file, and the one this process saved may have been evicted since.
  const bool prefill_only = seq.req.prefill_only;
  if (k == 0 || (!prefill_only && int64_t{k} * bs < options_.checkpoint_min_tokens) ||
      static_cast<int32_t>(seq.block_hashes.size()) < k) {
    return;
  }
  const uint64_t chain = seq.block_hashes[static_cast<size_t>(k - 1)];
  if (!prefill_only) {
    absl::MutexLock lock(&resident_mu_);
    if (resident_.contains(chain)) return;
  }
  CheckpointStore& store = *options_.checkpoint_store;
  const uint64_t name = Name(chain);
  if (prefill_only ? store.Exists(name) : store.Known(name)) {  // saved before (here or not)
    MarkResident(chain);
    return;
  }
  // The window blocks that a resume at block k reads, and if still there the one more block a
  // resume at k - 1 reads: the same prompt again (a prompt of whole blocks resumes a block
  // early, to compute its last token). Released blocks are still findable in the window cache's
  // prefix cache unless evicted; without those of block k no checkpoint (it would be incomplete).
  auto first_read = [&](int32_t blocks) {
    return std::max(0, blocks * bs - caches_.window_tokens + 1) / bs;
  };
  int32_t window_first = caches_.window_blocks != nullptr ? first_read(k - 1) : k;
  std::vector<int32_t> window(static_cast<size_t>(k), -1);
  for (int32_t b = k - 1; b >= window_first; --b) {
    int32_t w = b < static_cast<int32_t>(seq.window_blocks.size()) ? seq.window_blocks[b] : -1;
    if (w < 0) {
      w = caches_.window_blocks->Find(seq.block_hashes[static_cast<size_t>(b)],
                                      seq.tokens.data() + static_cast<size_t>(b) * bs);
    }
    if (w < 0) {
      if (b < first_read(k)) {  // only a resume at k - 1 would have read it
        window_first = b + 1;
        break;
      }
      return;
    }
    window[static_cast<size_t>(b)] = w;
  }
  PrefixCheckpoint c;
  c.header.model_revision = options_.model_revision;
  c.header.layout = layout_;
  c.header.cache_salt = seq.req.cache_salt;
  // The chain (seq.block_hashes) is salted with these images' hashes: the file carries them.
  c.header.images = ImagesWithin(seq.image_spans, k * bs);
  c.header.window_first_block = caches_.window_blocks != nullptr ? window_first : k;
  c.tokens.assign(seq.tokens.begin(), seq.tokens.begin() + static_cast<ptrdiff_t>(k) * bs);
  size_t total = 0;
  for (const Region& r : regions_) {
    total += static_cast<size_t>(r.bytes_per_token * bs) * (r.window ? k - window_first : k);
  }
  c.payload.resize(total);
  char* out = c.payload.data();
  for (const Region& r : regions_) {
    const size_t block_bytes = static_cast<size_t>(r.bytes_per_token) * bs;
    for (int32_t b = r.window ? window_first : 0; b < k; ++b) {
      const int32_t slot = r.window ? window[static_cast<size_t>(b)] : seq.blocks[static_cast<size_t>(b)];
      std::memcpy(out, r.cache->layer_bytes(r.layer) + static_cast<size_t>(slot) * block_bytes,
                  block_bytes);
      out += block_bytes;
    }
  }
  if (store.Save(name, std::move(c))) MarkResident(chain);
}

}  // namespace deepinfer::engine
