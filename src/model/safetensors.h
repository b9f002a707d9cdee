#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model.h"
#include "util/mapped_file.h"

namespace deepinfer::model {

// A parsed .safetensors file: an 8-byte little-endian header length, a JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}} and the
// tensor bytes. Tensor data is not copied; each TensorView points into the mapped bytes.
//
// Every read is bounds-checked: the header length against the file size, every tensor's
// [begin, end) against the data section, the byte count against shape x element size (with
// overflow checks). (A name repeated inside one header keeps its last entry, as in the JSON
// parser; repeats across shards are rejected by the checkpoint loader.)
// Shapes: TensorView.shape as stored (outermost first, a linear weight is [out, in]); a 0-d
//   tensor gets shape {1}.
// Errors: DataLoss "truncated_file" (shorter than its header or a tensor's end); DataLoss
//   "bad_header" (malformed JSON, missing/ill-typed fields, negative extents, byte count not
//   matching the shape; overlapping or out-of-order offsets are accepted, being harmless here);
//   Unimplemented "unsupported_dtype" (anything but F32, F16, BF16, F8_E4M3, F8_E8M0, I8, I64); NotFound
//   "file_not_found" / Internal "io_error" from Open.
// Threads: immutable after parsing.
// Lifetime: views die with the SafetensorsFile (or with the MappedFile taken from it).
// Source: https://github.com/huggingface/safetensors (format description in README).
class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Parses bytes owned by the caller (tests, fuzzing); `label` names them in errors.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Parse(const uint8_t* data, size_t size,
                                                                const std::string& label);

  const std::vector<TensorView>& tensors() const { return tensors_; }
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }
  // Hands over the mapping that the views point into (null for Parse).
  std::unique_ptr<util::MappedFile> TakeFile() { return std::move(file_); }

 private:
  SafetensorsFile() = default;
  std::unique_ptr<util::MappedFile> file_;
  std::vector<TensorView> tensors_;
  std::vector<std::pair<std::string, std::string>> metadata_;
};

}  // namespace deepinfer::model
