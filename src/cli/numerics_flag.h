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

// --kv-cache-dtype f32|f16|bf16 (also float32/float16/bfloat16, vLLM's spellings; "auto" is
// f32) for generate and serve.
inline void AddKvCacheDtypeOption(CLI::App* cmd, kernels::KvDtype* out) {
  auto name = std::make_shared<std::string>("auto");
  cmd->add_option("--kv-cache-dtype", *name,
                  "element type of the KV cache: auto (f32), f32, f16 or bf16; the 16-bit types "
                  "halve its memory per token and the bytes attention reads (Llama-family "
                  "models with fast numerics; docs/engine.md)")
      ->check(CLI::IsMember({"auto", "f32", "float32", "f16", "float16", "bf16", "bfloat16"}))
      ->capture_default_str()
      ->each([out, name](const std::string& v) {
        *out = kernels::KvDtypeFromName(v).value_or(kernels::KvDtype::kF32);
      });
}

}  // namespace deepinfer::cli
