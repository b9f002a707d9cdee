#pragma once

// The one sequence every text-generation route runs (chat completions, completions, Responses,
// Anthropic messages), and the loop that drives a Generation while watching the client.
//
// ServeRoute runs, in this order:
//   1. Parse     the body into the route's request type (Route::Parse); images are checked
//                against the server (CheckImagesAllowed: P/D decode side, vision tower, count)
//                before anything is fetched;
//   2. CheckModel the request's model name against the served one;
//   3. Render    the prompts to token ids (Route::Render: a chat template, or the prompts as
//   given), and compile the output constraint (Route::Constraint) on this thread;
//   4. ResolveMaxTokens for each prompt against the context window (an empty prompt is refused);
//   5. MakeEngineRequest for each of the request's n choices of each prompt;
//   6. Answer    submits them together (Generation::Start) and answers through Route::Stream or
//                Route::Complete.
// A failure of steps 1-6 before any byte was sent is answered whole through Route::AnswerError
// (OpenAI's error shape unless the route says otherwise).

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/generation.h"
#include "api/served_model.h"
#include "engine/engine.h"
#include "http/server.h"
#include "protocol/openai_types.h"

namespace deepinfer::api {

// One text-generation route: what differs between the protocols. A Route object lives for one
// HTTP request and holds its parsed request and whatever its answer needs.
// Threads: one connection thread.
// Lifetime: borrows the ServedModel.
class Route {
 public:
  virtual ~Route() = default;
  Route(const Route&) = delete;
  Route& operator=(const Route&) = delete;

  // Step 1: parses `body` into the route's request.
  // Errors: InvalidArgument with the request field at fault (http/errors.h).
  virtual absl::Status Parse(std::string_view body, const ParseLimits& limits) = 0;
  // The generation parameters of the parsed request (valid after Parse).
  virtual const GenerationParams& params() const = 0;
  // The conversation of a chat-shaped request (valid after Parse), whose images are checked
  // before Render; null for other routes.
  virtual const std::vector<ChatMessage>* chat_messages() const { return nullptr; }
  // The prompt's images with their span positions (valid after Render); every choice carries
  // them. Empty for text prompts.
  virtual const std::vector<std::shared_ptr<const engine::ImageInput>>& images() const;
  // Step 3: the prompts, as token ids; each is answered by params().n choices, choice i of
  // prompt p getting index p * n + i.
  // Errors: InvalidArgument from the chat encoder.
  virtual absl::StatusOr<std::vector<std::vector<int32_t>>> Render() = 0;
  // Step 3b, after Render: what the output is constrained to, and the request field a bad
  // constraint is reported against. Default: params().constraint.
  struct OutputConstraint {
    constraint::ConstraintSpec spec;
    std::string param;
  };
  virtual std::optional<OutputConstraint> Constraint() const;
  // The token that closes the reasoning block the prompt opened (DeepSeek's "</think>"), or -1
  // when the answer does not start inside one: reasoning tokens are counted up to it, and a
  // thinking budget (GenerationParams::reasoning_budget) forces it. Valid after Render.
  virtual int32_t ReasoningEndToken() const { return -1; }
  // Step 6: the answer as a stream (params().stream) or whole. Each answers exactly once.
  virtual void Stream(Generation& generation, http::ResponseWriter& writer) = 0;
  virtual void Complete(Generation& generation, http::ResponseWriter& writer) = 0;
  // A complete error answer in the route's shape (OpenAI's by default).
  virtual void AnswerError(http::ResponseWriter& writer, const absl::Status& status) const;

  const ServedModel& model() const { return model_; }
  // The answer's id ("<id_prefix><24 alphanumerics>") and creation time (Unix seconds).
  const std::string& id() const { return id_; }
  int64_t created() const { return created_; }
  // The request field an empty or too-long prompt is reported against.
  std::string_view prompt_param() const { return prompt_param_; }

  // For answers sent whole: DriveGeneration, and when it did not finish, the error answer
  // through AnswerError (Cancelled "client_closed_request" for a gone client). Returns true
  // when every choice finished and the caller should send the answer.
  bool DriveToCompletion(Generation& generation, http::ResponseWriter& writer,
                         const std::function<bool(const ChoiceDelta&)>& on_delta) const;

 protected:
  Route(const ServedModel& model, std::string_view id_prefix, std::string_view prompt_param);

 private:
  const ServedModel& model_;
  const std::string id_;
  const int64_t created_;
  const std::string_view prompt_param_;
};

// Runs steps 1-6 for `route`; answers exactly once through `writer`.
void ServeRoute(Route& route, const http::Request& request, http::ResponseWriter& writer);

// Fills the engine request fields every route sets the same way. Choice `choice_index` of a
// seeded request uses seed + choice_index.
engine::GenerateRequest MakeEngineRequest(const GenerationParams& params,
                                          std::vector<int32_t> prompt, int32_t max_tokens,
                                          int32_t choice_index, const std::string& request_id);

// How a generation loop ended.
enum class DriveEnd { kDone, kClientGone, kError };

// Polls `generation` until every choice finished and its usage is known, handing each delta to
// `on_delta` (which returns false when it could not write to the client). Cancels the engine
// requests when the client disconnects or a write fails; the disconnect is noticed within about
// one poll interval (20 ms) whether the request is queued, prefilling or decoding.
// `error` receives the failure with kError (also Unavailable "shutting_down" when the server
// stops). Fills the request log (token counts, first-token time, how it ended).
DriveEnd DriveGeneration(Generation& generation, http::ResponseWriter& writer,
                         const std::function<bool(const ChoiceDelta&)>& on_delta,
                         absl::Status* error);

}  // namespace deepinfer::api
