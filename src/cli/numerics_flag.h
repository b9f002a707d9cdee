#pragma once

#include <memory>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "arch/causal_lm.h"

namespace deepinfer::cli {

// --numerics auto|fast|ggml|deepseek-qat for generate and serve: `out` stays unset for auto
// (the model's default, arch::CausalLm::default_numerics).
inline void AddNumericsOption(CLI::App* cmd, std::optional<arch::Numerics>* out) {
  auto name = std::make_shared<std::string>("auto");
  cmd->add_option("--numerics", *name,
                  "forward-pass arithmetic: auto (default: deepseek-qat for DeepSeek-V4.1 and for "
                  "a DeepSeek-V4 checkpoint in the released FP8/FP4 formats, else fast), fast, ggml "
                  "(bit-identical to llama.cpp's CPU backend, Llama models, one sequence at a time; "
                  "docs/parity.md) or deepseek-qat (DeepSeek-V4 / V4.1 cached values "
                  "fake-quantized as DeepSeek's inference code does; docs/deepseek.md)")
      ->check(CLI::IsMember({"auto", "fast", "ggml", "deepseek-qat"}))
      ->capture_default_str()
      // The lambda owns the bound string, which must outlive the parse.
      ->each([out, name](const std::string& v) { *out = arch::NumericsFromName(v); });
}

}  // namespace deepinfer::cli
