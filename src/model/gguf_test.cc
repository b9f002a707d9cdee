#include "model/gguf.h"

#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <random>

#include "gtest/gtest.h"
#include "model/gguf_test_util.h"
#include "util/status.h"

namespace deepinfer::model {
namespace {

using testing::GgufBuilder;
using testing::GStr;
using testing::TypeId;
using testing::U32;
using testing::U64;

// Parses `bytes` from an exactly-sized heap copy, so that ASan flags any read past the end.
struct Parsed {
  std::unique_ptr<uint8_t[]> buffer;
  absl::StatusOr<std::unique_ptr<GgufFile>> file;
};
Parsed Parse(const std::string& bytes) {
  Parsed p;
  p.buffer.reset(new uint8_t[bytes.size() + (bytes.empty() ? 1 : 0)]);
  std::memcpy(p.buffer.get(), bytes.data(), bytes.size());
  p.file = GgufFile::OpenFromMemory(p.buffer.get(), bytes.size());
  return p;
}
std::string CodeOf(const std::string& bytes) { return ErrorCodeOf(Parse(bytes).file.status()); }

GgufBuilder ValidBuilder() {
  GgufBuilder b;
  b.Str("general.architecture", "llama").U32Kv("llama.block_count", 2);
  b.Tensor("a.weight", 0, {4, 2}).Tensor("b.weight", 8, {32, 3});
  return b;
}

// A header with no metadata and one tensor info built by hand.
std::string OneTensor(uint32_t n_dims, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
  std::string s = "GGUF" + U32(3) + U64(1) + U64(0) + GStr("t") + U32(n_dims);
  for (uint64_t d : ne) s += U64(d);
  s += U32(type) + U64(offset);
  s.resize((s.size() + 31) / 32 * 32, '\0');
  s += std::string(64, '\x01');
  return s;
}

std::string SmolLm2Path() {
  const char* cache = std::getenv("DEEPINFER_CACHE");
  const char* home = std::getenv("HOME");
  std::string base = cache ? cache : std::string(home ? home : "") + "/.cache/deepinfer";
  return base + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

TEST(GgufReaderTest, ParsesHeaderTensorsAndDataOffset) {
  const std::string bytes = ValidBuilder().Build();
  auto p = Parse(bytes);
  ASSERT_TRUE(p.file.ok()) << p.file.status();
  const GgufFile& f = **p.file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  ASSERT_EQ(f.tensors().size(), 2u);
  const TensorView* a = f.FindTensor("a.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_EQ(a->size_bytes, 32u);
  EXPECT_EQ(a->data, p.buffer.get() + f.data_offset());
  const TensorView* b = f.FindTensor("b.weight");
  EXPECT_EQ(b->shape, (std::vector<int64_t>{3, 32}));
  EXPECT_EQ(b->size_bytes, 3u * 34u);
  EXPECT_EQ(b->data, p.buffer.get() + f.data_offset() + 32);
  EXPECT_EQ(f.FindTensor("c.weight"), nullptr);
  EXPECT_EQ(f.metadata_keys(),
            (std::vector<std::string>{"general.architecture", "llama.block_count"}));
}

TEST(GgufReaderTest, AcceptsVersion2) {
  EXPECT_TRUE(Parse(ValidBuilder().SetVersion(2).Build()).file.ok());
}

TEST(GgufReaderTest, ReadsEveryMetadataValueType) {
  GgufBuilder b;
  b.Raw("u8", GgufType::kUint8, testing::U8(200))
      .Raw("i8", GgufType::kInt8, testing::U8(0xff))
      .Raw("u16", GgufType::kUint16, std::string("\x34\x12", 2))
      .Raw("i16", GgufType::kInt16, std::string("\xfe\xff", 2))
      .U32Kv("u32", 4000000000u)
      .I32Kv("i32", -7)
      .F32Kv("f32", 0.25f)
      .BoolKv("bool", true)
      .Str("str", std::string("h\0i", 3))
      .U64Kv("u64", std::numeric_limits<uint64_t>::max())
      .Raw("i64", GgufType::kInt64, U64(static_cast<uint64_t>(-5)))
      .Raw("f64", GgufType::kFloat64,
           [] {
             double d = 1.5;
             return std::string((char*)&d, 8);
           }())
      .StrArray("strs", {"x", "", "yz"})
      .I32Array("ints", {1, -2, 3})
      .F32Array("floats", {1.0f, -0.5f});
  // [[1, 2], [3]] as an array of int32 arrays, and [["a"], []] as an array of string arrays.
  b.Raw("nested", GgufType::kArray,
        TypeId(GgufType::kArray) + U64(2) + TypeId(GgufType::kInt32) + U64(2) + U32(1) + U32(2) +
            TypeId(GgufType::kInt32) + U64(1) + U32(3));
  b.Raw("nested_str", GgufType::kArray,
        TypeId(GgufType::kArray) + U64(2) + TypeId(GgufType::kString) + U64(1) + GStr("a") +
            TypeId(GgufType::kString) + U64(0));
  auto p = Parse(b.Build());
  ASSERT_TRUE(p.file.ok()) << p.file.status();
  const GgufFile& f = **p.file;
  EXPECT_EQ(*f.GetU32("u8"), 200u);
  EXPECT_EQ(*f.GetI32("i8"), -1);
  EXPECT_EQ(*f.GetU32("u16"), 0x1234u);
  EXPECT_EQ(*f.GetI64("i16"), -2);
  EXPECT_EQ(*f.GetU32("u32"), 4000000000u);
  EXPECT_EQ(*f.GetI32("i32"), -7);
  EXPECT_EQ(*f.GetF32("f32"), 0.25f);
  EXPECT_EQ(*f.GetBool("bool"), true);
  EXPECT_EQ(*f.GetString("str"), std::string("h\0i", 3));
  EXPECT_EQ(*f.GetU64("u64"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(*f.GetI64("i64"), -5);
  EXPECT_EQ(*f.GetF64("f64"), 1.5);
  EXPECT_EQ(*f.GetF32("f64"), 1.5f);
  EXPECT_EQ(*f.GetStringArray("strs"), (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ(*f.GetI32Array("ints"), (std::vector<int32_t>{1, -2, 3}));
  EXPECT_EQ(*f.GetF32Array("floats"), (std::vector<float>{1.0f, -0.5f}));

  auto nested = f.GetArray("nested");
  ASSERT_TRUE(nested.ok());
  EXPECT_EQ(nested->elem_type, GgufType::kArray);
  auto outer = GgufFile::Elements(*nested);
  ASSERT_TRUE(outer.ok()) << outer.status();
  ASSERT_EQ(outer->size(), 2u);
  auto first = GgufFile::Elements((*outer)[0].array);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 2u);
  int64_t v = 0;
  EXPECT_TRUE((*first)[1].ToI64(&v));
  EXPECT_EQ(v, 2);
  EXPECT_EQ((*outer)[1].array.count, 1u);
  auto nested_str = GgufFile::Elements(f.GetArray("nested_str").value());
  ASSERT_TRUE(nested_str.ok());
  auto strs = GgufFile::Elements((*nested_str)[0].array);
  ASSERT_TRUE(strs.ok());
  EXPECT_EQ((*strs)[0].str, "a");
  EXPECT_EQ((*nested_str)[1].array.count, 0u);
}

TEST(GgufReaderTest, GettersReportMissingAndMistypedValues) {
  GgufBuilder b;
  b.Str("s", "x").I32Kv("neg", -1).U64Kv("big", 1ull << 40).U64Kv("huge", ~0ull).F32Kv("f", 1);
  b.StrArray("strs", {"a"});
  b.Raw("f64big", GgufType::kFloat64, [] {
    double d = 1e300;
    return std::string((char*)&d, 8);
  }());
  auto p = Parse(b.Build());
  ASSERT_TRUE(p.file.ok());
  const GgufFile& f = **p.file;
  EXPECT_EQ(ErrorCodeOf(f.GetString("absent").status()), "missing_metadata");
  EXPECT_EQ(ErrorCodeOf(f.GetU32("s").status()), "bad_metadata");
  EXPECT_EQ(ErrorCodeOf(f.GetString("neg").status()), "bad_metadata");
  EXPECT_EQ(ErrorCodeOf(f.GetU32("neg").status()), "bad_metadata");
  EXPECT_EQ(ErrorCodeOf(f.GetU32("big").status()), "bad_metadata");
  EXPECT_EQ(*f.GetI64("big"), 1ll << 40);
  EXPECT_EQ(ErrorCodeOf(f.GetI64("huge").status()), "bad_metadata");
  EXPECT_EQ(ErrorCodeOf(f.GetF32("neg").status()), "bad_metadata");
  EXPECT_EQ(ErrorCodeOf(f.GetBool("f").status()), "bad_metadata");
  EXPECT_EQ(ErrorCodeOf(f.GetI32Array("strs").status()), "bad_metadata");
  EXPECT_EQ(ErrorCodeOf(f.GetStringArray("s").status()), "bad_metadata");
  EXPECT_EQ(ErrorCodeOf(f.GetF32Array("strs").status()), "bad_metadata");
  EXPECT_EQ(ErrorCodeOf(f.GetF32("f64big").status()), "bad_metadata");  // no UB narrowing
  EXPECT_EQ(*f.GetF64("f64big"), 1e300);
}

TEST(GgufReaderTest, HonorsGeneralAlignment) {
  GgufBuilder b = ValidBuilder();
  b.SetAlignment(64).U32Kv("general.alignment", 64);
  auto p = Parse(b.Build());
  ASSERT_TRUE(p.file.ok()) << p.file.status();
  EXPECT_EQ((*p.file)->alignment(), 64u);
  EXPECT_EQ((*p.file)->data_offset() % 64, 0u);
  EXPECT_EQ((*p.file)->FindTensor("b.weight")->data - p.buffer.get(),
            static_cast<ptrdiff_t>((*p.file)->data_offset() + 64));
}

TEST(GgufReaderTest, RejectsBadAlignment) {
  EXPECT_EQ(CodeOf(ValidBuilder().U32Kv("general.alignment", 0).Build()), "bad_metadata");
  EXPECT_EQ(CodeOf(ValidBuilder().U32Kv("general.alignment", 48).Build()), "bad_metadata");
  EXPECT_EQ(CodeOf(ValidBuilder().Str("general.alignment", "32").Build()), "bad_metadata");
}

TEST(GgufReaderTest, RejectsWrongMagic) {
  std::string bytes = ValidBuilder().Build();
  bytes[0] = 'X';
  EXPECT_EQ(CodeOf(bytes), "bad_magic");
  EXPECT_EQ(CodeOf(""), "bad_magic");
  EXPECT_EQ(CodeOf("GGU"), "bad_magic");
}

TEST(GgufReaderTest, RejectsUnsupportedVersion) {
  EXPECT_EQ(CodeOf(ValidBuilder().SetVersion(1).Build()), "unsupported_version");
  EXPECT_EQ(CodeOf(ValidBuilder().SetVersion(4).Build()), "unsupported_version");
  EXPECT_EQ(CodeOf(ValidBuilder().SetVersion(0x03000000).Build()), "unsupported_version");
}

TEST(GgufReaderTest, RejectsTruncatedHeader) {
  EXPECT_EQ(CodeOf("GGUF" + U32(3)), "truncated_file");
  EXPECT_EQ(CodeOf("GGUF" + U32(3) + U64(0) + U32(0)), "truncated_file");
}

TEST(GgufReaderTest, RejectsEveryTruncationOfAValidFile) {
  const std::string bytes = ValidBuilder().Build();
  for (size_t n = 4; n < bytes.size(); ++n) {
    EXPECT_EQ(CodeOf(bytes.substr(0, n)), "truncated_file") << "prefix of " << n << " bytes";
  }
  EXPECT_TRUE(Parse(bytes).file.ok());
}

TEST(GgufReaderTest, RejectsTruncatedTensorData) {
  std::string bytes = ValidBuilder().Build();
  bytes.resize(bytes.size() - 1);
  EXPECT_EQ(CodeOf(bytes), "truncated_file");
}

TEST(GgufReaderTest, RejectsTensorOffsetPastTheEnd) {
  GgufBuilder b;
  b.Tensor("a", 0, {8}).Tensor("far", 0, {8}, "", 1 << 20);
  EXPECT_EQ(CodeOf(b.Build()), "out_of_bounds");
  EXPECT_EQ(CodeOf(OneTensor(1, {8}, 0, ~0ull - 31)), "out_of_bounds");  // offset + size wraps
}

TEST(GgufReaderTest, RejectsMisalignedTensorOffset) {
  EXPECT_EQ(CodeOf(OneTensor(1, {2}, 0, 4)), "bad_metadata");
}

TEST(GgufReaderTest, RejectsUnknownGgmlType) {
  EXPECT_EQ(CodeOf(OneTensor(1, {32}, 6, 0)), "unsupported_dtype");  // Q5_0: not supported
  EXPECT_EQ(CodeOf(OneTensor(1, {32}, 12345, 0)), "unsupported_dtype");
}

TEST(GgufReaderTest, RejectsBadDimensions) {
  EXPECT_EQ(CodeOf(OneTensor(0, {}, 0, 0)), "bad_metadata");
  EXPECT_EQ(CodeOf(OneTensor(5, {1, 1, 1, 1, 1}, 0, 0)), "bad_metadata");
  EXPECT_EQ(CodeOf(OneTensor(2, {4, 0}, 0, 0)), "bad_metadata");
  EXPECT_EQ(CodeOf(OneTensor(1, {static_cast<uint64_t>(-4)}, 0, 0)), "bad_metadata");
  EXPECT_EQ(CodeOf(OneTensor(2, {1ull << 40, 1ull << 40}, 0, 0)), "bad_metadata");  // overflow
  EXPECT_EQ(CodeOf(OneTensor(1, {1ull << 62}, 0, 0)), "out_of_bounds");  // bytes overflow
  EXPECT_EQ(CodeOf(OneTensor(1, {1ull << 60}, 0, 0)), "truncated_file");
  EXPECT_EQ(CodeOf(OneTensor(1, {33}, 8, 0)), "bad_metadata");  // not a whole Q8_0 block
}

TEST(GgufReaderTest, RejectsAbsurdStringLength) {
  // Key length.
  EXPECT_EQ(CodeOf("GGUF" + U32(3) + U64(0) + U64(1) + U64(1ull << 62) + "abc"), "truncated_file");
  // String value length.
  GgufBuilder b;
  b.Raw("k", GgufType::kString, U64(~0ull) + "abc");
  EXPECT_EQ(CodeOf(b.Build()), "truncated_file");
  // Tensor name length.
  EXPECT_EQ(CodeOf("GGUF" + U32(3) + U64(1) + U64(0) + U64(1ull << 40) + std::string(40, 'x')),
            "truncated_file");
}

TEST(GgufReaderTest, RejectsHugeCounts) {
  for (GgufType t : {GgufType::kUint8, GgufType::kUint64, GgufType::kString, GgufType::kArray}) {
    GgufBuilder b;
    b.Raw("k", GgufType::kArray, TypeId(t) + U64(~0ull >> 1) + std::string(64, '\0'));
    EXPECT_EQ(CodeOf(b.Build()), "truncated_file") << static_cast<int>(t);
  }
  EXPECT_EQ(CodeOf("GGUF" + U32(3) + U64(~0ull) + U64(0) + std::string(64, '\0')),
            "truncated_file");
  EXPECT_EQ(CodeOf("GGUF" + U32(3) + U64(0) + U64(~0ull) + std::string(64, '\0')),
            "truncated_file");
}

TEST(GgufReaderTest, RejectsDeeplyNestedArrays) {
  auto nest = [](int depth) {
    std::string v = TypeId(GgufType::kUint8) + U64(0);
    for (int i = 1; i < depth; ++i) v = TypeId(GgufType::kArray) + U64(1) + v;
    GgufBuilder b;
    b.Raw("k", GgufType::kArray, v);
    return b.Build();
  };
  EXPECT_TRUE(Parse(nest(8)).file.ok());
  EXPECT_EQ(CodeOf(nest(9)), "bad_metadata");
  EXPECT_EQ(CodeOf(nest(10000)), "bad_metadata");
}

TEST(GgufReaderTest, RejectsUnknownValueTypes) {
  GgufBuilder b;
  b.Raw("k", static_cast<GgufType>(13), U32(0));
  EXPECT_EQ(CodeOf(b.Build()), "bad_metadata");
  GgufBuilder a;
  a.Raw("k", GgufType::kArray, U32(99) + U64(0));
  EXPECT_EQ(CodeOf(a.Build()), "bad_metadata");
}

TEST(GgufReaderTest, RejectsDuplicateKeysAndTensorNames) {
  EXPECT_EQ(CodeOf(ValidBuilder().U32Kv("llama.block_count", 3).Build()), "bad_metadata");
  EXPECT_EQ(CodeOf(ValidBuilder().Tensor("a.weight", 0, {8}).Build()), "bad_metadata");
}

TEST(GgufReaderTest, SurvivesRandomByteMutations) {
  GgufBuilder b = ValidBuilder();
  b.StrArray("strs", {"ab", "c"}).I32Array("ints", {1, 2});
  b.Raw("nested", GgufType::kArray,
        TypeId(GgufType::kArray) + U64(1) + TypeId(GgufType::kString) + U64(1) + GStr("a"));
  const std::string valid = b.Build();
  std::mt19937 rng(7);
  int parsed = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string bytes = valid;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 3) {
        case 0:
          bytes[at] = static_cast<char>(rng());
          break;
        case 1:
          bytes[at] = static_cast<char>(0xff);
          break;
        default:
          bytes.resize(at);
          break;
      }
      if (bytes.empty()) break;
    }
    auto p = Parse(bytes);
    if (!p.file.ok()) continue;
    ++parsed;
    const GgufFile& f = **p.file;
    for (const TensorView& t : f.tensors()) {
      ASSERT_LE(t.data + t.size_bytes, p.buffer.get() + bytes.size());
    }
    for (const std::string& key : f.metadata_keys()) {
      const GgufValue* v = f.Find(key);
      if (v->type == GgufType::kArray) (void)GgufFile::Elements(v->array);
      (void)f.GetStringArray(key);
      (void)f.GetI32Array(key);
    }
  }
  EXPECT_GT(parsed, 0);
}

TEST(GgufReaderTest, OpenReadsFilesAndReportsMissingOnes) {
  const std::string dir = ::testing::TempDir() + "/gguf_test";
  std::filesystem::create_directories(dir);
  testing::WriteBytes(dir + "/ok.gguf", ValidBuilder().Build());
  auto f = GgufFile::Open(dir + "/ok.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->tensors().size(), 2u);
  EXPECT_EQ(ErrorCodeOf(GgufFile::Open(dir + "/absent.gguf").status()), "file_not_found");
}

TEST(GgufReaderTest, SeesEveryTensorOfSmolLm2) {
  const std::string path = SmolLm2Path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "test model not found: " << path;
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  std::map<DType, int> counts;
  for (const TensorView& t : (*f)->tensors()) ++counts[t.dtype];
  EXPECT_EQ((*f)->tensors().size(), 272u);
  EXPECT_EQ(counts[DType::kQ4_1], 210);
  EXPECT_EQ(counts[DType::kF32], 61);
  EXPECT_EQ(counts[DType::kQ8_0], 1);
  EXPECT_EQ((*f)->version(), 3u);
  EXPECT_EQ((*f)->metadata_keys().size(), 33u);
  EXPECT_EQ(*(*f)->GetString("general.architecture"), "llama");
  EXPECT_EQ(*(*f)->GetU32("llama.block_count"), 30u);
  EXPECT_EQ(*(*f)->GetU32("general.quantization_version"), 2u);
  EXPECT_EQ(*(*f)->GetF32("llama.rope.freq_base"), 100000.0f);
  EXPECT_EQ(*(*f)->GetBool("tokenizer.ggml.add_space_prefix"), false);
  EXPECT_EQ(*(*f)->GetStringArray("general.languages"), (std::vector<std::string>{"en"}));
  auto types = (*f)->GetI32Array("tokenizer.ggml.token_type");
  ASSERT_TRUE(types.ok());
  EXPECT_EQ(types->size(), 49152u);
}

}  // namespace
}  // namespace deepinfer::model
