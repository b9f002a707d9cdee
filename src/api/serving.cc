#include "api/serving.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <random>

#include "api/reasoning_parser.h"
#include "http/errors.h"
#include "http/sse.h"
#include "util/status.h"

namespace deepinfer::api {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(20);

// JSON has no -inf; vLLM reports impossible tokens with this value.
double FiniteLogprob(float logprob) {
  return std::isfinite(logprob) ? static_cast<double>(logprob) : -9999.0;
}

util::Json BytesJson(const std::string& piece) {
  util::Json bytes = util::Json::array();
  for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
  return bytes;
}

}  // namespace

absl::StatusOr<int32_t> ResolveMaxTokens(const Backend& backend, int64_t prompt_tokens,
                                         std::optional<int32_t> requested,
                                         std::string_view prompt_param) {
  const int64_t window = backend.max_model_len;
  if (prompt_tokens >= window) {
    return http::ContextLengthError(prompt_param, prompt_tokens, requested.value_or(1), window);
  }
  if (requested) {
    if (prompt_tokens + *requested > window) {
      return http::ContextLengthError("max_tokens", prompt_tokens, *requested, window);
    }
    return std::min(*requested, backend.max_output_tokens);
  }
  return static_cast<int32_t>(std::min<int64_t>(backend.max_output_tokens, window - prompt_tokens));
}

absl::Status CheckModel(const Backend& backend, const std::string& model) {
  if (model.empty() || model == backend.served_model_name) return absl::OkStatus();
  return http::ModelNotFoundError(model);
}

namespace {

// OpenAI's message shape to the encoders': "developer" is the new name of "system", and
// assistant tool calls arrive as JSON.
std::vector<tokenizer::ChatMessage> EncoderMessages(const std::vector<ChatMessage>& messages) {
  std::vector<tokenizer::ChatMessage> turns;
  turns.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    tokenizer::ChatMessage t{m.role == "developer" ? "system" : m.role, m.content};
    t.has_content = m.has_content;
    t.tool_call_id = m.tool_call_id;
    t.name = m.name;
    if (!m.tool_calls_json.empty()) {
      util::Json calls = util::Json::parse(m.tool_calls_json, nullptr, /*allow_exceptions=*/false);
      if (calls.is_array()) {
        for (const util::Json& c : calls) {
          if (!c.is_object()) continue;
          tokenizer::ToolCall call;
          call.id = c.value("id", std::string());
          auto fn = c.find("function");
          if (fn != c.end() && fn->is_object()) {
            call.name = fn->value("name", std::string());
            auto args = fn->find("arguments");
            if (args != fn->end())
              call.arguments = args->is_string() ? args->get<std::string>() : args->dump();
          }
          t.tool_calls.push_back(std::move(call));
        }
      }
    }
    turns.push_back(std::move(t));
  }
  return turns;
}

}  // namespace

tokenizer::ChatOptions ChatOptionsFor(const ChatExtras& extras) {
  tokenizer::ChatOptions options;
  options.add_generation_prompt = extras.add_generation_prompt;
  options.continue_final_message = extras.continue_final_message;
  options.tools = extras.tools;
  options.thinking = extras.thinking;
  options.reasoning_effort = extras.reasoning_effort == "none" ? "" : extras.reasoning_effort;
  return options;
}

absl::StatusOr<ChatPrompt> RenderChatPrompt(const Backend& backend,
                                            const std::vector<ChatMessage>& messages,
                                            const tokenizer::ChatOptions& options) {
  DI_ASSIGN_OR_RETURN(std::string text, tokenizer::RenderChat(*backend.chat_template,
                                                              EncoderMessages(messages), options));
  ChatPrompt prompt;
  // Templates that write the BOS text themselves (DeepSeek) must not get a second BOS.
  const bool add_bos = backend.tokenizer->add_bos() && !backend.chat_template->writes_bos();
  prompt.tokens = backend.tokenizer->Encode(text, /*parse_special=*/true, add_bos);
  prompt.parse_reasoning = backend.chat_template->name().starts_with("deepseek");
  prompt.starts_in_reasoning = prompt.parse_reasoning && PromptOpensReasoning(text);
  return prompt;
}

