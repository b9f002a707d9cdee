// Prefix checkpoints through the engine (EngineOptions::checkpoint_store): a prompt's full
// blocks saved after its prefill, restored by a fresh engine on a fresh store over the same
// folder (a restart) with cached_tokens = the restored prefix, and greedy tokens equal to an
// engine without any prefix cache; a checkpoint of another revision or layout is counted and
// recomputed. Models: stories260K (Llama, ../shared), the tiny DeepSeek-V3 and V4 checkpoints
// (V4 with MTP drafts, whose KV the checkpoint carries too) and the tiny V4.1 one with its window
// cache, Engram and QAT (../shared/goldens). Cases whose files are absent skip.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "engine/prefix_checkpoint.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "model/synthetic_checkpoint_testing.h"
#include "nlohmann/json.hpp"

namespace deepinfer::engine {
namespace {

namespace fs = std::filesystem;
using testing::Generate;

struct Case {
  const char* name;
  int speculative_tokens;
};

absl::StatusOr<std::unique_ptr<model::Model>> LoadCase(const std::string& name) {
  if (name == "stories260K") {
    const std::string dir = std::string(DI_SOURCE_DIR) + "/../shared/models/stories260K";
    if (!fs::exists(dir + "/stories260K.bin")) return absl::NotFoundError("skip: " + dir);
    return model::LoadModel(dir + "/stories260K.bin", dir + "/tok512.bin");
  }
  if (name == "v41_full") {
    const std::string golden = std::string(DI_SOURCE_DIR) + "/../shared/goldens/deepseek_v41/" + name;
    if (!fs::exists(golden)) return absl::NotFoundError("skip: " + golden);
    auto dir = model::SyntheticCheckpoint(golden, std::string(DI_TESTDATA_DIR) + "/deepseek_v41");
    if (!dir.ok()) return dir.status();
    auto m = model::LoadModel(*dir);
    if (!m.ok()) return m.status();
    std::ifstream in(golden + "/golden.json");
    (*m)->engram_token_classes =
        nlohmann::json::parse(in)["engram"]["token_map"].get<std::vector<int32_t>>();
    return m;
  }
  const std::string family = name == std::string("v3_groups_yarn") ? "deepseek_v3" : "deepseek_v4";
  auto dir = model::DeepseekTestCheckpoint(name, family);
  if (!dir.ok()) return dir.status();
  return model::LoadModel(*dir);
}

class PrefixCheckpointEngineTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    auto m = LoadCase(GetParam().name);
    if (!m.ok() && absl::IsNotFound(m.status()) &&
        std::string(m.status().message()).starts_with("skip: ")) {
      GTEST_SKIP() << m.status().message().substr(6) << " is absent (../shared)";
    }
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    dir_ = fs::temp_directory_path() /
           ("dipc-engine-" + std::to_string(::getpid()) + "-" + GetParam().name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (store_ != nullptr) store_->Flush();  // the writer may still be saving a later prompt
    store_.reset();
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  // An engine with the prefix cache off (the reference), or on with a fresh store over dir_.
  std::unique_ptr<Engine> Make(bool checkpoints, const std::string& revision = "rev-1",
                               kernels::KvDtype dtype = kernels::KvDtype::kF32,
                               bool save = true) {
    EngineOptions o;
    o.num_threads = 2;
    o.kv_cache_tokens = 4096;
    o.block_size = 16;
    o.speculative_tokens = GetParam().speculative_tokens;
    o.enable_prefix_caching = checkpoints;
    o.kv_cache_dtype = dtype;
    if (checkpoints) {
      auto store = CheckpointStore::Open(dir_.string(), int64_t{1} << 30);
      EXPECT_TRUE(store.ok()) << store.status();
      if (!store.ok()) return nullptr;
      store_ = std::shared_ptr<CheckpointStore>(*std::move(store));
      o.checkpoint_store = store_;
      o.checkpoint_min_tokens = 32;
      o.model_revision = revision;
      o.checkpoint_save = save;
      o.checkpoint_preload_tokens = preload_tokens_;
    }
    auto e = Engine::Create(*model_, o);
    EXPECT_TRUE(e.ok()) << e.status();
    if (!e.ok()) return nullptr;
    while (!(*e)->ready()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return std::move(*e);
  }

  // Greedy, a 75-token prompt (4 full blocks and 11 tokens) plus `extra` more.
  GenerateRequest Request(int extra = 0) const {
    std::mt19937 rng(11);
    GenerateRequest r;
    const int32_t vocab = std::min<int32_t>(model_->config.vocab, 500);
    for (int i = 0; i < 75 + extra; ++i) r.prompt.push_back(static_cast<int32_t>(3 + rng() % (vocab - 3)));
    r.sampling.temperature = 0;
    r.max_tokens = 12;
    r.ignore_eos = true;
    return r;
  }

  // Fills `want` with the tokens an engine without the prefix cache generates for Request(),
  // then lets an engine with checkpoints (revision rev-1) serve it once and save its one
  // checkpoint. Callers wrap it in ASSERT_NO_FATAL_FAILURE.
  void SaveOneCheckpoint(std::vector<int32_t>* want) {
    auto plain = Make(false);
    ASSERT_TRUE(plain);
    *want = Generate(*plain, Request());
    auto first = Make(true);
    ASSERT_TRUE(first);
    Generate(*first, Request());
    store_->Flush();
    ASSERT_EQ(store_->counters().saved, 1);
  }

  std::unique_ptr<model::Model> model_;
  int64_t preload_tokens_ = 0;  // EngineOptions::checkpoint_preload_tokens of the next Make
  fs::path dir_;
  std::shared_ptr<CheckpointStore> store_;
};

TEST_P(PrefixCheckpointEngineTest, ARestartedEngineRestoresThePrefixAndAnswersTheSame) {
  auto plain = Make(false);
  ASSERT_TRUE(plain);
  const std::vector<int32_t> want = Generate(*plain, Request());
  const std::vector<int32_t> want_longer = Generate(*plain, Request(40));
  {
    auto first = Make(true);
    ASSERT_TRUE(first);
    StreamUpdate u;
    EXPECT_EQ(Generate(*first, Request(), &u), want);
    EXPECT_EQ(u.cached_tokens, 0);
    store_->Flush();
    EXPECT_EQ(store_->counters().saved, 1);  // 64 tokens: 4 full blocks of the prompt
    // The same prompt again is a plain prefix-cache hit: nothing restored, nothing saved twice.
    EXPECT_EQ(Generate(*first, Request(), &u), want);
    EXPECT_EQ(u.cached_tokens, 64);
    store_->Flush();
    EXPECT_EQ(store_->counters().saved, 1);
    EXPECT_EQ(store_->counters().restored, 0);
  }
  // A restart: a new engine and store over the same folder.
  auto second = Make(true);
  ASSERT_TRUE(second);
  StreamUpdate u;
  EXPECT_EQ(Generate(*second, Request(), &u), want);
  EXPECT_EQ(u.cached_tokens, 64);
  EXPECT_EQ(store_->counters().restored, 1);
  EXPECT_EQ(store_->counters().restored_tokens, 64);
  // A longer prompt sharing the prefix: the restored blocks plus its own.
  EXPECT_EQ(Generate(*second, Request(40), &u), want_longer);
  EXPECT_EQ(u.cached_tokens, 64);
}

TEST_P(PrefixCheckpointEngineTest, AnotherRevisionNeitherRestoresNorBlocksItsOwn) {
  std::vector<int32_t> want;
  ASSERT_NO_FATAL_FAILURE(SaveOneCheckpoint(&want));
  auto other = Make(true, "rev-2");
  ASSERT_TRUE(other);
  StreamUpdate u;
  EXPECT_EQ(Generate(*other, Request(), &u), want);
  EXPECT_EQ(u.cached_tokens, 0);
  store_->Flush();
  EXPECT_EQ(store_->counters().restored, 0);
  EXPECT_EQ(store_->counters().saved, 1);  // its own file beside rev-1's
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 2);
  // A rev-1 file under rev-2's name (copied by hand, or a name collision) is read, rejected for
  // its revision, counted, and the prefix recomputed.
  std::vector<fs::path> files{fs::directory_iterator(dir_), fs::directory_iterator()};
  std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
    return fs::last_write_time(a) < fs::last_write_time(b);
  });
  fs::copy_file(files[0], files[1], fs::copy_options::overwrite_existing);
  auto restarted = Make(true, "rev-2");
  ASSERT_TRUE(restarted);
  EXPECT_EQ(Generate(*restarted, Request(), &u), want);
  EXPECT_EQ(u.cached_tokens, 0);
  EXPECT_EQ(store_->counters().rejected[static_cast<int>(CheckpointReject::kWrongRevision)], 1);
}

