// libFuzzer target for the llama2.c readers: the checkpoint header and the weight layout it
// implies (model::ModelFromLlama2c), the tok*.bin tokenizer (ParseLlama2cTokenizer) and the
// score-BPE tokenizer built from it, which then encodes and decodes a little hostile text. A
// malformed file must give an error status, never a crash, an out-of-bounds view or a huge
// allocation.
//
// Input layout: a 4-byte little-endian length N, then N bytes of checkpoint, then the
// tokenizer file (the rest). Seeds: tests/fuzz/make_seeds.py.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "model/llama2c.h"
#include "tokenizer/tokenizer.h"

namespace {

volatile uint8_t g_sink;

void FuzzTokenizer(const deepinfer::model::TokenizerData& data) {
  auto tok = deepinfer::tokenizer::CreateTokenizer(data);
  if (!tok.ok()) return;
  const deepinfer::tokenizer::Tokenizer& t = **tok;
  static const char* const kTexts[] = {"Once upon a time",
                                       " a b ab",
                                       "",
                                       "  \n\t",
                                       "\xff\xfe\xc3(\xe2\x82",
                                       "<0x41><s></s><unk>",
                                       "caf\xc3\xa9 \xf0\x9f\x98\x80 \xe6\x97\xa5"};
  for (const char* text : kTexts) {
    for (bool special : {false, true}) {
      std::vector<int32_t> ids = t.Encode(text, special);
      for (int32_t id : ids) {
        if (id < 0 || id >= t.vocab_size()) __builtin_trap();
      }
      std::string back = t.Decode(ids, /*skip_special=*/special);
      if (!back.empty()) g_sink = static_cast<uint8_t>(back.back());
    }
  }
  // Every piece decodes on its own, in and out of range.
  for (int32_t id = -1; id <= t.vocab_size() && id < 300; ++id) {
    std::string out;
    t.AppendDecoded(1, id, false, &out);
    (void)t.TokenPiece(id);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  uint32_t n = 0;
  if (size >= 4) std::memcpy(&n, data, 4);
  const uint8_t* rest = data + (size >= 4 ? 4 : size);
  const size_t rest_size = size >= 4 ? size - 4 : 0;
  const size_t ckpt_size = n < rest_size ? n : rest_size;
  const uint8_t* tok = rest + ckpt_size;
  const size_t tok_size = rest_size - ckpt_size;

  // Copies, so that ASan catches a view that reads past its own part of the input.
  std::vector<uint8_t> ckpt(rest, rest + ckpt_size);
  int vocab = size > 0 ? data[size - 1] % 64 : 1;
  auto model = deepinfer::model::ModelFromLlama2c(ckpt.data(), ckpt.size(), "fuzz.bin");
  if (model.ok()) {
    vocab = (*model)->config.vocab;
    for (const auto& [name, t] : (*model)->tensors) {
      if (t.size_bytes > 0) g_sink = t.data[0] ^ t.data[t.size_bytes - 1];
    }
  }
  std::vector<uint8_t> tok_bytes(tok, tok + tok_size);
  auto tokenizer =
      deepinfer::model::ParseLlama2cTokenizer(tok_bytes.data(), tok_bytes.size(), vocab);
  if (tokenizer.ok()) {
    if (static_cast<int>(tokenizer->tokens.size()) != vocab) __builtin_trap();
    FuzzTokenizer(*tokenizer);
  }
  return 0;
}
