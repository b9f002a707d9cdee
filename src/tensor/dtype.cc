#include "tensor/dtype.h"

#include <array>
#include <cmath>
#include <cstring>
#include <iterator>

namespace deepinfer::tensor {
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

// The one table of element types: block sizes and bytes per block here are what every layer uses
// (the loaders to size tensors, the kernels to walk rows). Source: ggml/src/ggml-common.h.
constexpr DTypeInfo kDTypes[] = {
    {DType::kF32, "F32", 1, 4, false},
    {DType::kF16, "F16", 1, 2, false},
    {DType::kBF16, "BF16", 1, 2, false},
    {DType::kF8E4M3, "F8_E4M3", 1, 1, false},
    {DType::kI64, "I64", 1, 8, false},
    {DType::kFp4E2M1, "FP4_E2M1", 2, 1, false},
    {DType::kE8M0, "F8_E8M0", 1, 1, false},
    {DType::kI8, "I8", 1, 1, false},
    {DType::kQ4_0, "Q4_0", 32, sizeof(BlockQ4_0), true},
    {DType::kQ4_1, "Q4_1", 32, sizeof(BlockQ4_1), true},
    {DType::kQ8_0, "Q8_0", 32, sizeof(BlockQ8_0), true},
    {DType::kQ8_1, "Q8_1", 32, sizeof(BlockQ8_1), true},
    {DType::kQ4_K, "Q4_K", kQK_K, sizeof(BlockQ4_K), true},
    {DType::kQ6_K, "Q6_K", kQK_K, sizeof(BlockQ6_K), true},
    {DType::kQ8_K, "Q8_K", kQK_K, sizeof(BlockQ8_K), true},
};

namespace {

// FindDType indexes the table by the type's value: the GGML ids are 0..30, and the types
// outside GGUF take the slots after them. kSlotOf[slot] is the row of kDTypes, or -1. (A type whose
// value has no slot fails to compile here.)
constexpr int kGgmlSlots = 31;
// The types outside GGUF have consecutive values from 1000 and take the slots after the GGML ids.
constexpr int kFirstOwn = static_cast<int>(DType::kF8E4M3);
constexpr int kLastOwn = static_cast<int>(DType::kI8);
constexpr int Slot(DType t) {
  const int v = static_cast<int>(t);
  if (v >= 0 && v < kGgmlSlots) return v;
  if (v >= kFirstOwn && v <= kLastOwn) return kGgmlSlots + (v - kFirstOwn);
  return -1;
}
constexpr auto kSlotOf = [] {
  std::array<int8_t, kGgmlSlots + (kLastOwn - kFirstOwn + 1)> rows{};
  rows.fill(-1);
  for (size_t i = 0; i < std::size(kDTypes); ++i) {
    rows[static_cast<size_t>(Slot(kDTypes[i].type))] = static_cast<int8_t>(i);
  }
  return rows;
}();

}  // namespace

const DTypeInfo* FindDType(DType t) {
  const int slot = Slot(t);
  if (slot < 0) return nullptr;
  const int row = kSlotOf[static_cast<size_t>(slot)];
  return row < 0 ? nullptr : &kDTypes[row];
}

std::span<const DTypeInfo> AllDTypes() { return kDTypes; }

int64_t BlockSize(DType t) {
  const DTypeInfo* info = FindDType(t);
  return info == nullptr ? 0 : info->block_size;
}

size_t BlockBytes(DType t) {
  const DTypeInfo* info = FindDType(t);
  return info == nullptr ? 0 : info->block_bytes;
}

std::string_view DTypeName(DType t) {
  const DTypeInfo* info = FindDType(t);
  return info == nullptr ? "INVALID" : info->name;
}

DType DTypeFromGgml(uint32_t ggml_type) {
  // Every GGML id with a table row is a DType of the same value.
  if (ggml_type >= static_cast<uint32_t>(kGgmlSlots)) return DType::kInvalid;
  const DType t = static_cast<DType>(ggml_type);
  return FindDType(t) == nullptr ? DType::kInvalid : t;
}

bool IsQuantized(DType t) {
  const DTypeInfo* info = FindDType(t);
  return info != nullptr && info->quantized;
}

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

}  // namespace deepinfer::tensor
