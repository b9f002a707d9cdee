#include "model/safetensors.h"

#include <openssl/evp.h>
#include <openssl/sha.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"
#include "model/block_scales.h"
#include "model/fp8.h"
#include "model/model.h"
#include "model/synthetic_checkpoint_testing.h"
#include "nlohmann/json.hpp"
#include "util/status.h"

namespace deepinfer::model {
namespace {

// Serializes a safetensors file: 8-byte header length, JSON header, data.
std::vector<uint8_t> MakeFile(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out;
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i, n >>= 8) out.push_back(static_cast<uint8_t>(n & 0xff));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::vector<uint8_t> FloatBytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST(SafetensorsTest, ParsesTensorsAndMetadata) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]},)"
      R"("s":{"dtype":"F8_E4M3","shape":[],"data_offsets":[32,33]}})";
  std::vector<uint8_t> data = FloatBytes({1, 2, 3, 4, 5, 6});
  data.resize(33, 0x38);  // bf16 0x3838 and e4m3 0x38 = 1.0
  const auto file = MakeFile(header, data);
  auto st = SafetensorsFile::Parse(file.data(), file.size(), "mem");
  ASSERT_TRUE(st.ok()) << st.status();
  ASSERT_EQ((*st)->tensors().size(), 3u);
  const TensorView* a = nullptr;
  for (const auto& t : (*st)->tensors()) {
    if (t.name == "a") a = &t;
  }
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  float last;  // the parser keeps views unaligned; the checkpoint loader realigns
  std::memcpy(&last, a->data + 20, 4);
  EXPECT_EQ(last, 6.0f);
  ASSERT_EQ((*st)->metadata().size(), 1u);
  EXPECT_EQ((*st)->metadata()[0].second, "pt");
}

absl::Status ParseStatus(const std::string& header, size_t data_bytes) {
  const auto file = MakeFile(header, std::vector<uint8_t>(data_bytes, 0));
  return SafetensorsFile::Parse(file.data(), file.size(), "mem").status();
}

TEST(SafetensorsTest, RejectsHeaderLongerThanFile) {
  std::vector<uint8_t> file = MakeFile("{}", {});
  const uint64_t n = 1000;
  std::memcpy(file.data(), &n, 8);
  auto st = SafetensorsFile::Parse(file.data(), file.size(), "mem");
  EXPECT_EQ(ErrorCodeOf(st.status()), "truncated_file");
  EXPECT_EQ(ErrorCodeOf(SafetensorsFile::Parse(file.data(), 5, "mem").status()), "truncated_file");
}

TEST(SafetensorsTest, RejectsTensorEndingPastTheData) {
  EXPECT_EQ(
      ErrorCodeOf(ParseStatus(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 12)),
      "truncated_file");
}

TEST(SafetensorsTest, RejectsMalformedHeaders) {
  for (const std::string& h : {
           std::string("{not json"),
           std::string(R"(["a"])"),
           std::string(R"({"a":{"dtype":"F32","shape":[4]}})"),
           std::string(R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})"),
           std::string(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,12]}})"),
           std::string(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})"),
           std::string(R"({"a":{"dtype":"F32","shape":["4"],"data_offsets":[0,16]}})"),
           std::string(R"({"a":{"dtype":"F32","shape":[1099511627776,1099511627776],)"
                       R"("data_offsets":[0,16]}})"),
       }) {
    EXPECT_EQ(ErrorCodeOf(ParseStatus(h, 16)), "bad_header") << h;
  }
}

TEST(SafetensorsTest, RejectsUnsupportedDtype) {
  EXPECT_EQ(
      ErrorCodeOf(ParseStatus(R"({"a":{"dtype":"U16","shape":[2],"data_offsets":[0,4]}})", 4)),
      "unsupported_dtype");
}

