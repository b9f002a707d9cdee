#pragma once

// Route handlers that need the loaded model. Each answers exactly once through `writer`:
// validation and context-length errors go out as complete JSON error responses before any
// streamed byte; failures after a stream started go out as an in-band `data: {"error": ...}`
// frame followed by `data: [DONE]`.

#include "api/route.h"
#include "api/served_model.h"
#include "http/server.h"

namespace deepinfer::api {

// POST /v1/chat/completions
void HandleChatCompletions(const ServedModel& model, const http::Request& request,
                           http::ResponseWriter& writer);
// POST /v1/completions
void HandleCompletions(const ServedModel& model, const http::Request& request,
                       http::ResponseWriter& writer);
// POST /v1/responses (OpenAI Responses API, stateless: no stored responses).
void HandleResponses(const ServedModel& model, const http::Request& request,
                     http::ResponseWriter& writer);
// POST /v1/messages (Anthropic shape: content blocks, named SSE events, Anthropic errors).
void HandleAnthropicMessages(const ServedModel& model, const http::Request& request,
                             http::ResponseWriter& writer);
// POST /tokenize and POST /detokenize (vLLM shapes).
void HandleTokenize(const ServedModel& model, const http::Request& request,
                    http::ResponseWriter& writer);
void HandleDetokenize(const ServedModel& model, const http::Request& request,
                      http::ResponseWriter& writer);

}  // namespace deepinfer::api
