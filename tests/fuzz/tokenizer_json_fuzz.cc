// libFuzzer target for Hugging Face tokenizers: tokenizer.json and tokenizer_config.json
// (tokenizer::ParseHfTokenizer), the tokenizer built from them (CreateHfTokenizer: vocabulary,
// merges, added tokens, the regex pre-tokenizer), a little encoding and decoding, and the Engram
// token classes of the vocabulary and of the text (BuildEngramTokenMap, NormalizeEngramKey). A
// malformed or hostile file must give an error status, never a crash, a hang or a huge allocation.
//
// Input layout: tokenizer.json, a NUL byte, tokenizer_config.json, a NUL byte, then text to
// encode (JSON text holds no raw NUL, so the split is unambiguous). Missing parts are empty.
// Seeds: tests/fuzz/make_seeds.py.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/engram_token_map.h"
#include "tokenizer/hf_tokenizer.h"

namespace {

namespace dt = deepinfer::tokenizer;

std::string_view Next(std::string_view* rest) {
  const size_t nul = rest->find('\0');
  std::string_view part = rest->substr(0, nul);
  *rest = nul == std::string_view::npos ? std::string_view() : rest->substr(nul + 1);
  return part;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  const std::string_view tokenizer_json = Next(&rest);
  const std::string_view config_json = Next(&rest);
  const std::string_view text = rest;

  (void)dt::NormalizeEngramKey(text);
  auto spec = dt::ParseHfTokenizer(tokenizer_json, config_json);
  if (!spec.ok()) return 0;
  if (spec->model_vocab.size() > spec->data.tokens.size()) __builtin_trap();
  auto tok = dt::CreateHfTokenizer(*spec);
  if (!tok.ok()) return 0;
  const dt::Tokenizer& t = **tok;
  for (std::string_view s :
       {text, std::string_view("Hello, world! 123 \xe4\xbd\xa0\xe5\xa5\xbd \xff")}) {
    for (bool special : {false, true}) {
      std::vector<int32_t> ids = t.Encode(s, special);
      for (int32_t id : ids) {
        if (id < 0 || id >= t.vocab_size()) __builtin_trap();
      }
      (void)t.Decode(ids, /*skip_special=*/!special);
    }
  }
  for (int32_t id = -1; id <= t.vocab_size() && id < 300; ++id) {
    (void)t.TokenPiece(id);
    (void)t.TokenEntry(id);
    (void)t.IsSpecial(id);
  }
  if (t.vocab_size() <= 4096) {
    auto map = dt::BuildEngramTokenMap(t);
    if (!map.ok() || static_cast<int32_t>(map->class_of.size()) != t.vocab_size()) __builtin_trap();
    for (int32_t c : map->class_of) {
      if (c < 0 || c >= map->num_classes) __builtin_trap();
    }
  }
  return 0;
}
