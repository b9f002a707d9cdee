#include "model/gguf.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "fmt/format.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::model {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF is read as little endian");

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr int kMaxArrayDepth = 8;        // nested arrays deeper than this are rejected
constexpr uint32_t kMaxDims = 4;
// Smallest encodings, used to cap counts by the remaining bytes before anything is allocated.
constexpr size_t kMinKvBytes = 8 + 4;                      // empty key + type
constexpr size_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, 1 dim, type, offset
constexpr size_t kMinStringBytes = 8;
constexpr size_t kMinArrayBytes = 4 + 8;
constexpr uint64_t kMaxReserve = 4096;

absl::Status Truncated(std::string_view what) {
  return DataLossError(util::codes::kTruncatedFile, fmt::format("GGUF file ends inside {}", what));
}
absl::Status BadMetadata(std::string_view message) {
  return InvalidArgumentError(util::codes::kBadMetadata, message);
}

// Size of a fixed-size scalar type; 0 for string, array and unknown ids.
size_t ScalarSize(uint32_t type) {
  switch (static_cast<GgufType>(type)) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    default:
      return 0;
  }
}

bool IsKnownType(uint32_t type) { return type <= static_cast<uint32_t>(GgufType::kFloat64); }

// A bounds-checked little-endian cursor over a byte span.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  const uint8_t* here() const { return data_ + pos_; }

  absl::Status Skip(size_t n, std::string_view what) {
    if (n > remaining()) return Truncated(what);
    pos_ += n;
    return absl::OkStatus();
  }
  template <typename T>
  absl::Status Read(T* out, std::string_view what) {
    if (sizeof(T) > remaining()) return Truncated(what);
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }
  absl::Status ReadString(std::string_view* out, std::string_view what) {
    uint64_t len = 0;
    DI_RETURN_IF_ERROR(Read(&len, what));
    if (len > remaining()) return Truncated(what);
    *out = std::string_view(reinterpret_cast<const char*>(here()), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return absl::OkStatus();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Parses one value of `type` at the reader; arrays are validated element by element (recursing
// into nested arrays up to kMaxArrayDepth) but kept as spans.
absl::Status ParseValue(Reader& r, uint32_t type, int depth, GgufValue* out) {
  if (!IsKnownType(type)) return BadMetadata(fmt::format("unknown metadata value type {}", type));
  out->type = static_cast<GgufType>(type);
  if (size_t n = ScalarSize(type); n > 0) {
    out->bits = 0;
    if (n > r.remaining()) return Truncated("a metadata value");
    std::memcpy(&out->bits, r.here(), n);
    return r.Skip(n, "a metadata value");
  }
  if (out->type == GgufType::kString) return r.ReadString(&out->str, "a metadata string");

  // Array: element type, count, elements.
  if (depth >= kMaxArrayDepth) return BadMetadata("metadata arrays nested too deeply");
  uint32_t elem_type = 0;
  uint64_t count = 0;
  DI_RETURN_IF_ERROR(r.Read(&elem_type, "an array header"));
  DI_RETURN_IF_ERROR(r.Read(&count, "an array header"));
  if (!IsKnownType(elem_type)) {
    return BadMetadata(fmt::format("unknown array element type {}", elem_type));
  }
  const size_t start = r.pos();
  GgufArray& a = out->array;
  a.elem_type = static_cast<GgufType>(elem_type);
  a.count = count;
  a.data = r.here();
  if (size_t n = ScalarSize(elem_type); n > 0) {
    if (count > r.remaining() / n) return Truncated("an array");
    DI_RETURN_IF_ERROR(r.Skip(static_cast<size_t>(count) * n, "an array"));
  } else {
    const size_t min_elem =
        elem_type == static_cast<uint32_t>(GgufType::kString) ? kMinStringBytes : kMinArrayBytes;
    if (count > r.remaining() / min_elem) return Truncated("an array");
    GgufValue elem;
    for (uint64_t i = 0; i < count; ++i) {
      DI_RETURN_IF_ERROR(ParseValue(r, elem_type, depth + 1, &elem));
    }
  }
  a.size_bytes = r.pos() - start;
  return absl::OkStatus();
}

// a * b and a + b in uint64 with overflow detection.
bool MulOverflow(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}
bool AddOverflow(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_add_overflow(a, b, out);
}

}  // namespace

std::string_view GgufTypeName(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
      return "uint8";
    case GgufType::kInt8:
      return "int8";
    case GgufType::kUint16:
      return "uint16";
    case GgufType::kInt16:
      return "int16";
    case GgufType::kUint32:
      return "uint32";
    case GgufType::kInt32:
      return "int32";
    case GgufType::kFloat32:
      return "float32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "uint64";
    case GgufType::kInt64:
      return "int64";
    case GgufType::kFloat64:
      return "float64";
  }
  return "unknown";
}

bool GgufValue::IsInteger() const {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}

bool GgufValue::ToI64(int64_t* out) const {
  switch (type) {
    case GgufType::kUint8:
      *out = static_cast<uint8_t>(bits);
      return true;
    case GgufType::kInt8:
      *out = static_cast<int8_t>(bits);
      return true;
    case GgufType::kUint16:
      *out = static_cast<uint16_t>(bits);
      return true;
    case GgufType::kInt16:
      *out = static_cast<int16_t>(bits);
      return true;
    case GgufType::kUint32:
      *out = static_cast<uint32_t>(bits);
      return true;
    case GgufType::kInt32:
      *out = static_cast<int32_t>(bits);
      return true;
    case GgufType::kInt64:
      *out = static_cast<int64_t>(bits);
      return true;
    case GgufType::kUint64:
      if (bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
      *out = static_cast<int64_t>(bits);
      return true;
    default:
      return false;
  }
}

bool GgufValue::ToF64(double* out) const {
  if (type == GgufType::kFloat32) {
    float f;
    uint32_t u = static_cast<uint32_t>(bits);
    std::memcpy(&f, &u, 4);
    *out = f;
    return true;
  }
  if (type == GgufType::kFloat64) {
    std::memcpy(out, &bits, 8);
    return true;
  }
  return false;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  DI_ASSIGN_OR_RETURN(auto mapping, util::MappedFile::Open(path));
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->data_ = mapping->data();
  file->size_ = mapping->size();
  file->mapping_ = std::move(mapping);
  DI_RETURN_IF_ERROR(WithContext(file->Parse(), path));
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::OpenFromMemory(const uint8_t* data,
                                                                   size_t size) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->data_ = data;
  file->size_ = size;
  DI_RETURN_IF_ERROR(file->Parse());
  return file;
}

absl::Status GgufFile::Parse() {
  Reader r(data_, size_);
  uint32_t magic = 0;
  if (size_ < 4)
    return InvalidArgumentError(util::codes::kBadMagic, "file too short for the GGUF magic");
  DI_RETURN_IF_ERROR(r.Read(&magic, "the magic"));
  if (magic != kMagic)
    return InvalidArgumentError(util::codes::kBadMagic, "not a GGUF file (bad magic)");
  DI_RETURN_IF_ERROR(r.Read(&version_, "the header"));
  if (version_ != 2 && version_ != 3) {
    return UnimplementedError(
        util::codes::kUnsupportedVersion,
        fmt::format("GGUF version {} (only 2 and 3 are supported)", version_));
  }
  uint64_t num_tensors = 0, num_kv = 0;
  DI_RETURN_IF_ERROR(r.Read(&num_tensors, "the header"));
  DI_RETURN_IF_ERROR(r.Read(&num_kv, "the header"));

  // Metadata.
  if (num_kv > r.remaining() / kMinKvBytes) return Truncated("the metadata");
  // Counts are only capped by the file size, so reservations are capped further: a lying header
  // must not make the parser allocate many times the file's size up front.
  keys_.reserve(static_cast<size_t>(std::min<uint64_t>(num_kv, kMaxReserve)));
  values_.reserve(static_cast<size_t>(std::min<uint64_t>(num_kv, kMaxReserve)));
  for (uint64_t i = 0; i < num_kv; ++i) {
    std::string_view key;
    uint32_t type = 0;
    DI_RETURN_IF_ERROR(r.ReadString(&key, "a metadata key"));
    DI_RETURN_IF_ERROR(r.Read(&type, "a metadata type"));
    GgufValue value;
    DI_RETURN_IF_ERROR(ParseValue(r, type, 0, &value));
    auto [it, inserted] = values_.try_emplace(std::string(key), value);
    if (!inserted) return BadMetadata(fmt::format("duplicate metadata key '{}'", key));
    keys_.push_back(it->first);
  }

  if (const GgufValue* a = Find("general.alignment")) {
    if (a->type != GgufType::kUint32) return BadMetadata("general.alignment is not a uint32");
    alignment_ = static_cast<uint32_t>(a->bits);
    if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) {
      return BadMetadata(fmt::format("general.alignment {} is not a power of two", alignment_));
    }
  }

  // Tensor infos.
  struct Info {
    std::string_view name;
    uint32_t type;
    int64_t ne[kMaxDims];
    uint32_t num_dims;
    uint64_t offset;
  };
  if (num_tensors > r.remaining() / kMinTensorInfoBytes) return Truncated("the tensor infos");
  std::vector<Info> infos;
  infos.reserve(static_cast<size_t>(std::min<uint64_t>(num_tensors, kMaxReserve)));
  for (uint64_t i = 0; i < num_tensors; ++i) {
    Info& info = infos.emplace_back();
    DI_RETURN_IF_ERROR(r.ReadString(&info.name, "a tensor name"));
    DI_RETURN_IF_ERROR(r.Read(&info.num_dims, "a tensor info"));
    if (info.num_dims < 1 || info.num_dims > kMaxDims) {
      return BadMetadata(
          fmt::format("tensor '{}' has {} dimensions (1..4 allowed)", info.name, info.num_dims));
    }
    for (uint32_t d = 0; d < info.num_dims; ++d)
      DI_RETURN_IF_ERROR(r.Read(&info.ne[d], "a tensor info"));
    DI_RETURN_IF_ERROR(r.Read(&info.type, "a tensor info"));
    DI_RETURN_IF_ERROR(r.Read(&info.offset, "a tensor info"));
  }

  // The data section starts at the next multiple of the alignment.
  const uint64_t pad = (alignment_ - r.pos() % alignment_) % alignment_;
  data_offset_ = r.pos() + pad;
  if (!infos.empty() && data_offset_ > size_) return Truncated("the padding before tensor data");
  const uint64_t data_size = data_offset_ <= size_ ? size_ - data_offset_ : 0;

  tensors_.reserve(infos.size());
  tensor_index_.reserve(infos.size());
  for (const Info& info : infos) {
    const DType dtype = DTypeFromGgml(info.type);
    if (dtype == DType::kInvalid) {
      return UnimplementedError(util::codes::kUnsupportedDtype,
                                fmt::format("tensor '{}' has ggml type {}", info.name, info.type));
    }
    uint64_t num_elements = 1;
    for (uint32_t d = 0; d < info.num_dims; ++d) {
      if (info.ne[d] <= 0) {
        return BadMetadata(
            fmt::format("tensor '{}' has extent {} in dimension {}", info.name, info.ne[d], d));
      }
      if (MulOverflow(num_elements, static_cast<uint64_t>(info.ne[d]), &num_elements) ||
          num_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return BadMetadata(fmt::format("tensor '{}' has too many elements", info.name));
      }
    }
    const uint64_t block = static_cast<uint64_t>(BlockSize(dtype));
    if (static_cast<uint64_t>(info.ne[0]) % block != 0) {
      return BadMetadata(fmt::format("tensor '{}': row of {} is not a multiple of the {} block {}",
                                     info.name, info.ne[0], DTypeName(dtype), block));
    }
    uint64_t size_bytes = 0, end = 0;
    if (MulOverflow(num_elements / block, BlockBytes(dtype), &size_bytes) ||
        AddOverflow(info.offset, size_bytes, &end)) {
      return DataLossError(util::codes::kOutOfBounds,
                           fmt::format("tensor '{}' is too large", info.name));
    }
    if (info.offset % alignment_ != 0) {
      return BadMetadata(fmt::format("tensor '{}' offset {} is not a multiple of {}", info.name,
                                     info.offset, alignment_));
    }
    if (info.offset > data_size) {
      return DataLossError(util::codes::kOutOfBounds,
                           fmt::format("tensor '{}' starts at data offset {} past the end ({})",
                                       info.name, info.offset, data_size));
    }
    if (end > data_size) return Truncated(fmt::format("the data of tensor '{}'", info.name));

    TensorView view;
    view.name = std::string(info.name);
    view.dtype = dtype;
    for (uint32_t d = info.num_dims; d-- > 0;) view.shape.push_back(info.ne[d]);
    view.data = data_ + data_offset_ + info.offset;
    view.size_bytes = static_cast<size_t>(size_bytes);
    auto [it, inserted] = tensor_index_.try_emplace(view.name, tensors_.size());
    if (!inserted) return BadMetadata(fmt::format("duplicate tensor name '{}'", info.name));
    tensors_.push_back(std::move(view));
  }
  return absl::OkStatus();
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

const TensorView* GgufFile::FindTensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<const GgufValue*> GgufFile::Require(const std::string& key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr)
    return NotFoundError(util::codes::kMissingMetadata, fmt::format("no metadata key '{}'", key));
  return v;
}

namespace {
absl::Status WrongType(const std::string& key, const GgufValue& v, std::string_view want) {
  return InvalidArgumentError(
      util::codes::kBadMetadata,
      fmt::format("metadata '{}' is {}, expected {}", key, GgufTypeName(v.type), want));
}

// Converting a finite double beyond the float range is undefined behavior, so it is refused.
bool FitsFloat(double d) {
  return !std::isfinite(d) || std::fabs(d) <= std::numeric_limits<float>::max();
}

template <typename T>
absl::StatusOr<T> IntegerAs(const std::string& key, const GgufValue& v) {
  int64_t i = 0;
  if (!v.IsInteger()) return WrongType(key, v, "an integer");
  if (v.type == GgufType::kUint64 && !v.ToI64(&i)) {
    if constexpr (std::is_same_v<T, uint64_t>) return v.bits;
    return InvalidArgumentError(util::codes::kBadMetadata,
                                fmt::format("metadata '{}' is out of range", key));
  }
  v.ToI64(&i);
  if (i < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
      (i > 0 && static_cast<uint64_t>(i) > static_cast<uint64_t>(std::numeric_limits<T>::max()))) {
    return InvalidArgumentError(util::codes::kBadMetadata,
                                fmt::format("metadata '{}' = {} is out of range", key, i));
  }
  return static_cast<T>(i);
}
}  // namespace

absl::StatusOr<std::string> GgufFile::GetString(const std::string& key) const {
  DI_ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  if (v->type != GgufType::kString) return WrongType(key, *v, "a string");
  return std::string(v->str);
}

absl::StatusOr<uint32_t> GgufFile::GetU32(const std::string& key) const {
  DI_ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  return IntegerAs<uint32_t>(key, *v);
}
absl::StatusOr<int32_t> GgufFile::GetI32(const std::string& key) const {
  DI_ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  return IntegerAs<int32_t>(key, *v);
}
absl::StatusOr<uint64_t> GgufFile::GetU64(const std::string& key) const {
  DI_ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  return IntegerAs<uint64_t>(key, *v);
}
absl::StatusOr<int64_t> GgufFile::GetI64(const std::string& key) const {
  DI_ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  return IntegerAs<int64_t>(key, *v);
}

absl::StatusOr<double> GgufFile::GetF64(const std::string& key) const {
  DI_ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  double d = 0;
  if (!v->ToF64(&d)) return WrongType(key, *v, "a float");
  return d;
}
absl::StatusOr<float> GgufFile::GetF32(const std::string& key) const {
  DI_ASSIGN_OR_RETURN(double d, GetF64(key));
  if (!FitsFloat(d)) {
    return InvalidArgumentError(util::codes::kBadMetadata,
                                fmt::format("metadata '{}' = {} is out of float "
                                            "range",
                                            key, d));
  }
  return static_cast<float>(d);
}

absl::StatusOr<bool> GgufFile::GetBool(const std::string& key) const {
  DI_ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  if (v->type != GgufType::kBool) return WrongType(key, *v, "a bool");
  return v->bits != 0;
}

absl::StatusOr<GgufArray> GgufFile::GetArray(const std::string& key) const {
  DI_ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  if (v->type != GgufType::kArray) return WrongType(key, *v, "an array");
  return v->array;
}

absl::StatusOr<std::vector<GgufValue>> GgufFile::Elements(const GgufArray& array) {
  // The span was validated when the file was parsed, so this re-parse cannot fail on a
  // GgufArray obtained from a GgufFile; it still checks, for hand-made spans.
  Reader r(array.data, array.size_bytes);
  const uint32_t type = static_cast<uint32_t>(array.elem_type);
  size_t min_elem = ScalarSize(type);
  if (min_elem == 0)
    min_elem = array.elem_type == GgufType::kString ? kMinStringBytes : kMinArrayBytes;
  if (array.count > array.size_bytes / min_elem) return Truncated("an array");
  std::vector<GgufValue> out;
  out.resize(static_cast<size_t>(array.count));
  for (GgufValue& v : out) {
    DI_RETURN_IF_ERROR(ParseValue(r, static_cast<uint32_t>(array.elem_type), 1, &v));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(const std::string& key) const {
  DI_ASSIGN_OR_RETURN(GgufArray a, GetArray(key));
  if (a.elem_type != GgufType::kString) {
    return InvalidArgumentError(util::codes::kBadMetadata,
                                fmt::format("metadata '{}' is an array of {}, "
                                            "expected strings",
                                            key, GgufTypeName(a.elem_type)));
  }
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(a.count));
  Reader r(a.data, a.size_bytes);
  for (uint64_t i = 0; i < a.count; ++i) {
    std::string_view s;
    DI_RETURN_IF_ERROR(r.ReadString(&s, "an array string"));
    out.emplace_back(s);
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> GgufFile::GetI32Array(const std::string& key) const {
  DI_ASSIGN_OR_RETURN(GgufArray a, GetArray(key));
  const size_t n = ScalarSize(static_cast<uint32_t>(a.elem_type));
  GgufValue probe;
  probe.type = a.elem_type;
  if (!probe.IsInteger()) {
    return InvalidArgumentError(util::codes::kBadMetadata,
                                fmt::format("metadata '{}' is an array of {}, "
                                            "expected integers",
                                            key, GgufTypeName(a.elem_type)));
  }
  std::vector<int32_t> out(static_cast<size_t>(a.count));
  for (size_t i = 0; i < out.size(); ++i) {
    GgufValue e;
    e.type = a.elem_type;
    std::memcpy(&e.bits, a.data + i * n, n);
    DI_ASSIGN_OR_RETURN(out[i], IntegerAs<int32_t>(key, e));
  }
  return out;
}

absl::StatusOr<std::vector<float>> GgufFile::GetF32Array(const std::string& key) const {
  DI_ASSIGN_OR_RETURN(GgufArray a, GetArray(key));
  if (a.elem_type != GgufType::kFloat32 && a.elem_type != GgufType::kFloat64) {
    return InvalidArgumentError(util::codes::kBadMetadata,
                                fmt::format("metadata '{}' is an array of {}, "
                                            "expected floats",
                                            key, GgufTypeName(a.elem_type)));
  }
  const size_t n = ScalarSize(static_cast<uint32_t>(a.elem_type));
  std::vector<float> out(static_cast<size_t>(a.count));
  for (size_t i = 0; i < out.size(); ++i) {
    GgufValue e;
    e.type = a.elem_type;
    std::memcpy(&e.bits, a.data + i * n, n);
    double d = 0;
    e.ToF64(&d);
    if (!FitsFloat(d)) {
      return InvalidArgumentError(util::codes::kBadMetadata,
                                  fmt::format("metadata '{}'[{}] = {} is out of "
                                              "float range",
                                              key, i, d));
    }
    out[i] = static_cast<float>(d);
  }
  return out;
}

}  // namespace deepinfer::model
