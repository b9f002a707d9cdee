#pragma once

// Checks of the values inside weight tensors (what the loaders and the architectures run before
// a model serves), shared so that every format reports a corrupt checkpoint the same way.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/model.h"

namespace deepinfer::model {

// True when element `i` of a tensor of type `t` stored at `p` is NaN or infinite. Plain float
// types and F8_E4M3 only; false for every other type (block formats are not checked per element).
bool IsNonFinite(DType t, const uint8_t* p, int64_t i);

// Checks `t` for NaN and Inf: every element when `full` or when it has at most 65,536 elements,
// else 4 evenly spaced rows (enough to catch a corrupt or diverged checkpoint without reading
// hundreds of gigabytes at load: DeepSeek-V3 has ~45k expert matrices).
// Errors: DataLoss "nan_in_weights" naming the tensor and the element.
absl::Status CheckFinite(const TensorView& t, bool full);

// "[a, b, c]", for error messages.
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace deepinfer::model
