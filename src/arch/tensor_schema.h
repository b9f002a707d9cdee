#pragma once

// The one reader of an architecture's tensor schema: every builder (llama.cc, deepseek_v3.cc,
// deepseek_v4.cc, deepseek_v41.cc) asks it for each tensor by name and by the shape its config
// implies, and it checks the type against what the kernels read and, where the architecture asks,
// the values for NaN/Inf. model/'s loaders only map the files; what a tensor must be is said here
// and in the builders' calls.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "model/model.h"

namespace deepinfer::arch {

// What a matrix (a 2-D tensor) may be stored as.
enum class MatrixTypes {
  // GGUF's types the Llama kernels read in place: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K;
  // vectors must be F32 (every GGUF converter writes norms so), and data 4-byte aligned.
  kGguf,
  // Any type with a CPU kernel (kernels::HasCpuKernel), unscaled.
  kCpuKernel,
  // Any type the matmul kernels read (kernels::HasCpuMatMul), block-scaled FP8 / FP4 included
  // when the tensor carries its scale.
  kBlockScaled,
};

struct TensorSchemaOptions {
  MatrixTypes matrices = MatrixTypes::kCpuKernel;
  // NaN/Inf: every element of vectors, sampled rows of matrices (model::CheckFinite).
  bool check_finite = true;
  // The words before the implied shape in a shape_mismatch message.
  std::string_view implied = "the config implies";
};

// Reads tensors of one model for one architecture, remembering the names it gave out so that a
// tensor with no place can be reported (CheckAllPlaced).
//
// Errors: NotFound "missing_tensor" (also a block-scaled matrix without its scale);
//   InvalidArgument "shape_mismatch"; Unimplemented "unsupported_dtype"; DataLoss
//   "nan_in_weights"; InvalidArgument "bad_metadata" (kGguf: misaligned data). Messages name the
//   tensor.
// Threads: not thread-safe; used while an architecture loads.
// Lifetime: borrows the Model.
class TensorSchema {
 public:
  explicit TensorSchema(const model::Model& m, TensorSchemaOptions options = {})
      : model_(m), options_(options) {}

  // The tensor `name` with exactly `shape` and a type the options allow. With read_values
  // false neither its type nor its values are checked (nor its pages touched): a tensor this
  // process maps but never reads, such as another expert-parallel rank's experts (which the
  // loader may have left in their stored FP8).
  absl::StatusOr<const tensor::TensorView*> Tensor(const std::string& name,
                                                  const std::vector<int64_t>& shape,
                                                  bool read_values = true);
  absl::StatusOr<const tensor::TensorView*> Mat(const std::string& name, int64_t rows,
                                               int64_t cols, bool read_values = true) {
    return Tensor(name, {rows, cols}, read_values);
  }
  // Values dequantized to f32 (row-major), every element checked for NaN/Inf.
  absl::StatusOr<std::vector<float>> Vec(const std::string& name, std::vector<int64_t> shape);
  bool Has(const std::string& name) const { return model_.Find(name) != nullptr; }
  void MarkUsed(const std::string& name) { used_.insert(name); }
  // InvalidArgument "unexpected_tensor" naming a tensor no Tensor / Mat / Vec / MarkUsed took;
  // `what` names the architecture in the message.
  absl::Status CheckAllPlaced(const std::string& what) const;

 private:
  const model::Model& model_;
  TensorSchemaOptions options_;
  absl::flat_hash_set<std::string> used_;
};

}  // namespace deepinfer::arch
