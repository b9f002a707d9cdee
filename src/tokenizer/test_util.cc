#include "tokenizer/test_util.h"


#include <cstdlib>
#include <filesystem>
#include <memory>

#include "util/status.h"

namespace deepinfer::tokenizer::testing {

std::string SmolLm2Path() {
  std::string cache;
  if (const char* env = std::getenv("DEEPINFER_CACHE"); env != nullptr && *env != '\0') {
    cache = env;
  } else {
    const char* home = std::getenv("HOME");
    cache = std::string(home != nullptr ? home : "") + "/.cache/deepinfer";
  }
  return cache + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::string Stories260kDir() {
  return std::string(DI_SOURCE_DIR) + "/../shared/models/stories260K";
}

std::string SourcePath(const std::string& relative) {
  return std::string(DI_SOURCE_DIR) + "/" + relative;
}

const model::Model* SmolLm2Model() {
  static const model::Model* model = []() -> const model::Model* {
    if (!std::filesystem::exists(SmolLm2Path())) return nullptr;
    auto m = model::LoadModel(SmolLm2Path());
    if (!m.ok()) {
      std::fprintf(stderr, "loading %s: %s\n", SmolLm2Path().c_str(),
                   OneLineError(m.status()).c_str());
      std::abort();
    }
    return m->release();
  }();
  return model;
}

const Tokenizer* SmolLm2Tokenizer() {
  static const Tokenizer* tokenizer = []() -> const Tokenizer* {
    const model::Model* m = SmolLm2Model();
    if (m == nullptr) return nullptr;
    auto t = CreateTokenizer(m->tokenizer);
    if (!t.ok()) {
      std::fprintf(stderr, "CreateTokenizer: %s\n", OneLineError(t.status()).c_str());
      std::abort();
    }
    return t->release();
  }();
  return tokenizer;
}

const model::Model* Stories260kModel() {
  static const model::Model* model = []() -> const model::Model* {
    const std::string path = Stories260kDir() + "/stories260K.bin";
    if (!std::filesystem::exists(path)) return nullptr;
    auto m = model::LoadModel(path, Stories260kDir() + "/tok512.bin");
    if (!m.ok()) {
      std::fprintf(stderr, "loading %s: %s\n", path.c_str(), OneLineError(m.status()).c_str());
      std::abort();
    }
    return m->release();
  }();
  return model;
}

const Tokenizer* Stories260kTokenizer() {
  static const Tokenizer* tokenizer = []() -> const Tokenizer* {
    const model::Model* m = Stories260kModel();
    if (m == nullptr) return nullptr;
    auto t = CreateTokenizer(m->tokenizer);
    if (!t.ok()) {
      std::fprintf(stderr, "CreateTokenizer: %s\n", OneLineError(t.status()).c_str());
      std::abort();
    }
    return t->release();
  }();
  return tokenizer;
}

}  // namespace deepinfer::tokenizer::testing
