#include "tensor/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "gtest/gtest.h"

namespace deepinfer::tensor {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(DTypeTest, BlockSizesAndBytesMatchGgml) {
  EXPECT_EQ(BlockSize(DType::kF32), 1);
  EXPECT_EQ(BlockBytes(DType::kF32), 4u);
  EXPECT_EQ(BlockBytes(DType::kF16), 2u);
  EXPECT_EQ(BlockBytes(DType::kBF16), 2u);
  EXPECT_EQ(BlockSize(DType::kQ4_0), 32);
  EXPECT_EQ(BlockBytes(DType::kQ4_0), 18u);
  EXPECT_EQ(BlockBytes(DType::kQ4_1), 20u);
  EXPECT_EQ(BlockBytes(DType::kQ8_0), 34u);
  EXPECT_EQ(BlockSize(DType::kQ4_K), 256);
  EXPECT_EQ(BlockBytes(DType::kQ4_K), 144u);
  EXPECT_EQ(BlockBytes(DType::kQ6_K), 210u);
  EXPECT_EQ(BlockBytes(DType::kQ8_K), 292u);
  EXPECT_EQ(RowBytes(DType::kQ4_1, 576), 18u * 20u);
  EXPECT_EQ(RowBytes(DType::kInvalid, 10), 0u);
}

TEST(DTypeTest, TypesOutsideTheTableHaveNoBlocks) {
  EXPECT_EQ(FindDType(DType::kInvalid), nullptr);
  EXPECT_EQ(BlockSize(DType::kInvalid), 0);
  EXPECT_EQ(BlockBytes(static_cast<DType>(7)), 0u);  // a ggml id deepinfer does not support
  EXPECT_EQ(BlockSize(DType::kF8E4M3), 1);
  EXPECT_EQ(BlockBytes(DType::kF8E4M3), 1u);
  EXPECT_FALSE(IsQuantized(DType::kF8E4M3));
  // Values next to the direct index's edges.
  for (int32_t v : {-2, 4, 29, 31, 32, 999, 1005, 2147483647}) {
    EXPECT_EQ(FindDType(static_cast<DType>(v)), nullptr) << v;
  }
  for (DType t : {DType::kF32, DType::kF16, DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kQ8_1,
                  DType::kQ4_K, DType::kQ6_K, DType::kQ8_K, DType::kBF16, DType::kF8E4M3,
                  DType::kI64, DType::kFp4E2M1, DType::kE8M0, DType::kI8}) {
    ASSERT_NE(FindDType(t), nullptr) << static_cast<int>(t);
    EXPECT_EQ(FindDType(t)->type, t);
  }
}

TEST(DTypeTest, GgmlIdsMapToDTypes) {
  EXPECT_EQ(DTypeFromGgml(0), DType::kF32);
  EXPECT_EQ(DTypeFromGgml(1), DType::kF16);
  EXPECT_EQ(DTypeFromGgml(3), DType::kQ4_1);
  EXPECT_EQ(DTypeFromGgml(8), DType::kQ8_0);
  EXPECT_EQ(DTypeFromGgml(12), DType::kQ4_K);
  EXPECT_EQ(DTypeFromGgml(14), DType::kQ6_K);
  EXPECT_EQ(DTypeFromGgml(30), DType::kBF16);
  EXPECT_EQ(DTypeFromGgml(6), DType::kInvalid);  // Q5_0 is not supported
  EXPECT_EQ(DTypeFromGgml(1000), DType::kInvalid);
  EXPECT_EQ(DTypeName(DType::kQ4_1), "Q4_1");
  EXPECT_EQ(DTypeName(DType::kInvalid), "INVALID");
  EXPECT_TRUE(IsQuantized(DType::kQ8_0));
  EXPECT_FALSE(IsQuantized(DType::kBF16));
}

TEST(DTypeTest, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Fp16ToFp32(static_cast<uint16_t>(h));
    const bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    if (is_nan) {
      EXPECT_TRUE(std::isnan(f)) << h;
      const uint16_t back = Fp32ToFp16(f);
      EXPECT_EQ(back & 0x7c00, 0x7c00) << h;
      EXPECT_NE(back & 0x3ff, 0) << h;
    } else {
      EXPECT_EQ(Fp32ToFp16(f), h) << h;
    }
  }
}

