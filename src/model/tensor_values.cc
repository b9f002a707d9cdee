#include "model/tensor_values.h"

#include <algorithm>
#include <cstring>

#include "fmt/format.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::model {

bool IsNonFinite(DType t, const uint8_t* p, int64_t i) {
  switch (t) {
    case DType::kF32: {
      uint32_t u;
      std::memcpy(&u, p + 4 * i, 4);
      return (u & 0x7f800000u) == 0x7f800000u;
    }
    case DType::kBF16: {
      uint16_t u;
      std::memcpy(&u, p + 2 * i, 2);
      return (u & 0x7f80u) == 0x7f80u;
    }
    case DType::kF16: {
      uint16_t u;
      std::memcpy(&u, p + 2 * i, 2);
      return (u & 0x7c00u) == 0x7c00u;
    }
    case DType::kF8E4M3:
      return (p[i] & 0x7f) == 0x7f;
    case DType::kE8M0:
      return p[i] == 0xff;
    default:
      return false;
  }
}

absl::Status CheckFinite(const TensorView& t, bool full) {
  const int64_t n = t.num_elements();
  auto bad = [&](int64_t i) {
    return DataLossError(util::codes::kNanInWeights,
                         fmt::format("tensor '{}' holds NaN or Inf (element {})", t.name, i));
  };
  if (full || n <= (int64_t{1} << 16)) {
    for (int64_t i = 0; i < n; ++i) {
      if (IsNonFinite(t.dtype, t.data, i)) return bad(i);
    }
    return absl::OkStatus();
  }
  const int64_t rows = t.rows(), cols = t.cols();
  const int64_t samples = std::min<int64_t>(4, rows);
  for (int64_t s = 0; s < samples; ++s) {
    const int64_t r = samples == 1 ? 0 : s * (rows - 1) / (samples - 1);
    for (int64_t c = 0; c < cols; ++c) {
      if (IsNonFinite(t.dtype, t.data, r * cols + c)) return bad(r * cols + c);
    }
  }
  return absl::OkStatus();
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

}  // namespace deepinfer::model
