// Speculative decoding with the MTP module of tiny DeepSeek-V3 and V4 checkpoints and the DSpark
// stages of tiny DeepSeek-V4.1 ones (random weights from the recipes of
// tests/reference/make_deepseek_v{3,4}_golden.py and make_deepseek_v41_dspark.py, generated at
// test time): whatever the drafts, greedy output must equal plain greedy decoding, token for
// token.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "model/synthetic_checkpoint_testing.h"
#include "util/status.h"

namespace deepinfer::engine {
namespace {

std::string CheckpointDir(const std::string& name, const std::string& family = "deepseek_v3") {
  auto dir = model::DeepseekTestCheckpoint(name, family);
  EXPECT_TRUE(dir.ok()) << dir.status();
  return dir.ok() ? *dir : "";
}

using testing::Generate;

// (golden family, case) of a checkpoint with one MTP module or DSpark stages.
using Case = std::pair<const char*, const char*>;

class EngineSpeculativeTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    auto m = model::LoadModel(CheckpointDir(GetParam().second, GetParam().first));
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
  }
  // spec 0: no drafter; else the checkpoint's (DSpark or MTP) with `spec` drafts at most.
  std::unique_ptr<Engine> Make(int spec, int block_size = 16, float confidence_threshold = 0) {
    EngineOptions o;
    o.num_threads = 2;
    o.speculative_tokens = spec;
    if (spec == 0) o.speculative_method = EngineOptions::SpeculativeMethod::kNone;
    o.dspark_confidence_threshold = confidence_threshold;
    o.block_size = block_size;
    o.kv_cache_tokens = 4096;
    auto e = Engine::Create(*model_, o);
    EXPECT_TRUE(e.ok()) << e.status();
    while (!(*e)->ready()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return std::move(*e);
  }
  std::vector<GenerateRequest> Requests() {
    std::mt19937 rng(7);
    std::vector<GenerateRequest> rs;
    for (int len : {1, 5, 23, 40}) {
      GenerateRequest r;
      for (int i = 0; i < len; ++i) r.prompt.push_back(static_cast<int32_t>(rng() % model_->config.vocab));
      r.sampling.temperature = 0;
      r.max_tokens = 48;
      r.ignore_eos = true;
      rs.push_back(r);
    }
    return rs;
  }
  std::unique_ptr<model::Model> model_;
};

TEST_P(EngineSpeculativeTest, GreedyOutputIsIdenticalWithAndWithoutDrafts) {
  auto plain = Make(0);
  std::vector<std::vector<int32_t>> want;
  for (const auto& r : Requests()) want.push_back(Generate(*plain, r));
  for (int spec : {1, 3}) {
    auto engine = Make(spec, spec == 3 ? 4 : 16);  // small blocks: drafts cross block edges
    for (size_t i = 0; i < want.size(); ++i) {
      StreamUpdate fin;
      EXPECT_EQ(Generate(*engine, Requests()[i], &fin), want[i]) << "spec " << spec << " request " << i;
      EXPECT_GT(fin.num_draft_tokens, 0);
    }
    EngineStats st = engine->Stats();
    EXPECT_GT(st.spec_num_drafts, 0);
    EXPECT_LE(st.spec_num_accepted_tokens, st.spec_num_draft_tokens);
    // Per position: accepted as a prefix, so the counts never rise with the position, sum to
    // the accepted drafts, and stop at the block size.
    int64_t sum = 0;
    for (int32_t i = 0; i < kMaxSpeculativeTokens; ++i) {
      sum += st.spec_accepted_per_pos[i];
      if (i > 0) {
        EXPECT_LE(st.spec_accepted_per_pos[i], st.spec_accepted_per_pos[i - 1]);
      }
      if (i >= spec) {
        EXPECT_EQ(st.spec_accepted_per_pos[i], 0);
      }
    }
    EXPECT_EQ(sum, st.spec_num_accepted_tokens);
  }
}

// min_tokens no longer turns drafting off (deepinfer bench sends min_tokens = max_tokens with
// ignore_eos): each verification row holds the stop tokens back while its token comes before
// min_tokens, so a stop token that greedy decoding reaches early is skipped in every row, and
// the tokens are those of the engine without drafts.
TEST_P(EngineSpeculativeTest, MinTokensRequestsDraftAndKeepTheirTokens) {
  auto plain = Make(0);
  auto drafting = Make(3, 4);
  for (GenerateRequest r : Requests()) {
    const std::vector<int32_t> free_run = Generate(*plain, r);
    ASSERT_GE(free_run.size(), 8u);
    r.ignore_eos = false;
    r.stop_token_ids = {free_run[2]};  // would stop the third token
    r.min_tokens = r.max_tokens;       // before the change: no drafts at all
    const std::vector<int32_t> want = Generate(*plain, r);
    ASSERT_EQ(want.size(), static_cast<size_t>(r.max_tokens));
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NE(want[i], free_run[2]) << i;
    StreamUpdate fin;
    EXPECT_EQ(Generate(*drafting, r, &fin), want);
    EXPECT_GT(fin.num_draft_tokens, 0);
  }
}

TEST_P(EngineSpeculativeTest, ARequestThatOptsOutGetsNoDraftsAndTheSameTokens) {
  auto engine = Make(2);
  for (GenerateRequest r : Requests()) {
    const std::vector<int32_t> drafted = Generate(*engine, r);
    r.speculative = false;
    StreamUpdate fin;
    EXPECT_EQ(Generate(*engine, r, &fin), drafted);
    EXPECT_EQ(fin.num_draft_tokens, 0);
  }
}

TEST_P(EngineSpeculativeTest, ConcurrentMixedRequestsStayExact) {
  auto plain = Make(0);
  auto reqs = Requests();
  std::vector<std::vector<int32_t>> want;
  for (const auto& r : reqs) want.push_back(Generate(*plain, r));
  auto engine = Make(2);
  // All at once, plus a sampled request that must not disturb the greedy ones.
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) streams.push_back(*engine->Submit(r));
  GenerateRequest sampled = reqs[2];
  sampled.sampling.temperature = 0.8f;
  sampled.sampling.seed = 3;
  sampled.sampling.has_seed = true;
  auto s_stream = *engine->Submit(sampled);
  for (size_t i = 0; i < streams.size(); ++i) {
    std::vector<int32_t> got;
    StreamUpdate u;
    while (true) {
      if (!streams[i]->Wait(u, std::chrono::milliseconds(100))) continue;
      for (const auto& t : u.tokens) got.push_back(t.token);
      if (u.finish != FinishReason::kNone) break;
    }
    EXPECT_EQ(got, want[i]) << i;
  }
  StreamUpdate u;
  while (!s_stream->Wait(u, std::chrono::milliseconds(100)) || u.finish == FinishReason::kNone) {
  }
}

