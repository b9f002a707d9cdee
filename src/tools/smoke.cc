#include "tools/smoke.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "fmt/format.h"
#include "http/client.h"
#include "http/sse_parser.h"
#include "http/url.h"
#include "util/error_codes.h"
#include "util/json.h"
#include "util/status.h"

namespace deepinfer::tools {
namespace {

using util::Json;

// Common short words: about one token each in every BPE vocabulary, also tiny ones.
constexpr const char* kWords[] = {"the", "cat",  "sat",   "on", "a",   "red", "mat", "and",
                                  "was", "very", "happy", "to", "see", "the", "sun", "today"};

class Smoke {
 public:
  Smoke(const SmokeOptions& options, http::Url server) : options_(options), server_(server) {
    // The API lives under ".../v1"; /health sits at the server root.
    std::string prefix = server_.path();
    if (prefix.size() >= 3 && prefix.compare(prefix.size() - 3, 3, "/v1") == 0) {
      root_ = prefix.substr(0, prefix.size() - 3);
      api_ = prefix;
    } else {
      root_ = prefix;
      api_ = prefix + "/v1";
    }
    std::random_device rd;
    nonce_ = fmt::format("{:08x}", rd());
  }

  SmokeReport Run() {
    report_.base_url = options_.base_url;
    Health();
    Models();
    Chat();
    Image();
    Stream();
    PrefixCache();
    OverWindow();
    Cancel();
    return std::move(report_);
  }

 private:
  void Add(const std::string& name, bool ok, std::string detail) {
    report_.checks.push_back({name, ok, std::move(detail)});
  }

  http::ClientRequest Request(const std::string& method, const std::string& target,
                              std::string body, bool chat) const {
    http::ClientRequest r;
    r.method = method;
    r.target = target;
    r.body = std::move(body);
    r.headers.push_back({"Accept", "*/*"});
    if (!r.body.empty() || method == "POST")
      r.headers.push_back({"Content-Type", "application/json"});
    if (!options_.api_key.empty())
      r.headers.push_back({"Authorization", "Bearer " + options_.api_key});
    if (chat && options_.dp_rank) {
      r.headers.push_back({"X-data-parallel-rank", std::to_string(*options_.dp_rank)});
    }
    return r;
  }

  // One exchange within --timeout. With a sink, a 2xx body goes to it piece by piece (false
  // hangs up); other bodies are read whole.
  absl::StatusOr<http::ClientResponse> Probe(const http::ClientRequest& request,
                                             const http::BodySink& sink = nullptr) const {
    http::FetchOptions fetch;
    fetch.idle_timeout_ms = 0;  // only the whole exchange is bounded
    fetch.total_timeout_ms = static_cast<int>(options_.timeout_s * 1000.0);
    return http::Fetch(server_, request, fetch, sink);
  }

  util::Json ChatBody(const util::Json& messages, int max_tokens, bool stream) const {
    util::Json body = util::Json::object();
    if (!report_.model.empty()) body["model"] = report_.model;
    body["messages"] = messages;
    body["max_tokens"] = max_tokens;
    body["temperature"] = 0;
    body["ignore_eos"] = true;  // vLLM extension; keeps tiny models from answering nothing
    if (stream) {
      body["stream"] = true;
      body["stream_options"] = util::Json{{"include_usage", true}};
    }
    return body;
  }

  static util::Json UserMessage(const std::string& text) {
    return util::Json::array({util::Json{{"role", "user"}, {"content", text}}});
  }

  // A short description of a failed answer: status plus the server's error message.
  static std::string Describe(const http::ClientResponse& r) {
    std::string detail = fmt::format("HTTP {}", r.status);
    auto json = util::ParseJson(r.body);
    if (json.ok() && json->is_object() && json->contains("error")) {
      const util::Json& e = (*json)["error"];
      if (e.is_object()) {
        if (e.contains("code") && e["code"].is_string()) {
          detail += " " + e["code"].get<std::string>();
        }
        if (e.contains("message") && e["message"].is_string()) {
          std::string m = e["message"].get<std::string>();
          if (m.size() > 160) m = m.substr(0, 160) + "...";
          detail += ": " + m;
        }
      } else if (e.is_string()) {
        detail += ": " + e.get<std::string>();
      }
    } else if (!r.body.empty()) {
      detail += ": " + r.body.substr(0, 120);
    }
    return detail;
  }

