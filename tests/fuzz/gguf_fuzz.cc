// libFuzzer target for the model file readers: the GGUF parser, the GGUF -> llama Model builder,
// the Llama tensor schema that checks such a model (arch::CreateLlama; it allocates nothing) and
// the llama2.c header/tokenizer parsers. A malformed input must produce an error status,
// never a crash, an out-of-bounds read or a huge allocation.
//
// Run: build with -DDI_BUILD_FUZZ=ON (clang), then fuzz in a scratch copy of the seeds so that
// new units never land in the repository:
//   mkdir -p /tmp/gguf_corpus && cp tests/fuzz/corpus/gguf/* /tmp/gguf_corpus
//   ./gguf_fuzz -max_total_time=60 -malloc_limit_mb=256 /tmp/gguf_corpus

#include <cstddef>
#include <cstdint>

#include "arch/llama.h"
#include "model/gguf.h"
#include "model/gguf_model.h"
#include "model/llama2c.h"

namespace {

using deepinfer::model::GgufArray;
using deepinfer::model::GgufFile;
using deepinfer::model::GgufType;
using deepinfer::model::GgufValue;

volatile uint8_t g_sink;

// Walks an array value and its nested arrays, as a consumer of the metadata would.
void Walk(const GgufArray& array, int depth) {
  auto elems = GgufFile::Elements(array);
  if (!elems.ok()) return;
  for (const GgufValue& v : *elems) {
    if (!v.str.empty()) g_sink = static_cast<uint8_t>(v.str.back());
    if (v.type == GgufType::kArray && depth < 16) Walk(v.array, depth + 1);
  }
}

void FuzzGguf(const uint8_t* data, size_t size) {
  auto file = GgufFile::OpenFromMemory(data, size);
  if (!file.ok()) return;
  const GgufFile& f = **file;
  for (const auto& t : f.tensors()) {
    // Touch the first and last byte of every tensor: ASan checks they lie inside the input.
    if (t.size_bytes > 0) g_sink = static_cast<uint8_t>(t.data[0] ^ t.data[t.size_bytes - 1]);
  }
  for (const std::string& key : f.metadata_keys()) {
    const GgufValue* v = f.Find(key);
    if (v->type == GgufType::kArray) Walk(v->array, 0);
    (void)f.GetString(key);
    (void)f.GetU32(key);
    (void)f.GetI64(key);
    (void)f.GetF32(key);
    (void)f.GetBool(key);
    (void)f.GetStringArray(key);
    (void)f.GetI32Array(key);
    (void)f.GetF32Array(key);
  }
  auto model = deepinfer::model::ModelFromGguf(f, "fuzz.gguf");
  if (model.ok()) {
    for (const auto& [name, t] : (*model)->tensors) {
      if (t.size_bytes > 0) g_sink = t.data[t.size_bytes - 1];
    }
    auto lm = deepinfer::arch::CreateLlama(**model);
    if (lm.ok()) g_sink = static_cast<uint8_t>((*lm)->config().vocab);
  }
}

void FuzzLlama2c(const uint8_t* data, size_t size) {
  auto header = deepinfer::model::ParseLlama2cHeader(data, size);
  // Reuse the same bytes as a tokenizer; the vocabulary size comes from the first byte so that
  // both the "too few" and "too many records" paths are reachable.
  const int vocab = size > 0 ? data[0] % 64 : 1;
  (void)header;
  (void)deepinfer::model::ParseLlama2cTokenizer(data, size, vocab);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= 4 && data[0] == 'G' && data[1] == 'G' && data[2] == 'U' && data[3] == 'F') {
    FuzzGguf(data, size);
  } else {
    FuzzGguf(data, size);  // the magic check itself
    FuzzLlama2c(data, size);
  }
  return 0;
}
