// libFuzzer target for prefix checkpoint files (engine/prefix_checkpoint.h): a file in the
// checkpoint folder is outside input (another process, a full disk, a person), so any bytes must
// give a verified checkpoint or a "bad_prefix_checkpoint" error, never a crash, an out-of-bounds
// read or a huge allocation. A checkpoint that passes must survive encode -> decode unchanged.
//
// Input layout: a checkpoint file. Its expectation is fixed (model revision "fuzz-rev", the
// layout below, salt 7, no fingerprint check); seeds: tests/fuzz/make_seeds.py.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/prefix_checkpoint.h"

namespace {

namespace de = deepinfer::engine;

de::CheckpointExpect Expect() {
  de::CheckpointExpect e;
  e.model_revision = "fuzz-rev";
  e.layout.architecture = "llama";
  e.layout.kv_dtype = "f32";
  e.layout.numerics = "fast";
  e.layout.block_size = 2;
  e.layout.layer_bytes = {8, 4};
  e.layout.window_layer_bytes = {4};
  e.layout.window_tokens = 3;
  e.cache_salt = 7;
  return e;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const de::CheckpointExpect expect = Expect();
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  de::CheckpointReject reason;
  auto checkpoint = de::DecodeCheckpoint(input, expect, &reason);
  if (!checkpoint.ok()) return 0;
  // Verified: the sizes agree with the layout, and re-encoding gives a file that decodes to the
  // same tokens and payload.
  de::PrefixCheckpoint copy = *checkpoint;
  auto file = de::EncodeCheckpoint(copy);
  if (!file.ok()) __builtin_trap();
  auto again = de::DecodeCheckpoint(*file, expect);
  if (!again.ok() || again->tokens != checkpoint->tokens || again->payload != checkpoint->payload ||
      again->header.images != checkpoint->header.images) {
    __builtin_trap();
  }
  return 0;
}