  // POSTs a chat request and returns the parsed 200 answer, or a failure line.
  absl::StatusOr<util::Json> PostChat(const util::Json& body) const {
    auto r = Probe(Request("POST", api_ + "/chat/completions", util::DumpJson(body), true));
    if (!r.ok()) return r.status();
    if (r->status != 200) return InternalError(util::codes::kBadStatus, Describe(*r));
    auto json = util::ParseJson(r->body);
    if (!json.ok() || !json->is_object()) {
      return InternalError(util::codes::kBadBody, "the answer is not a JSON object");
    }
    return *json;
  }

  // The content delta of the first choice of one SSE chunk ("" when none).
  static std::string DeltaText(const std::string& event) {
    auto chunk = util::ParseJson(event);
    if (!chunk.ok() || !chunk->is_object()) return "";
    util::Json& choices = (*chunk)["choices"];
    if (!choices.is_array() || choices.empty() || !choices[0].is_object()) return "";
    util::Json& delta = choices[0]["delta"];
    if (!delta.is_object() || !delta.contains("content") || !delta["content"].is_string()) {
      return "";
    }
    return delta["content"].get<std::string>();
  }

  static int64_t IntAt(const util::Json& j, std::initializer_list<const char*> path) {
    const util::Json* cur = &j;
    for (const char* key : path) {
      if (!cur->is_object() || !cur->contains(key)) return -1;
      cur = &(*cur)[key];
    }
    return cur->is_number_integer() ? cur->get<int64_t>() : -1;
  }

  void Health() {
    auto r = Probe(Request("GET", root_ + "/health", "", false));
    if (!r.ok()) return Add("health", false, OneLineError(r.status()));
    if (r->status != 200) return Add("health", false, Describe(*r));
    Add("health", true, "GET /health answered 200");
  }

  void Models() {
    auto r = Probe(Request("GET", api_ + "/models", "", false));
    if (!r.ok()) return Add("models", false, OneLineError(r.status()));
    if (r->status != 200) return Add("models", false, Describe(*r));
    auto json = util::ParseJson(r->body);
    if (!json.ok() || !json->is_object() || !(*json)["data"].is_array() ||
        (*json)["data"].empty()) {
      return Add("models", false, "no model listed in {\"data\": [...]}");
    }
    const util::Json* card = nullptr;
    std::vector<std::string> ids;
    for (const util::Json& m : (*json)["data"]) {
      if (!m.is_object() || !m.contains("id") || !m["id"].is_string()) continue;
      ids.push_back(m["id"].get<std::string>());
      if (card == nullptr && (options_.model.empty() || ids.back() == options_.model)) card = &m;
    }
    if (card == nullptr) {
      report_.model = options_.model;
      return Add("models", false,
                 options_.model.empty() ? std::string("no model has a string id")
                                        : fmt::format("model '{}' not listed (listed: {})",
                                                      options_.model, fmt::join(ids, ", ")));
    }
    report_.model = (*card)["id"].get<std::string>();
    for (const char* key : {"max_model_len", "context_length", "context_window"}) {
      if (card->contains(key) && (*card)[key].is_number_integer()) {
        report_.window = (*card)[key].get<int64_t>();
        break;
      }
    }
    if (report_.window <= 0) {
      return Add(
          "models", false,
          fmt::format("model '{}' listed without a context window (max_model_len)", report_.model));
    }
    if (options_.expect_window && *options_.expect_window != report_.window) {
      return Add("models", false,
                 fmt::format("model '{}' has a window of {} tokens, expected {}", report_.model,
                             report_.window, *options_.expect_window));
    }
    Add("models", true, fmt::format("model '{}', window {} tokens", report_.model, report_.window));
  }

