// Parity of the DeepSeek-V4.1 text model on prompts with images with DeepSeek's reference
// (inference/model.py + vision.py) on the tiny random models of
// ../shared/goldens/deepseek_v41_vision (weights written at test time from their recipes; pixel
// values from the goldens' preprocessing outputs, span rows from our vision tower): one prefill,
// chunked prefill cutting through spans, cached greedy decode after the images, and batching
// with a text-only prompt. Span positions: embeddings overwritten by the span rows, experts
// selected with gate.bias_vl, Engram DEAD (look-back blocked, gate 0). Skips with a message
// when ../shared is absent.

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "arch/causal_lm.h"
#include "arch/deepseek_testing.h"
#include "arch/engram_hash.h"
#include "arch/vision_testing.h"
#include "arch/vision_tower.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "model/synthetic_checkpoint.h"
#include "model/synthetic_checkpoint_testing.h"
#include "nlohmann/json.hpp"
#include "util/error_codes.h"
#include "util/mapped_file.h"
#include "util/status.h"

namespace deepinfer::arch {
namespace {

using Json = nlohmann::json;
using testing::ArgMax;
using testing::MaxAbsDiff;

using testing::CaseDir;

// A case's composite model and its expanded prompt: ids, token types, and the span rows our
// vision tower computes for its images (one row per span position, in prompt order).
struct ImageCase {
  Json golden, greedy, logits;
  int vocab = 0;
  int64_t hidden = 0;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<CausalLm> lm;
  std::vector<int32_t> ids;
  std::vector<int8_t> types;
  std::vector<float> span_rows;

  // The reference's logits `key`: [rows, vocab].
  std::vector<float> Ref(const std::string& key, int64_t rows) const {
    EXPECT_TRUE(logits.contains(key)) << key;
    if (!logits.contains(key)) return {};
    EXPECT_EQ(logits[key]["shape"].get<std::vector<int64_t>>(),
              (std::vector<int64_t>{rows, vocab}));
    return logits[key]["data"].get<std::vector<float>>();
  }
};

Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  return in ? Json::parse(in) : Json();
}

std::unique_ptr<ImageCase> LoadCase(const std::string& name, util::ThreadPool& pool) {
  auto c = std::make_unique<ImageCase>();
  const std::string dir = CaseDir(name);
  c->golden = ReadJson(dir + "/golden.json");
  c->greedy = ReadJson(dir + "/greedy.json");
  auto text = util::ReadGzipFile(dir + "/logits.json.gz");
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok()) return nullptr;
  c->logits = Json::parse(*text);
  c->vocab = c->golden["vocab"].get<int>();
  c->model = testing::LoadCaseModel(dir);
  if (c->model == nullptr) return nullptr;
  // Engram case: the token classes of the case's toy tokenizer, as the reference built them.
  if (c->golden.contains("engram")) {
    c->model->engram_token_classes =
        c->golden["engram"]["token_map"].get<std::vector<int32_t>>();
  }
  auto lm = CreateCausalLm(*c->model);
  EXPECT_TRUE(lm.ok()) << lm.status();
  if (!lm.ok()) return nullptr;
  c->lm = std::move(*lm);
  c->hidden = c->model->config.hidden;
  const Json& e2e = c->golden["e2e"];
  c->ids = e2e["input_ids"].get<std::vector<int32_t>>();
  for (int t : e2e["token_types"].get<std::vector<int>>()) c->types.push_back(static_cast<int8_t>(t));
  EXPECT_EQ(c->ids.size(), c->types.size());

  // The images in span order (the records of golden.json "images" by file name).
  VisionTower* tower = c->lm->vision_tower();
  EXPECT_NE(tower, nullptr);
  if (tower == nullptr) return nullptr;
  std::vector<std::vector<float>> pixels;
  std::vector<VisionImage> images;
  int64_t rows = 0;
  for (const Json& span : e2e["spans"]) {
    const Json* rec = nullptr;
    for (const Json& r : c->golden["images"]) {
      if (r["image"] == span["image"]) rec = &r;
    }
    EXPECT_NE(rec, nullptr) << span["image"];
    if (rec == nullptr) return nullptr;
    pixels.push_back(testing::PixelValues(dir, *rec, c->golden["value_table"]));
    images.push_back({nullptr, span["n_vit_h"].get<int32_t>(), span["n_vit_w"].get<int32_t>()});
    EXPECT_EQ(tower->GridOf(images.back()).span_rows(), span["length"].get<int64_t>());
    rows += span["length"].get<int64_t>();
  }
  for (size_t i = 0; i < images.size(); ++i) images[i].pixel_values = pixels[i].data();
  EXPECT_EQ(rows, std::count_if(c->types.begin(), c->types.end(), [](int8_t t) { return t >= 0; }));
  c->span_rows.resize(rows * c->hidden);
  tower->EmbedImages(images, c->span_rows.data(), pool);
  return c;
}

