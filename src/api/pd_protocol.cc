#include "api/pd_protocol.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "engine/engine.h"
#include "fmt/format.h"
#include "http/errors.h"
#include "util/error_codes.h"
#include "util/json.h"
#include "util/status.h"

namespace deepinfer::api {

namespace codes = util::codes;

absl::StatusOr<PdPrefillRequest> ParsePdPrefillRequest(std::string_view body, int32_t vocab) {
  DI_ASSIGN_OR_RETURN(util::Json j, util::ParseJson(body));
  if (!j.is_object()) {
    return http::RequestError("", codes::kInvalidType, "The body must be a JSON object.");
  }
  const util::Json* ids = util::Member(j, "prompt_token_ids");
  if (ids == nullptr) {
    return http::RequestError("prompt_token_ids", codes::kMissingField,
                              "prompt_token_ids is required.");
  }
  if (!ids->is_array() || ids->empty()) {
    return http::RequestError("prompt_token_ids", codes::kInvalidType,
                              "prompt_token_ids must be a non-empty array of token ids.");
  }
  PdPrefillRequest r;
  r.tokens.reserve(ids->size());
  for (const util::Json& id : *ids) {
    if (!id.is_number_integer()) {
      return http::RequestError("prompt_token_ids", codes::kInvalidType,
                                "prompt_token_ids must hold integers.");
    }
    const int64_t v = id.is_number_unsigned() && id.get<uint64_t>() > INT64_MAX
                          ? -1
                          : id.get<int64_t>();
    if (v < 0 || v >= vocab) {
      return http::RequestError("prompt_token_ids", codes::kInvalidToken,
                                "a token id is outside the vocabulary");
    }
    r.tokens.push_back(static_cast<int32_t>(v));
  }
  if (const util::Json* salt = util::Member(j, "cache_salt"); salt != nullptr) {
    const std::string s = salt->is_string() ? salt->get<std::string>() : "";
    const bool digits = !s.empty() && s.size() <= 20 &&
                        std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    errno = 0;
    const unsigned long long v = digits ? std::strtoull(s.c_str(), nullptr, 10) : 0;
    if (!digits || errno != 0) {
      return http::RequestError("cache_salt", codes::kInvalidValue,
                                "cache_salt must be a decimal string of an unsigned 64-bit value.");
    }
    r.cache_salt = v;
  }
  if (auto id = util::StringMember(j, "request_id")) {
    // It reaches the log: letters, digits and -_.: only.
    for (char c : id->substr(0, 64)) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_' || c == '.' || c == ':';
      r.request_id += ok ? c : '?';
    }
  }
  return r;
}

std::string PdPrefillRequestBody(const PdPrefillRequest& request) {
  return util::DumpJson(util::Json{{"prompt_token_ids", request.tokens},
                                   {"cache_salt", std::to_string(request.cache_salt)},
                                   {"request_id", request.request_id}});
}

std::optional<PdPrefillAnswer> ParsePdPrefillAnswer(std::string_view body, size_t prompt_tokens) {
  const util::Json j = util::ParseJsonOrDiscarded(body);
  if (!j.is_object()) return std::nullopt;
  std::optional<std::string> name = util::StringMember(j, "checkpoint");
  std::optional<int64_t> n = util::IntMember(j, "num_tokens");
  if (!name || !n || *n < 0 || static_cast<uint64_t>(*n) > prompt_tokens) return std::nullopt;
  if (name->empty() ? *n != 0 : !engine::ParseCheckpointFileName(*name).has_value()) {
    return std::nullopt;
  }
  PdPrefillAnswer a;
  a.checkpoint = *std::move(name);
  a.num_tokens = static_cast<int32_t>(*n);
  if (const util::Json* c = util::Member(j, "computed"); c != nullptr && c->is_boolean()) {
    a.computed = c->get<bool>();
  }
  if (const util::Json* s = util::Member(j, "prefill_seconds"); s != nullptr && s->is_number()) {
    const double v = s->get<double>();
    a.prefill_seconds = v > 0 && v < 1e9 ? v : 0;
  }
  return a;
}

std::string PdPrefillAnswerBody(const PdPrefillAnswer& answer) {
  return util::DumpJson(util::Json{{"checkpoint", answer.checkpoint},
                                   {"num_tokens", answer.num_tokens},
                                   {"computed", answer.computed},
                                   {"prefill_seconds", answer.prefill_seconds}});
}

}  // namespace deepinfer::api
