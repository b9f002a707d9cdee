#include "model/block_scales.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "model/tensor_values.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::model {

namespace {

absl::Status Mismatch(const std::string& what) {
  return InvalidArgumentError(util::codes::kShapeMismatch, what);
}

}  // namespace

absl::Status AttachBlockScales(Model& m, const Fp8Blocks& blocks) {
  constexpr std::string_view kSuffix = ".scale";
  std::vector<std::string> scale_names;
  for (const auto& [name, t] : m.tensors) {
    // DeepSeek-V4.1's Engram tables carry per-row scales of their own (1 x 32 along the head
    // dimension, F32 ones in float checkpoints): the architecture reads those, not the matmul.
    if (name.find(".engram.embed.") != std::string::npos) continue;
    if (name.size() > kSuffix.size() &&
        name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0) {
      scale_names.push_back(name);
    }
  }
  for (const std::string& sname : scale_names) {
    const std::string wname = sname.substr(0, sname.size() - kSuffix.size()) + ".weight";
    auto wit = m.tensors.find(wname);
    if (wit == m.tensors.end()) continue;  // not a weight's scale (the architecture decides)
    TensorView& w = wit->second;
    const TensorView s = m.tensors.at(sname);
    if (s.dtype != DType::kE8M0 || s.shape.size() != 2) {
      return Mismatch(fmt::format("scale '{}' is {} {}, expected a 2-D F8_E8M0 grid", sname,
                                  DTypeName(s.dtype), ShapeString(s.shape)));
    }
    if (w.shape.size() != 2) {
      return Mismatch(fmt::format("scaled weight '{}' has shape {}", wname, ShapeString(w.shape)));
    }
    const int64_t out = w.shape[0];
    if (w.dtype == DType::kF8E4M3) {
      const int64_t in = w.shape[1];
      const std::vector<int64_t> want = {(out + blocks.rows - 1) / blocks.rows,
                                         (in + blocks.cols - 1) / blocks.cols};
      if (s.shape != want) {
        return Mismatch(fmt::format("scale '{}' has shape {}; {} blocks of '{}' {} need {}", sname,
                                    ShapeString(s.shape),
                                    fmt::format("{}x{}", blocks.rows, blocks.cols), wname,
                                    ShapeString(w.shape), ShapeString(want)));
      }
      w.scale_block_rows = static_cast<int32_t>(blocks.rows);
      w.scale_block_cols = static_cast<int32_t>(blocks.cols);
    } else if (w.dtype == DType::kI8) {
      // FP4: [out, in / 2] bytes with one scale per 32 elements of a row.
      const int64_t in = s.shape[1] * 32;
      if (s.shape[0] != out || w.shape[1] * 2 != in) {
        return Mismatch(fmt::format(
            "FP4 weight '{}' holds {} bytes per row, its scale '{}' {} implies {} (32 values "
            "per scale, 2 per byte)",
            wname, w.shape[1], sname, ShapeString(s.shape), in / 2));
      }
      w.dtype = DType::kFp4E2M1;
      w.shape = {out, in};
      w.scale_block_rows = 1;
      w.scale_block_cols = 32;
    } else {
      return Mismatch(fmt::format("weight '{}' with a block scale is {} (expected F8_E4M3 or I8 "
                                  "packed FP4)",
                                  wname, DTypeName(w.dtype)));
    }
    for (int64_t i = 0; i < s.num_elements(); ++i) {
      if (s.data[i] == 0xff) {
        return DataLossError(util::codes::kNanInWeights,
                             fmt::format("scale '{}' holds the E8M0 NaN (element {})", sname, i));
      }
    }
    w.scale = s.data;
    m.tensors.erase(sname);
  }
  return absl::OkStatus();
}

}  // namespace deepinfer::model
