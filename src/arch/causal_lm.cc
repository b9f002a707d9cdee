#include "arch/causal_lm.h"

#include <sys/mman.h>

#include "arch/deepseek_v3.h"
#include "arch/deepseek_v4.h"
#include "arch/deepseek_v41.h"
#include "arch/llama.h"
#include "util/status.h"

namespace deepinfer::arch {

KvCache::~KvCache() {
  size_t bytes = static_cast<size_t>(num_blocks) * block_size * floats_per_token * sizeof(float);
  for (float* p : layers) {
    if (p != nullptr) ::munmap(p, bytes);
  }
}

absl::Status KvCache::Allocate(int layers_count, int block_size_tokens, int blocks,
                               int64_t per_token) {
  DI_CHECK(layers.empty());
  num_layers = layers_count;
  block_size = block_size_tokens;
  num_blocks = blocks;
  floats_per_token = per_token;
  size_t bytes = static_cast<size_t>(blocks) * block_size * per_token * sizeof(float);
  for (int l = 0; l < layers_count; ++l) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
    if (p == MAP_FAILED) {
      return ResourceExhaustedError("out_of_memory", "cannot reserve the KV cache");
    }
    // Attention walks K/V rows at a stride of floats_per_token, touching a new 4 KiB page every
    // few positions; huge pages keep those walks out of TLB misses. Advisory only.
    ::madvise(p, bytes, MADV_HUGEPAGE);
    layers.push_back(static_cast<float*>(p));
  }
  return absl::OkStatus();
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

absl::StatusOr<std::unique_ptr<CausalLm>> CreateCausalLm(const model::Model& model) {
  if (model.config.architecture == "llama") return CreateLlama(model);
  if (model.config.architecture == "deepseek_v3" || model.config.architecture == "deepseek_v2") {
    DI_ASSIGN_OR_RETURN(auto lm, CreateDeepseekV3(model));
    return std::unique_ptr<CausalLm>(std::move(lm));
  }
  if (model.config.architecture == "deepseek_v4") return CreateDeepseekV4(model);
  if (model.config.architecture == "deepseek_v41") return CreateDeepseekV41(model);
  return UnimplementedError("unsupported_architecture",
                            "no forward pass for architecture '" + model.config.architecture + "'");
}

}  // namespace deepinfer::arch
