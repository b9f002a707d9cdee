#include "engine/sequence.h"

#include <utility>

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

bool EnsureBlocks(BlockManager& blocks, Sequence& seq, int32_t num_tokens) {
  const int32_t need = (num_tokens + blocks.block_size() - 1) / blocks.block_size() -
                       static_cast<int32_t>(seq.blocks.size());
  if (need <= 0) return true;
  return blocks.Allocate(need, seq.blocks);
}

}  // namespace deepinfer::engine
