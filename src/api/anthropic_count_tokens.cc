#include "api/anthropic_count_tokens.h"

#include <string>

#include "http/errors.h"
#include "protocol/anthropic_types.h"
#include "protocol/chat_prompt.h"
#include "protocol/openai_types.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::api {

void RespondAnthropicError(http::ResponseWriter& writer, const absl::Status& status,
                           const http::Headers& extra) {
  http::ApiError error = http::ApiErrorFromStatus(status);
  writer.log().error = error.code;
  http::Headers headers = {{"Content-Type", "application/json"}};
  headers.insert(headers.end(), extra.begin(), extra.end());
  writer.Respond(error.http_status, headers, util::DumpJson(http::AnthropicErrorJson(error)));
}

namespace {

absl::Status RunCountTokens(const ServedModel& model, const http::Request& http_request,
                            http::ResponseWriter& writer) {
  DI_ASSIGN_OR_RETURN(util::Json body, util::ParseJson(http_request.body));
  if (!body.is_object()) {
    return http::RequestError("", util::codes::kInvalidType,
                              "The request body must be a JSON object.");
  }
  std::string model_name;
  if (auto it = body.find("model"); it != body.end() && !it->is_null()) {
    if (!it->is_string())
      return http::RequestError("model", util::codes::kInvalidType, "'model' must be a string.");
    model_name = it->get<std::string>();
  }
  DI_RETURN_IF_ERROR(CheckModel(model, model_name));
  DI_ASSIGN_OR_RETURN(AnthropicChat chat, ParseAnthropicChat(body));
  DI_ASSIGN_OR_RETURN(ChatPrompt prompt, RenderChatPrompt(*model.tokenizer, *model.chat_template,
                                                       chat.messages, chat.options));
  int64_t total = static_cast<int64_t>(prompt.tokens.size()) +
                  static_cast<int64_t>(chat.num_images) * kDefaultImageTokens;
  RespondJson(writer, 200, util::Json{{"input_tokens", total}});
  return absl::OkStatus();
}

}  // namespace

void HandleAnthropicCountTokens(const ServedModel& model, const http::Request& request,
                                http::ResponseWriter& writer) {
  absl::Status status = RunCountTokens(model, request, writer);
  if (!status.ok() && !writer.started()) RespondAnthropicError(writer, status);
}

}  // namespace deepinfer::api