  void Chat() {
    auto json = PostChat(ChatBody(UserMessage("Say hello."), 8, false));
    if (!json.ok()) return Add("chat", false, std::string(json.status().message()));
    util::Json& j = *json;
    if (!j["choices"].is_array() || j["choices"].empty() || !j["choices"][0].is_object()) {
      return Add("chat", false, "the answer has no choices");
    }
    util::Json& choice = j["choices"][0];
    if (!choice["message"].is_object() || !choice["message"]["content"].is_string()) {
      return Add("chat", false, "choices[0].message.content is not a string");
    }
    std::string content = choice["message"]["content"].get<std::string>();
    if (!choice["finish_reason"].is_string()) {
      return Add("chat", false, "choices[0].finish_reason is missing");
    }
    int64_t prompt = IntAt(j, {"usage", "prompt_tokens"});
    int64_t completion = IntAt(j, {"usage", "completion_tokens"});
    if (prompt <= 0 || completion <= 0) {
      return Add("chat", false, "usage.prompt_tokens / completion_tokens missing or zero");
    }
    if (content.empty()) return Add("chat", false, "the answer text is empty");
    Add("chat", true,
        fmt::format("{} prompt + {} completion tokens, finish_reason {}", prompt, completion,
                    choice["finish_reason"].get<std::string>()));
  }

  // A chat with a 1x1 PNG: a vision model answers, its prompt longer than the same text alone
  // by the image's span; a text-only model refuses it with unsupported_content. Either passes.
  void Image() {
    static constexpr char kPng1x1[] =
        "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QD"
        "wADhgGAWjR9awAAAABJRU5ErkJggg==";
    const std::string question = "What is in this image?";
    util::Json content = util::Json::array(
        {util::Json{{"type", "text"}, {"text", question}},
         util::Json{{"type", "image_url"}, {"image_url", util::Json{{"url", kPng1x1}}}}});
    util::Json messages =
        util::Json::array({util::Json{{"role", "user"}, {"content", std::move(content)}}});
    auto r = Probe(Request("POST", api_ + "/chat/completions",
                           util::DumpJson(ChatBody(messages, 1, false)), true));
    if (!r.ok()) return Add("image", false, std::string(r.status().message()));
    if (r->status == 400 && Describe(*r).find("unsupported_content") != std::string::npos) {
      return Add("image", true, "the model takes text only: the image was refused "
                                "(unsupported_content)");
    }
    if (r->status != 200) return Add("image", false, Describe(*r));
    auto with = util::ParseJson(r->body);
    auto text = PostChat(ChatBody(UserMessage(question), 1, false));
    if (!with.ok() || !text.ok()) return Add("image", false, "the answers are not JSON objects");
    const int64_t span =
        IntAt(*with, {"usage", "prompt_tokens"}) - IntAt(*text, {"usage", "prompt_tokens"});
    if (span <= 2) {
      return Add("image", false,
                 fmt::format("the prompt with the image is only {} tokens longer", span));
    }
    Add("image", true, fmt::format("answered; the image took about {} prompt tokens", span));
  }

