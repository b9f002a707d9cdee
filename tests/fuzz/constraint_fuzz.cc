// Feeds arbitrary bytes as client-written constraints to the grammar compiler
// (src/constraint/grammar.h: JSON schemas, regular expressions, EBNF grammars, choices, structural
// tags, a reasoning prefix) and as tool definitions to the enforced tool choice
// (src/api/tool_constraint.h), then walks what compiled for a few tokens. Whatever the bytes:
// no crash, an error is invalid_constraint (or the tool choice's own 400s), and a compiled
// constraint never strands the walk.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "constraint/grammar.h"
#include "protocol/tool_constraint.h"
#include "tokenizer/piece_tokenizer_testing.h"
#include "util/status.h"

namespace {

using deepinfer::constraint::ConstraintKind;
using deepinfer::constraint::ConstraintSpec;

// Every byte, a control token, an end-of-generation token and a few longer pieces, so that
// masks mix single bytes with multi-byte tokens.
const deepinfer::tokenizer::Tokenizer& Vocabulary() {
  static const auto* tok = [] {
    std::vector<std::string> pieces = {"<s>", "</s>"};
    for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
    for (const char* p : {"{\"", "\":", "\", \"", "true", "null", "</think>", "<｜DSML｜",
                          "<｜tool▁call▁begin｜>", "invoke", "\xE2\x82\xAC", "\xED\xA0\x80"}) {
      pieces.push_back(p);
    }
    return new deepinfer::tokenizer::testing::PieceTokenizer(std::move(pieces), 0, 1);
  }();
  return *tok;
}

deepinfer::constraint::GrammarCompiler& Compiler() {
  static auto* compiler =
      deepinfer::constraint::GrammarCompiler::Create(Vocabulary(), Vocabulary().vocab_size() + 3)
          .release();
  return *compiler;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    out.push_back(text.substr(start, nl - start));
  }
  out.push_back(text.substr(start));
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2 || size > 4096) return 0;
  const uint8_t mode = data[0];
  const uint8_t walk_seed = data[1];
  const std::string text(reinterpret_cast<const char*>(data + 2), size - 2);
  ConstraintSpec spec;
  switch (mode % 8) {
    case 0: spec = {ConstraintKind::kJsonSchema, text}; break;
    case 1: spec = {ConstraintKind::kRegex, text}; break;
    case 2: spec = {ConstraintKind::kGrammar, text}; break;
    case 3: spec = {ConstraintKind::kChoice, "", Lines(text)}; break;
    case 4: spec = {ConstraintKind::kStructuralTag, text}; break;
    case 5: spec = {ConstraintKind::kJsonObject, ""}; break;
    default: {
      // Tool definitions, one per line; the tool choice and the format from the mode byte.
      using deepinfer::api::ToolChoice;
      ToolChoice choice;
      choice.mode = (mode & 0x10) ? ToolChoice::Mode::kNamed : ToolChoice::Mode::kRequired;
      choice.name = "f";
      choice.parallel = (mode & 0x20) != 0;
      const auto format = static_cast<deepinfer::api::ToolCallFormat>((mode >> 6) % 5 + 1);
      auto tool = deepinfer::api::ToolChoiceConstraint(format, Lines(text), choice);
      if (!tool.ok()) {
        const std::string code(deepinfer::ErrorCodeOf(tool.status()));
        if (code != "invalid_value" && code != "unsupported_value") __builtin_trap();
        return 0;
      }
      if (!tool->has_value()) __builtin_trap();
      spec = **tool;
    }
  }
  if (mode & 0x08) spec.reasoning_end = "</think>";
  auto compiled = Compiler().Compile(spec);
  if (!compiled.ok()) {
    if (deepinfer::ErrorCodeOf(compiled.status()) != "invalid_constraint") __builtin_trap();
    return 0;
  }
  deepinfer::constraint::ConstraintMatcher matcher(*compiled);
  std::vector<uint32_t> mask(static_cast<size_t>(matcher.MaskWords()));
  uint32_t pick_seed = walk_seed;
  for (int step = 0; step < 32 && !matcher.IsTerminated(); ++step) {
    const int32_t allowed = matcher.FillMask(mask.data());
    if (allowed <= 0) __builtin_trap();  // a live matcher always allows something
    int32_t k = static_cast<int32_t>(pick_seed % static_cast<uint32_t>(allowed));
    pick_seed = pick_seed * 1103515245u + 12345u;
    int32_t pick = -1;
    for (int32_t id = 0; id < Compiler().logits_size() && pick < 0; ++id) {
      if (((mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u) && k-- == 0) pick = id;
    }
    if (pick < 0 || pick >= Vocabulary().vocab_size()) __builtin_trap();  // padded ids never
    if (!matcher.Accept(pick)) __builtin_trap();
  }
  return 0;
}
