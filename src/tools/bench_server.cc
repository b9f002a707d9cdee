#include "tools/bench_server.h"

#include "fmt/format.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::tools {
namespace {

std::string Snippet(const std::string& body) {
  std::string s = body.substr(0, 200);
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

// Reads a token id array; returns false when `j` is not an array of integers.
bool ReadIds(const util::Json* j, std::vector<int32_t>* out) {
  if (j == nullptr || !j->is_array()) return false;
  out->clear();
  for (const util::Json& v : *j) {
    // llama.cpp's server answers {"id": 1, "piece": "x"} objects when asked for pieces.
    const util::Json* id = v.is_object() ? util::Member(v, "id") : &v;
    if (id == nullptr || !id->is_number_integer()) return false;
    out->push_back(id->get<int32_t>());
  }
  return true;
}

}  // namespace

const char* DialectName(TokenizerDialect dialect) {
  switch (dialect) {
    case TokenizerDialect::kVllm:
      return "vllm";
    case TokenizerDialect::kLlamaCpp:
      return "llama.cpp";
    case TokenizerDialect::kLlamaCppPython:
      return "llama-cpp-python";
    case TokenizerDialect::kNone:
      break;
  }
  return "none";
}

absl::StatusOr<util::Json> ServerClient::PostJson(const std::string& path,
                                                  const std::string& body) {
  DI_ASSIGN_OR_RETURN(http::ClientResponse r, HttpFetch(base_, "POST", path, body, options_));
  if (r.status != 200) {
    return UnavailableError(util::codes::kHttpError,
                            fmt::format("POST {}: HTTP {}: {}", path, r.status, Snippet(r.body)));
  }
  util::Json j = util::ParseJsonOrDiscarded(r.body);
  if (j.is_discarded()) {
    return UnavailableError(util::codes::kBadResponse,
                            fmt::format("POST {}: not JSON: {}", path, Snippet(r.body)));
  }
  return j;
}

absl::Status ServerClient::Probe(const std::string& model) {
  DI_ASSIGN_OR_RETURN(http::ClientResponse r, HttpFetch(base_, "GET", "/v1/models", "", options_));
  if (r.status != 200) {
    return UnavailableError(util::codes::kHttpError,
                            fmt::format("GET /v1/models: HTTP {}: {}", r.status, Snippet(r.body)));
  }
  util::Json models = util::ParseJsonOrDiscarded(r.body);
  const util::Json* data = util::Member(models, "data");
  if (data == nullptr || !data->is_array() || data->empty()) {
    return UnavailableError(util::codes::kBadResponse, "GET /v1/models: no models listed");
  }
  const util::Json* chosen = nullptr;
  std::string ids;
  for (const util::Json& m : *data) {
    std::string id = util::StringMember(m, "id").value_or("");
    ids += (ids.empty() ? "" : ", ") + id;
    if ((model.empty() && chosen == nullptr) || id == model) chosen = &m;
  }
  if (chosen == nullptr) {
    return NotFoundError(util::codes::kModelNotFound,
                         fmt::format("the server does not serve '{}' (it lists: {})", model, ids));
  }
  info_.model = util::StringMember(*chosen, "id").value_or(model);
  info_.max_model_len = util::IntMember(*chosen, "max_model_len").value_or(0);
  std::string owner = util::StringMember(*chosen, "owned_by").value_or("");
  if (owner == "deepinfer" || owner == "vllm") {
    info_.kind = owner;
  } else if (owner == "llamacpp") {
    info_.kind = "llama.cpp";
  } else {
    info_.kind = "openai";
  }

  // The first dialect that tokenizes a short text to a non-empty list wins.
  for (TokenizerDialect d :
       {TokenizerDialect::kVllm, TokenizerDialect::kLlamaCpp, TokenizerDialect::kLlamaCppPython}) {
    auto ids_or = TokenizeWith(d, "Hello world");
    if (ids_or.ok() && !ids_or->empty()) {
      info_.tokenizer = d;
      break;
    }
  }
  if (info_.tokenizer == TokenizerDialect::kLlamaCppPython) info_.kind = "llama-cpp-python";
  if (info_.kind == "llama.cpp" && info_.max_model_len == 0) {
    // llama.cpp's server states its context size in /props.
    auto props = HttpFetch(base_, "GET", "/props", "", options_);
    if (props.ok() && props->status == 200) {
      util::Json p = util::ParseJsonOrDiscarded(props->body);
      if (const util::Json* g = util::Member(p, "default_generation_settings")) {
        info_.max_model_len = util::IntMember(*g, "n_ctx").value_or(0);
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> ServerClient::TokenizeWith(TokenizerDialect dialect,
                                                                const std::string& text) {
  std::vector<int32_t> ids;
  switch (dialect) {
    case TokenizerDialect::kVllm: {
      DI_ASSIGN_OR_RETURN(util::Json j,
                          PostJson("/tokenize", util::DumpJson(util::Json{{"model", info_.model},
                                                                          {"prompt", text}})));
      if (!ReadIds(util::Member(j, "tokens"), &ids)) break;
      return ids;
    }
    case TokenizerDialect::kLlamaCpp: {
      // add_special: count BOS as a completion request would.
      DI_ASSIGN_OR_RETURN(util::Json j,
                          PostJson("/tokenize", util::DumpJson(util::Json{{"content", text},
                                                                          {"add_special", true}})));
      if (!ReadIds(util::Member(j, "tokens"), &ids)) break;
      return ids;
    }
    case TokenizerDialect::kLlamaCppPython: {
      DI_ASSIGN_OR_RETURN(
          util::Json j,
          PostJson("/extras/tokenize",
                   util::DumpJson(util::Json{{"model", info_.model}, {"input", text}})));
      if (!ReadIds(util::Member(j, "tokens"), &ids)) break;
      return ids;
    }
    case TokenizerDialect::kNone:
      return UnimplementedError(util::codes::kNoTokenizerEndpoint,
                                "the server has no tokenize endpoint the bench knows");
  }
  return UnavailableError(util::codes::kBadResponse, "tokenize: no token list in the answer");
}

absl::StatusOr<std::vector<int32_t>> ServerClient::Tokenize(const std::string& text) {
  return TokenizeWith(info_.tokenizer, text);
}

absl::StatusOr<std::string> ServerClient::Detokenize(const std::vector<int32_t>& tokens) {
  const char* path = "/detokenize";
  const char* field = "prompt";
  util::Json body = util::Json{{"tokens", tokens}};
  switch (info_.tokenizer) {
    case TokenizerDialect::kVllm:
      body["model"] = info_.model;
      break;
    case TokenizerDialect::kLlamaCpp:
      field = "content";
      break;
    case TokenizerDialect::kLlamaCppPython:
      path = "/extras/detokenize";
      field = "text";
      body["model"] = info_.model;
      break;
    case TokenizerDialect::kNone:
      return UnimplementedError(util::codes::kNoTokenizerEndpoint,
                                "the server has no detokenize endpoint the bench knows");
  }
  DI_ASSIGN_OR_RETURN(util::Json j, PostJson(path, util::DumpJson(body)));
  auto text = util::StringMember(j, field);
  if (!text)
    return UnavailableError(util::codes::kBadResponse, "detokenize: no text in the answer");
  return *text;
}

}  // namespace deepinfer::tools
