#include "arch/causal_lm.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "arch/deepseek_v3.h"
#include "arch/deepseek_v4.h"
#include "arch/deepseek_v41.h"
#include "arch/llama.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::arch {

KvCache::~KvCache() {
  for (size_t l = 0; l < layers.size(); ++l) {
    const size_t bytes =
        static_cast<size_t>(num_blocks) * block_size * layer_floats[l] * kernels::KvDtypeBytes(dtype);
    if (layers[l] != nullptr) ::munmap(layers[l], bytes);
  }
}

absl::Status KvCache::Allocate(int layers_count, int block_size_tokens, int blocks,
                               int64_t per_token) {
  return AllocateLayers(block_size_tokens, blocks,
                        std::vector<int64_t>(static_cast<size_t>(layers_count), per_token));
}

absl::Status KvCache::AllocateLayers(int block_size_tokens, int blocks,
                                     const std::vector<int64_t>& per_layer) {
  DI_CHECK(layers.empty());
  num_layers = static_cast<int>(per_layer.size());
  block_size = block_size_tokens;
  num_blocks = blocks;
  layer_floats = per_layer;
  floats_per_token = 0;
  for (int64_t f : per_layer) floats_per_token = std::max(floats_per_token, f);
  for (int l = 0; l < num_layers; ++l) {
    const size_t bytes =
        static_cast<size_t>(blocks) * block_size * per_layer[l] * kernels::KvDtypeBytes(dtype);
    if (bytes == 0) {
      layers.push_back(nullptr);
      continue;
    }
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      return ResourceExhaustedError(util::codes::kOutOfMemory, "cannot reserve the KV cache");
    }
    // Attention walks K/V rows at a stride of floats_per_token, touching a new 4 KiB page every
    // few positions; huge pages keep those walks out of TLB misses. Advisory only.
    ::madvise(p, bytes, MADV_HUGEPAGE);
    layers.push_back(static_cast<float*>(p));
  }
  return absl::OkStatus();
}

int64_t KvCache::bytes_per_token() const {
  int64_t floats = 0;
  for (int64_t f : layer_floats) floats += f;
  return floats * kernels::KvDtypeBytes(dtype);
}

std::optional<Numerics> NumericsFromName(std::string_view name) {
  for (Numerics n : {Numerics::kFast, Numerics::kGgml, Numerics::kDeepseekQat}) {
    if (name == NumericsName(n)) return n;
  }
  return std::nullopt;
}

const char* NumericsName(Numerics numerics) {
  switch (numerics) {
    case Numerics::kFast:
      return "fast";
    case Numerics::kGgml:
      return "ggml";
    case Numerics::kDeepseekQat:
      return "deepseek-qat";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<CausalLm>> CreateCausalLm(const model::Model& model,
                                                         ExpertExchange* experts) {
  const std::string& arch = model.config.architecture;
  if (arch == "llama") {
    if (experts != nullptr && experts->ranks() > 1) {
      return InvalidArgumentError(util::codes::kBadOption,
                                  "expert parallelism needs a mixture-of-experts model (DeepSeek); "
                                  "this checkpoint is a dense Llama-family model");
    }
    return CreateLlama(model);
  }
  if (arch == "deepseek_v3" || arch == "deepseek_v2") {
    DI_ASSIGN_OR_RETURN(auto lm, CreateDeepseekV3(model, experts));
    return std::unique_ptr<CausalLm>(std::move(lm));
  }
  if (arch == "deepseek_v4") return CreateDeepseekV4(model, experts);
  if (arch == "deepseek_v41") return CreateDeepseekV41(model, experts);
  return UnimplementedError(util::codes::kUnsupportedArchitecture,
                            "no forward pass for architecture '" + model.config.architecture + "'");
}

void GatherLogitRows(const ForwardBatch& batch, const float* src, int64_t width, float* dst) {
  int64_t r = 0;
  for (const auto& s : batch.seqs) {
    for (int32_t i = s.num_tokens - s.num_logits; i < s.num_tokens; ++i, ++r) {
      std::memcpy(dst + r * width, src + (s.token_offset + i) * width, width * sizeof(float));
    }
  }
}

void BatchPositions(const ForwardBatch& batch, int32_t* positions, int32_t* token_seq) {
  for (size_t si = 0; si < batch.seqs.size(); ++si) {
    const SequenceSlice& s = batch.seqs[si];
    for (int32_t i = 0; i < s.num_tokens; ++i) {
      positions[s.token_offset + i] = s.start_pos + i;
      if (token_seq != nullptr) token_seq[s.token_offset + i] = static_cast<int32_t>(si);
    }
  }
}

}  // namespace deepinfer::arch