TEST_P(EngineSpeculativeTest, CancelledMidBlockLeavesTheCachesConsistent) {
  // A request cancelled while its drafts are in flight; one sharing its prompt and the tokens
  // it had produced (a prefix-cache hit over them) must continue as plain decoding does.
  auto plain = Make(0);
  GenerateRequest r = Requests()[3];
  const std::vector<int32_t> want = Generate(*plain, r);
  auto engine = Make(3);
  auto stream = engine->Submit(r);
  ASSERT_TRUE(stream.ok());
  std::vector<int32_t> got;
  StreamUpdate u;
  while (got.size() < 9) {
    if (!(*stream)->Wait(u, std::chrono::milliseconds(100))) continue;
    for (const auto& t : u.tokens) got.push_back(t.token);
    ASSERT_EQ(u.finish, FinishReason::kNone);
  }
  (*stream)->Cancel();
  while (!(*stream)->Wait(u, std::chrono::milliseconds(100)) || u.finish == FinishReason::kNone) {
  }
  ASSERT_LE(got.size(), want.size());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin()));
  GenerateRequest follow = r;
  follow.prompt.insert(follow.prompt.end(), want.begin(), want.begin() + 6);
  follow.max_tokens = r.max_tokens - 6;
  EXPECT_EQ(Generate(*engine, follow), std::vector<int32_t>(want.begin() + 6, want.end()));
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, EngineSpeculativeTest,
                         ::testing::Values(Case{"deepseek_v3", "v3_groups_yarn"},
                                           Case{"deepseek_v4", "v4_flash_tiny"},
                                           Case{"deepseek_v4", "v4_flash_tiny_fp8"},
                                           Case{"deepseek_v41_dspark", "dspark_random"},
                                           Case{"deepseek_v41_dspark", "dspark_agree"}),
                         [](const auto& info) { return std::string(info.param.second); });

