// DeepSeek-V4.1's DSpark drafter on the tiny checkpoints of tests/golden/deepseek_v41_dspark
// (recipes from tests/reference/make_deepseek_v41_dspark.py; no reference logits exist, see
// docs/deepseek.md): the stages load, their windows are extra window-cache layers, a proposal
// does not depend on how the prefix was chunked or on what else is in the batch, and it reads
// the windows. The greedy identity with the verifier is engine_spec_test's.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "arch/causal_lm.h"
#include "arch/deepseek_testing.h"
#include "gtest/gtest.h"
#include "model/hf_config.h"
#include "model/model.h"
#include "model/synthetic_checkpoint_testing.h"
#include "util/status.h"

namespace deepinfer::arch {
namespace {

using testing::Cache;

struct Loaded {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<CausalLm> lm;
};

Loaded Load(const std::string& name, bool enable = true) {
  Loaded l;
  if (!testing::LoadAndCreate(model::DeepseekTestCheckpoint(name, "deepseek_v41_dspark"),
                              &CreateCausalLm, l.model, l.lm)) {
    return l;
  }
  if (enable) {
    EXPECT_TRUE(l.lm->draft_heads() != nullptr && l.lm->draft_heads()->EnableDspark());
  }
  return l;
}

std::vector<int32_t> Prompt(int n, int salt = 0) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(3 + (37 * i + salt) % 310);
  return p;
}

struct Proposal {
  std::vector<int32_t> drafts;
  std::vector<float> confidence;
};

// The prompt but its last token prefilled in chunks of `chunk`, then one proposal for the last.
Proposal Propose(CausalLm& lm, const std::vector<int32_t>& prompt, int chunk,
                 util::ThreadPool& pool, int block_size = 16) {
  const int n = static_cast<int>(prompt.size()), B = lm.draft_heads()->dspark_block_size();
  Cache cache(lm, n, block_size);
  for (int off = 0; off < n - 1; off += chunk) {
    const int k = std::min(chunk, n - 1 - off);
    ForwardBatch b;
    b.tokens = prompt.data() + off;
    b.num_tokens = k;
    cache.Release(off);
    b.seqs.push_back(cache.Slice(0, k, off, 0));
    lm.Forward(b, cache.kv, nullptr, pool);
  }
  cache.Release(n - 1);
  ForwardBatch b;
  b.tokens = prompt.data() + n - 1;
  b.num_tokens = 1;
  b.seqs.push_back(cache.Slice(0, 1, n - 1, 0));
  Proposal p{std::vector<int32_t>(B), std::vector<float>(B)};
  lm.draft_heads()->DsparkPropose(b, cache.kv, p.drafts.data(), p.confidence.data(), pool);
  return p;
}

TEST(DsparkTest, StagesLoadAndAddOneWindowLayerEach) {
  Loaded off = Load("dspark_random", /*enable=*/false);
  ASSERT_TRUE(off.lm);
  const int layers = off.model->config.num_layers;
  ASSERT_NE(off.lm->draft_heads(), nullptr);
  EXPECT_EQ(off.lm->draft_heads()->dspark_block_size(), 5);
  EXPECT_EQ(off.lm->kv_layout(16).window_floats.size(), static_cast<size_t>(layers));
  ASSERT_TRUE(off.lm->draft_heads()->EnableDspark());
  EXPECT_EQ(off.lm->kv_layout(16).window_floats.size(), static_cast<size_t>(layers + 3));
  // The main cache is the same either way.
  EXPECT_EQ(off.lm->kv_layout(16).floats, Load("dspark_random", false).lm->kv_layout(16).floats);
}

TEST(DsparkTest, ProposalsDoNotDependOnChunkingOrBlockSize) {
  Loaded l = Load("dspark_random");
  ASSERT_TRUE(l.lm);
  util::ThreadPool pool(2);
  const std::vector<int32_t> prompt = Prompt(41);
  const Proposal full = Propose(*l.lm, prompt, 64, pool);
  for (int v : full.drafts) EXPECT_TRUE(v >= 0 && v < l.model->config.vocab);
  for (float c : full.confidence) EXPECT_TRUE(c > 0.0f && c <= 1.0f) << c;
  for (int chunk : {1, 3, 7}) {
    const Proposal got = Propose(*l.lm, prompt, chunk, pool);
    EXPECT_EQ(got.drafts, full.drafts) << chunk;
    EXPECT_EQ(got.confidence, full.confidence) << chunk;
  }
  const Proposal odd = Propose(*l.lm, prompt, 7, pool, /*block_size=*/5);
  EXPECT_EQ(odd.confidence, full.confidence);
}

TEST(DsparkTest, ProposalsReadTheWindowsAndNotTheirNeighbours) {
  Loaded l = Load("dspark_random");
  ASSERT_TRUE(l.lm);
  util::ThreadPool pool(2);
  const std::vector<int32_t> a = Prompt(30), b = Prompt(23, 5);
  const Proposal pa = Propose(*l.lm, a, 64, pool), pb = Propose(*l.lm, b, 64, pool);
  // A token inside the window changes the windows (through the taps), so the proposal changes:
  // the next token is the same, so only the windows can carry the difference.
  std::vector<int32_t> a2 = a;
  a2[a.size() - 3] = (a2[a.size() - 3] + 1) % 300;
  EXPECT_NE(Propose(*l.lm, a2, 64, pool).confidence, pa.confidence);
  // Both in one batch over one cache (b's blocks after a's): each as alone.
  const int B = l.lm->draft_heads()->dspark_block_size(), bs = 16;
  const int blocks_a = (static_cast<int>(a.size()) + bs - 1) / bs;
  Cache cache(*l.lm, blocks_a * bs + static_cast<int>(b.size()), bs);
  auto slice = [&](int first_block, int offset, int n, int start) {
    SequenceSlice s = cache.Slice(offset, n, start, 0);
    s.block_table += first_block;
    s.window_block_table += first_block;
    s.num_blocks -= first_block;
    return s;
  };
  std::vector<int32_t> tokens(a.begin(), a.end() - 1);
  tokens.insert(tokens.end(), b.begin(), b.end() - 1);
  ForwardBatch prefill;
  prefill.tokens = tokens.data();
  prefill.num_tokens = static_cast<int32_t>(tokens.size());
  prefill.seqs = {slice(0, 0, static_cast<int>(a.size()) - 1, 0),
                  slice(blocks_a, static_cast<int>(a.size()) - 1, static_cast<int>(b.size()) - 1,
                        0)};
  l.lm->Forward(prefill, cache.kv, nullptr, pool);
  const int32_t last[2] = {a.back(), b.back()};
  ForwardBatch step;
  step.tokens = last;
  step.num_tokens = 2;
  step.seqs = {slice(0, 0, 1, static_cast<int>(a.size()) - 1),
               slice(blocks_a, 1, 1, static_cast<int>(b.size()) - 1)};
  std::vector<int32_t> drafts(2 * B);
  std::vector<float> confidence(2 * B);
  l.lm->draft_heads()->DsparkPropose(step, cache.kv, drafts.data(), confidence.data(), pool);
  EXPECT_EQ(std::vector<int32_t>(drafts.begin(), drafts.begin() + B), pa.drafts);
  EXPECT_EQ(std::vector<int32_t>(drafts.begin() + B, drafts.end()), pb.drafts);
  EXPECT_EQ(std::vector<float>(confidence.begin(), confidence.begin() + B), pa.confidence);
  EXPECT_EQ(std::vector<float>(confidence.begin() + B, confidence.end()), pb.confidence);
}

TEST(DsparkTest, TheAgreeingDrafterGuessesTheBigramChain) {
  // dspark_agree's model is near lm_head(norm(embed(x))) and its Markov head a scaled copy of
  // it: the drafts follow the greedy bigram chain from the newest token.
  Loaded l = Load("dspark_agree");
  ASSERT_TRUE(l.lm);
  util::ThreadPool pool(2);
  const std::vector<int32_t> prompt = Prompt(20);
  const Proposal p = Propose(*l.lm, prompt, 64, pool);
  const int V = l.model->config.vocab;
  std::vector<float> logits(V);
  int32_t token = prompt.back();
  int matches = 0;
  const int B = l.lm->draft_heads()->dspark_block_size();
  for (int r = 0; r < B; ++r) {
    // The bigram: one token alone in a fresh cache.
    Cache cache(*l.lm, 1);
    ForwardBatch b;
    b.tokens = &token;
    b.num_tokens = 1;
    b.seqs.push_back(cache.Slice(0, 1, 0, 1));
    l.lm->Forward(b, cache.kv, logits.data(), pool);
    token = testing::ArgMax(logits.data(), V);
    if (r == 0) {  // its row has no noise token
      EXPECT_EQ(p.drafts[r], token);
    }
    matches += p.drafts[r] == token;
    token = p.drafts[r];
  }
  // Later rows add the noise token's own bigram, a small term that may flip a close call.
  EXPECT_GE(matches, B - 1);
}

}  // namespace
}  // namespace deepinfer::arch

