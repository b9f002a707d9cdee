#include "model/fp8.h"

#include <openssl/sha.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/model.h"
#include "model/synthetic_checkpoint_testing.h"
#include "nlohmann/json.hpp"
#include "util/status.h"

namespace deepinfer::model {
namespace {

TEST(Fp8Test, DecodesEveryCodeLikeTorchFloat8E4M3fn) {
  std::ifstream in(std::string(DI_SOURCE_DIR) + "/tests/golden/deepseek_v3/fp8_e4m3.json");
  ASSERT_TRUE(in) << "golden missing: run tests/reference/make_deepseek_v3_golden.py";
  const auto values = nlohmann::json::parse(in)["values"];
  ASSERT_EQ(values.size(), 256u);
  for (int b = 0; b < 256; ++b) {
    const float got = Fp8E4M3ToFp32(static_cast<uint8_t>(b));
    if (values[b].is_null()) {
      EXPECT_TRUE(std::isnan(got)) << b;
    } else {
      const float want = values[b].get<float>();
      EXPECT_EQ(std::signbit(got), std::signbit(want)) << b;
      EXPECT_EQ(got, want) << b;
    }
  }
  EXPECT_EQ(Fp8E4M3ToFp32(0x7e), 448.0f);
  EXPECT_EQ(Fp8E4M3ToFp32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
}

TEST(Fp8Test, BlockDequantizationHandlesPartialBlocks) {
  // 3 x 5 weight with 2 x 2 blocks: scale grid [2, 3], the last row and column blocks partial.
  const std::vector<uint8_t> w = {0x38, 0x40, 0x30, 0xb8, 0x00, 0x38, 0x38, 0x38,
                                  0x38, 0x38, 0x01, 0x7e, 0x38, 0x38, 0x38};
  const std::vector<float> scale = {1, 2, 4, 8, 16, 32};
  std::vector<uint16_t> out(15);
  DequantizeFp8BlockToBf16(w.data(), 3, 5, scale.data(), 2, 2, 0, 3, out.data());
  const float expect[15] = {1,       2,  1,  -2, 0, 1, 1, 2, 2, 4, 8 * std::ldexp(1.0f, -9),
                            448 * 8, 16, 16, 32};
  for (int i = 0; i < 15; ++i) EXPECT_EQ(Bf16ToFp32(out[i]), expect[i]) << i;
}

// A model holding one 3 x 5 FP8 weight "w" (the bytes of BlockDequantizationHandlesPartialBlocks)
// and, unless `scale_shape` is empty, its F32 scale "w_scale_inv".
struct Fp8Model {
  std::vector<uint8_t> w = {0x38, 0x40, 0x30, 0xb8, 0x00, 0x38, 0x38, 0x38,
                            0x38, 0x38, 0x01, 0x7e, 0x38, 0x38, 0x38};
  std::vector<float> scale = {1, 2, 4, 8, 16, 32};
  Model m;

  explicit Fp8Model(std::vector<int64_t> scale_shape) {
    m.tensors["w"] = {"w", DType::kF8E4M3, {3, 5}, w.data(), w.size()};
    if (!scale_shape.empty()) {
      m.tensors["w_scale_inv"] = {"w_scale_inv", DType::kF32, scale_shape,
                                  reinterpret_cast<const uint8_t*>(scale.data()), 4 * scale.size()};
    }
  }
};

TEST(Fp8Test, DequantizesWeightsInPlaceAndDropsTheScales) {
  Fp8Model f({2, 3});
  ASSERT_TRUE(DequantizeFp8Weights(f.m, Fp8Blocks{2, 2}, /*release_pages=*/false).ok());
  ASSERT_EQ(f.m.tensors.size(), 1u);
  const TensorView& t = f.m.tensors.at("w");
  EXPECT_EQ(t.dtype, DType::kBF16);
  EXPECT_EQ(t.size_bytes, 30u);
  ASSERT_EQ(f.m.owned.size(), 1u);
  EXPECT_EQ(t.data, f.m.owned[0].data());
  uint16_t last;
  std::memcpy(&last, t.data + 28, 2);
  EXPECT_EQ(Bf16ToFp32(last), 32.0f);  // 1.0 in the bottom-right (partial) block
}

TEST(Fp8Test, UnreadWeightsStayAsStoredAndLoseTheirScale) {
  // Another expert-parallel rank's experts: mapped, never read, never converted.
  Fp8Model f({2, 3});
  const uint8_t* stored = f.m.tensors.at("w").data;
  auto unread = [](const std::string& name, const ModelConfig&) { return name == "w"; };
  ASSERT_TRUE(DequantizeFp8Weights(f.m, Fp8Blocks{2, 2}, false, unread).ok());
  ASSERT_EQ(f.m.tensors.size(), 1u);
  EXPECT_EQ(f.m.tensors.at("w").dtype, DType::kF8E4M3);
  EXPECT_EQ(f.m.tensors.at("w").data, stored);
  EXPECT_TRUE(f.m.owned.empty());
}

TEST(Fp8Test, ScaleThatDoesNotFitTheWeightIsReported) {
  Fp8Model missing(std::vector<int64_t>{});
  EXPECT_EQ(ErrorCodeOf(DequantizeFp8Weights(missing.m, Fp8Blocks{2, 2}, false)), "missing_tensor");
  Fp8Model shape({3, 2});
  EXPECT_EQ(ErrorCodeOf(DequantizeFp8Weights(shape.m, Fp8Blocks{2, 2}, false)), "shape_mismatch");
  Fp8Model blocks({2, 3});  // 128x128 blocks need a 1 x 1 grid
  EXPECT_EQ(ErrorCodeOf(DequantizeFp8Weights(blocks.m, Fp8Blocks{}, false)), "shape_mismatch");
}

std::string Sha256Hex(const uint8_t* p, size_t n) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(p, n, md);
  std::string hex;
  for (unsigned char c : md) {
    static const char* digits = "0123456789abcdef";
    hex += digits[c >> 4];
    hex += digits[c & 15];
  }
  return hex;
}

// The loader's bf16(fp8 * scale_inv) must equal torch's reference block dequantization bit for
// bit, including the partial 128-blocks of the 160- and 192-wide matrices.
TEST(Fp8Test, LoadedFp8WeightsEqualReferenceDequantizationExactly) {
  for (const char* name : {"v3_qlora_fp8", "v3_groups_yarn_fp8"}) {
    std::ifstream in(DeepseekGoldenDir(name) + "/golden.json");
    ASSERT_TRUE(in) << "golden missing: run tests/reference/make_deepseek_v3_golden.py";
    const auto sha = nlohmann::json::parse(in)["dequant_bf16_sha256"];
    auto dir = DeepseekTestCheckpoint(name);
    ASSERT_TRUE(dir.ok()) << dir.status();
    auto m = LoadModel(*dir + "/config.json");
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ((*m)->source.format, ModelFormat::kHuggingFace);
    EXPECT_EQ((*m)->source.folder, *dir);  // from the config.json path, not the path itself
    int checked = 0;
    for (auto it = sha.begin(); it != sha.end(); ++it) {
      const TensorView* t = (*m)->Find(it.key());
      ASSERT_NE(t, nullptr) << it.key();
      ASSERT_EQ(t->dtype, DType::kBF16) << it.key();
      EXPECT_EQ(Sha256Hex(t->data, t->size_bytes), it.value().get<std::string>()) << it.key();
      ++checked;
    }
    EXPECT_GT(checked, 20) << name;
    for (const auto& [n, t] : (*m)->tensors) {
      EXPECT_EQ(n.find("_scale_inv"), std::string::npos) << n;
    }
  }
}

}  // namespace
}  // namespace deepinfer::model