  void Stream() {
    http::SseParser sse;
    std::vector<std::string> events;
    std::string body = util::DumpJson(ChatBody(UserMessage("Tell me a story."), 8, true));
    auto r =
        Probe(Request("POST", api_ + "/chat/completions", body, true), [&](std::string_view piece) {
          for (http::SseEvent& e : sse.Feed(piece)) events.push_back(std::move(e.data));
          return true;
        });
    if (!r.ok()) return Add("stream", false, OneLineError(r.status()));
    if (r->status != 200) return Add("stream", false, Describe(*r));
    if (r->Header("content-type").rfind("text/event-stream", 0) != 0) {
      return Add(
          "stream", false,
          fmt::format("content type '{}', expected text/event-stream", r->Header("content-type")));
    }
    if (events.empty() || events.back() != "[DONE]") {
      return Add(
          "stream", false,
          fmt::format("the stream did not end with data: [DONE] ({} events)", events.size()));
    }
    std::string text;
    std::string finish;
    bool usage = false;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      if (events[i] == "[DONE]") return Add("stream", false, "[DONE] before the last event");
      auto chunk = util::ParseJson(events[i]);
      if (!chunk.ok() || !chunk->is_object()) {
        return Add("stream", false, fmt::format("event {} is not a JSON object", i));
      }
      if (chunk->contains("error")) {
        return Add("stream", false, "in-band error: " + events[i].substr(0, 160));
      }
      util::Json& choices = (*chunk)["choices"];
      if (choices.is_array() && !choices.empty()) {
        util::Json& c = choices[0];
        if (c["delta"].is_object() && c["delta"]["content"].is_string()) {
          text += c["delta"]["content"].get<std::string>();
        }
        if (c["finish_reason"].is_string()) finish = c["finish_reason"].get<std::string>();
      }
      if ((*chunk)["usage"].is_object()) usage = true;
    }
    if (text.empty()) return Add("stream", false, "no content deltas before [DONE]");
    if (finish.empty()) return Add("stream", false, "no finish_reason before [DONE]");
    Add("stream", true,
        fmt::format("{} events, finish_reason {}, ends with [DONE]{}", events.size(), finish,
                    usage ? ", usage chunk" : ""));
  }

  void PrefixCache() {
    // Long enough to fill several KV blocks, short enough for a tiny window.
    int64_t num_words = report_.window > 0 ? std::clamp<int64_t>(report_.window / 8, 8, 600) : 64;
    std::string prefix = fmt::format("Session {}. ", nonce_);
    for (int64_t i = 0; i < num_words; ++i) {
      prefix += kWords[i % (sizeof(kWords) / sizeof(kWords[0]))];
      prefix += (i % 10 == 9) ? ". " : " ";
    }
    int64_t cached[2] = {0, 0};
    int64_t prompt[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
      util::Json messages = util::Json::array(
          {util::Json{{"role", "system"}, {"content", prefix}},
           util::Json{{"role", "user"},
                      {"content", i == 0 ? "First question?" : "Second question?"}}});
      auto json = PostChat(ChatBody(messages, 2, false));
      if (!json.ok()) {
        return Add("prefix_cache", false,
                   fmt::format("request {}: {}", i + 1, std::string(json.status().message())));
      }
      prompt[i] = IntAt(*json, {"usage", "prompt_tokens"});
      cached[i] = IntAt(*json, {"usage", "prompt_tokens_details", "cached_tokens"});
      if (cached[i] < 0) {
        return Add(
            "prefix_cache", false,
            fmt::format("request {}: usage.prompt_tokens_details.cached_tokens missing", i + 1));
      }
    }
    std::string rank = options_.dp_rank ? fmt::format(" (rank {})", *options_.dp_rank) : "";
    if (cached[1] <= 0) {
      return Add("prefix_cache", false,
                 fmt::format("repeated prefix{}: second request reported cached_tokens=0 of {} "
                             "prompt tokens (prefix caching off or broken?)",
                             rank, prompt[1]));
    }
    Add("prefix_cache", true,
        fmt::format("repeated prefix{}: second request reused {} of {} prompt tokens", rank,
                    cached[1], prompt[1]));
  }

