#include "api/served_model.h"

#include <algorithm>
#include <ctime>
#include <random>

#include "http/errors.h"

namespace deepinfer::api {

absl::StatusOr<int32_t> ResolveMaxTokens(const ServedModel& model, int64_t prompt_tokens,
                                         std::optional<int32_t> requested,
                                         std::string_view prompt_param) {
  const int64_t window = model.max_model_len;
  if (prompt_tokens >= window) {
    return http::ContextLengthError(prompt_param, prompt_tokens, requested.value_or(1), window);
  }
  if (requested) {
    if (prompt_tokens + *requested > window) {
      return http::ContextLengthError("max_tokens", prompt_tokens, *requested, window);
    }
    return std::min(*requested, model.max_output_tokens);
  }
  return static_cast<int32_t>(std::min<int64_t>(model.max_output_tokens, window - prompt_tokens));
}

ParseLimits ParseLimitsFor(const ServedModel& model) {
  ParseLimits limits;
  limits.vocab_size = model.tokenizer->vocab_size();
  limits.force_include_usage = model.force_include_usage;
  return limits;
}

absl::Status CheckModel(const ServedModel& model, const std::string& name) {
  if (name.empty() || name == model.served_model_name) return absl::OkStatus();
  return http::ModelNotFoundError(name, model.served_model_name);
}

std::string NewRequestId(std::string_view prefix) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  return id;
}

int64_t UnixNow() { return static_cast<int64_t>(std::time(nullptr)); }

void RespondJson(http::ResponseWriter& writer, int status, const util::Json& body) {
  writer.Respond(status, {{"Content-Type", "application/json"}}, util::DumpJson(body));
}

void RespondError(http::ResponseWriter& writer, const absl::Status& status,
                  const http::Headers& extra) {
  http::ApiError error = http::ApiErrorFromStatus(status);
  writer.log().error = error.code;
  http::Headers headers = {{"Content-Type", "application/json"}};
  headers.insert(headers.end(), extra.begin(), extra.end());
  writer.Respond(error.http_status, headers, http::ErrorBody(error));
}

}  // namespace deepinfer::api
