#pragma once

// What `deepinfer bench` learns about the server under test, and its tokenizer endpoints in the
// three dialects the bench speaks: vLLM / deepinfer (POST /tokenize {model, prompt}), llama.cpp's
// server (POST /tokenize {content}) and llama-cpp-python's server (POST /extras/tokenize {input}).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/bench_http.h"
#include "util/json.h"

namespace deepinfer::tools {

// Tokenizes and detokenizes with the server's own tokenizer. Tokenize counts what the server
// charges for a prompt, BOS included when the model adds one.
class TokenizerApi {
 public:
  virtual ~TokenizerApi() = default;
  virtual absl::StatusOr<std::vector<int32_t>> Tokenize(const std::string& text) = 0;
  virtual absl::StatusOr<std::string> Detokenize(const std::vector<int32_t>& tokens) = 0;
};

enum class TokenizerDialect { kNone, kVllm, kLlamaCpp, kLlamaCppPython };

const char* DialectName(TokenizerDialect dialect);

struct ServerInfo {
  std::string model;          // id sent in requests
  std::string kind;           // "deepinfer", "vllm", "llama.cpp", "llama-cpp-python", "openai"
  int64_t max_model_len = 0;  // 0 when the server does not say
  TokenizerDialect tokenizer = TokenizerDialect::kNone;
};

class ServerClient : public TokenizerApi {
 public:
  ServerClient(http::Url base, HttpOptions options)
      : base_(std::move(base)), options_(std::move(options)) {}

  // GET /v1/models (picks `model`, or the first model when empty), then finds which tokenizer
  // dialect answers.
  // Errors: Unavailable (server unreachable, non-200), NotFound "model_not_found" (the server
  //   does not list `model`).
  absl::Status Probe(const std::string& model);

  absl::StatusOr<std::vector<int32_t>> Tokenize(const std::string& text) override;
  absl::StatusOr<std::string> Detokenize(const std::vector<int32_t>& tokens) override;

  const ServerInfo& info() const { return info_; }
  const http::Url& base() const { return base_; }
  const HttpOptions& options() const { return options_; }

 private:
  absl::StatusOr<util::Json> PostJson(const std::string& path, const std::string& body);
  absl::StatusOr<std::vector<int32_t>> TokenizeWith(TokenizerDialect dialect,
                                                    const std::string& text);

  http::Url base_;
  HttpOptions options_;
  ServerInfo info_;
};

}  // namespace deepinfer::tools
