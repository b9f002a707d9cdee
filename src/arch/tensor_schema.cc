#include "arch/tensor_schema.h"

#include <cstdint>

#include "fmt/format.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant.h"
#include "model/tensor_values.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::arch {
namespace {

bool GgufWeightType(tensor::DType t) {
  switch (t) {
    case tensor::DType::kF32:
    case tensor::DType::kF16:
    case tensor::DType::kBF16:
    case tensor::DType::kQ8_0:
    case tensor::DType::kQ4_0:
    case tensor::DType::kQ4_1:
    case tensor::DType::kQ4_K:
    case tensor::DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

bool TypeAllowed(MatrixTypes rule, const tensor::TensorView& t, bool vector) {
  switch (rule) {
    case MatrixTypes::kGguf:
      return vector ? t.dtype == tensor::DType::kF32 : GgufWeightType(t.dtype);
    case MatrixTypes::kCpuKernel:
      return kernels::HasCpuKernel(t.dtype);
    case MatrixTypes::kBlockScaled:
      return vector ? kernels::HasCpuKernel(t.dtype) : kernels::HasCpuMatMul(t);
  }
  return false;
}

}  // namespace

absl::StatusOr<const tensor::TensorView*> TensorSchema::Tensor(const std::string& name,
                                                              const std::vector<int64_t>& shape,
                                                              bool read_values) {
  DI_ASSIGN_OR_RETURN(const tensor::TensorView* t, model_.Get(name));
  if (t->shape != shape) {
    return InvalidArgumentError(
        util::codes::kShapeMismatch,
        fmt::format("tensor '{}' has shape {}, {} {}", name, model::ShapeString(t->shape),
                    options_.implied, model::ShapeString(shape)));
  }
  const bool vector = shape.size() != 2;
  if (!read_values) {  // never read here: its type does not matter (it may be stored FP8)
    used_.insert(name);
    return t;
  }
  // A block-scaled matrix (FP8 / FP4) is unreadable without its E8M0 scales.
  if (options_.matrices == MatrixTypes::kBlockScaled && !vector &&
      kernels::IsBlockScaled(t->dtype) && t->scale == nullptr) {
    const std::string scale = name.substr(0, name.rfind('.')) + ".scale";
    return NotFoundError(
        util::codes::kMissingTensor,
        fmt::format("{} tensor '{}' has no scale '{}'", tensor::DTypeName(t->dtype), name, scale));
  }
  if (!TypeAllowed(options_.matrices, *t, vector)) {
    return UnimplementedError(
        util::codes::kUnsupportedDtype,
        fmt::format("tensor '{}' has dtype {}", name, tensor::DTypeName(t->dtype)));
  }
  // Kernels read fp32 / fp16 fields in place; a GGUF file with general.alignment < 4 could place
  // them at odd addresses.
  if (options_.matrices == MatrixTypes::kGguf && reinterpret_cast<uintptr_t>(t->data) % 4 != 0) {
    return InvalidArgumentError(util::codes::kBadMetadata,
                                fmt::format("tensor '{}' is misaligned", name));
  }
  if (options_.check_finite && read_values) {
    DI_RETURN_IF_ERROR(model::CheckFinite(*t, /*full=*/vector));
  }
  used_.insert(name);
  return t;
}

absl::StatusOr<std::vector<float>> TensorSchema::Vec(const std::string& name,
                                                     std::vector<int64_t> shape) {
  DI_ASSIGN_OR_RETURN(const tensor::TensorView* t, Tensor(name, shape));
  // A 2-D value table (an ape, a scale row) passed the matrix rules; it is dequantized whole.
  if (!kernels::HasCpuKernel(t->dtype)) {
    return UnimplementedError(
        util::codes::kUnsupportedDtype,
        fmt::format("tensor '{}' has dtype {}", name, tensor::DTypeName(t->dtype)));
  }
  if (options_.check_finite && shape.size() == 2) {
    DI_RETURN_IF_ERROR(model::CheckFinite(*t, /*full=*/true));
  }
  std::vector<float> v(static_cast<size_t>(t->num_elements()));
  for (int64_t r = 0; r < t->rows(); ++r) {
    kernels::DequantizeRow(t->dtype, t->row(r), v.data() + r * t->cols(), t->cols());
  }
  return v;
}

absl::Status TensorSchema::CheckAllPlaced(const std::string& what) const {
  for (const auto& [name, t] : model_.tensors) {
    if (used_.contains(name)) continue;
    return InvalidArgumentError(util::codes::kUnexpectedTensor,
                                fmt::format("tensor '{}' is not part of a {} model with this "
                                            "config",
                                            name, what));
  }
  return absl::OkStatus();
}

}  // namespace deepinfer::arch
