// libFuzzer target for Hugging Face checkpoints: the safetensors header
// (model::SafetensorsFile::Parse), config.json (ParseHfConfig, V3/V2 and V4) and the assembly of
// both into a DeepSeek model (HfModelFromParts: shard merge, V3 FP8 dequantization with its scale
// checks, V4's name mapping with fused-expert views and its FP8 / FP4 block scales, alignment). A malformed file must give an error status, never a crash, an out-of-bounds view
// or a huge allocation.
//
// Input layout: when it starts with '{', the config.json text up to the first NUL byte, then
// one safetensors shard (the rest, possibly empty: no shard); otherwise the whole input is a
// safetensors file. Seeds: tests/fuzz/make_seeds.py.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/hf_checkpoint.h"
#include "model/hf_config.h"
#include "model/safetensors.h"

namespace {

namespace dm = deepinfer::model;

volatile uint8_t g_sink;

void Touch(const dm::TensorView& t) {
  if (t.size_bytes > 0) g_sink = t.data[0] ^ t.data[t.size_bytes - 1];
  if (t.scale != nullptr) {  // a block-scaled weight: its whole scale grid is readable
    if (t.shape.size() != 2 || t.scale_block_rows <= 0 || t.scale_block_cols <= 0) __builtin_trap();
    const int64_t n = (t.shape[0] + t.scale_block_rows - 1) / t.scale_block_rows *
                      ((t.shape[1] + t.scale_block_cols - 1) / t.scale_block_cols);
    g_sink = t.scale[0] ^ t.scale[n - 1];
  }
}

absl::StatusOr<std::unique_ptr<dm::SafetensorsFile>> ParseShard(const std::vector<uint8_t>& b) {
  auto st = dm::SafetensorsFile::Parse(b.data(), b.size(), "fuzz.safetensors");
  if (!st.ok()) return st;
  for (const dm::TensorView& t : (*st)->tensors()) {
    // The byte count matches the shape and dtype, and the view lies inside the input.
    if (t.shape.empty()) __builtin_trap();
    Touch(t);
  }
  return st;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  if (input.empty() || input[0] != '{') {
    (void)ParseShard(std::vector<uint8_t>(data, data + size));
    return 0;
  }
  const size_t nul = input.find('\0');
  const std::string config(input.substr(0, nul));
  auto parsed = dm::ParseHfConfig(config);
  if (parsed.ok()) {
    if (!parsed->deepseek && !parsed->deepseek_v4) __builtin_trap();
    if (parsed->head_dim < 0 || parsed->rope_dim % 2 != 0) __builtin_trap();
    if (parsed->deepseek_v4 &&
        (parsed->deepseek_v4->attention.size() < static_cast<size_t>(parsed->num_layers) ||
         parsed->deepseek_v4->hash_routed.size() != static_cast<size_t>(parsed->num_layers))) {
      __builtin_trap();
    }
  }
  // A copy of the shard, so that ASan catches a view past its end.
  std::vector<uint8_t> shard;
  if (nul != std::string_view::npos) shard.assign(data + nul + 1, data + size);
  std::vector<std::unique_ptr<dm::SafetensorsFile>> shards;
  if (nul != std::string_view::npos) {
    auto st = ParseShard(shard);
    if (!st.ok()) return 0;
    shards.push_back(*std::move(st));
  }
  if (!parsed.ok()) return 0;
  auto model = dm::HfModelFromParts(config, std::move(shards), "fuzz/config.json");
  if (model.ok()) {
    for (const auto& [name, t] : (*model)->tensors) Touch(t);
  }
  return 0;
}