// The C++ generator draws the same weights as tests/reference/synthetic_weights.py, byte for
// byte (the sha256 of all tensors in recipe order is in each golden.json).
TEST(SyntheticCheckpointTest, WeightsEqualThePythonGeneratorsBitForBit) {
  const std::pair<const char*, const char*> cases[] = {
      {"v3_qlora", "deepseek_v3"},         {"v3_direct_q", "deepseek_v3"},
      {"v3_groups_yarn", "deepseek_v3"},   {"v2_lite", "deepseek_v3"},
      {"v3_qlora_fp8", "deepseek_v3"},     {"v3_groups_yarn_fp8", "deepseek_v3"},
      {"v4_flash_tiny", "deepseek_v4"},    {"v4_rates", "deepseek_v4"},
      {"v4_hf_names", "deepseek_v4"},      {"v4_flash_tiny_fp8", "deepseek_v4"},  // I64 tables
      {"dspark_agree", "deepseek_v41_dspark"}};                                   // draw_as
  for (const auto& [name, family] : cases) {
    std::ifstream g(DeepseekGoldenDir(name, family) + "/golden.json");
    std::ifstream r(DeepseekGoldenDir(name, family) + "/weights.json");
    ASSERT_TRUE(g && r) << "golden missing: run tests/reference/make_deepseek_v*_golden.py";
    auto tensors = DrawSyntheticTensors(nlohmann::json::parse(r));
    ASSERT_TRUE(tensors.ok()) << tensors.status();
    std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
    ASSERT_EQ(EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr), 1);
    for (const auto& t : *tensors) EVP_DigestUpdate(ctx.get(), t.bytes.data(), t.bytes.size());
    unsigned char md[SHA256_DIGEST_LENGTH];
    unsigned int md_size = 0;
    ASSERT_EQ(EVP_DigestFinal_ex(ctx.get(), md, &md_size), 1);
    std::string hex;
    for (unsigned char c : md) hex += fmt::format("{:02x}", c);
    EXPECT_EQ(hex, nlohmann::json::parse(g)["weights_sha256"].get<std::string>()) << name;
  }
}

std::string Sha256Hex(const void* data, size_t n) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  unsigned int md_size = 0;
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  EVP_DigestUpdate(ctx.get(), data, n);
  EVP_DigestFinal_ex(ctx.get(), md, &md_size);
  std::string hex;
  for (unsigned char c : md) hex += fmt::format("{:02x}", c);
  return hex;
}