TEST_P(PrefixCheckpointEngineTest, ACorruptFileIsRejectedAndRecomputed) {
  std::vector<int32_t> want;
  ASSERT_NO_FATAL_FAILURE(SaveOneCheckpoint(&want));
  for (const auto& e : fs::directory_iterator(dir_)) {  // flip one payload byte in place
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-7, std::ios::end);
    char ch;
    f.get(ch);
    f.seekp(-7, std::ios::end);
    f.put(static_cast<char>(ch ^ 0x10));
  }
  auto second = Make(true);
  ASSERT_TRUE(second);
  StreamUpdate u;
  EXPECT_EQ(Generate(*second, Request(), &u), want);
  EXPECT_EQ(u.cached_tokens, 0);
  EXPECT_EQ(store_->counters().rejected[static_cast<int>(CheckpointReject::kCorrupt)], 1);
}

// Prefill/decode disaggregation at the engine: a prefill_only request samples nothing and saves
// its blocks whatever --checkpoint-min-tokens says; a decode engine (saving nothing itself) told
// the file name restores it and answers the tokens of an engine without any cache.
TEST_P(PrefixCheckpointEngineTest, APrefillOnlyRequestHandsItsBlocksToADecodeEngine) {
  auto plain = Make(false);
  ASSERT_TRUE(plain);
  const std::vector<int32_t> want = Generate(*plain, Request());
  auto prefill = Make(true);
  ASSERT_TRUE(prefill);
  std::shared_ptr<CheckpointStore> prefill_store = store_;
  auto decode = Make(true, "rev-1", kernels::KvDtype::kF32, /*save=*/false);
  ASSERT_TRUE(decode);
  std::shared_ptr<CheckpointStore> decode_store = store_;

  GenerateRequest full = Request();
  const CheckpointRef ref = prefill->CheckpointFor(full.prompt, 0);
  ASSERT_EQ(ref.num_tokens, 64);
  EXPECT_EQ(decode->CheckpointFor(full.prompt, 0).file, ref.file);  // one name on both sides
  // Below checkpoint_min_tokens (32) and still saved: the decode side asked for it.
  for (int32_t n : {16, 64}) {
    GenerateRequest p = Request();
    p.prompt.resize(static_cast<size_t>(n));
    p.prefill_only = true;
    p.max_tokens = 1;
    auto stream = prefill->Submit(p);
    ASSERT_TRUE(stream.ok()) << stream.status();
    StreamUpdate u;
    std::vector<int32_t> tokens;
    while ((*stream)->Wait(u, std::chrono::seconds(60))) {
      for (const TokenEvent& t : u.tokens) tokens.push_back(t.token);
      if (u.finish != FinishReason::kNone) break;
    }
    EXPECT_EQ(u.finish, FinishReason::kLength);
    EXPECT_TRUE(tokens.empty());
    EXPECT_EQ(u.completion_tokens, 0);
  }
  prefill_store->Flush();
  EXPECT_EQ(prefill_store->counters().saved, 2);
  ASSERT_TRUE(fs::exists(dir_ / ref.file));

  GenerateRequest d = Request();
  d.checkpoint_file = ref.file;
  d.checkpoint_tokens = ref.num_tokens;
  StreamUpdate u;
  EXPECT_EQ(Generate(*decode, d, &u), want);
  EXPECT_EQ(u.cached_tokens, 64);
  EXPECT_EQ(decode_store->counters().restored, 1);
  decode_store->Flush();
  EXPECT_EQ(decode_store->counters().saved, 0);
  // A hint that names no checkpoint file, or more tokens than the prompt, costs a recompute.
  auto fresh = Make(true, "rev-1", kernels::KvDtype::kF32, /*save=*/false);
  ASSERT_TRUE(fresh);
  for (auto [file, n] : {std::pair<std::string, int32_t>{"../" + ref.file, 64},
                         {ref.file, 80}, {ref.file, 63}, {ref.file, 48}}) {
    GenerateRequest bad = Request();
    bad.checkpoint_file = file;
    bad.checkpoint_tokens = n;
    EXPECT_EQ(Generate(*fresh, bad, &u), want) << file << " " << n;
  }
  // 48 tokens named with the 64-token file: read, refused for its fingerprint.
  EXPECT_EQ(store_->counters().rejected[static_cast<int>(CheckpointReject::kWrongFingerprint)], 1);
  EXPECT_EQ(store_->counters().restored, 0);
}