TEST(EngineSpeculativeModelTest, ModelWithoutMtpRejectsSpeculation) {
  auto m = model::LoadModel(CheckpointDir("v3_qlora"));
  ASSERT_TRUE(m.ok()) << m.status();
  EngineOptions o;
  o.speculative_tokens = 1;
  auto e = Engine::Create(**m, o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(ErrorCodeOf(e.status()), "speculative_unsupported");
}

using Method = EngineOptions::SpeculativeMethod;

// The DSpark checkpoints: the drafter by default, its block, the cap, the confidence cut.
class DsparkEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = model::LoadModel(CheckpointDir("dspark_agree", "deepseek_v41_dspark"));
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
  }
  absl::StatusOr<std::unique_ptr<Engine>> Make(EngineOptions o) {
    o.num_threads = 2;
    o.kv_cache_tokens = 4096;
    auto e = Engine::Create(*model_, o);
    if (e.ok()) {
      while (!(*e)->ready()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return e;
  }
  // Greedy, 40 tokens from a 12-token prompt; the engine's totals afterwards.
  EngineStats Run(Engine& e, std::vector<int32_t>* tokens = nullptr) {
    GenerateRequest r;
    for (int i = 0; i < 12; ++i) r.prompt.push_back(3 + 17 * i % 300);
    r.sampling.temperature = 0;
    r.max_tokens = 40;
    r.ignore_eos = true;
    std::vector<int32_t> out = Generate(e, r);
    if (tokens != nullptr) *tokens = out;
    return e.Stats();
  }
  std::unique_ptr<model::Model> model_;
};

TEST_F(DsparkEngineTest, DefaultDraftsWholeBlocksThatTheAgreeingDrafterMostlyGetsRight) {
  auto e = Make({});
  ASSERT_TRUE(e.ok()) << e.status();
  const EngineStats st = Run(**e);
  const int block = model_->config.deepseek_v4->dspark_block_size;
  std::printf("dspark_agree: %lld of %lld drafts accepted in %lld blocks\n",
              static_cast<long long>(st.spec_num_accepted_tokens),
              static_cast<long long>(st.spec_num_draft_tokens),
              static_cast<long long>(st.spec_num_drafts));
  EXPECT_GT(st.spec_num_drafts, 0);
  // Whole blocks, but for the last one (max_tokens cuts it).
  EXPECT_GT(st.spec_num_draft_tokens, (st.spec_num_drafts - 1) * block);
  // The drafter copies the model's near-bigram: most drafts are accepted.
  EXPECT_GT(st.spec_num_accepted_tokens * 2, st.spec_num_draft_tokens);
  EXPECT_GT(st.spec_accepted_per_pos[block - 1], 0);
}

TEST_F(DsparkEngineTest, SpeculativeTokensCapTheBlock) {
  EngineOptions o;
  o.speculative_tokens = 2;
  auto e = Make(o);
  ASSERT_TRUE(e.ok()) << e.status();
  const EngineStats st = Run(**e);
  EXPECT_GT(st.spec_num_drafts, 0);
  EXPECT_LE(st.spec_num_draft_tokens, 2 * st.spec_num_drafts);
  EXPECT_EQ(st.spec_accepted_per_pos[2], 0);
}

TEST_F(DsparkEngineTest, AConfidenceThresholdCutsDraftsAndChangesNoToken) {
  EngineOptions o;
  o.speculative_method = Method::kNone;
  auto p = Make(o);
  ASSERT_TRUE(p.ok());
  std::vector<int32_t> plain, got;
  Run(**p, &plain);
  int64_t previous = -1;
  for (float threshold : {0.0f, 0.9f, 0.999f, 1.0f}) {
    o = {};
    o.dspark_confidence_threshold = threshold;
    auto e = Make(o);
    ASSERT_TRUE(e.ok()) << e.status();
    const int64_t drafted = Run(**e, &got).spec_num_draft_tokens;
    EXPECT_EQ(got, plain) << threshold;
    if (previous >= 0) {
      EXPECT_LE(drafted, previous) << threshold;
    }
    if (threshold == 1.0f) {
      EXPECT_LT(drafted, previous);
    }
    previous = drafted;
  }
}

// What made AConfidenceThresholdCutsDraftsAndChangesNoToken flaky: the stats were published
// after the step that finished a request, so a client reading them as soon as its stream
// finished could miss that step's drafts. Each request's own counts, summed, must equal the
// totals read right after each finish.
TEST_F(DsparkEngineTest, StatsCountARequestAsSoonAsItsFinishIsSeen) {
  auto e = Make({});
  ASSERT_TRUE(e.ok()) << e.status();
  int64_t drafted = 0, accepted = 0, generated = 0;
  for (int i = 0; i < 30; ++i) {
    GenerateRequest r;
    for (int j = 0; j < 4 + i % 5; ++j) r.prompt.push_back(5 + (31 * i + 7 * j) % 300);
    r.sampling.temperature = 0;
    r.max_tokens = 6 + i % 11;  // the last verification step carries a varying number of drafts
    r.ignore_eos = true;
    StreamUpdate fin;
    Generate(**e, r, &fin);
    drafted += fin.num_draft_tokens;
    accepted += fin.num_accepted_tokens;
    generated += fin.completion_tokens;
    const EngineStats st = (*e)->Stats();
    EXPECT_EQ(st.spec_num_draft_tokens, drafted) << "request " << i;
    EXPECT_EQ(st.spec_num_accepted_tokens, accepted) << "request " << i;
    EXPECT_EQ(st.generation_tokens, generated) << "request " << i;
    EXPECT_EQ(st.num_requests_finished[static_cast<int>(FinishReason::kLength)], i + 1);
  }
  EXPECT_GT(drafted, 0);
}

TEST_F(DsparkEngineTest, NoDsparkOnAModelWithoutMtpServesWithoutDrafts) {
  EngineOptions o;
  o.speculative_method = Method::kNoDspark;
  auto e = Make(o);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(Run(**e).spec_num_draft_tokens, 0);
  o.speculative_method = Method::kMtp;
  EXPECT_EQ(ErrorCodeOf(Make(o).status()), "speculative_unsupported");
}

// Sampled requests verify drafts by rejection sampling: the tokens' distribution is the
// model's. 300 seeded requests with DSpark and 300 without (the agreeing drafter, so drafts are
// often accepted); the second and third generated tokens (the first ones verified against
// drafts) have the same distribution by a two-sample chi-square test at p = 0.001 (bins with
// fewer than 10 draws pooled; the seeds are fixed, so the test is deterministic).
TEST_F(DsparkEngineTest, SampledRequestsKeepTheModelsDistribution) {
  constexpr int kRequests = 300;
  auto draw = [&](Engine& e) {
    std::vector<std::vector<int32_t>> out;
    for (int first = 0; first < kRequests; first += 50) {
      std::vector<std::shared_ptr<RequestStream>> streams;
      for (int i = first; i < first + 50; ++i) {
        GenerateRequest r;
        r.prompt = {5, 17, 42, 99, 7, 230};
        r.sampling.temperature = 0.3f;  // a few likely tokens, so the bins fill
        r.sampling.seed = 1000 + static_cast<uint64_t>(i);
        r.sampling.has_seed = true;
        r.max_tokens = 3;
        r.ignore_eos = true;
        streams.push_back(*e.Submit(r));
      }
      for (auto& st : streams) {
        std::vector<int32_t> got;
        StreamUpdate u;
        while (true) {
          if (!st->Wait(u, std::chrono::milliseconds(100))) continue;
          for (const auto& t : u.tokens) got.push_back(t.token);
          if (u.finish != FinishReason::kNone) break;
        }
        out.push_back(got);
      }
    }
    return out;
  };
  EngineOptions o;
  auto drafted = Make(o);
  ASSERT_TRUE(drafted.ok()) << drafted.status();
  o.speculative_method = Method::kNone;
  auto plain = Make(o);
  ASSERT_TRUE(plain.ok());
  const auto a = draw(**drafted), b = draw(**plain);
  const EngineStats st = (*drafted)->Stats();
  EXPECT_GT(st.spec_num_draft_tokens, 0);
  EXPECT_GT(st.spec_num_accepted_tokens, 0);
  for (int pos : {1, 2}) {
    std::map<int32_t, std::pair<int, int>> bins;
    for (int i = 0; i < kRequests; ++i) {
      ++bins[a[i].at(pos)].first;
      ++bins[b[i].at(pos)].second;
    }
    std::vector<std::pair<int, int>> kept;
    std::pair<int, int> pooled{0, 0};
    for (const auto& [token, c] : bins) {
      if (c.first + c.second >= 10) {
        kept.push_back(c);
      } else {
        pooled.first += c.first;
        pooled.second += c.second;
      }
    }
    if (pooled.first + pooled.second > 0) kept.push_back(pooled);
    ASSERT_GE(kept.size(), 2u) << "position " << pos << ": too few distinct tokens to test";
    double chi2 = 0;
    for (const auto& [x, y] : kept) chi2 += double(x - y) * (x - y) / (x + y);
    // Wilson-Hilferty: the chi-square quantile at 1 - 0.001 (z = 3.09) for df degrees.
    const double df = static_cast<double>(kept.size() - 1), h = 2.0 / (9.0 * df);
    const double critical = df * std::pow(1.0 - h + 3.09 * std::sqrt(h), 3.0);
    std::printf("position %d: chi2 %.2f over %zu bins (critical %.2f)\n", pos, chi2, kept.size(),
                critical);
    EXPECT_LT(chi2, critical) << "position " << pos;
  }
}

TEST(EngineSpeculativeModelTest, DsparkOnAModelWithoutStagesIsRefused) {
  auto m = model::LoadModel(CheckpointDir("v4_flash_tiny", "deepseek_v4"));
  ASSERT_TRUE(m.ok()) << m.status();
  EngineOptions o;
  o.speculative_method = Method::kDspark;
  auto e = Engine::Create(**m, o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(ErrorCodeOf(e.status()), "speculative_unsupported");
}

}  // namespace
}  // namespace deepinfer::engine