  void OverWindow() {
    if (report_.window <= 0) return Add("over_window", false, "the window is unknown");
    // At least one token per word in every vocabulary, plus the template's own tokens.
    std::string text;
    text.reserve(static_cast<size_t>(report_.window + 64) * 2);
    for (int64_t i = 0; i < report_.window + 64; ++i) text += "x ";
    std::string body = util::DumpJson(ChatBody(UserMessage(text), 1, true));
    size_t streamed = 0;
    auto r =
        Probe(Request("POST", api_ + "/chat/completions", body, true), [&](std::string_view piece) {
          streamed += piece.size();
          return false;
        });
    if (!r.ok()) return Add("over_window", false, OneLineError(r.status()));
    if (r->status == 200) {
      return Add("over_window", false,
                 fmt::format("a prompt over the {}-token window started a stream (HTTP 200, {})",
                             report_.window, r->Header("content-type")));
    }
    if (r->status != 400) return Add("over_window", false, Describe(*r) + " (expected 400)");
    if (r->Header("content-type").rfind("text/event-stream", 0) == 0) {
      return Add("over_window", false, "HTTP 400 but with an event-stream body");
    }
    Add("over_window", true, Describe(*r));
  }

  void Cancel() {
    int64_t max_tokens = report_.window > 0 ? std::clamp<int64_t>(report_.window / 2, 16, 512) : 64;
    std::string body = util::DumpJson(
        ChatBody(UserMessage("Write a very long story."), static_cast<int>(max_tokens), true));
    http::SseParser sse;
    bool got_token = false;
    auto r =
        Probe(Request("POST", api_ + "/chat/completions", body, true), [&](std::string_view piece) {
          for (const http::SseEvent& e : sse.Feed(piece)) {
            if (!DeltaText(e.data).empty()) got_token = true;
          }
          return !got_token;  // hang up after the first token
        });
    if (!r.ok()) return Add("cancel", false, OneLineError(r.status()));
    if (r->status != 200) return Add("cancel", false, "stream refused: " + Describe(*r));
    std::string how = r->aborted ? "hung up after the first token" : "the stream ended first";
    auto next = PostChat(ChatBody(UserMessage("Say hello."), 4, false));
    if (!next.ok()) {
      return Add("cancel", false,
                 fmt::format("{}; the next request failed: {}", how,
                             std::string(next.status().message())));
    }
    Add("cancel", true, how + "; the next request succeeded");
  }

  const SmokeOptions& options_;
  http::Url server_;
  std::string root_;
  std::string api_;
  std::string nonce_;
  SmokeReport report_;
};

}  // namespace

bool SmokeReport::ok() const {
  if (checks.empty()) return false;
  return std::all_of(checks.begin(), checks.end(), [](const SmokeCheck& c) { return c.ok; });
}

absl::StatusOr<SmokeReport> RunSmoke(const SmokeOptions& options) {
  DI_ASSIGN_OR_RETURN(http::Url server, http::ParseUrl(options.base_url));
  return Smoke(options, server).Run();
}

std::string FormatSmokeReport(const SmokeReport& report) {
  std::string out = fmt::format("deepinfer smoke {}\n", report.base_url);
  out += fmt::format("{:<13} {:<6} {}\n", "check", "result", "detail");
  for (const SmokeCheck& c : report.checks) {
    out += fmt::format("{:<13} {:<6} {}\n", c.name, c.ok ? "ok" : "FAIL", c.detail);
  }
  int failed = static_cast<int>(
      std::count_if(report.checks.begin(), report.checks.end(), [](auto& c) { return !c.ok; }));
  out += report.ok() ? fmt::format("PASS: all {} checks passed\n", report.checks.size())
                     : fmt::format("FAIL: {} of {} checks failed\n", failed, report.checks.size());
  return out;
}

std::string SmokeReportJson(const SmokeReport& report) {
  util::Json checks = util::Json::array();
  for (const SmokeCheck& c : report.checks) {
    checks.push_back(util::Json{{"name", c.name}, {"ok", c.ok}, {"detail", c.detail}});
  }
  util::Json out = util::Json{{"ok", report.ok()},
                              {"base_url", report.base_url},
                              {"model", report.model},
                              {"window", report.window},
                              {"checks", std::move(checks)}};
  return util::DumpJson(out) + "\n";
}

}  // namespace deepinfer::tools