// Logits of every position of the case's prompt, fed in chunks of `chunk` tokens; each chunk
// gets its slice of the token types and the span rows of the span positions in it.
std::vector<float> RunPrompt(ImageCase& c, int chunk, util::ThreadPool& pool,
                             testing::Cache* keep = nullptr) {
  const int V = c.vocab;
  const int n = static_cast<int>(c.ids.size());
  testing::Cache own(*c.lm, n + 16);
  testing::Cache& cache = keep != nullptr ? *keep : own;
  std::vector<float> out(static_cast<size_t>(n) * V);
  int64_t row = 0;  // span rows before this chunk
  for (int off = 0; off < n; off += chunk) {
    const int len = std::min(chunk, n - off);
    ForwardBatch b;
    b.tokens = c.ids.data() + off;
    b.num_tokens = len;
    b.token_types = c.types.data() + off;
    b.span_rows = c.span_rows.data() + row * c.hidden;
    row += std::count_if(c.types.begin() + off, c.types.begin() + off + len,
                         [](int8_t t) { return t >= 0; });
    cache.Release(off);
    b.seqs.push_back(cache.Slice(0, len, off, len));
    c.lm->Forward(b, cache.kv, out.data() + static_cast<size_t>(off) * V, pool);
  }
  return out;
}

// (a) one prefill against the reference's logits; (b) chunks of 37 tokens (cutting through
// every span) and of 1 token (every span position its own step, Engram's DEAD classes read
// back from the cache) against (a); (c) the greedy tokens and their step logits from the cached decode
// after that prefill (generated tokens are text: no token types).
void ExpectPromptMatches(const std::string& name) {
  util::ThreadPool pool(2);
  auto c = LoadCase(name, pool);
  ASSERT_TRUE(c && c->lm);
  const int V = c->vocab;
  const int64_t n = static_cast<int64_t>(c->ids.size());
  const std::vector<float> ref = c->Ref("logits_" + std::to_string(n), n);
  ASSERT_EQ(static_cast<int64_t>(ref.size()), n * V);
  testing::Cache cache(*c->lm, static_cast<int>(n) + 16);
  const std::vector<float> full = RunPrompt(*c, static_cast<int>(n), pool, &cache);
  const double da = MaxAbsDiff(full.data(), ref.data(), n * V);
  double db = 0;
  for (int chunk : {37, 1}) {
    const std::vector<float> chunked = RunPrompt(*c, chunk, pool);
    const double d = MaxAbsDiff(chunked.data(), full.data(), n * V);
    EXPECT_LE(d, 1e-5) << name << " chunks of " << chunk;
    db = std::max(db, d);
  }

  const std::vector<int32_t> want = c->greedy["tokens"].get<std::vector<int32_t>>();
  const int steps = static_cast<int>(want.size());
  const std::vector<float> step_ref = c->Ref("greedy_step_logits", steps);
  ASSERT_EQ(static_cast<int>(step_ref.size()), steps * V);
  EXPECT_EQ(ArgMax(full.data() + (n - 1) * V, V), want[0]) << name << " step 0";
  std::vector<float> step(V);
  double dc = 0;
  int32_t next = ArgMax(full.data() + (n - 1) * V, V);
  for (int i = 0; i < steps; ++i) {
    ForwardBatch b;
    b.tokens = &next;
    b.num_tokens = 1;
    const int32_t pos = static_cast<int32_t>(n) + i;
    cache.Release(pos);
    b.seqs.push_back(cache.Slice(0, 1, pos, 1));
    c->lm->Forward(b, cache.kv, step.data(), pool);
    dc = std::max(dc, MaxAbsDiff(step.data(), step_ref.data() + int64_t{i} * V, V));
    next = ArgMax(step.data(), V);
    if (i + 1 < steps) {
      EXPECT_EQ(next, want[i + 1]) << name << " step " << i + 1;
    }
  }
  std::printf(
      "%s, %lld tokens: max |logit diff| prefill vs reference %.3g, chunks of 37 and 1 vs one "
      "prefill %.3g, cached greedy step logits vs reference %.3g\n",
      name.c_str(), static_cast<long long>(n), da, db, dc);
  EXPECT_LE(da, 1e-4) << name;
  EXPECT_LE(dc, 1e-4) << name;
}

