#include "api/anthropic_count_tokens.h"

#include "api/image_inputs.h"
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

absl::StatusOr<int64_t> CountChatTokens(const ServedModel& model,
                                        const std::vector<ChatMessage>& messages,
                                        const tokenizer::ChatOptions& options) {
  if (model.vision == nullptr) {
    // No vision tower: the image spans cannot be planned; each image counts the reserve.
    DI_ASSIGN_OR_RETURN(ChatPrompt prompt,
                        RenderChatPrompt(*model.tokenizer, *model.chat_template, messages, options,
                                         kCountOnlyImageToken));
    const int64_t images = static_cast<int64_t>(prompt.image_positions.size());
    return static_cast<int64_t>(prompt.tokens.size()) - images + images * kDefaultImageTokens;
  }
  DI_RETURN_IF_ERROR(CheckImagesAllowed(messages, model.vision, model.media, false));
  DI_ASSIGN_OR_RETURN(ChatPrompt prompt,
                      RenderChatPrompt(*model.tokenizer, *model.chat_template, messages, options,
                                       model.vision->image_token_id));
  if (!prompt.image_positions.empty()) {
    DI_RETURN_IF_ERROR(ExpandChatImages(messages, *model.vision, model.media, &prompt, nullptr));
  }
  return static_cast<int64_t>(prompt.tokens.size());
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
  DI_ASSIGN_OR_RETURN(int64_t total, CountChatTokens(model, chat.messages, chat.options));
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
