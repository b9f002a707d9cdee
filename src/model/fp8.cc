#include "model/fp8.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "tensor/dtype.h"
#include "model/tensor_values.h"
#include "util/error_codes.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace deepinfer::model {
namespace {

constexpr char kScaleSuffix[] = "_scale_inv";
constexpr size_t kScaleSuffixLen = sizeof(kScaleSuffix) - 1;

// Drops the resident pages of a mapped range that is no longer read (the FP8 bytes once their
// BF16 copy exists), so they stop counting in RSS. Only whole pages inside the range: neighbours
// may belong to tensors still in use. Advisory: a read-only file mapping simply refaults.
void ReleasePages(const uint8_t* data, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

// The scales of FP8 weight `t` as f32, after checking that `scale_name` fits it.
absl::StatusOr<std::vector<float>> ReadScales(const Model& m, const TensorView& t,
                                              const std::string& scale_name, int64_t br,
                                              int64_t bc) {
  const TensorView* s = m.Find(scale_name);
  if (s == nullptr) {
    return NotFoundError(util::codes::kMissingTensor,
                         fmt::format("FP8 tensor '{}' has no '{}'", t.name, scale_name));
  }
  const std::vector<int64_t> want = {(t.shape[0] + br - 1) / br, (t.shape[1] + bc - 1) / bc};
  if (s->shape != want) {
    return InvalidArgumentError(util::codes::kShapeMismatch,
                                fmt::format("tensor '{}' has shape {}, expected {} for {} "
                                            "with {}x{} blocks",
                                            scale_name, ShapeString(s->shape), ShapeString(want),
                                            ShapeString(t.shape), br, bc));
  }
  if (s->dtype != DType::kF32 && s->dtype != DType::kBF16) {
    return UnimplementedError(util::codes::kUnsupportedDtype,
                              fmt::format("scale '{}' is not F32 or BF16", scale_name));
  }
  DI_RETURN_IF_ERROR(CheckFinite(*s, /*full=*/true));
  std::vector<float> scale(static_cast<size_t>(s->num_elements()));
  for (size_t i = 0; i < scale.size(); ++i) {
    if (s->dtype == DType::kF32) {
      std::memcpy(&scale[i], s->data + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, s->data + 2 * i, 2);
      scale[i] = Bf16ToFp32(h);
    }
  }
  return scale;
}

}  // namespace

void DequantizeFp8BlockToBf16(const uint8_t* w, int64_t rows, int64_t cols, const float* scale_inv,
                              int64_t block_rows, int64_t block_cols, int64_t row_begin,
                              int64_t row_end, uint16_t* out) {
  float lut[256];
  for (int i = 0; i < 256; ++i) lut[i] = Fp8E4M3ToFp32(static_cast<uint8_t>(i));
  const int64_t scale_cols = (cols + block_cols - 1) / block_cols;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* srow = scale_inv + (r / block_rows) * scale_cols;
    const uint8_t* src = w + r * cols;
    uint16_t* dst = out + r * cols;
    for (int64_t c = 0; c < cols; ++c) dst[c] = Fp32ToBf16(lut[src[c]] * srow[c / block_cols]);
  }
}

absl::Status DequantizeFp8Weights(Model& m, const Fp8Blocks& blocks, bool release_pages,
                                  const UnreadTensors& unread) {
  std::vector<std::string> fp8;
  bool stored_fp8 = false;
  for (const auto& [name, t] : m.tensors) {
    if (t.dtype != DType::kF8E4M3) continue;
    stored_fp8 = true;
    if (!(unread && unread(name, m.config))) fp8.push_back(name);
  }
  if (!stored_fp8) return absl::OkStatus();
  const int64_t br = blocks.rows, bc = blocks.cols;
  std::sort(fp8.begin(), fp8.end());  // the first bad tensor reported is the same on every run
  util::ThreadPool pool(std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
  for (const std::string& name : fp8) {
    TensorView& t = m.tensors.at(name);
    if (t.shape.size() != 2) {
      return UnimplementedError(util::codes::kUnsupportedDtype,
                                fmt::format("tensor '{}' is F8_E4M3 but not a matrix", name));
    }
    DI_ASSIGN_OR_RETURN(std::vector<float> scale, ReadScales(m, t, name + kScaleSuffix, br, bc));
    DI_RETURN_IF_ERROR(CheckFinite(t, /*full=*/false));
    const int64_t rows = t.shape[0], cols = t.shape[1];
    std::vector<uint8_t> buf(static_cast<size_t>(rows * cols) * 2);
    uint16_t* out = reinterpret_cast<uint16_t*>(buf.data());
    const uint8_t* w = t.data;
    pool.ParallelFor(rows, [&](int64_t begin, int64_t end, int) {
      DequantizeFp8BlockToBf16(w, rows, cols, scale.data(), br, bc, begin, end, out);
    });
    if (release_pages) ReleasePages(w, static_cast<size_t>(rows * cols));
    t.dtype = DType::kBF16;
    t.data = buf.data();
    t.size_bytes = buf.size();
    m.owned.push_back(std::move(buf));
  }
  for (auto it = m.tensors.begin(); it != m.tensors.end();) {
    const std::string& n = it->first;
    const bool is_scale = n.size() > kScaleSuffixLen &&
                          n.compare(n.size() - kScaleSuffixLen, kScaleSuffixLen, kScaleSuffix) == 0;
    if (is_scale) {
      m.tensors.erase(it++);
    } else {
      ++it;
    }
  }
  return absl::OkStatus();
}

}  // namespace deepinfer::model
