#include "engine/sequence.h"

#include <algorithm>
#include <utility>

#include "util/status.h"

namespace deepinfer::engine {

std::unique_ptr<Sequence> Sequence::Create(uint64_t id, GenerateRequest request,
                                           Clock::time_point arrival) {
  auto seq = std::make_unique<Sequence>();
  seq->id = id;
  seq->stream = std::make_shared<RequestStream>();
  seq->arrival = arrival;
  seq->prompt_len = static_cast<int32_t>(request.prompt.size());
  seq->tokens = request.prompt;
  seq->tokens.reserve(request.prompt.size() + static_cast<size_t>(request.max_tokens));
  seq->req = std::move(request);
  return seq;
}

bool EnsureBlocks(BlockManager& blocks, const WindowPool& window, Sequence& seq,
                  int32_t num_tokens) {
  const int32_t total = (num_tokens + blocks.block_size() - 1) / blocks.block_size();
  const int32_t need = total - static_cast<int32_t>(seq.blocks.size());
  const int32_t need_window =
      window.blocks == nullptr ? 0 : total - static_cast<int32_t>(seq.window_blocks.size());
  if (need > blocks.num_available()) return false;
  if (need_window > 0 && need_window > window.blocks->num_available()) return false;
  if (need > 0) DI_CHECK(blocks.Allocate(need, seq.blocks));
  if (need_window > 0) DI_CHECK(window.blocks->Allocate(need_window, seq.window_blocks));
  return true;
}

void ReleaseWindowBlocks(const WindowPool& window, Sequence& seq) {
  if (window.blocks == nullptr) return;
  // Block b is dead once its last position (b + 1) * B - 1 < num_computed - window_tokens + 1.
  const int32_t dead = (seq.num_computed - window.window_tokens + 1) / window.blocks->block_size();
  const int32_t n = std::min(dead, static_cast<int32_t>(seq.window_blocks.size()));
  for (int32_t b = n - 1; b >= 0 && seq.window_blocks[b] >= 0; --b) {
    window.blocks->FreeBlock(seq.window_blocks[b]);
    seq.window_blocks[b] = -1;
  }
}

void FreeBlocks(BlockManager& blocks, const WindowPool& window, Sequence& seq) {
  blocks.Free(seq.blocks);
  if (window.blocks != nullptr) window.blocks->Free(seq.window_blocks);
  seq.blocks.clear();
  seq.window_blocks.clear();
  seq.block_hashes.clear();
}

}  // namespace deepinfer::engine
