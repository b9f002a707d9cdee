// The exact FP8 E4M3, FP4 E2M1 and E8M0 conversions declared in tensor/tensor.h.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "tensor/tensor.h"

namespace deepinfer::tensor {

uint8_t Fp32ToFp8E4M3(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 448.0) return sign | 0x7e;
  if (a < std::ldexp(1.0, -6)) {  // subnormal: multiples of 2^-9
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0));
  }
  int e;
  const double m = std::frexp(a, &e) * 2.0;  // a = m * 2^(e-1), m in [1, 2)
  int exponent = e - 1;
  int mantissa = static_cast<int>(std::nearbyint((m - 1.0) * 8.0));  // ties to even
  if (mantissa == 8) {
    mantissa = 0;
    ++exponent;
  }
  return sign | static_cast<uint8_t>(((exponent + 7) << 3) | mantissa);
}

float Fp8E4M3ToFp32(uint8_t b) {
  const bool neg = (b & 0x80) != 0;
  const int exp = (b >> 3) & 0xf;
  const int man = b & 0x7;
  float v;
  if (exp == 0xf && man == 0x7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -9);  // subnormal: m/8 * 2^(1-7)
  } else {
    v = std::ldexp(static_cast<float>(8 + man), exp - 10);  // (1 + m/8) * 2^(e-7)
  }
  return neg ? -v : v;
}

float Fp4E2M1ToFp32(uint8_t code) {
  static constexpr float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kMagnitude[code & 7];
  return (code & 8) && v != 0.0f ? -v : v;  // code 8 is +0, as the V4.1 reference's table
}

float E8M0ToFp32(uint8_t b) {
  if (b == 0xff) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(b) - 127);
}

int PowerOfTwoCeilExponent(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return static_cast<int>((bits >> 23) & 0xff) - 127 + ((bits & 0x7fffff) != 0 ? 1 : 0);
}

uint8_t Fp32ToFp4E2M1(float v) {
  const uint8_t sign = v < 0 ? 8 : 0;
  const float m = std::fabs(v);
  uint8_t code;
  if (m <= 0.25f) {
    code = 0;
  } else if (m < 0.75f) {
    code = 1;
  } else if (m <= 1.25f) {
    code = 2;
  } else if (m < 1.75f) {
    code = 3;
  } else if (m <= 2.5f) {
    code = 4;
  } else if (m < 3.5f) {
    code = 5;
  } else if (m <= 5.0f) {
    code = 6;
  } else {
    code = 7;
  }
  return sign | code;
}

}  // namespace deepinfer::tensor