// A prompt of whole blocks, sent again after a restart: it resumes a block before the
// checkpoint's end (its last token must be computed), and a model with a window cache (V4, V4.1)
// finds that block's window too, because the checkpoint keeps one more window block.
TEST_P(PrefixCheckpointEngineTest, TheSameWholeBlockPromptAfterARestartHitsTheCheckpoint) {
  GenerateRequest whole = Request(-11);  // 64 tokens: 4 full blocks
  auto plain = Make(false);
  ASSERT_TRUE(plain);
  const std::vector<int32_t> want = Generate(*plain, whole);
  {
    auto first = Make(true);
    ASSERT_TRUE(first);
    EXPECT_EQ(Generate(*first, whole), want);
    store_->Flush();
    ASSERT_EQ(store_->counters().saved, 1);
  }
  auto second = Make(true);
  ASSERT_TRUE(second);
  StreamUpdate u;
  EXPECT_EQ(Generate(*second, whole, &u), want);
  EXPECT_EQ(u.cached_tokens, 48);
  EXPECT_EQ(store_->counters().restored, 1);
}

// Restore at start: a new engine on the folder puts the newest checkpoints back into its prefix
// cache before its first request, which then finds them (cached_tokens) with nothing left to
// restore; a budget smaller than a checkpoint restores none.
TEST_P(PrefixCheckpointEngineTest, PreloadedCheckpointsServeTheFirstRequestFromTheCache) {
  std::vector<int32_t> want;
  ASSERT_NO_FATAL_FAILURE(SaveOneCheckpoint(&want));
  preload_tokens_ = 63;  // less than the 64-token checkpoint
  {
    auto small = Make(true);
    ASSERT_TRUE(small);
    EXPECT_EQ(store_->counters().restored, 0);
  }
  preload_tokens_ = int64_t{1} << 40;
  auto second = Make(true);
  ASSERT_TRUE(second);
  EXPECT_EQ(store_->counters().restored, 1);  // at start, before any request
  StreamUpdate u;
  EXPECT_EQ(Generate(*second, Request(), &u), want);
  EXPECT_EQ(u.cached_tokens, 64);
  EXPECT_EQ(store_->counters().restored, 1);  // the request found it resident
}

