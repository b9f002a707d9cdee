#pragma once

// Unaligned loads and stores of GCC vector-extension types (float vectors of any width), shared
// by the kernels that instantiate one body per ISA over a vector type (attention.cc's dense
// attention, panel_gemm.cc). Always inlined: they compile to one move in each ISA's function.

#include <cstring>

// Vectors pass by value only between always-inlined functions: no call ABI is involved.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace deepinfer::kernels::internal {

template <typename V>
inline __attribute__((always_inline)) V LoadV(const float* p) {
  V r;
  std::memcpy(&r, p, sizeof(r));
  return r;
}
template <typename V>
inline __attribute__((always_inline)) void StoreV(float* p, V v) {
  std::memcpy(p, &v, sizeof(v));
}

}  // namespace deepinfer::kernels::internal
