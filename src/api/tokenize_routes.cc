// POST /tokenize and POST /detokenize in vLLM's shapes (`vllm bench serve` and clients that count
// tokens call them).
//
// Source: vLLM entrypoints/openai protocol (TokenizeCompletionRequest, TokenizeChatRequest,
//   TokenizeResponse {count, max_model_len, tokens, token_strs}, DetokenizeResponse {prompt}).

#include "api/handlers.h"
#include "api/image_inputs.h"
#include "http/errors.h"
#include "protocol/chat_prompt.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

absl::Status RunTokenize(const ServedModel& model, const http::Request& http_request,
                         http::ResponseWriter& writer) {
  DI_ASSIGN_OR_RETURN(
      TokenizeRequest request,
      ParseTokenizeRequest(http_request.body, ParseLimitsFor(model)));
  DI_RETURN_IF_ERROR(CheckModel(model, request.model));
  std::vector<int32_t> tokens;
  if (request.has_messages) {
    DI_RETURN_IF_ERROR(CheckImagesAllowed(request.messages, model.vision, model.media, false));
    if (CountImages(request.messages) > 0 || !request.add_special_tokens.has_value()) {
      // The same tokens a chat request with these messages, tools and options is charged for,
      // each image expanded to its span.
      DI_ASSIGN_OR_RETURN(ChatPrompt chat,
                          RenderChatPrompt(*model.tokenizer, *model.chat_template,
                                           request.messages, ChatOptionsFor(request.extras),
                                           model.vision ? model.vision->image_token_id : -1));
      if (!chat.image_positions.empty()) {
        DI_RETURN_IF_ERROR(
            ExpandChatImages(request.messages, *model.vision, model.media, &chat, nullptr));
      }
      tokens = std::move(chat.tokens);
    } else {
      std::vector<tokenizer::ChatMessage> turns;
      for (const ChatMessage& m : request.messages) {
        turns.push_back({m.role == "developer" ? "system" : m.role, m.content});
      }
      tokenizer::ChatOptions options;
      options.add_generation_prompt = request.extras.add_generation_prompt;
      options.continue_final_message = request.extras.continue_final_message;
      DI_ASSIGN_OR_RETURN(std::string text,
                          tokenizer::RenderChat(*model.chat_template, turns, options));
      tokens = model.tokenizer->Encode(text, true,
                                       *request.add_special_tokens && model.tokenizer->add_bos());
    }
  } else {
    bool add_bos = request.add_special_tokens.value_or(true) && model.tokenizer->add_bos();
    tokens = model.tokenizer->Encode(request.prompt, true, add_bos);
  }
  util::Json body = util::Json::object();
  body["count"] = tokens.size();
  body["max_model_len"] = model.max_model_len;
  body["tokens"] = tokens;
  if (request.return_token_strs) {
    util::Json strs = util::Json::array();
    for (int32_t id : tokens) strs.push_back(model.tokenizer->TokenPiece(id));
    body["token_strs"] = std::move(strs);
  } else {
    body["token_strs"] = nullptr;
  }
  RespondJson(writer, 200, body);
  return absl::OkStatus();
}

absl::Status RunDetokenize(const ServedModel& model, const http::Request& http_request,
                           http::ResponseWriter& writer) {
  DI_ASSIGN_OR_RETURN(
      DetokenizeRequest request,
      ParseDetokenizeRequest(http_request.body, ParseLimitsFor(model)));
  DI_RETURN_IF_ERROR(CheckModel(model, request.model));
  // Special tokens (BOS, <|im_end|>) are left out, so the text reads like the prompt that was
  // tokenized.
  std::string text = model.tokenizer->Decode(request.tokens, /*skip_special=*/true);
  RespondJson(writer, 200, util::Json{{"prompt", text}});
  return absl::OkStatus();
}

}  // namespace

void HandleTokenize(const ServedModel& model, const http::Request& request,
                    http::ResponseWriter& writer) {
  absl::Status status = RunTokenize(model, request, writer);
  if (!status.ok() && !writer.started()) RespondError(writer, status);
}

void HandleDetokenize(const ServedModel& model, const http::Request& request,
                      http::ResponseWriter& writer) {
  absl::Status status = RunDetokenize(model, request, writer);
  if (!status.ok() && !writer.started()) RespondError(writer, status);
}

}  // namespace deepinfer::api
