#include "model/dtype.h"

#include <cmath>
#include <cstring>

namespace deepinfer::model {
namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Rounds `value >> shift` to nearest, ties to even. `shift` is in [1, 31].
uint32_t ShiftRoundEven(uint32_t value, int shift) {
  const uint32_t q = value >> shift;
  const uint32_t rem = value & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  return (rem > half || (rem == half && (q & 1))) ? q + 1 : q;
}

}  // namespace

int64_t BlockSize(DType t) {
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ8_0:
    case DType::kQ8_1:
      return 32;
    case DType::kQ4_K:
    case DType::kQ6_K:
    case DType::kQ8_K:
      return kQK_K;
    default:
      return 1;  // plain types; also kInvalid so that RowBytes never divides by zero
  }
}

size_t BlockBytes(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kF8E4M3:
      return 1;
    case DType::kQ4_0:
      return sizeof(BlockQ4_0);
    case DType::kQ4_1:
      return sizeof(BlockQ4_1);
    case DType::kQ8_0:
      return sizeof(BlockQ8_0);
    case DType::kQ8_1:
      return sizeof(BlockQ8_1);
    case DType::kQ4_K:
      return sizeof(BlockQ4_K);
    case DType::kQ6_K:
      return sizeof(BlockQ6_K);
    case DType::kQ8_K:
      return sizeof(BlockQ8_K);
    case DType::kInvalid:
      return 0;
  }
  return 0;
}

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kF8E4M3:
      return "F8_E4M3";
    case DType::kQ4_0:
      return "Q4_0";
    case DType::kQ4_1:
      return "Q4_1";
    case DType::kQ8_0:
      return "Q8_0";
    case DType::kQ8_1:
      return "Q8_1";
    case DType::kQ4_K:
      return "Q4_K";
    case DType::kQ6_K:
      return "Q6_K";
    case DType::kQ8_K:
      return "Q8_K";
    case DType::kInvalid:
      return "INVALID";
  }
  return "INVALID";
}

DType DTypeFromGgml(uint32_t ggml_type) {
  switch (ggml_type) {
    case 0:
      return DType::kF32;
    case 1:
      return DType::kF16;
    case 2:
      return DType::kQ4_0;
    case 3:
      return DType::kQ4_1;
    case 8:
      return DType::kQ8_0;
    case 9:
      return DType::kQ8_1;
    case 12:
      return DType::kQ4_K;
    case 14:
      return DType::kQ6_K;
    case 15:
      return DType::kQ8_K;
    case 30:
      return DType::kBF16;
    default:
      return DType::kInvalid;
  }
}

bool IsQuantized(DType t) { return BlockSize(t) > 1; }

float Fp16ToFp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24 is exact in fp32.
    const float mag = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -mag : mag;
  }
  if (exp == 31) return BitsFloat(sign | 0x7f800000u | (mant << 13));  // inf / nan (payload kept)
  return BitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t Fp32ToFp16(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) {
    // NaN: keep the top payload bits and force the quiet bit so it never becomes infinity.
    return sign | 0x7e00 | static_cast<uint16_t>((abs >> 13) & 0x3ff);
  }
  // 65520 is halfway between the largest half (65504, odd mantissa) and 2^16: ties go to inf.
  if (abs >= 0x477ff000u) return sign | 0x7c00;
  const uint32_t exp = abs >> 23;
  if (exp < 113) {
    // Result is a half subnormal (or zero): count in units of 2^-24.
    if (exp < 102) return sign;  // below 2^-25: rounds to zero (ties at 2^-25 are exact below)
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    // value = m * 2^(exp - 150) = (m >> (126 - exp)) * 2^-24
    return sign | static_cast<uint16_t>(ShiftRoundEven(m, static_cast<int>(126 - exp)));
  }
  // Normal: rebias the exponent and round the 23-bit mantissa to 10 bits (carry may bump exp).
  const uint32_t biased = ((exp - 112) << 23) | (abs & 0x7fffffu);
  return sign | static_cast<uint16_t>(ShiftRoundEven(biased, 13));
}

uint16_t Fp32ToBf16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1);
  return static_cast<uint16_t>(rounded >> 16);
}

}  // namespace deepinfer::model
