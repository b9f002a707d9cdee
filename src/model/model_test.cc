#include "model/model.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "gtest/gtest.h"
#include "model/gguf.h"
#include "model/gguf_test_util.h"
#include "util/status.h"

namespace deepinfer::model {
namespace {

using testing::GgufBuilder;
using testing::TinyLlama;

std::string SmolLm2Path() {
  const char* cache = std::getenv("DEEPINFER_CACHE");
  const char* home = std::getenv("HOME");
  std::string base = cache ? cache : std::string(home ? home : "") + "/.cache/deepinfer";
  return base + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::string StoriesDir() { return std::string(DI_SOURCE_DIR) + "/../shared/models/stories260K"; }

std::string TempPath(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/model_test";
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

#define SKIP_IF_MISSING(path) \
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "test model not found: " << (path)

TEST(LoadModelTest, LoadsSmolLm2GgufConfig) {
  const std::string path = SmolLm2Path();
  SKIP_IF_MISSING(path);
  auto model = LoadModel(path);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->source.format, ModelFormat::kGguf);
  EXPECT_EQ((*model)->source.path, path);
  EXPECT_EQ((*model)->source.folder, "");
  const ModelConfig& c = (*model)->config;
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.hidden, 576);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rope_dim, 64);
  EXPECT_EQ(c.ffn_hidden, 1536);
  EXPECT_EQ(c.vocab, 49152);
  EXPECT_EQ(c.max_context, 8192);
  EXPECT_FLOAT_EQ(c.rope_theta, 100000.0f);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c.rope_style, RopeStyle::kAdjacentPairs);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.name, "Smollm2 135M 8k Lc100K Mix1 Ep2");
}

TEST(LoadModelTest, LoadsSmolLm2GgufTokenizer) {
  const std::string path = SmolLm2Path();
  SKIP_IF_MISSING(path);
  auto model = LoadModel(path);
  ASSERT_TRUE(model.ok()) << model.status();
  const TokenizerData& t = (*model)->tokenizer;
  EXPECT_EQ(t.kind, TokenizerData::Kind::kByteLevelBpe);
  EXPECT_EQ(t.pre, "smollm");
  ASSERT_EQ(t.tokens.size(), 49152u);
  EXPECT_EQ(t.tokens[0], "<|endoftext|>");
  EXPECT_EQ(t.tokens[2], "<|im_end|>");
  EXPECT_EQ(t.token_types.size(), 49152u);
  EXPECT_EQ(t.token_types[0], TokenType::kControl);
  EXPECT_EQ(t.merges.size(), 48900u);
  EXPECT_TRUE(t.scores.empty());
  EXPECT_EQ(t.bos_id, 1);
  EXPECT_EQ(t.eos_id, 2);
  EXPECT_EQ(t.unk_id, 0);
  EXPECT_EQ(t.pad_id, 2);
  EXPECT_FALSE(t.add_bos);
  EXPECT_NE(t.chat_template.find("<|im_start|>"), std::string::npos);
  // llama.cpp (llama-cpp-python 0.3.36) reports EOG {0 <|endoftext|>, 2 <|im_end|>,
  // 4 <reponame> (FIM repo token)}.
  EXPECT_EQ(t.eog_ids, (std::vector<int32_t>{0, 2, 4}));
}

