#pragma once

// Image spans inside the engine (DeepSeek-V4.1 image input, docs/image.md): where each image of
// a prompt sits, how its span salts the prefix cache, and the span rows a step's Forward needs,
// encoded by the model's vision tower once per image content (the encoder cache).
//
// Threads: engine thread only (PlanImageSpans also runs in Submit, on the caller's thread: it
//   reads only the request and the tower's config).

#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "arch/causal_lm.h"
#include "arch/vision_tower.h"
#include "engine/request.h"
#include "model/model.h"
#include "util/thread_pool.h"

namespace deepinfer::engine {

struct StepPlan;

// One image's span in a prompt: positions [position, position + length), length =
// n_llm_h (n_llm_w + 1) + 2; `image` indexes GenerateRequest::images.
struct ImageSpan {
  int32_t position = 0;
  int32_t length = 0;
  int32_t n_llm_w = 0;
  int32_t image = 0;
  uint64_t content_hash = 0;
};

// Checks r.images against r.prompt and the vision tower's config `vision` (null: the model takes
// text only; arch::VisionTower::config()) and returns the
// spans in prompt order. Every span position must hold `image_token_id` (elsewhere the id is an
// ordinary token, as in the reference), spans may not overlap or leave the prompt, and each
// image's pixels must fill its grid.
// Errors: InvalidArgument kUnsupportedContent (images for a model without a vision tower);
//   kInvalidImage (a grid, pixel count or position that does not fit, a span position without
//   the image token).
absl::StatusOr<std::vector<ImageSpan>> PlanImageSpans(
    const GenerateRequest& r, const model::DeepseekV41VisionConfig* vision);

// The prefix-cache salt of prompt block `block` (positions [block B, block B + B)): cache_salt,
// mixed with the content hash of every span that overlaps the block. The block hash chains it,
// so no block at or after an image is shared with a prompt holding another image there, and
// the same image at the same place in a later turn hashes alike.
uint64_t BlockSalt(uint64_t cache_salt, const std::vector<ImageSpan>& spans, int32_t block,
                   int32_t block_size);

// Span rows by image content hash ([length, hidden] f32 each), least recently used evicted once
// more than `max_bytes` are held (a sequence still holds its own reference while prefilling).
class EncoderCache {
 public:
  explicit EncoderCache(int64_t max_bytes) : max_bytes_(max_bytes) {}
  using Rows = std::shared_ptr<const std::vector<float>>;
  // The rows of `hash`, or null; a hit becomes the most recently used.
  Rows Find(uint64_t hash);
  void Insert(uint64_t hash, Rows rows);
  int64_t bytes() const { return bytes_; }
  int64_t hits() const { return hits_; }
  int64_t encodes() const { return encodes_; }
  double encode_seconds() const { return encode_seconds_; }
  void AddEncodeSeconds(double s) { encode_seconds_ += s; }

 private:
  const int64_t max_bytes_;
  int64_t bytes_ = 0, hits_ = 0, encodes_ = 0;
  double encode_seconds_ = 0;
  std::list<std::pair<uint64_t, Rows>> lru_;  // front: most recent
  absl::flat_hash_map<uint64_t, std::list<std::pair<uint64_t, Rows>>::iterator> by_hash_;
};

// Fills a step's ForwardBatch::token_types and span_rows from its sequences' spans, encoding the
// images the step reaches that neither the sequence nor the encoder cache holds (all of them in
// one EmbedImages call). Leaves both null when no batch token is in a span.
class SpanRowsBuilder {
 public:
  SpanRowsBuilder(arch::VisionTower* tower, int64_t cache_bytes)
      : tower_(tower), cache_(cache_bytes) {}
  // REQUIRES: the batch's slices were built from `plan` in order (Executor::BuildBatch).
  void Build(const StepPlan& plan, arch::ForwardBatch& batch, util::ThreadPool& pool);
  const EncoderCache& cache() const { return cache_; }

 private:
  void Encode(const StepPlan& plan, util::ThreadPool& pool);

  arch::VisionTower* tower_;
  EncoderCache cache_;
  std::vector<int8_t> types_;
  std::vector<arch::ImageTokenType> span_types_;
  std::vector<float> rows_;
};

}  // namespace deepinfer::engine