TEST(DeepseekV41VisionParityTest, TwoImagePromptMatchesTheReference) {
  DI_SKIP_WITHOUT_VISION_GOLDENS("v41vis_a");
  ExpectPromptMatches("v41vis_a");
}

TEST(DeepseekV41VisionParityTest, EngramThreeImagePromptMatchesTheReference) {
  DI_SKIP_WITHOUT_VISION_GOLDENS("v41vis_b_engram");
  ExpectPromptMatches("v41vis_b_engram");
}

// (d) One Forward over a text-only prompt and the image prompt (after it, so the image tokens'
// batch offsets differ from their positions) gives each exactly the logits it gets alone.
void ExpectBatchInvariance(const std::string& name) {
  util::ThreadPool pool(2);
  auto c = LoadCase(name, pool);
  ASSERT_TRUE(c && c->lm);
  const int V = c->vocab;
  const int n = static_cast<int>(c->ids.size());
  const std::vector<float> image_alone = RunPrompt(*c, n, pool);
  // The text-only prompt: the prompt's text tokens, spans left out.
  std::vector<int32_t> text;
  for (int t = 0; t < n; ++t) {
    if (c->types[t] < 0) text.push_back(c->ids[t]);
  }
  const int m = static_cast<int>(text.size());
  const std::vector<float> text_alone = testing::RunTokens(*c->lm, text, m, pool);
  // Both sequences in one cache, each with its own block table (window tables = main ones).
  KvCache kv, window;
  const int bs = 16, bt = (m + bs - 1) / bs, bi = (n + bs - 1) / bs;
  testing::AllocateKv(*c->lm, bs, bt + bi, kv, window);
  std::vector<int32_t> tt(bt), ti(bi);
  for (int i = 0; i < bt; ++i) tt[i] = bi + i;
  for (int i = 0; i < bi; ++i) ti[i] = i;
  std::vector<int32_t> tokens = text;
  tokens.insert(tokens.end(), c->ids.begin(), c->ids.end());
  std::vector<int8_t> types(m, -1);
  types.insert(types.end(), c->types.begin(), c->types.end());
  ForwardBatch b;
  b.tokens = tokens.data();
  b.num_tokens = m + n;
  b.token_types = types.data();
  b.span_rows = c->span_rows.data();
  b.seqs.push_back({0, m, 0, m, tt.data(), bt, tt.data()});
  b.seqs.push_back({m, n, 0, n, ti.data(), bi, ti.data()});
  std::vector<float> out(static_cast<size_t>(m + n) * V);
  c->lm->Forward(b, kv, out.data(), pool);
  const double dt = MaxAbsDiff(out.data(), text_alone.data(), int64_t{m} * V);
  const double di = MaxAbsDiff(out.data() + int64_t{m} * V, image_alone.data(), int64_t{n} * V);
  std::printf("%s batched with a %d-token text prompt: max |logit diff| text %.3g, image %.3g\n",
              name.c_str(), m, dt, di);
  EXPECT_EQ(dt, 0.0) << name;
  EXPECT_EQ(di, 0.0) << name;
}

TEST(DeepseekV41VisionConsistencyTest, BatchingWithATextPromptChangesNothing) {
  DI_SKIP_WITHOUT_VISION_GOLDENS("v41vis_a");
  ExpectBatchInvariance("v41vis_a");
}

TEST(DeepseekV41VisionConsistencyTest, EngramBatchingWithATextPromptChangesNothing) {
  DI_SKIP_WITHOUT_VISION_GOLDENS("v41vis_b_engram");
  ExpectBatchInvariance("v41vis_b_engram");
}

