#include "engine/image_spans.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <span>

#include "arch/vision_tower.h"
#include "engine/sequence.h"
#include "fmt/format.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::engine {

absl::StatusOr<std::vector<ImageSpan>> PlanImageSpans(
    const GenerateRequest& r, const model::DeepseekV41VisionConfig* vision) {
  std::vector<ImageSpan> spans;
  if (r.images.empty() && vision == nullptr) return spans;
  if (!r.images.empty() && vision == nullptr) {
    return InvalidArgumentError(util::codes::kUnsupportedContent,
                                "this model takes text only: it has no vision tower");
  }
  const model::DeepseekV41VisionConfig& cfg = *vision;
  const int32_t image_token = cfg.image_token_id;
  const int64_t patch_floats = int64_t{3} * cfg.patch_size * cfg.patch_size;
  const int32_t prompt_len = static_cast<int32_t>(r.prompt.size());
  int32_t next_free = 0;
  for (size_t i = 0; i < r.images.size(); ++i) {
    const ImageInput& in = *r.images[i];
    if (in.n_vit_h <= 0 || in.n_vit_w <= 0 || in.n_vit_h > 4096 || in.n_vit_w > 4096 ||
        static_cast<int64_t>(in.pixel_values.size()) !=
            int64_t{in.n_vit_h} * in.n_vit_w * patch_floats) {
      return InvalidArgumentError(
          util::codes::kInvalidImage,
          fmt::format("image {}: {} pixel values do not fill a {}x{} patch grid", i,
                      in.pixel_values.size(), in.n_vit_h, in.n_vit_w));
    }
    const arch::LlmGrid grid = arch::LlmGridOf(in.n_vit_h, in.n_vit_w, cfg.downsample_ratio);
    ImageSpan s{.position = in.position,
                .length = static_cast<int32_t>(grid.span_rows()),
                .n_llm_w = grid.n_w,
                .image = static_cast<int32_t>(i),
                .content_hash = in.content_hash};
    if (s.position < next_free || s.position > prompt_len - s.length) {
      return InvalidArgumentError(
          util::codes::kInvalidImage,
          fmt::format("image {}: its span of {} tokens at position {} overlaps another or "
                      "leaves the prompt of {} tokens",
                      i, s.length, s.position, prompt_len));
    }
    next_free = s.position + s.length;
    spans.push_back(s);
  }
  // Every span position holds the image token. Elsewhere the id is an ordinary token, as in the
  // reference (which tells spans by token_types): a small vocabulary's text may encode to it.
  for (const ImageSpan& s : spans) {
    for (int32_t p = s.position; p < s.position + s.length; ++p) {
      if (r.prompt[p] != image_token) {
        return InvalidArgumentError(
            util::codes::kInvalidImage,
            fmt::format("prompt position {} is in an image span but is not the image token {}",
                        p, image_token));
      }
    }
  }
  return spans;
}

uint64_t BlockSalt(uint64_t cache_salt, const std::vector<ImageSpan>& spans, int32_t block,
                   int32_t block_size) {
  const int64_t first = int64_t{block} * block_size, end = first + block_size;
  uint64_t salt = cache_salt;
  for (const ImageSpan& s : spans) {
    if (s.position >= end) break;
    if (s.position + s.length <= first) continue;
    // splitmix64-style mixing: order-dependent, so two images swapped hash differently.
    salt = (salt ^ s.content_hash) * 0x9E3779B97F4A7C15ull;
    salt ^= salt >> 31;
  }
  return salt;
}

EncoderCache::Rows EncoderCache::Find(uint64_t hash) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  ++hits_;
  return it->second->second;
}

