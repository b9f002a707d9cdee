// Greedy draft verification on hand-made logits (the MTP drafter itself is covered by
// engine_spec_test.cc, which needs a model).

#include "engine/speculative.h"

#include <vector>

#include "gtest/gtest.h"

namespace deepinfer::engine {
namespace {

constexpr int32_t kVocab = 8;

// Logit rows whose argmax is `best[r]`.
std::vector<float> Rows(const std::vector<int32_t>& best) {
  std::vector<float> logits(best.size() * kVocab, 0.0f);
  for (size_t r = 0; r < best.size(); ++r) logits[r * kVocab + best[r]] = 5.0f;
  return logits;
}

Sampler Greedy() {
  SamplingParams p;
  p.temperature = 0;
  return Sampler(p, {}, 0);
}

std::vector<int32_t> Tokens(const std::vector<SampledToken>& out) {
  std::vector<int32_t> t;
  for (const auto& s : out) t.push_back(s.token);
  return t;
}

TEST(VerifyDraftsTest, WithoutDraftsItSamplesOneToken) {
  Sampler sampler = Greedy();
  std::vector<float> logits = Rows({3});
  std::vector<SampledToken> out;
  EXPECT_EQ(VerifyDrafts(sampler, logits.data(), kVocab, nullptr, 0, out), 0);
  EXPECT_EQ(Tokens(out), (std::vector<int32_t>{3}));
}

TEST(VerifyDraftsTest, AllDraftsAcceptedAddTheBonusToken) {
  Sampler sampler = Greedy();
  std::vector<float> logits = Rows({1, 2, 4});
  const int32_t drafts[] = {1, 2};
  std::vector<SampledToken> out;
  EXPECT_EQ(VerifyDrafts(sampler, logits.data(), kVocab, drafts, 2, out), 2);
  EXPECT_EQ(Tokens(out), (std::vector<int32_t>{1, 2, 4}));
}

TEST(VerifyDraftsTest, VerificationStopsAtTheFirstRejectedDraft) {
  Sampler sampler = Greedy();
  std::vector<float> logits = Rows({1, 6, 4, 5});
  const int32_t drafts[] = {1, 2, 4};  // 2 is rejected: the model wants 6 there
  std::vector<SampledToken> out;
  EXPECT_EQ(VerifyDrafts(sampler, logits.data(), kVocab, drafts, 3, out), 1);
  EXPECT_EQ(Tokens(out), (std::vector<int32_t>{1, 6}));  // the correction replaces the draft
}

TEST(VerifyDraftsTest, ARejectedFirstDraftStillYieldsTheModelsToken) {
  Sampler sampler = Greedy();
  std::vector<float> logits = Rows({0, 7});
  const int32_t drafts[] = {5};
  std::vector<SampledToken> out;
  EXPECT_EQ(VerifyDrafts(sampler, logits.data(), kVocab, drafts, 1, out), 0);
  EXPECT_EQ(Tokens(out), (std::vector<int32_t>{0}));
}

}  // namespace
}  // namespace deepinfer::engine
