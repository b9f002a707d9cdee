#include "engine/image_spans.h"

#include <memory>
#include <vector>

#include "engine/block_manager.h"
#include "gtest/gtest.h"
#include "util/status.h"

namespace deepinfer::engine {
namespace {

constexpr int32_t kImageToken = 99;

// A vision config with the release's patch and merge sizes.
model::DeepseekV41VisionConfig Vision() {
  model::DeepseekV41VisionConfig v;
  v.patch_size = 14;
  v.downsample_ratio = 3;
  v.image_token_id = kImageToken;
  return v;
}

// An image of a n_vit_h x n_vit_w grid at `position`; its span has n_h (n_w + 1) + 2 tokens.
std::shared_ptr<const ImageInput> Image(int32_t position, int32_t h, int32_t w, uint64_t hash) {
  auto in = std::make_shared<ImageInput>();
  in->position = position;
  in->n_vit_h = h;
  in->n_vit_w = w;
  in->pixel_values.assign(static_cast<size_t>(h) * w * 3 * 14 * 14, 0.0f);
  in->content_hash = hash;
  return in;
}

// A prompt of `n` text tokens with the image token on [at, at + len).
std::vector<int32_t> Prompt(int32_t n, std::vector<std::pair<int32_t, int32_t>> spans) {
  std::vector<int32_t> p(static_cast<size_t>(n), 5);
  for (auto [at, len] : spans) {
    for (int32_t i = at; i < at + len; ++i) p[static_cast<size_t>(i)] = kImageToken;
  }
  return p;
}

TEST(ImageSpansTest, SpansFollowTheAlignerGrid) {
  // A 4 x 7 ViT grid merges to 2 x 3 cells: 2 * (3 + 1) + 2 = 10 span tokens.
  GenerateRequest r;
  r.prompt = Prompt(20, {{3, 10}});
  r.images = {Image(3, 4, 7, 11)};
  const auto vision = Vision();
  auto spans = PlanImageSpans(r, &vision);
  ASSERT_TRUE(spans.ok()) << spans.status();
  ASSERT_EQ(spans->size(), 1u);
  EXPECT_EQ((*spans)[0].position, 3);
  EXPECT_EQ((*spans)[0].length, 10);
  EXPECT_EQ((*spans)[0].n_llm_w, 3);
  EXPECT_EQ((*spans)[0].content_hash, 11u);
}

TEST(ImageSpansTest, RefusesImagesItCannotPlace) {
  const auto vision = Vision();
  auto code = [&](GenerateRequest r, const model::DeepseekV41VisionConfig* v) {
    return ErrorCodeOf(PlanImageSpans(r, v).status());
  };
  GenerateRequest r;
  r.prompt = Prompt(20, {{3, 10}});
  r.images = {Image(3, 4, 7, 1)};
  EXPECT_EQ(code(r, nullptr), "unsupported_content");
  r.images = {Image(2, 4, 7, 1)};  // one position early: position 2 is not the image token
  EXPECT_EQ(code(r, &vision), "invalid_image");
  r.images = {Image(15, 4, 7, 1)};  // leaves the prompt
  EXPECT_EQ(code(r, &vision), "invalid_image");
  auto short_pixels = std::make_shared<ImageInput>(*Image(3, 4, 7, 1));
  short_pixels->pixel_values.pop_back();
  r.images = {short_pixels};
  EXPECT_EQ(code(r, &vision), "invalid_image");
  r.prompt = Prompt(30, {{0, 10}, {8, 10}});
  r.images = {Image(0, 4, 7, 1), Image(8, 4, 7, 2)};  // overlapping spans
  EXPECT_EQ(code(r, &vision), "invalid_image");
  r.prompt = Prompt(20, {});
  r.prompt[5] = kImageToken;  // the id outside a span is an ordinary token (toy vocabularies)
  r.images.clear();
  EXPECT_TRUE(PlanImageSpans(r, &vision).ok());
}

TEST(ImageSpansTest, OnlyBlocksAtOrAfterAnImageCarryItsHash) {
  const std::vector<ImageSpan> spans = {{.position = 20, .length = 10, .content_hash = 7}};
  EXPECT_EQ(BlockSalt(3, spans, 0, 16), 3u);  // positions 0..15: before the image
  EXPECT_NE(BlockSalt(3, spans, 1, 16), 3u);  // 16..31 holds the span
  EXPECT_EQ(BlockSalt(3, spans, 2, 16), 3u);  // the chain carries the image into later blocks
  const std::vector<ImageSpan> other = {{.position = 20, .length = 10, .content_hash = 8}};
  EXPECT_NE(BlockSalt(3, spans, 1, 16), BlockSalt(3, other, 1, 16));
  EXPECT_EQ(BlockSalt(3, spans, 1, 16), BlockSalt(3, spans, 1, 16));
}

TEST(ImageSpansTest, TwoImagesWithTheSameTokensNeverShareCachedBlocks) {
  BlockManager bm(16, 4, true);
  const std::vector<int32_t> tokens = Prompt(12, {{2, 6}});
  const std::vector<ImageSpan> a = {{.position = 2, .length = 6, .content_hash = 1}};
  const std::vector<ImageSpan> b = {{.position = 2, .length = 6, .content_hash = 2}};
  std::vector<int32_t> blocks;
  ASSERT_TRUE(bm.Allocate(3, blocks));
  uint64_t parent = 0;
  for (int32_t i = 0; i < 3; ++i) {
    parent = bm.Commit(blocks[i], parent, tokens.data() + 4 * i, BlockSalt(0, a, i, 4));
  }
  bm.Free(blocks);
  std::vector<int32_t> got;
  std::vector<uint64_t> hashes;
  auto salt_b = [&](int32_t i) { return BlockSalt(0, b, i, 4); };
  EXPECT_EQ(bm.MatchPrefix(tokens.data(), 3, salt_b, got, hashes), 0);
  auto salt_a = [&](int32_t i) { return BlockSalt(0, a, i, 4); };
  EXPECT_EQ(bm.MatchPrefix(tokens.data(), 3, salt_a, got, hashes), 3);
  bm.Free(got);
}

TEST(ImageSpansTest, EncoderCacheEvictsTheLeastRecentlyUsedBeyondItsBudget) {
  EncoderCache cache(3 * 4 * sizeof(float));  // three images of four floats
  auto rows = [] { return std::make_shared<const std::vector<float>>(4, 1.0f); };
  cache.Insert(1, rows());
  cache.Insert(2, rows());
  cache.Insert(3, rows());
  ASSERT_NE(cache.Find(1), nullptr);  // 1 is now the most recent: 2 goes first
  cache.Insert(4, rows());
  EXPECT_EQ(cache.Find(2), nullptr);
  EXPECT_NE(cache.Find(1), nullptr);
  EXPECT_NE(cache.Find(3), nullptr);
  EXPECT_NE(cache.Find(4), nullptr);
  EXPECT_EQ(cache.bytes(), static_cast<int64_t>(3 * 4 * sizeof(float)));
  EXPECT_EQ(cache.encodes(), 4);
}

}  // namespace
}  // namespace deepinfer::engine