// The release-format quantizers (FP8 e4m3 + E8M0 blocks, FP4 e2m1 + E8M0 1x32) against the
// sha256s of the reference's codes, scales and dequantized values: the V4 golden (128x128) and,
// when ../shared is there, the V4.1 golden (32x32, made with the V4.1 reference's own helpers).
void ExpectQuantizersMatch(const std::string& case_dir) {
  std::ifstream r(case_dir + "/weights.json");
  ASSERT_TRUE(r) << case_dir;
  const auto recipe = nlohmann::json::parse(r);
  const auto& quant = recipe.at("quant");
  auto tensors = DrawSyntheticTensors(recipe);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  int checked = 0;
  for (const auto& [key, section] : quant.items()) {
    int64_t br = 1, bc = 32;
    const bool fp4 = key == "fp4_e2m1_ue8m0_1x32";
    if (!fp4 && std::sscanf(key.c_str(), "fp8_e4m3_ue8m0_%ldx%ld", &br, &bc) != 2) continue;
    if (key.rfind("fp8_e4m3_ue8m0_", 0) != 0 && !fp4) continue;
    for (const auto& name : section.at("tensors")) {
      const SafetensorsEntry* t = nullptr;
      for (const auto& e : *tensors) {
        if (e.name == name.get<std::string>()) t = &e;
      }
      ASSERT_NE(t, nullptr) << name;
      const int64_t rows = t->shape[0], cols = t->shape[1];
      std::vector<float> w(rows * cols);
      for (int64_t i = 0; i < rows * cols; ++i) {
        if (t->dtype == "BF16") {
          uint16_t h;
          std::memcpy(&h, t->bytes.data() + 2 * i, 2);
          w[i] = Bf16ToFp32(h);
        } else {
          std::memcpy(&w[i], t->bytes.data() + 4 * i, 4);
        }
      }
      const BlockQuantized q =
          fp4 ? QuantizeFp4E8M0(w.data(), rows, cols) : QuantizeFp8E8M0(w.data(), rows, cols, br, bc);
      const auto& want = quant.at("sha256").at(name.get<std::string>());
      EXPECT_EQ(Sha256Hex(q.codes.data(), q.codes.size()), want.at("q")) << name;
      EXPECT_EQ(Sha256Hex(q.scales.data(), q.scales.size()), want.at("scale")) << name;
      EXPECT_EQ(Sha256Hex(q.dequant.data(), q.dequant.size() * 4), want.at("dequant_f32")) << name;
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);
  std::printf("%s: %d quantized tensors bit-identical to the reference\n", case_dir.c_str(),
              checked);
}

TEST(SyntheticCheckpointTest, ReleaseQuantizersEqualTheReferenceBitForBit) {
  ExpectQuantizersMatch(DeepseekGoldenDir("v4_flash_tiny_fp8", "deepseek_v4"));
  const std::string v41 = std::string(DI_SOURCE_DIR) + "/../shared/goldens/deepseek_v41/v41_full_fp8";
  if (!std::filesystem::exists(v41)) {
    GTEST_SKIP() << "../shared/goldens/deepseek_v41 is absent (a user's clone has none); the V4 "
                    "golden was checked";
  }
  ExpectQuantizersMatch(v41);
}

TEST(SyntheticCheckpointTest, Fp4EncodingRoundsToNearestEven) {
  EXPECT_EQ(Fp32ToFp4E2M1(0.25f), 0);  // tie between 0 and 0.5: even code 0
  EXPECT_EQ(Fp32ToFp4E2M1(0.75f), 2);  // tie between 0.5 and 1: even code 2
  EXPECT_EQ(Fp32ToFp4E2M1(1.25f), 2);
  EXPECT_EQ(Fp32ToFp4E2M1(1.75f), 4);
  EXPECT_EQ(Fp32ToFp4E2M1(2.5f), 4);
  EXPECT_EQ(Fp32ToFp4E2M1(3.5f), 6);
  EXPECT_EQ(Fp32ToFp4E2M1(5.0f), 6);
  EXPECT_EQ(Fp32ToFp4E2M1(5.01f), 7);
  EXPECT_EQ(Fp32ToFp4E2M1(-1.0f), 8 | 2);
  for (int c = 0; c < 16; ++c) {
    if (c == 8) continue;  // -0 reads back as +0
    EXPECT_EQ(Fp32ToFp4E2M1(Fp4E2M1ToFp32(static_cast<uint8_t>(c))), c) << c;
  }
  EXPECT_EQ(PowerOfTwoCeilExponent(1.0f), 0);
  EXPECT_EQ(PowerOfTwoCeilExponent(1.5f), 1);
  EXPECT_EQ(PowerOfTwoCeilExponent(0.25f), -2);
}

TEST(SyntheticCheckpointTest, Fp8EncodingRoundsToNearestEven) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;  // NaN codes
    EXPECT_EQ(Fp32ToFp8E4M3(Fp8E4M3ToFp32(static_cast<uint8_t>(b))), b) << b;
  }
  // Halfway between 1.0 (0x38) and 1.125 (0x39) goes to the even code; just above goes up.
  EXPECT_EQ(Fp32ToFp8E4M3(1.0625f), 0x38);
  EXPECT_EQ(Fp32ToFp8E4M3(std::nextafter(1.0625f, 2.0f)), 0x39);
  EXPECT_EQ(Fp32ToFp8E4M3(1.1875f), 0x3a);                // between 0x39 and 0x3a: even is 0x3a
  EXPECT_EQ(Fp32ToFp8E4M3(std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal
  EXPECT_EQ(Fp32ToFp8E4M3(std::ldexp(3.0f, -10)), 0x02);  // 1.5 subnormal steps -> 2
  EXPECT_EQ(Fp32ToFp8E4M3(-500.0f), 0xfe);                // clamps to -448
}

TEST(SyntheticCheckpointTest, BadRecipesAreReported) {
  for (const char* text :
       {R"({"generator": "other", "seed": 1, "tensors": []})",
        R"({"generator": "splitmix64-uniform/1", "seed": 1, "tensors": [{"name": "a"}]})",
        R"({"generator": "splitmix64-uniform/1", "seed": 1, "tensors": [{"name": "a",
            "shape": [2], "dtype": "I8", "center": 0, "half_width": 1}]})",
        R"({"generator": "splitmix64-uniform/1", "seed": 1, "tensors": [{"name": "a",
            "shape": [0], "dtype": "F32", "center": 0, "half_width": 1}]})"}) {
    EXPECT_EQ(ErrorCodeOf(DrawSyntheticTensors(nlohmann::json::parse(text)).status()), "bad_recipe")
        << text;
  }
}

}  // namespace
}  // namespace deepinfer::model
