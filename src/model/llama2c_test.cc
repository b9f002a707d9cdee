#include "model/llama2c.h"

#include <cstring>
#include <filesystem>
#include <vector>

#include "gtest/gtest.h"
#include "model/gguf_test_util.h"
#include "util/status.h"

namespace deepinfer::model {
namespace {

using testing::F32;
using testing::U32;

std::string TempDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/llama2c_test/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string Header(int dim, int hidden, int layers, int heads, int kv_heads, int vocab, int seq) {
  std::string s;
  for (int v : {dim, hidden, layers, heads, kv_heads, vocab, seq})
    s += U32(static_cast<uint32_t>(v));
  return s;
}

// A checkpoint whose i-th float (after the header) has the value i.
std::string Checkpoint(int dim, int hidden, int layers, int heads, int kv_heads, int vocab,
                       int seq) {
  const int v = vocab < 0 ? -vocab : vocab;
  const int kv_dim = dim * kv_heads / heads;
  const int head = dim / heads;
  size_t n = static_cast<size_t>(v) * dim + layers * dim * 2 + layers * dim * dim * 2 +
             layers * kv_dim * dim * 2 + layers * hidden * dim * 3 + dim + seq * head;
  if (vocab < 0) n += static_cast<size_t>(v) * dim;
  std::string s = Header(dim, hidden, layers, heads, kv_heads, vocab, seq);
  for (size_t i = 0; i < n; ++i) s += F32(static_cast<float>(i));
  return s;
}

std::string Tokenizer(int vocab) {
  std::string s = U32(8);
  for (int i = 0; i < vocab; ++i) {
    const std::string piece = i == 0   ? "<unk>"
                              : i == 3 ? "<0x41>"
                                       : std::string(1, 't').append(std::to_string(i));
    s += F32(-static_cast<float>(i)) + U32(static_cast<uint32_t>(piece.size())) + piece;
  }
  return s;
}

float FirstFloat(const TensorView* t) {
  float f;
  std::memcpy(&f, t->data, 4);
  return f;
}

TEST(Llama2cTest, LoadsTiedCheckpointWithTokenizerBesideIt) {
  const std::string dir = TempDir("tied");
  testing::WriteBytes(dir + "/model.bin", Checkpoint(8, 16, 2, 2, 1, 5, 4));
  testing::WriteBytes(dir + "/tok5.bin", Tokenizer(5));
  auto model = LoadLlama2c(dir + "/model.bin");
  ASSERT_TRUE(model.ok()) << model.status();
  const Model& m = **model;
  EXPECT_EQ(m.config.name, "model");
  EXPECT_EQ(m.config.head_dim, 4);
  EXPECT_EQ(m.config.max_context, 4);
  EXPECT_TRUE(m.config.tied_embeddings);
  EXPECT_EQ(m.tensors.size(), 1u + 2u * 9u + 1u);
  EXPECT_EQ(m.Find("output.weight"), nullptr);
  // Offsets in floats: embd 40, rms_att 16, wq 128, wk 64, wv 64, wo 128, rms_ffn 16, w1 256 ...
  EXPECT_EQ(FirstFloat(m.Find("token_embd.weight")), 0.0f);
  EXPECT_EQ(FirstFloat(m.Find("blk.1.attn_norm.weight")), 48.0f);
  EXPECT_EQ(FirstFloat(m.Find("blk.1.attn_q.weight")), 56.0f + 64.0f);
  EXPECT_EQ(FirstFloat(m.Find("blk.0.attn_k.weight")), 184.0f);
  EXPECT_EQ(m.Find("blk.0.attn_k.weight")->shape, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(FirstFloat(m.Find("blk.1.ffn_gate.weight")), 184.0f + 64 + 64 + 128 + 16 + 128);
  EXPECT_EQ(m.Find("blk.1.ffn_down.weight")->shape, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(m.tokenizer.tokens[3], "<0x41>");
  EXPECT_EQ(m.tokenizer.token_types[3], TokenType::kByte);
  EXPECT_EQ(m.tokenizer.token_types[1], TokenType::kControl);
  EXPECT_EQ(m.tokenizer.scores[4], -4.0f);
  EXPECT_EQ(m.tokenizer.eog_ids, (std::vector<int32_t>{1, 2}));
}

TEST(Llama2cTest, UntiedCheckpointHasOutputAfterFreqCis) {
  const std::string dir = TempDir("untied");
  const std::string ckpt = Checkpoint(8, 16, 1, 2, 2, -5, 4);
  testing::WriteBytes(dir + "/m.bin", ckpt);
  testing::WriteBytes(dir + "/tok.bin", Tokenizer(5));
  auto model = LoadLlama2c(dir + "/m.bin", dir + "/tok.bin");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_FALSE((*model)->config.tied_embeddings);
  const TensorView* out = (*model)->Find("output.weight");
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out->shape, (std::vector<int64_t>{5, 8}));
  EXPECT_EQ(out->data + out->size_bytes, (*model)->files[0]->data() + ckpt.size());
}

TEST(Llama2cTest, RejectsTruncatedCheckpoint) {
  const std::string dir = TempDir("cut");
  std::string ckpt = Checkpoint(8, 16, 2, 2, 1, 5, 4);
  ckpt.resize(ckpt.size() - 4);
  testing::WriteBytes(dir + "/m.bin", ckpt);
  testing::WriteBytes(dir + "/tok5.bin", Tokenizer(5));
  EXPECT_EQ(ErrorCodeOf(LoadLlama2c(dir + "/m.bin").status()), "truncated_file");
  // Sizes whose products overflow 64 bits are reported as truncation, not wrapped.
  testing::WriteBytes(dir + "/huge.bin", Header(1 << 30, 1 << 30, 1 << 30, 2, 2, 5, 4));
  EXPECT_EQ(ErrorCodeOf(LoadLlama2c(dir + "/huge.bin").status()), "truncated_file");
  testing::WriteBytes(dir + "/short.bin", "abc");
  EXPECT_EQ(ErrorCodeOf(LoadLlama2c(dir + "/short.bin").status()), "truncated_file");
}

TEST(Llama2cTest, RejectsBadHeaderValues) {
  auto code = [](const std::string& header) {
    return ErrorCodeOf(
        ParseLlama2cHeader(reinterpret_cast<const uint8_t*>(header.data()), header.size())
            .status());
  };
  EXPECT_EQ(code(Header(0, 16, 2, 2, 1, 5, 4)), "bad_header");
  EXPECT_EQ(code(Header(8, -1, 2, 2, 1, 5, 4)), "bad_header");
  EXPECT_EQ(code(Header(8, 16, 2, 2, 1, 0, 4)), "bad_header");
  EXPECT_EQ(code(Header(8, 16, 2, 2, 1, 5, 0)), "bad_header");
  EXPECT_EQ(code(Header(10, 16, 2, 3, 1, 5, 4)), "bad_header");  // heads do not divide dim
  EXPECT_EQ(code(Header(8, 16, 2, 4, 3, 5, 4)), "bad_header");   // kv heads do not divide heads
  EXPECT_EQ(code(Header(6, 16, 2, 2, 1, 5, 4)), "bad_header");   // odd head size
  EXPECT_EQ(code(Header(8, 16, 2, 2, 1, INT32_MIN, 4)), "bad_header");
  EXPECT_EQ(code(Header(8, 16, 2, 2, 1, 5, 4)), "ok");
  EXPECT_EQ(code(Header(8, 16, 2, 2, 1, 5, 4).substr(0, 27)), "truncated_file");
}

TEST(Llama2cTest, RejectsTokenizerVocabMismatch) {
  const std::string dir = TempDir("vocab");
  testing::WriteBytes(dir + "/m.bin", Checkpoint(8, 16, 1, 2, 1, 5, 4));
  testing::WriteBytes(dir + "/few.bin", Tokenizer(4));
  testing::WriteBytes(dir + "/many.bin", Tokenizer(6));
  EXPECT_EQ(ErrorCodeOf(LoadLlama2c(dir + "/m.bin", dir + "/few.bin").status()), "vocab_mismatch");
  EXPECT_EQ(ErrorCodeOf(LoadLlama2c(dir + "/m.bin", dir + "/many.bin").status()), "vocab_mismatch");
}

TEST(Llama2cTest, RejectsMalformedTokenizerRecords) {
  auto code = [](const std::string& bytes, int vocab) {
    return ErrorCodeOf(
        ParseLlama2cTokenizer(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), vocab)
            .status());
  };
  std::string cut = Tokenizer(5);
  cut.resize(cut.size() - 1);
  EXPECT_EQ(code(cut, 5), "truncated_file");
  EXPECT_EQ(code(U32(8) + F32(0) + U32(0x7fffffff) + "abc", 1), "truncated_file");
  EXPECT_EQ(code(U32(8) + F32(0) + U32(0xffffffff) + "abc", 1), "bad_metadata");
  EXPECT_EQ(code(U32(8) + F32(0) + U32(1), 1), "truncated_file");
  EXPECT_EQ(code(U32(8) + F32(0), 1), "truncated_file");
  EXPECT_EQ(code("ab", 1), "truncated_file");
  EXPECT_EQ(code(Tokenizer(5), 2000000000), "vocab_mismatch");
}

TEST(Llama2cTest, ReportsMissingTokenizer) {
  const std::string dir = TempDir("notok");
  testing::WriteBytes(dir + "/m.bin", Checkpoint(8, 16, 1, 2, 1, 5, 4));
  EXPECT_EQ(ErrorCodeOf(LoadLlama2c(dir + "/m.bin").status()), "file_not_found");
  EXPECT_EQ(ErrorCodeOf(LoadLlama2c(dir + "/m.bin", dir + "/none.bin").status()), "file_not_found");
  EXPECT_EQ(ErrorCodeOf(LoadLlama2c(dir + "/absent.bin").status()), "file_not_found");
}

TEST(Llama2cTest, ReadsStories260KTokenizer) {
  const std::string dir = std::string(DI_SOURCE_DIR) + "/../shared/models/stories260K";
  if (!std::filesystem::exists(dir + "/tok512.bin")) GTEST_SKIP() << "stories260K not found";
  auto model = LoadLlama2c(dir + "/stories260K.bin");
  ASSERT_TRUE(model.ok()) << model.status();
  const TokenizerData& t = (*model)->tokenizer;
  ASSERT_EQ(t.tokens.size(), 512u);
  EXPECT_EQ(t.tokens[0], "<unk>");
  EXPECT_EQ(t.tokens[3], "<0x00>");
  EXPECT_EQ(t.tokens[258], "<0xFF>");
  EXPECT_EQ(t.token_types[3], TokenType::kByte);
  EXPECT_EQ(t.token_types[259], TokenType::kNormal);
  EXPECT_EQ(t.scores.size(), 512u);
  EXPECT_EQ(t.bos_id, 1);
  EXPECT_EQ(t.eos_id, 2);
  EXPECT_EQ(t.unk_id, 0);
}

}  // namespace
}  // namespace deepinfer::model
