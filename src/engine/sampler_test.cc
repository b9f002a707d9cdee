#include "engine/sampler.h"

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
