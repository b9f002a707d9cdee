#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace deepinfer::tensor {

// Element types of weights and activations. The numeric values of the GGML-compatible entries are
// the GGUF `ggml_type` ids, so a GGUF tensor type maps with a range check and a cast.
//
// Source: ggml/include/ggml.h (enum ggml_type) and ggml/src/ggml-common.h (block layouts).
enum class DType : int32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ4_K = 12,
  kQ6_K = 14,
  kQ8_K = 15,
  kBF16 = 30,
  // Not in GGUF; used by safetensors checkpoints (F8_E4M3 with block scales; I64 integer tables
  // such as DeepSeek-V4's hash-routing tid2eid, never a matmul operand).
  kF8E4M3 = 1000,
  kI64 = 1001,
  // DeepSeek-V4's release formats: FP4 E2M1 packed two per byte (low nibble = even element), and
  // E8M0 power-of-two scales (byte b = 2^(b - 127), 255 = NaN). Block-scaled FP8 / FP4 weights
  // carry their scale tensor in TensorView::scale. I8 is the on-disk dtype of packed FP4 data.
  kFp4E2M1 = 1002,
  kE8M0 = 1003,
  kI8 = 1004,
  kInvalid = -1,
};

// What the tree knows about one element type. Units: block_size in elements (1 for plain types),
// block_bytes in bytes per block.
struct DTypeInfo {
  DType type;
  std::string_view name;  // short upper-case name: "Q4_1", "F32", "F8_E4M3"
  int64_t block_size;
  size_t block_bytes;
  bool quantized;  // one of the block formats with scales (Q4_0 ... Q8_K)
};

// The table entry of `t`; nullptr for kInvalid and values outside the table.
const DTypeInfo* FindDType(DType t);
// Every entry of the table (tests walk it to cover each type a loader can produce).
std::span<const DTypeInfo> AllDTypes();
// Elements per block; 0 for a type outside the table (callers check before dividing).
int64_t BlockSize(DType t);
// Bytes per block; 0 for a type outside the table.
size_t BlockBytes(DType t);
// Bytes needed for a row of `n` elements; `n` must be a multiple of BlockSize(t). 0 for a type
// outside the table.
inline size_t RowBytes(DType t, int64_t n) {
  const int64_t block = BlockSize(t);
  return block == 0 ? 0 : BlockBytes(t) * static_cast<size_t>(n / block);
}
// Short upper-case name ("Q4_1", "F32"); "INVALID" for unknown values.
std::string_view DTypeName(DType t);
// Maps a GGUF ggml_type id to DType; returns kInvalid for types deepinfer does not support.
DType DTypeFromGgml(uint32_t ggml_type);
// True when the type is one of the quantized block formats.
bool IsQuantized(DType t);

// Block layouts (little endian, packed as in ggml). Field names follow ggml so the code can be
// checked against ggml-common.h line by line.
struct BlockQ4_0 {
  uint16_t d;      // fp16 scale
  uint8_t qs[16];  // 32 x 4-bit: low nibbles are elements 0..15, high nibbles 16..31
};
struct BlockQ4_1 {
  uint16_t d;  // fp16 scale
  uint16_t m;  // fp16 min
  uint8_t qs[16];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct BlockQ8_1 {
  uint16_t d;  // fp16 scale
  uint16_t s;  // fp16 d * sum(qs)
  int8_t qs[32];
};
constexpr int kQK_K = 256;
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];  // 8 x (6-bit scale, 6-bit min)
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
struct BlockQ8_K {
  float d;
  int8_t qs[256];
  int16_t bsums[16];
};
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

// IEEE half and bfloat16 conversions (round to nearest even on the way down).
float Fp16ToFp32(uint16_t h);
uint16_t Fp32ToFp16(float f);
inline float Bf16ToFp32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
uint16_t Fp32ToBf16(float f);

}  // namespace deepinfer::tensor