INSTANTIATE_TEST_SUITE_P(Models, PrefixCheckpointEngineTest,
                         ::testing::Values(Case{"stories260K", 0}, Case{"v3_groups_yarn", 0},
                                           Case{"v4_flash_tiny", 2}, Case{"v41_full", 0}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(PrefixCheckpointLayoutTest, A16BitCacheNeitherRestoresNorBlocksA32BitCheckpoint) {
  const std::string dir = std::string(DI_SOURCE_DIR) + "/../shared/models/stories260K";
  if (!fs::exists(dir + "/stories260K.bin")) GTEST_SKIP() << dir << " is absent (../shared)";
  auto model = model::LoadModel(dir + "/stories260K.bin", dir + "/tok512.bin");
  ASSERT_TRUE(model.ok());
  const fs::path folder = fs::temp_directory_path() / ("dipc-layout-" + std::to_string(::getpid()));
  fs::remove_all(folder);
  fs::create_directories(folder);
  GenerateRequest r;
  for (int i = 0; i < 70; ++i) r.prompt.push_back(5 + (i * 37) % 400);
  r.sampling.temperature = 0;
  r.max_tokens = 4;
  std::shared_ptr<CheckpointStore> store;
  for (kernels::KvDtype dtype : {kernels::KvDtype::kF32, kernels::KvDtype::kF16}) {
    store = std::shared_ptr<CheckpointStore>(*CheckpointStore::Open(folder.string(), 1 << 30));
    EngineOptions o;
    o.num_threads = 2;
    o.kv_cache_tokens = 2048;
    o.kv_cache_dtype = dtype;
    o.checkpoint_store = store;
    o.checkpoint_min_tokens = 32;
    o.model_revision = "r";
    auto e = Engine::Create(**model, o);
    ASSERT_TRUE(e.ok()) << e.status();
    StreamUpdate u;
    Generate(**e, r, &u);
    EXPECT_EQ(u.cached_tokens, 0);
    store->Flush();
  }
  // Each cache kept its own file; neither restored the other's.
  EXPECT_EQ(std::distance(fs::directory_iterator(folder), fs::directory_iterator()), 2);
  EXPECT_EQ(store->counters().restored, 0);
  fs::remove_all(folder);
}

}  // namespace
}  // namespace deepinfer::engine
