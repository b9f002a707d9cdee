#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "model/model.h"
#include "util/mapped_file.h"

namespace deepinfer::model {

// GGUF metadata value types (the numeric values are the on-disk `gguf_type` ids).
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// Name of a metadata type ("uint32", "array", ...), for error messages.
std::string_view GgufTypeName(GgufType t);

// An array value: a validated byte span inside the file, decoded on demand.
//
// Lifetime: points into the GgufFile's bytes.
struct GgufArray {
  GgufType elem_type = GgufType::kUint8;
  uint64_t count = 0;
  const uint8_t* data = nullptr;  // first element
  size_t size_bytes = 0;          // all elements, including nested headers
};

// One metadata value. Scalars keep their little-endian bits in `bits` (zero-extended); strings
// and arrays point into the file.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  uint64_t bits = 0;
  std::string_view str;  // kString
  GgufArray array;       // kArray

  // Integer value of any integer type (not bool, not float).
  bool IsInteger() const;
  // Returns the integer as signed 64-bit; false when the value is not an integer or a uint64
  // above INT64_MAX.
  bool ToI64(int64_t* out) const;
  // Returns the value as double for kFloat32 / kFloat64; false otherwise.
  bool ToF64(double* out) const;
};

// A parsed GGUF v2/v3 file: header, metadata and tensor infos. Tensor data is not copied; each
// TensorView points into the file bytes.
//
// Every read is bounds-checked against the file size: string lengths and array counts are
// capped by the bytes that remain, offset arithmetic is overflow-checked, tensors have 1..4
// dimensions with positive extents, data offsets are multiples of general.alignment (default
// 32, a power of two) and every tensor ends inside the file.
// Shapes: TensorView.shape is outermost first, so GGUF ne = {in, out} becomes {out, in}.
// Errors: InvalidArgument "bad_magic"; Unimplemented "unsupported_version" (only 2 and 3);
//   DataLoss "truncated_file" (the file ends inside the header, metadata, tensor infos or
//   tensor data); DataLoss "out_of_bounds" (a tensor starts past the end of the data section);
//   Unimplemented "unsupported_dtype" (a ggml type deepinfer has no DType for); DataLoss
//   "bad_metadata" (unknown value type, nesting deeper than 8, duplicate key or tensor name,
//   bad alignment, bad dimension count or extent, misaligned offset); NotFound
//   "file_not_found" from Open. Getters: NotFound "missing_metadata", InvalidArgument
//   "bad_metadata" for a value of the wrong type or range.
// Threads: immutable after parsing; safe to read from any thread.
// Lifetime: views (strings, arrays, tensors) live as long as the GgufFile and, for
//   OpenFromMemory, as long as the caller's buffer.
// Source: ggml/docs/gguf.md; ggml/src/gguf.cpp.
class GgufFile {
 public:
  // Maps and parses the file at `path`; the GgufFile owns the mapping.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses `size` bytes at `data` without copying; the caller keeps them alive and unchanged.
  static absl::StatusOr<std::unique_ptr<GgufFile>> OpenFromMemory(const uint8_t* data, size_t size);

  // Releases ownership of the mapping made by Open (nullptr for OpenFromMemory). The views stay
  // valid while the returned mapping lives.
  std::unique_ptr<util::MappedFile> ReleaseMapping() { return std::move(mapping_); }

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  // Byte offset of the data section inside the file.
  uint64_t data_offset() const { return data_offset_; }
  size_t file_size() const { return size_; }

  // Metadata keys in file order.
  const std::vector<std::string>& metadata_keys() const { return keys_; }
  bool Has(const std::string& key) const { return values_.contains(key); }
  // Returns the value or nullptr.
  const GgufValue* Find(const std::string& key) const;

  // Typed getters. Integer getters accept any integer type whose value fits; GetF32 accepts
  // float32 and float64.
  absl::StatusOr<std::string> GetString(const std::string& key) const;
  absl::StatusOr<uint32_t> GetU32(const std::string& key) const;
  absl::StatusOr<int32_t> GetI32(const std::string& key) const;
  absl::StatusOr<uint64_t> GetU64(const std::string& key) const;
  absl::StatusOr<int64_t> GetI64(const std::string& key) const;
  absl::StatusOr<float> GetF32(const std::string& key) const;
  absl::StatusOr<double> GetF64(const std::string& key) const;
  absl::StatusOr<bool> GetBool(const std::string& key) const;
  absl::StatusOr<GgufArray> GetArray(const std::string& key) const;
  // Arrays decoded to vectors; the element type must match (any integer type for GetI32Array,
  // float32/float64 for GetF32Array).
  absl::StatusOr<std::vector<std::string>> GetStringArray(const std::string& key) const;
  absl::StatusOr<std::vector<int32_t>> GetI32Array(const std::string& key) const;
  absl::StatusOr<std::vector<float>> GetF32Array(const std::string& key) const;

  // Decodes the elements of an array value (for nested arrays and mixed access).
  // Cost: O(bytes of the array) time and sizeof(GgufValue) per element; strings and sub-arrays
  //   are views, not copies. Prefer the typed getters for long scalar arrays.
  static absl::StatusOr<std::vector<GgufValue>> Elements(const GgufArray& array);

  // Tensors in file order, and lookup by name.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* FindTensor(const std::string& name) const;

 private:
  GgufFile() = default;
  absl::Status Parse();
  absl::StatusOr<const GgufValue*> Require(const std::string& key) const;

  std::unique_ptr<util::MappedFile> mapping_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::string> keys_;
  absl::flat_hash_map<std::string, GgufValue> values_;
  std::vector<TensorView> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
};

}  // namespace deepinfer::model
