#include "kernels/cpu/quant.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/half.h"
#include "nlohmann/json.hpp"
#include "util/mapped_file.h"

namespace deepinfer::kernels {
namespace {

using tensor::DType;

std::string Sha256Hex(const void* data, size_t size) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data, size, md, &len, EVP_sha256(), nullptr);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

std::vector<uint8_t> FromHex(const std::string& hex) {
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

nlohmann::json LoadGolden(const std::string& name) {
  const std::string path = std::string(DI_SOURCE_DIR) + "/tests/golden/dequant/" + name;
  auto text = util::ReadFile(path);
  if (!text.ok()) {
    ADD_FAILURE() << "missing golden " << path << ": " << text.status();
    return nlohmann::json();
  }
  return nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
}

std::string ModelPath() {
  const char* cache = std::getenv("DEEPINFER_CACHE");
  std::string root =
      cache != nullptr
          ? cache
          : std::string(std::getenv("HOME") ? std::getenv("HOME") : "") + "/.cache/deepinfer";
  return root + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

TEST(DequantizeRowTest, EveryTensorOfSmolLm2MatchesTheGgufPackage) {
  const nlohmann::json golden = LoadGolden("smollm2_q4_1.json");
  ASSERT_TRUE(golden.is_object());
  auto file = util::MappedFile::Open(ModelPath());
  if (!file.ok()) GTEST_SKIP() << "SmolLM2 model not found at " << ModelPath();
  ASSERT_EQ((*file)->size(), golden["file_size"].get<size_t>()) << "a different SmolLM2 file";
  std::vector<float> out;
  int checked = 0;
  for (const auto& t : golden["tensors"]) {
    const auto type = static_cast<DType>(t["ggml_type"].get<int>());
    int64_t n = 1;
    for (const auto& d : t["shape"]) n *= d.get<int64_t>();
    const size_t offset = t["offset"].get<size_t>();
    ASSERT_LE(offset + t["n_bytes"].get<size_t>(), (*file)->size());
    out.assign(static_cast<size_t>(n), 0.0f);
    DequantizeRow(type, (*file)->data() + offset, out.data(), n);
    const std::string name = t["name"];
    for (int i = 0; i < 8 && i < n; ++i)
      ASSERT_EQ(out[i], t["first8"][i].get<float>()) << name << " value " << i;
    ASSERT_EQ(Sha256Hex(out.data(), out.size() * 4), t["sha256"].get<std::string>()) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 272);
}

TEST(DequantizeRowTest, SyntheticBlocksOfEveryTypeMatchTheGgufPackage) {
  const nlohmann::json golden = LoadGolden("synthetic.json");
  ASSERT_TRUE(golden.is_object());
  int checked = 0;
  for (const auto& c : golden["cases"]) {
    const auto type = static_cast<DType>(c["ggml_type"].get<int>());
    const int64_t n = c["n"];
    const std::vector<uint8_t> blocks = FromHex(c["blocks_hex"]);
    ASSERT_EQ(blocks.size(),
              tensor::BlockBytes(type) * static_cast<size_t>(n / tensor::BlockSize(type)));
    std::vector<float> out(static_cast<size_t>(n));
    DequantizeRow(type, blocks.data(), out.data(), n);
    const std::string name = c["type_name"];
    for (int i = 0; i < 8; ++i) ASSERT_EQ(out[i], c["first8"][i].get<float>()) << name << " " << i;
    EXPECT_EQ(Sha256Hex(out.data(), out.size() * 4), c["sha256"].get<std::string>()) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 7);
}

TEST(DequantizeRowTest, EveryFiniteHalfConvertsExactly) {
  const nlohmann::json golden = LoadGolden("synthetic.json");
  ASSERT_TRUE(golden.is_object());
  std::vector<uint16_t> halves;
  for (uint32_t h = 0; h < 65536; ++h)
    if ((h & 0x7c00u) != 0x7c00u) halves.push_back(static_cast<uint16_t>(h));
  ASSERT_EQ(halves.size(), golden["all_finite_f16"]["count"].get<size_t>());
  std::vector<float> out(halves.size());
  DequantizeRow(DType::kF16, halves.data(), out.data(), static_cast<int64_t>(halves.size()));
  EXPECT_EQ(Sha256Hex(out.data(), out.size() * 4),
            golden["all_finite_f16"]["sha256"].get<std::string>());
}

TEST(HalfTest, FloatToHalfRoundsToNearestEvenAndRoundTrips) {
  using internal::FloatToHalf;
  using internal::HalfToFloat;
  for (uint32_t h = 0; h < 65536; ++h) {
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0) continue;  // NaN
    ASSERT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))), h) << h;
  }
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bffu);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00u);
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3c00u);      // tie, even stays
  EXPECT_EQ(FloatToHalf(1.0f + 3 * 0x1p-11f), 0x3c02u);  // tie, odd rounds up
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000u);             // subnormal tie to even (0)
  EXPECT_EQ(FloatToHalf(3 * 0x1p-25f), 0x0002u);         // subnormal tie to even (2)
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000u);
}

class QuantizeGoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    golden_ = LoadGolden("quantize_q8.json");
    ASSERT_TRUE(golden_.is_object());
    const std::vector<uint8_t> bytes = FromHex(golden_["input_f32_hex"]);
    x_.resize(bytes.size() / 4);
    std::memcpy(x_.data(), bytes.data(), bytes.size());
  }
  std::vector<uint8_t> Expected(const std::string& key) {
    return FromHex(golden_["expected_hex"][key]);
  }

  nlohmann::json golden_;
  std::vector<float> x_;
};

// Compares block by block so a failure names the first differing block.
void ExpectSameBlocks(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                      size_t block_bytes) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t b = 0; b * block_bytes < got.size(); ++b)
    ASSERT_EQ(std::memcmp(got.data() + b * block_bytes, want.data() + b * block_bytes, block_bytes),
              0)
        << "block " << b;
}

TEST_F(QuantizeGoldenTest, Q8_0MatchesGgmlReference) {
  const int64_t n = static_cast<int64_t>(x_.size());
  std::vector<uint8_t> got(static_cast<size_t>(n / 32) * sizeof(tensor::BlockQ8_0));
  QuantizeRowQ8_0(x_.data(), reinterpret_cast<tensor::BlockQ8_0*>(got.data()), n);
  ExpectSameBlocks(got, Expected("q8_0_ref"), sizeof(tensor::BlockQ8_0));
}

TEST_F(QuantizeGoldenTest, Q8_1MatchesGgmlReference) {
  const int64_t n = static_cast<int64_t>(x_.size());
  std::vector<uint8_t> got(static_cast<size_t>(n / 32) * sizeof(tensor::BlockQ8_1));
  QuantizeRowQ8_1(x_.data(), reinterpret_cast<tensor::BlockQ8_1*>(got.data()), n);
  ExpectSameBlocks(got, Expected("q8_1_ref"), sizeof(tensor::BlockQ8_1));
}

TEST_F(QuantizeGoldenTest, Q8_KMatchesGgmlReference) {
  const int64_t n = static_cast<int64_t>(x_.size());
  std::vector<uint8_t> got(static_cast<size_t>(n / 256) * sizeof(tensor::BlockQ8_K));
  QuantizeRowQ8_K(x_.data(), reinterpret_cast<tensor::BlockQ8_K*>(got.data()), n);
  ExpectSameBlocks(got, Expected("q8_k_ref"), sizeof(tensor::BlockQ8_K));
}

TEST_F(QuantizeGoldenTest, Q8_0CpuMatchesGgmlCpuBackend) {
  const int64_t n = static_cast<int64_t>(x_.size());
  std::vector<uint8_t> got(static_cast<size_t>(n / 32) * sizeof(tensor::BlockQ8_0));
  QuantizeRowQ8_0Cpu(x_.data(), reinterpret_cast<tensor::BlockQ8_0*>(got.data()), n);
  ExpectSameBlocks(got, Expected("q8_0_cpu"), sizeof(tensor::BlockQ8_0));
}

TEST_F(QuantizeGoldenTest, Q8_1CpuMatchesGgmlCpuBackend) {
  const int64_t n = static_cast<int64_t>(x_.size());
  std::vector<uint8_t> got(static_cast<size_t>(n / 32) * sizeof(tensor::BlockQ8_1));
  QuantizeRowQ8_1Cpu(x_.data(), reinterpret_cast<tensor::BlockQ8_1*>(got.data()), n);
  ExpectSameBlocks(got, Expected("q8_1_cpu"), sizeof(tensor::BlockQ8_1));
}

// HasCpuKernel said yes to Q8_1 and Q8_K, the activation formats, which neither DequantizeRow
// nor MatMul reads (both abort on them): a loader's schema would have admitted such a weight.
TEST(HasCpuKernelTest, ActivationFormatsAreNotWeightTypes) {
  EXPECT_FALSE(HasCpuKernel(tensor::DType::kQ8_1));
  EXPECT_FALSE(HasCpuKernel(tensor::DType::kQ8_K));
  for (const tensor::DType t : {tensor::DType::kF32, tensor::DType::kF16, tensor::DType::kBF16,
                                tensor::DType::kQ4_0, tensor::DType::kQ4_1, tensor::DType::kQ8_0,
                                tensor::DType::kQ4_K, tensor::DType::kQ6_K}) {
    EXPECT_TRUE(HasCpuKernel(t)) << tensor::DTypeName(t);
  }
}

}  // namespace
}  // namespace deepinfer::kernels
