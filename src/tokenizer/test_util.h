#pragma once

// Test-only helpers shared by the tokenizer tests: model paths, cached tokenizers and gzip
// reading (util::ReadGzipFile). Not part of the library.

#include <string>

#include "absl/status/statusor.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer::testing {

// $DEEPINFER_CACHE (default $HOME/.cache/deepinfer) + /models/SmolLM2-135M-Instruct.Q4_1.gguf.
std::string SmolLm2Path();
// The stories260K folder under /work/shared/models (DI_SOURCE_DIR/../shared/models).
std::string Stories260kDir();
// A path under the repository root.
std::string SourcePath(const std::string& relative);

// The SmolLM2 model (loaded once), or nullptr when the file is absent.
const model::Model* SmolLm2Model();
// The SmolLM2 tokenizer (built once), or nullptr when the model file is absent.
const Tokenizer* SmolLm2Tokenizer();
// The stories260K model (loaded once), or nullptr when the files are absent.
const model::Model* Stories260kModel();
const Tokenizer* Stories260kTokenizer();

}  // namespace deepinfer::tokenizer::testing