// The Engram hash of every text position of the image prompt against the reference's: span
// positions are DEAD, so a text position's look-back stops at the span before it and hashes the
// pad class from there on (cumulatively). Span positions' own rows are not compared (gate 0).
TEST(DeepseekV41VisionEngramTest, LookBackStopsAtSpans) {
  DI_SKIP_WITHOUT_VISION_GOLDENS("v41vis_b_engram");
  const std::string dir = CaseDir("v41vis_b_engram");
  const Json golden = ReadJson(dir + "/golden.json");
  const Json config = ReadJson(dir + "/config.json")["text_config"];
  const Json& e = golden["engram"];
  const auto layers = config["engram_layer_ids"].get<std::vector<int>>();
  const EngramLayout l = EngramLayout::Make(
      layers, config["engram_max_ngram_size"].get<int>(), config["engram_n_heads"].get<int>(),
      config["engram_vocab_size"].get<int64_t>(), e["compressed_vocab_size"].get<int>());
  const auto token_map = e["token_map"].get<std::vector<int32_t>>();
  const auto ids = golden["e2e"]["input_ids"].get<std::vector<int32_t>>();
  const auto types = golden["e2e"]["token_types"].get<std::vector<int>>();
  const int N = l.max_ngram_size;
  std::vector<int32_t> classes(N);
  std::vector<int64_t> row(l.columns());
  int blocked = 0;
  for (size_t p = 0; p < ids.size(); ++p) {
    if (types[p] >= 0) continue;
    // As the class layer holds them: -1 before the start and at span positions.
    for (int k = 0; k < N; ++k) {
      const int64_t q = static_cast<int64_t>(p) - k;
      classes[k] = q < 0 || types[q] >= 0 ? -1 : token_map[ids[q]];
    }
    for (int k = 1; k < N; ++k) blocked += static_cast<int64_t>(p) >= k && types[p - k] >= 0;
    for (size_t i = 0; i < layers.size(); ++i) {
      l.Hash(static_cast<int>(i), classes.data(), e["pad_class"].get<int32_t>(), row.data());
      EXPECT_EQ(row, e["hash_ids_of_prompt"][p][i].get<std::vector<int64_t>>())
          << "position " << p << " layer " << i;
    }
  }
  EXPECT_GT(blocked, 0);  // the prompt has text right after spans
}

// A checkpoint with vision tensors but no vision_config, and a vision_config without vision
// tensors, are one-line bad_config errors.
TEST(DeepseekV41VisionLoadTest, VisionTensorsAndVisionConfigComeTogether) {
  DI_SKIP_WITHOUT_VISION_GOLDENS("v41vis_a");
  const std::string text_case =
      std::string(DI_SOURCE_DIR) + "/../shared/goldens/deepseek_v41/v41_noengram_noqat";
  auto expect_bad_config = [](const std::string& folder) {
    auto m = model::LoadModel(folder);
    ASSERT_TRUE(m.ok()) << m.status();
    const absl::Status st = CreateCausalLm(**m).status();
    EXPECT_EQ(ErrorCodeOf(st), "bad_config") << st;
    EXPECT_EQ(OneLineError(st).find('\n'), std::string::npos);
  };
  auto vis = model::SyntheticCheckpoint(CaseDir("v41vis_a"),
                                        std::string(DI_TESTDATA_DIR) + "/deepseek_v41_vision");
  ASSERT_TRUE(vis.ok()) << vis.status();
  {
    model::CheckpointCopy c(model::CheckpointCopy::Folder{*vis});
    c.EditConfig("vision_config", nullptr);
    expect_bad_config(c.dir());
  }
  if (!std::filesystem::exists(text_case)) return;
  auto text = model::SyntheticCheckpoint(text_case,
                                         std::string(DI_TESTDATA_DIR) + "/deepseek_v41");
  ASSERT_TRUE(text.ok()) << text.status();
  model::CheckpointCopy c(model::CheckpointCopy::Folder{*text});
  const Json vis_config = ReadJson(CaseDir("v41vis_a") + "/config.json");
  c.EditConfig("vision_config", vis_config["vision_config"]);
  c.EditConfig("image_token_id", vis_config["image_token_id"]);
  expect_bad_config(c.dir());
}

}  // namespace
}  // namespace deepinfer::arch