namespace deepinfer::arch {
namespace {

TEST(DsparkConfigTest, DsparkKeysAreReadAndCheckedInOneLine) {
  const std::string base = R"({"model_type": "deepseek_v41", "text_config": {
    "num_hidden_layers": 4, "compress_ratios": [0, 2, 2, 1, 0, 0, 0], "vocab_size": 320,
    "kv_source_layer_ids": [1, 3], "index_source_layer_ids": [1, 3], "engram_layer_ids": [],
    "num_nextn_predict_layers": 3, "dspark_noise_token_id": 319 EXTRA}})";
  auto config = [&](const std::string& extra) {
    std::string s = base;
    s.replace(s.find("EXTRA"), 5, extra);
    return model::ParseHfConfig(s);
  };
  auto ok = config(R"(, "dspark_target_layer_ids": [1, 2, 3], "dspark_block_size": 4,
                      "dspark_markov_rank": 16)");
  ASSERT_TRUE(ok.ok()) << ok.status();
  const auto& d = *ok->deepseek_v4;
  EXPECT_EQ(d.dspark_target_layer_ids, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(d.dspark_block_size, 4);
  EXPECT_EQ(d.dspark_markov_rank, 16);
  EXPECT_EQ(d.dspark_noise_token_id, 319);
  for (const char* bad : {"",                                                  // no taps
                          R"(, "dspark_target_layer_ids": [4])",               // not a layer
                          R"(, "dspark_target_layer_ids": [1], "dspark_block_size": 0)",
                          R"(, "dspark_target_layer_ids": [1], "dspark_block_size": 17)",
                          R"(, "dspark_target_layer_ids": [1], "dspark_noise_token_id": 320)",
                          R"(, "dspark_target_layer_ids": "x")"}) {
    auto parsed = config(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(ErrorCodeOf(parsed.status()), "bad_config") << parsed.status();
    EXPECT_EQ(OneLineError(parsed.status()).find('\n'), std::string::npos);
  }
}

}  // namespace
}  // namespace deepinfer::arch