TEST(DTypeTest, HalfDecodesKnownValues) {
  EXPECT_EQ(Fp16ToFp32(0x3c00), 1.0f);
  EXPECT_EQ(Fp16ToFp32(0xc000), -2.0f);
  EXPECT_EQ(Fp16ToFp32(0x7bff), 65504.0f);
  EXPECT_EQ(Fp16ToFp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Fp16ToFp32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(Fp16ToFp32(0x0400), std::ldexp(1.0f, -14));
  EXPECT_TRUE(std::isinf(Fp16ToFp32(0x7c00)));
  EXPECT_TRUE(std::signbit(Fp16ToFp32(0x8000)));
}

TEST(DTypeTest, HalfEncodingRoundsToNearestEven) {
  EXPECT_EQ(Fp32ToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie, even stays
  EXPECT_EQ(Fp32ToFp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie, odd rounds up
  EXPECT_EQ(Fp32ToFp16(65519.0f), 0x7bff);
  EXPECT_EQ(Fp32ToFp16(65520.0f), 0x7c00);  // ties to even: overflows to inf
  EXPECT_EQ(Fp32ToFp16(-1e10f), 0xfc00);
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and 1 ulp
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(Fp32ToFp16(std::ldexp(3.0f, -25)), 0x0002);     // 1.5 ulp ties to 2
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1023.5f, -24)), 0x0400);  // rounds up into the normals
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(Fp32ToFp16(-std::ldexp(1.0f, -30)), 0x8000);
  EXPECT_EQ(Fp32ToFp16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(Fp32ToFp16(std::numeric_limits<float>::infinity()), 0x7c00);
}

// The compiler's IEEE half: __fp16 on Arm (GCC 12 takes _Float16 in C++ only on x86).
#if defined(__aarch64__)
using CompilerHalf = __fp16;
#define DI_HAS_COMPILER_HALF 1
#elif defined(__FLT16_MAX__)
using CompilerHalf = _Float16;
#define DI_HAS_COMPILER_HALF 1
#endif

#if defined(DI_HAS_COMPILER_HALF)
TEST(DTypeTest, HalfEncodingMatchesCompilerConversionOnRandomFloats) {
  std::mt19937 rng(42);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = rng();
    // Concentrate on the exponent range where halves live, plus the full range.
    if (i % 2 == 0) u = (u & 0x807fffffu) | ((100u + (u >> 23) % 45u) << 23);
    const float f = FromBits(u);
    if (std::isnan(f)) continue;
    const CompilerHalf ref = static_cast<CompilerHalf>(f);
    uint16_t ref_bits;
    std::memcpy(&ref_bits, &ref, 2);
    ASSERT_EQ(Fp32ToFp16(f), ref_bits) << std::hex << u;
  }
}
#endif

TEST(DTypeTest, Bf16EncodingRoundsToNearestEven) {
  EXPECT_EQ(Fp32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(Fp32ToBf16(FromBits(0x3f808001u)), 0x3f81);
  EXPECT_EQ(Fp32ToBf16(FromBits(0x7f7fffffu)), 0x7f80);  // max float rounds to inf
  EXPECT_EQ(Fp32ToBf16(-std::numeric_limits<float>::infinity()), 0xff80);
  const uint16_t nan = Fp32ToBf16(FromBits(0x7f800001u));  // payload only in the low bits
  EXPECT_TRUE(std::isnan(Bf16ToFp32(nan)));
  EXPECT_EQ(Bits(Bf16ToFp32(0x4049)), 0x40490000u);
}

}  // namespace
}  // namespace deepinfer::tensor
