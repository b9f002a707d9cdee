#include "model/hf_checkpoint.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "model/model.h"
#include "model/synthetic_checkpoint_testing.h"
#include "util/status.h"

namespace deepinfer::model {
namespace {

namespace fs = std::filesystem;

// The generated test checkpoint `name` (see model/synthetic_checkpoint_testing.h).
std::string GoldenDir(const std::string& name) {
  auto dir = DeepseekTestCheckpoint(name);
  EXPECT_TRUE(dir.ok()) << dir.status();
  return dir.ok() ? *dir : "";
}

// Every bad-input error is one line with a stable code (never a crash).
void ExpectError(const std::string& path, const std::string& code) {
  auto m = LoadModel(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(ErrorCodeOf(m.status()), code) << m.status();
  const std::string line = OneLineError(m.status());
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  std::printf("  %s\n", line.c_str());
}

TEST(HfCheckpointTest, LoadsFolderConfigPathAndShardPath) {
  for (const std::string& p : {GoldenDir("v3_direct_q"), GoldenDir("v3_direct_q") + "/config.json",
                               GoldenDir("v3_direct_q") + "/model-00001-of-00002.safetensors"}) {
    auto m = LoadModel(p);
    ASSERT_TRUE(m.ok()) << p << ": " << m.status();
    EXPECT_EQ((*m)->config.architecture, "deepseek_v3");
    EXPECT_EQ((*m)->config.deepseek->q_lora_rank, 0);
    EXPECT_EQ((*m)->files.size(), 2u);
    EXPECT_NE((*m)->Find("model.layers.1.mlp.experts.15.down_proj.weight"), nullptr);
    EXPECT_EQ((*m)->config.name, "v3_direct_q");
    EXPECT_EQ((*m)->tokenizer.eos_id, 1);
  }
}

TEST(HfCheckpointTest, MissingShardIsReported) {
  CheckpointCopy c("v3_direct_q");
  fs::remove(c.path("model-00002-of-00002.safetensors"));
  ExpectError(c.dir(), "missing_shard");
  CheckpointCopy d("v3_qlora");
  fs::remove(d.path("model.safetensors"));
  ExpectError(d.dir(), "missing_shard");
}

TEST(HfCheckpointTest, UnsupportedConfigValueIsReported) {
  CheckpointCopy c("v3_qlora");
  c.EditConfig("scoring_func", "sqrtsoftplus");
  ExpectError(c.dir(), "unsupported_config");
  CheckpointCopy d("v3_qlora");
  d.EditConfig("rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}});
  ExpectError(d.dir(), "unsupported_config");
}

TEST(HfCheckpointTest, NanInFp8ScaleIsReported) {
  CheckpointCopy c("v3_qlora_fp8");
  const size_t off =
      c.TensorOffset("model.safetensors", "model.layers.0.self_attn.o_proj.weight_scale_inv");
  const float nan = std::nanf("");
  c.Patch("model.safetensors", off, &nan, 4);
  ExpectError(c.dir(), "nan_in_weights");
}

TEST(HfCheckpointTest, TruncatedAndCorruptShardsAreReported) {
  CheckpointCopy c("v3_qlora");
  fs::resize_file(c.path("model.safetensors"), fs::file_size(c.path("model.safetensors")) / 2);
  ExpectError(c.dir(), "truncated_file");
  CheckpointCopy d("v3_qlora");
  d.Patch("model.safetensors", 8, "garbage!", 8);
  ExpectError(d.dir(), "bad_header");
  CheckpointCopy e("v3_direct_q");
  std::ofstream(e.path("model.safetensors.index.json")) << "{\"weight_map\": 3}";
  ExpectError(e.dir(), "bad_header");
}

TEST(HfCheckpointTest, MissingOrBrokenConfigIsReported) {
  CheckpointCopy c("v3_qlora");
  fs::remove(c.path("config.json"));
  ExpectError(c.dir(), "file_not_found");
  CheckpointCopy d("v3_qlora");
  std::ofstream(d.path("config.json")) << "{\"model_type\": ";
  ExpectError(d.dir(), "bad_config");
}

}  // namespace
}  // namespace deepinfer::model