std::vector<int32_t> ChatPromptTokens(const Backend& backend,
                                      const std::vector<ChatMessage>& messages,
                                      bool add_generation_prompt) {
  tokenizer::ChatOptions options;
  options.add_generation_prompt = add_generation_prompt;
  auto prompt = RenderChatPrompt(backend, messages, options);
  return prompt.ok() ? std::move(prompt->tokens) : std::vector<int32_t>();
}

engine::GenerateRequest MakeEngineRequest(const GenerationParams& params,
                                          std::vector<int32_t> prompt, int32_t max_tokens,
                                          int32_t choice_index, const std::string& request_id) {
  engine::GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling = params.sampling;
  if (r.sampling.has_seed) r.sampling.seed += static_cast<uint64_t>(choice_index);
  r.max_tokens = max_tokens;
  r.stop_token_ids = params.stop_token_ids;
  r.ignore_eos = params.ignore_eos;
  r.request_id = request_id;
  return r;
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

util::Json UsageJson(const UsageCounts& usage) {
  util::Json u = util::Json::object();
  u["prompt_tokens"] = usage.prompt_tokens;
  u["completion_tokens"] = usage.completion_tokens;
  u["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  u["prompt_tokens_details"] = util::Json{{"cached_tokens", usage.cached_tokens}};
  if (usage.draft_tokens > 0) {
    // Speculative decoding (MTP): acceptance length = 1 + accepted / verification steps.
    u["speculative"] = util::Json{{"draft_tokens", usage.draft_tokens},
                                  {"accepted_tokens", usage.accepted_tokens},
                                  {"acceptance_rate", static_cast<double>(usage.accepted_tokens) /
                                                          static_cast<double>(usage.draft_tokens)}};
  }
  return u;
}

util::Json ChatLogprobsJson(const tokenizer::Tokenizer& tokenizer,
                            const std::vector<engine::TokenEvent>& tokens, int32_t num_top) {
  util::Json content = util::Json::array();
  for (const engine::TokenEvent& t : tokens) {
    std::string piece = tokenizer.TokenPiece(t.token);
    util::Json entry = util::Json::object();
    entry["token"] = piece;
    entry["logprob"] = FiniteLogprob(t.logprob);
    entry["bytes"] = BytesJson(piece);
    util::Json top = util::Json::array();
    for (size_t i = 0; i < t.top_logprobs.size() && static_cast<int32_t>(i) < num_top; ++i) {
      std::string top_piece = tokenizer.TokenPiece(t.top_logprobs[i].first);
      top.push_back(util::Json{{"token", top_piece},
                               {"logprob", FiniteLogprob(t.top_logprobs[i].second)},
                               {"bytes", BytesJson(top_piece)}});
    }
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return util::Json{{"content", std::move(content)}};
}

util::Json CompletionLogprobsJson(const tokenizer::Tokenizer& tokenizer,
                                  const std::vector<engine::TokenEvent>& tokens, int32_t num_top,
                                  int64_t* text_offset) {
  util::Json out = util::Json::object();
  util::Json pieces = util::Json::array(), logprobs = util::Json::array(),
             tops = util::Json::array(), offsets = util::Json::array();
  for (const engine::TokenEvent& t : tokens) {
    std::string piece = tokenizer.TokenPiece(t.token);
    pieces.push_back(piece);
    logprobs.push_back(FiniteLogprob(t.logprob));
    offsets.push_back(*text_offset);
    *text_offset += static_cast<int64_t>(piece.size());
    util::Json top = util::Json::object();
    for (size_t i = 0; i < t.top_logprobs.size() && static_cast<int32_t>(i) < num_top; ++i) {
      top[tokenizer.TokenPiece(t.top_logprobs[i].first)] = FiniteLogprob(t.top_logprobs[i].second);
    }
    // The chosen token is always among the top entries in the legacy format.
    if (num_top > 0 && !top.contains(piece)) top[piece] = FiniteLogprob(t.logprob);
    tops.push_back(std::move(top));
  }
  out["tokens"] = std::move(pieces);
  out["token_logprobs"] = std::move(logprobs);
  out["top_logprobs"] = std::move(tops);
  out["text_offset"] = std::move(offsets);
  return out;
}

void RespondJson(http::ResponseWriter& writer, int status, const util::Json& body) {
  writer.Respond(status, {{"Content-Type", "application/json"}}, util::DumpJson(body));
}

void RespondError(http::ResponseWriter& writer, const absl::Status& status) {
  http::ApiError error = http::ApiErrorFromStatus(status);
  writer.log().error = error.code;
  writer.Respond(error.http_status, {{"Content-Type", "application/json"}}, http::ErrorBody(error));
}

ToolCallFormat ToolFormatFor(const Backend& backend, bool has_tools, bool tools_off) {
  if (!has_tools || tools_off) return ToolCallFormat::kNone;
  return ToolCallFormatForTemplate(backend.chat_template->name());
}

AnswerSplitter::AnswerSplitter(const ChatPrompt& prompt, ToolCallFormat tool_format) {
  if (prompt.parse_reasoning) reasoning_.emplace(prompt.starts_in_reasoning);
  if (tool_format != ToolCallFormat::kNone) tools_.emplace(tool_format);
}

AnswerSplitter::Delta AnswerSplitter::Push(std::string_view text, bool last) {
  Delta out;
  if (reasoning_) {
    ReasoningParser::Delta split = reasoning_->Push(text);
    if (last) {
      ReasoningParser::Delta rest = reasoning_->Finish();
      split.reasoning += rest.reasoning;
      split.content += rest.content;
    }
    out.reasoning = std::move(split.reasoning);
    out.content = std::move(split.content);
  } else {
    out.content = std::string(text);
  }
  if (tools_) {
    ToolCallParser::Delta t = tools_->Push(out.content);
    if (last) {
      ToolCallParser::Delta rest = tools_->Finish();
      t.content += rest.content;
      for (auto& c : rest.calls) t.calls.push_back(std::move(c));
    }
    out.content = std::move(t.content);
    out.calls = std::move(t.calls);
  }
  return out;
}

namespace {

// Fills the request log with how a generation ended, on every way out of DriveGeneration.
class GenerationLogger {
 public:
  GenerationLogger(Generation& generation, http::RequestLog& log)
      : generation_(generation), log_(log) {
    log_.generated = true;
  }
  ~GenerationLogger() {
    UsageCounts u = generation_.usage();
    log_.prompt_tokens = u.prompt_tokens;
    log_.cached_tokens = u.cached_tokens;
    log_.completion_tokens = u.completion_tokens;
  }
  void Saw(const ChoiceDelta& d) {
    if (!d.tokens.empty() && log_.first_token == std::chrono::steady_clock::time_point()) {
      log_.first_token = std::chrono::steady_clock::now();
    }
    if (!d.finish_reason.empty() && log_.end != "length") log_.end = d.finish_reason;
  }
  DriveEnd End(DriveEnd end) {
    if (end == DriveEnd::kClientGone) log_.end = "client_gone";
    if (end == DriveEnd::kError) log_.end = "error";
    return end;
  }

 private:
  Generation& generation_;
  http::RequestLog& log_;
};

}  // namespace

DriveEnd DriveGeneration(Generation& generation, http::ResponseWriter& writer,
                         const std::function<bool(const ChoiceDelta&)>& on_delta,
                         absl::Status* error) {
  GenerationLogger logger(generation, writer.log());
  std::vector<ChoiceDelta> deltas;
  while (!generation.done()) {
    // A stopping server ends generations too (their answer is a 503 shutting_down), so that a
    // long one does not hold up the shutdown.
    if (writer.PeerClosed() || writer.stopping()) {
      generation.Cancel();
      if (writer.stopping()) {
        *error = UnavailableError("shutting_down", "The server is shutting down.");
        return logger.End(DriveEnd::kError);
      }
      return logger.End(DriveEnd::kClientGone);
    }
    deltas.clear();
    absl::Status status = generation.Poll(kPollInterval, &deltas);
    if (!status.ok()) {
      generation.Cancel();
      *error = status;
      return logger.End(DriveEnd::kError);
    }
    for (const ChoiceDelta& d : deltas) {
      logger.Saw(d);
      if (!on_delta(d)) {
        generation.Cancel();
        return logger.End(DriveEnd::kClientGone);
      }
    }
  }
  return logger.End(DriveEnd::kDone);
}

util::Json OpenAiEnvelope(const std::string& id, const char* object, int64_t created,
                          const std::string& model) {
  util::Json body = util::Json::object();
  body["id"] = id;
  body["object"] = object;
  body["created"] = created;
  body["model"] = model;
  return body;
}

std::string OpenAiChoiceChunk(util::Json envelope, util::Json choice, bool include_usage) {
  envelope["choices"] = util::Json::array({std::move(choice)});
  if (include_usage) envelope["usage"] = nullptr;
  return http::SseData(util::DumpJson(envelope));
}

void FinishOpenAiStream(Generation& generation, http::ResponseWriter& writer,
                        const std::function<bool(const ChoiceDelta&)>& on_delta,
                        std::optional<util::Json> usage_chunk) {
  absl::Status error;
  DriveEnd end = DriveGeneration(generation, writer, on_delta, &error);
  if (end == DriveEnd::kClientGone) return;
  std::string tail;
  if (end == DriveEnd::kError) {
    tail = http::SseErrorAndDone(http::ApiErrorFromStatus(error));
  } else {
    if (usage_chunk) {
      (*usage_chunk)["choices"] = util::Json::array();
      (*usage_chunk)["usage"] = UsageJson(generation.usage());
      tail += http::SseData(util::DumpJson(*usage_chunk));
    }
    tail += http::SseDone();
  }
  if (writer.Write(tail)) writer.End();
}

bool DriveToCompletion(Generation& generation, http::ResponseWriter& writer,
                       const std::function<bool(const ChoiceDelta&)>& on_delta,
                       void (*respond_error)(http::ResponseWriter&, const absl::Status&)) {
  absl::Status error;
  switch (DriveGeneration(generation, writer, on_delta, &error)) {
    case DriveEnd::kDone:
      return true;
    case DriveEnd::kClientGone:
      respond_error(writer, MakeError(absl::StatusCode::kCancelled, "client_closed_request",
                                      "The client closed the connection."));
      return false;
    case DriveEnd::kError:
      respond_error(writer, error);
      return false;
  }
  return false;
}

absl::Status AnswerGeneration(const Backend& backend, std::vector<ChoiceSpec> specs,
                              const std::string& id, bool stream, http::ResponseWriter& writer,
                              const std::function<void(Generation&)>& stream_answer,
                              const std::function<void(Generation&)>& whole_answer) {
  DI_ASSIGN_OR_RETURN(auto generation, Generation::Start(*backend.engine, *backend.tokenizer,
                                                         std::move(specs), backend.metrics));
  writer.log().id = id;
  writer.log().stream = stream;
  (stream ? stream_answer : whole_answer)(*generation);
  return absl::OkStatus();
}

std::vector<ChoiceSpec> SingleChoice(const GenerationParams& params,
                                     const std::vector<int32_t>& prompt, int32_t max_tokens,
                                     const std::string& id) {
  std::vector<ChoiceSpec> specs(1);
  specs[0].request = MakeEngineRequest(params, prompt, max_tokens, 0, id);
  specs[0].stops = params.stop;
  return specs;
}

}  // namespace deepinfer::api
