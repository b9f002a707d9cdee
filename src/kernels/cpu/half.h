#pragma once

// Portable IEEE half <-> float conversions for the kernels (internal to kernels/cpu).
//
// Kept here rather than calling tensor::Fp16ToFp32 so the hot loops inline them; the SIMD paths
// use F16C instead. Both directions are exact / round-to-nearest-even like F16C and numpy.

#include <cstdint>
#include <cstring>

namespace deepinfer::kernels::internal {

static inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

static inline uint32_t FloatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

static inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return BitsToFloat(sign | 0x7f800000u | (man << 13));
  if (exp != 0) return BitsToFloat(sign | ((exp + 112) << 23) | (man << 13));
  // Zero or subnormal: man * 2^-24 is exact in float.
  return BitsToFloat(sign | FloatToBits(static_cast<float>(man) * 0x1p-24f));
}

static inline uint16_t FloatToHalf(float f) {
  uint32_t x = FloatToBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((x >> 13) & 0x3ffu);  // NaN
  if (x >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity
  if (x < 0x38800000u) {
    // Below the smallest normal half: adding 0.5 puts the half subnormal ulp (2^-24) at the
    // float ulp of 0.5, so the FPU's own round-to-nearest-even does the rounding.
    const float a = BitsToFloat(x) + 0.5f;
    return sign | static_cast<uint16_t>(FloatToBits(a) - 0x3f000000u);
  }
  const uint32_t odd = (x >> 13) & 1u;
  x += 0xc8000fffu + odd;  // rebias exponent 127 -> 15 and round half to even
  return sign | static_cast<uint16_t>(x >> 13);
}

}  // namespace deepinfer::kernels::internal