void EncoderCache::Insert(uint64_t hash, Rows rows) {
  ++encodes_;
  if (by_hash_.contains(hash)) return;
  bytes_ += static_cast<int64_t>(rows->size() * sizeof(float));
  lru_.emplace_front(hash, std::move(rows));
  by_hash_[hash] = lru_.begin();
  while (bytes_ > max_bytes_ && !lru_.empty()) {
    bytes_ -= static_cast<int64_t>(lru_.back().second->size() * sizeof(float));
    by_hash_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

namespace {

// The spans of `seq` that positions [begin, end) reach.
template <typename Fn>
void ForSpansIn(const Sequence& seq, int32_t begin, int32_t end, Fn&& fn) {
  for (size_t k = 0; k < seq.image_spans.size(); ++k) {
    const ImageSpan& s = seq.image_spans[k];
    if (s.position >= end) break;
    if (s.position + s.length > begin) fn(k, s);
  }
}

}  // namespace

void SpanRowsBuilder::Encode(const StepPlan& plan, util::ThreadPool& pool) {
  std::vector<arch::VisionImage> images;
  std::vector<std::pair<Sequence*, size_t>> owners;  // (sequence, span) per image to encode
  std::vector<uint64_t> queued;
  for (const ScheduledSeq& p : plan.seqs) {
    Sequence& seq = *p.seq;
    seq.image_rows.resize(seq.image_spans.size());
    const int32_t end = p.start_pos + p.num_real_tokens();
    ForSpansIn(seq, p.start_pos, end, [&](size_t k, const ImageSpan& s) {
      if (seq.image_rows[k] != nullptr) return;
      if ((seq.image_rows[k] = cache_.Find(s.content_hash)) != nullptr) return;
      owners.emplace_back(&seq, k);
      if (std::find(queued.begin(), queued.end(), s.content_hash) != queued.end()) return;
      const ImageInput& in = *seq.req.images[s.image];
      images.push_back({in.pixel_values.data(), in.n_vit_h, in.n_vit_w});
      queued.push_back(s.content_hash);
    });
  }
  if (images.empty()) return;
  const int64_t hidden = tower_->text_hidden();
  int64_t total = 0;
  for (const arch::VisionImage& im : images) total += tower_->GridOf(im).span_rows();
  // Encodes are rare and large: the buffer lives for this call only.
  std::vector<float> encoded(static_cast<size_t>(total * hidden));
  const auto start = std::chrono::steady_clock::now();
  tower_->EmbedImages(std::span<const arch::VisionImage>(images), encoded.data(), pool);
  cache_.AddEncodeSeconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  int64_t offset = 0;
  std::vector<EncoderCache::Rows> fresh;
  for (size_t i = 0; i < images.size(); ++i) {
    const int64_t n = tower_->GridOf(images[i]).span_rows() * hidden;
    fresh.push_back(std::make_shared<const std::vector<float>>(encoded.begin() + offset,
                                                               encoded.begin() + offset + n));
    cache_.Insert(queued[i], fresh.back());
    offset += n;
  }
  for (auto [seq, k] : owners) {
    const auto it = std::find(queued.begin(), queued.end(), seq->image_spans[k].content_hash);
    seq->image_rows[k] = fresh[static_cast<size_t>(it - queued.begin())];
  }
}

void SpanRowsBuilder::Build(const StepPlan& plan, arch::ForwardBatch& batch,
                            util::ThreadPool& pool) {
  batch.token_types = nullptr;
  batch.span_rows = nullptr;
  if (tower_ == nullptr) return;
  int64_t span_tokens = 0;  // the step's tokens inside spans: one row each
  for (const ScheduledSeq& p : plan.seqs) {
    const int32_t begin = p.start_pos, end = p.start_pos + p.num_real_tokens();
    ForSpansIn(*p.seq, begin, end, [&](size_t, const ImageSpan& s) {
      span_tokens += std::min(end, s.position + s.length) - std::max(begin, s.position);
    });
  }
  if (span_tokens == 0) return;
  Encode(plan, pool);
  const int64_t hidden = tower_->text_hidden();
  types_.assign(static_cast<size_t>(batch.num_tokens), -1);
  if (static_cast<int64_t>(rows_.size()) < span_tokens * hidden) {
    rows_.resize(static_cast<size_t>(span_tokens * hidden));
  }
  int64_t num_rows = 0;
  for (const ScheduledSeq& p : plan.seqs) {
    Sequence& seq = *p.seq;
    const int32_t begin = p.start_pos, end = p.start_pos + p.num_real_tokens();
    ForSpansIn(seq, begin, end, [&](size_t k, const ImageSpan& s) {
      const float* rows = seq.image_rows[k]->data();
      const arch::LlmGrid grid{.n_h = (s.length - 2) / (s.n_llm_w + 1), .n_w = s.n_llm_w};
      span_types_.resize(static_cast<size_t>(s.length));
      arch::ImageSpanTokenTypes(grid, span_types_.data());
      for (int32_t q = std::max(begin, s.position); q < std::min(end, s.position + s.length);
           ++q) {
        const int32_t off = q - s.position;
        types_[static_cast<size_t>(p.token_offset + (q - begin))] =
            static_cast<int8_t>(span_types_[static_cast<size_t>(off)]);
        std::memcpy(rows_.data() + num_rows * hidden, rows + int64_t{off} * hidden,
                    hidden * sizeof(float));
        ++num_rows;
      }
    });
    // Spans wholly computed after this step need their rows no more (a preempted sequence
    // finds them in the encoder cache or encodes again).
    for (size_t k = 0; k < seq.image_spans.size() && k < seq.image_rows.size(); ++k) {
      const ImageSpan& s = seq.image_spans[k];
      if (s.position + s.length <= end) seq.image_rows[k] = nullptr;
    }
  }
  DI_CHECK(num_rows == span_tokens);
  batch.token_types = types_.data();
  batch.span_rows = rows_.data();
}

}  // namespace deepinfer::engine
