#include "engine/sampler.h"

#include <cmath>
#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace deepinfer::engine {
namespace {

std::vector<float> Logits() { return {1.0f, 3.0f, 2.0f, 0.5f, 2.9f}; }

TEST(SamplerTest, GreedyPicksArgmaxWithLowestIndexOnTies) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p, {}, 1);
  auto l = Logits();
  EXPECT_EQ(s.Sample(l.data(), 5).token, 1);
  std::vector<float> tie = {2, 5, 5};
  Sampler s2(p, {}, 1);
  EXPECT_EQ(s2.Sample(tie.data(), 3).token, 1);
}

TEST(SamplerTest, SameSeedGivesSameTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 1234;
  p.has_seed = true;
  Sampler a(p, {}, 1), b(p, {}, 99);
  for (int i = 0; i < 50; ++i) {
    auto la = Logits(), lb = Logits();
    EXPECT_EQ(a.Sample(la.data(), 5).token, b.Sample(lb.data(), 5).token);
  }
}

TEST(SamplerTest, TopKOneIsGreedy) {
  SamplingParams p;
  p.temperature = 5.0f;
  p.top_k = 1;
  Sampler s(p, {}, 7);
  for (int i = 0; i < 20; ++i) {
    auto l = Logits();
    EXPECT_EQ(s.Sample(l.data(), 5).token, 1);
  }
}

TEST(SamplerTest, TopPKeepsOnlyTheNucleus) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.5f;
  Sampler s(p, {}, 3);
  for (int i = 0; i < 50; ++i) {
    auto l = Logits();
    int t = s.Sample(l.data(), 5).token;
    EXPECT_TRUE(t == 1 || t == 4) << t;  // 1 and 4 hold over half the mass together
  }
}

TEST(SamplerTest, MinPDropsUnlikelyTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.5f;
  Sampler s(p, {}, 3);
  for (int i = 0; i < 50; ++i) {
    auto l = Logits();
    int t = s.Sample(l.data(), 5).token;
    EXPECT_TRUE(t == 1 || t == 4 || t == 2) << t;
    EXPECT_NE(t, 3);
    EXPECT_NE(t, 0);
  }
}

TEST(SamplerTest, LogitBiasCanForceAToken) {
  SamplingParams p;
  p.temperature = 0;
  p.logit_bias = {{3, 100.0f}};
  Sampler s(p, {}, 1);
  auto l = Logits();
  EXPECT_EQ(s.Sample(l.data(), 5).token, 3);
}

TEST(SamplerTest, FrequencyPenaltyDiscouragesRepeats) {
  SamplingParams p;
  p.temperature = 0;
  p.frequency_penalty = 2.0f;
  Sampler s(p, {}, 1);
  auto l = Logits();
  EXPECT_EQ(s.Sample(l.data(), 5).token, 1);
  l = Logits();
  EXPECT_EQ(s.Sample(l.data(), 5).token, 4);  // 3 - 2 < 2.9
}

TEST(SamplerTest, RepetitionPenaltyAppliesToPromptTokens) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  Sampler s(p, {1}, 1);
  auto l = Logits();
  EXPECT_EQ(s.Sample(l.data(), 5).token, 4);  // 3 / 2 < 2.9
}

TEST(SamplerTest, LogprobsAreFromTheUnmodifiedDistribution) {
  SamplingParams p;
  p.temperature = 0;
  p.num_top_logprobs = 2;
  p.logit_bias = {{0, 100.0f}};
  Sampler s(p, {}, 1);
  auto l = Logits();
  SampledToken t = s.Sample(l.data(), 5);
  EXPECT_EQ(t.token, 0);
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].first, 1);
  EXPECT_EQ(t.top[1].first, 4);
  double z = 0;
  for (float v : Logits()) z += std::exp(v);
  EXPECT_NEAR(t.logprob, 1.0 - std::log(z), 1e-5);
}

}  // namespace
}  // namespace deepinfer::engine

namespace deepinfer::engine {
namespace {

// Verifying a draft (speculative sampling) leaves the token's distribution at the target's p:
// 60,000 verifications from fixed seeds, for a draft that is likely, one that is unlikely and
// one top-k cut away, each histogram within a chi-square bound of p (df 3, p = 0.001: 16.27).
TEST(SamplerTest, VerifyingADraftKeepsTheTargetDistribution) {
  const std::vector<float> logits = {2.0f, 1.2f, 0.9f, -0.3f, -1.0f, -2.5f};
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 4;  // tokens 4 and 5 have probability 0
  std::vector<double> p(4);
  double z = 0;
  for (int i = 0; i < 4; ++i) z += p[i] = std::exp(logits[i] / 0.8);
  for (double& v : p) v /= z;
  for (int32_t draft : {0, 3, 5}) {
    constexpr int kDraws = 60000;
    std::vector<int> counts(6, 0);
    int accepted = 0;
    for (int seed = 0; seed < kDraws; ++seed) {
      params.seed = static_cast<uint64_t>(seed) * 7919 + static_cast<uint64_t>(draft);
      params.has_seed = true;
      Sampler s(params, {}, 0);
      std::vector<float> l = logits;
      const int32_t t = s.Sample(l.data(), 6, draft).token;
      ++counts[t];
      accepted += t == draft;
    }
    EXPECT_EQ(counts[4] + counts[5], 0) << draft;
    double chi2 = 0;
    for (int i = 0; i < 4; ++i) {
      const double want = p[i] * kDraws;
      chi2 += (counts[i] - want) * (counts[i] - want) / want;
    }
    EXPECT_LT(chi2, 16.27) << "draft " << draft;
    // The draft comes back exactly as often as p gives it.
    const double pd = draft < 4 ? p[draft] : 0.0;
    EXPECT_NEAR(accepted / static_cast<double>(kDraws), pd, 4 * std::sqrt(pd * (1 - pd) / kDraws) + 1e-9);
  }
}

TEST(SamplerTest, GreedyVerificationIsTheArgmax) {
  SamplingParams params;
  params.temperature = 0;
  Sampler s(params, {}, 0);
  std::vector<float> l = {0.1f, 3.0f, 0.2f};
  EXPECT_EQ(s.Sample(l.data(), 3, /*draft=*/2).token, 1);
  l = {0.1f, 3.0f, 0.2f};
  EXPECT_EQ(s.Sample(l.data(), 3, /*draft=*/1).token, 1);
}

}  // namespace
}  // namespace deepinfer::engine