TEST(LoadModelTest, SmolLm2TensorsPointIntoTheMapping) {
  const std::string path = SmolLm2Path();
  SKIP_IF_MISSING(path);
  auto model = LoadModel(path);
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  EXPECT_EQ(m.tensors.size(), 272u);
  ASSERT_EQ(m.files.size(), 1u);
  const uint8_t* base = m.files[0]->data();
  auto embd = m.Get("token_embd.weight");
  ASSERT_TRUE(embd.ok());
  EXPECT_EQ((*embd)->dtype, DType::kQ8_0);
  EXPECT_EQ((*embd)->shape, (std::vector<int64_t>{49152, 576}));
  EXPECT_EQ((*embd)->data - base, 1785664);  // as reported by the gguf Python package
  EXPECT_EQ((*embd)->size_bytes, 49152u * 18u * 34u);
  const TensorView* down = m.Find("blk.0.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->dtype, DType::kQ4_1);
  EXPECT_EQ(down->shape, (std::vector<int64_t>{576, 1536}));
  EXPECT_EQ(down->data - base, 31868992);
  EXPECT_EQ(down->row_bytes(), 48u * 20u);
  EXPECT_EQ(m.Find("output.weight"), nullptr);
  EXPECT_EQ(ErrorCodeOf(m.Get("output.weight").status()), "missing_tensor");
  for (const auto& [name, t] : m.tensors) {
    EXPECT_GE(t.data, base) << name;
    EXPECT_LE(t.data + t.size_bytes, base + m.files[0]->size()) << name;
  }
}

TEST(LoadModelTest, LoadsStories260KCheckpoint) {
  const std::string path = StoriesDir() + "/stories260K.bin";
  SKIP_IF_MISSING(path);
  auto model = LoadModel(path);
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  EXPECT_EQ(m.source.format, ModelFormat::kLlama2c);
  const ModelConfig& c = m.config;
  EXPECT_EQ(c.hidden, 64);
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.ffn_hidden, 172);
  EXPECT_EQ(c.vocab, 512);
  EXPECT_EQ(c.max_context, 512);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.rope_style, RopeStyle::kAdjacentPairs);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(m.tensors.size(), 1u + 5u * 9u + 1u);
  EXPECT_EQ(m.tokenizer.kind, TokenizerData::Kind::kScoreBpe);
  EXPECT_EQ(m.tokenizer.tokens.size(), 512u);
  EXPECT_EQ(m.tokenizer.eog_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(m.tokenizer.add_bos);

  // Offsets follow run.c's memory_map_weights, in floats after the 28-byte header.
  const uint8_t* weights = m.files[0]->data() + 28;
  const int64_t dim = 64, hidden = 172, kv = 32, layers = 5, vocab = 512;
  const int64_t w3 = vocab * dim + layers * dim + 2 * layers * dim * dim + 2 * layers * kv * dim +
                     layers * dim + 2 * layers * hidden * dim;
  const TensorView* up4 = m.Find("blk.4.ffn_up.weight");
  ASSERT_NE(up4, nullptr);
  EXPECT_EQ(up4->shape, (std::vector<int64_t>{172, 64}));
  EXPECT_EQ(up4->data, weights + (w3 + 4 * hidden * dim) * 4);
  const TensorView* norm = m.Find("output_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->data, weights + (w3 + layers * hidden * dim) * 4);
  EXPECT_EQ(m.Find("blk.3.attn_k.weight")->shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(m.Find("blk.3.ffn_down.weight")->shape, (std::vector<int64_t>{64, 172}));
}

absl::StatusOr<std::unique_ptr<Model>> LoadTiny(const TinyLlama& spec, const std::string& name) {
  const std::string path = TempPath(name + ".gguf");
  testing::WriteBytes(path, spec.Build());
  return LoadModel(path);
}

TEST(LoadModelTest, LoadsTinyLlamaGguf) {
  auto model = LoadTiny(TinyLlama{}, "tiny");
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelConfig& c = (*model)->config;
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.rope_dim, 8);
  EXPECT_EQ(c.vocab, 8);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ((*model)->tokenizer.bos_id, -1);
  EXPECT_EQ((*model)->tokenizer.eog_ids, (std::vector<int32_t>{0, 4}));
  EXPECT_EQ((*model)->tokenizer.pre, "default");
}

TEST(LoadModelTest, UntiedWhenOutputWeightPresent) {
  TinyLlama spec;
  spec.with_output = true;
  auto model = LoadTiny(spec, "untied");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_FALSE((*model)->config.tied_embeddings);
}

TEST(LoadModelTest, RejectsUnknownArchitecture) {
  TinyLlama spec;
  spec.arch = "mamba";
  EXPECT_EQ(ErrorCodeOf(LoadTiny(spec, "arch").status()), "unsupported_architecture");
}

TEST(LoadModelTest, EogIdsFollowLlamaCppRules) {
  TinyLlama spec;
  spec.extra_tokens = {"<|eot_id|>", "<|end|>", "<|return|>", "<|call|>"};
  auto model = LoadTiny(spec, "eog");
  ASSERT_TRUE(model.ok()) << model.status();
  // <|end|> (id 6) is dropped because <|return|> and <|call|> are present.
  EXPECT_EQ((*model)->tokenizer.eog_ids, (std::vector<int32_t>{0, 4, 5, 7}));
}

TEST(LoadModelTest, RejectsMissingFile) {
  EXPECT_EQ(ErrorCodeOf(LoadModel(TempPath("nope.gguf")).status()), "file_not_found");
}

TEST(LoadModelTest, RejectsUnknownFormatByMagicAndExtension) {
  const std::string path = TempPath("junk.txt");
  testing::WriteBytes(path, "this is not a model at all, not even close");
  EXPECT_EQ(ErrorCodeOf(LoadModel(path).status()), "bad_magic");
}

TEST(LoadModelTest, TreatsBinWithoutGgufMagicAsLlama2c) {
  const std::string path = TempPath("short.bin");
  testing::WriteBytes(path, "tiny");
  EXPECT_EQ(ErrorCodeOf(LoadModel(path).status()), "truncated_file");
}

TEST(LoadModelTest, ReportsGgufParseErrorsWithPath) {
  const std::string path = TempPath("cut.gguf");
  std::string bytes = TinyLlama{}.Build();
  bytes.resize(bytes.size() - 10);
  testing::WriteBytes(path, bytes);
  auto model = LoadModel(path);
  EXPECT_EQ(ErrorCodeOf(model.status()), "truncated_file");
  EXPECT_NE(model.status().message().find("cut.gguf"), absl::string_view::npos);
}

}  // namespace
}  // namespace deepinfer::model
