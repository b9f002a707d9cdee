// Writes the seed corpus for gguf_fuzz (tiny GGUF files, no model weights) into the folder given
// as the only argument. The committed seeds in tests/fuzz/corpus/gguf/ were made with it:
//   ./make_gguf_seeds tests/fuzz/corpus/gguf

#include <cstdio>
#include <string>
#include <vector>

#include "model/gguf_test_util.h"

namespace {

using deepinfer::model::GgufType;
using namespace deepinfer::model::testing;  // NOLINT: test helpers

std::string EveryType() {
  GgufBuilder b;
  double f64 = 2.5;
  b.Raw("u8", GgufType::kUint8, U8(7))
      .Raw("i8", GgufType::kInt8, U8(0xfe))
      .Raw("u16", GgufType::kUint16, std::string("\x01\x02", 2))
      .Raw("i16", GgufType::kInt16, std::string("\xff\xff", 2))
      .U32Kv("u32", 30)
      .I32Kv("i32", -3)
      .F32Kv("f32", 1e-5f)
      .BoolKv("bool", true)
      .Str("str", "llama")
      .U64Kv("u64", 1ull << 40)
      .Raw("i64", GgufType::kInt64, U64(static_cast<uint64_t>(-9)))
      .Raw("f64", GgufType::kFloat64, std::string(reinterpret_cast<const char*>(&f64), 8))
      .StrArray("strs", {"a", "bc", ""})
      .I32Array("ints", {1, 2, 3})
      .F32Array("floats", {0.5f})
      .Raw("nested", GgufType::kArray,
           TypeId(GgufType::kArray) + U64(2) + TypeId(GgufType::kInt32) + U64(1) + U32(5) +
               TypeId(GgufType::kString) + U64(1) + GStr("x"));
  b.Tensor("f32", 0, {4, 2}).Tensor("q8", 8, {32}).Tensor("f16", 1, {2, 1, 1, 3});
  return b.Build();
}

std::string TinyLlamaWithTemplate() {
  GgufBuilder b;
  b.Str("general.architecture", "llama")
      .U32Kv("llama.block_count", 1)
      .U32Kv("llama.context_length", 64)
      .U32Kv("llama.embedding_length", 32)
      .U32Kv("llama.feed_forward_length", 32)
      .U32Kv("llama.attention.head_count", 4)
      .U32Kv("llama.attention.head_count_kv", 2)
      .F32Kv("llama.attention.layer_norm_rms_epsilon", 1e-5f)
      .F32Kv("llama.rope.freq_base", 10000.0f)
      .Str("tokenizer.ggml.model", "gpt2")
      .Str("tokenizer.ggml.pre", "smollm")
      .StrArray("tokenizer.ggml.tokens", {"<|endoftext|>", "<|im_end|>", "a", "b"})
      .I32Array("tokenizer.ggml.token_type", {3, 3, 1, 1})
      .StrArray("tokenizer.ggml.merges", {"a b"})
      .U32Kv("tokenizer.ggml.eos_token_id", 1)
      .BoolKv("tokenizer.ggml.add_bos_token", false)
      .Str("tokenizer.chat_template", "{{ messages }}");
  b.Tensor("token_embd.weight", 8, {32, 4})
      .Tensor("blk.0.attn_norm.weight", 0, {32})
      .Tensor("blk.0.attn_q.weight", 2, {32, 32})
      .Tensor("blk.0.attn_k.weight", 3, {32, 16})
      .Tensor("blk.0.attn_v.weight", 1, {32, 16})
      .Tensor("blk.0.attn_output.weight", 2, {32, 32})
      .Tensor("blk.0.ffn_norm.weight", 0, {32})
      .Tensor("blk.0.ffn_gate.weight", 2, {32, 32})
      .Tensor("blk.0.ffn_up.weight", 2, {32, 32})
      .Tensor("blk.0.ffn_down.weight", 2, {32, 32})
      .Tensor("output_norm.weight", 0, {32});
  return b.Build();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output folder>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  WriteBytes(dir + "/empty_v3.gguf", GgufBuilder().Build());
  WriteBytes(dir + "/empty_v2.gguf", GgufBuilder().SetVersion(2).Build());
  WriteBytes(dir + "/every_type.gguf", EveryType());
  WriteBytes(dir + "/align64.gguf", GgufBuilder()
                                        .SetAlignment(64)
                                        .U32Kv("general.alignment", 64)
                                        .Tensor("a", 0, {3})
                                        .Tensor("b", 30, {5})
                                        .Build());
  WriteBytes(dir + "/tiny_llama.gguf", TinyLlamaWithTemplate());
  return 0;
}
