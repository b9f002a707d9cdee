#include "api/server.h"

#include <chrono>
#include <map>
#include <optional>
#include <thread>

#include "api/testing/capture_writer.h"
#include "api/testing/fake_engine.h"
#include "gtest/gtest.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/json.h"

namespace deepinfer::api {
namespace {

using testing::ByteTokens;
using testing::CaptureWriter;
using testing::FakeEngine;

class ApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override { Init(FakeEngine::Options{}); }

  void Init(FakeEngine::Options options) {
    engine_.reset();
    model_ = testing::MakeByteModel();
    auto tok = tokenizer::CreateTokenizer(model_->tokenizer);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
    auto tmpl = tokenizer::CreateChatTemplate(model_->tokenizer);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    template_ = std::move(*tmpl);
    engine_ = std::make_unique<FakeEngine>(*model_, options);
    engine_->SetScript(ByteTokens("Hello world"));
    served_.engine = engine_.get();
    served_.tokenizer = tokenizer_.get();
    served_.chat_template = template_.get();
    served_.served_model_name = "byte-model";
    served_.max_model_len = options.max_model_len;
    served_.max_output_tokens = 64;
    served_.created_unix = 1700000000;
    server_ = std::make_unique<ApiServer>();
    served_.metrics = &server_->metrics();
    server_->SetServedModel(&served_);
  }

  CaptureWriter Call(const std::string& method, const std::string& path, const std::string& body,
                     int close_after_writes = -1) {
    http::Request request;
    request.method = method;
    request.target = request.path = path;
    request.body = body;
    CaptureWriter writer(close_after_writes);
    server_->Handle(request, writer);
    server_->Observe(request, writer.status(), 0.01);
    return writer;
  }
  CaptureWriter Chat(const std::string& extra, int close_after_writes = -1) {
    return Call(
        "POST", "/v1/chat/completions",
        R"({"model":"byte-model","messages":[{"role":"user","content":"Hi"}])" + extra + "}",
        close_after_writes);
  }

  CaptureWriter Messages(const std::string& extra, int close_after_writes = -1) {
    return Call(
        "POST", "/v1/messages",
        R"({"model":"byte-model","max_tokens":32,"messages":[{"role":"user","content":"Hi"}])" +
            extra + "}",
        close_after_writes);
  }

  // Waits until the fake engine saw `n` cancellations.
  bool WaitForCancelled(int n) {
    for (int i = 0; i < 2000 && engine_->num_cancelled() < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return engine_->num_cancelled() >= n;
  }

  std::unique_ptr<model::Model> model_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<tokenizer::ChatTemplate> template_;
  std::unique_ptr<FakeEngine> engine_;
  ServedModel served_;
  std::unique_ptr<ApiServer> server_;
};

TEST_F(ApiServerTest, ChatCompletionReturnsTextFinishAndUsage) {
  auto script = ByteTokens("Hello world");
  script.push_back(testing::kImEnd);
  engine_->SetScript(script);
  CaptureWriter w = Chat("");
  ASSERT_EQ(w.status(), 200) << w.body();
  EXPECT_EQ(w.content_type(), "application/json");
  util::Json j = w.json();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["model"], "byte-model");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello world");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 2);
  EXPECT_EQ(j["usage"]["total_tokens"].get<int>(), j["usage"]["prompt_tokens"].get<int>() + 12);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

TEST_F(ApiServerTest, ChatPromptIsTheRenderedTemplate) {
  Chat("");
  ASSERT_EQ(engine_->submitted().size(), 1u);
  std::vector<int32_t> prompt = engine_->submitted()[0].prompt;
  EXPECT_EQ(tokenizer_->Decode(prompt), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST_F(ApiServerTest, StreamingChatFramesRoleContentFinishAndDone) {
  CaptureWriter w = Chat(R"(,"stream":true)");
  ASSERT_TRUE(w.streaming());
  EXPECT_EQ(w.content_type(), "text/event-stream");
  EXPECT_TRUE(w.ended());
  std::vector<std::string> events = w.Events();
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  int finishes = 0;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    util::Json c = *util::ParseJson(events[i]);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_FALSE(c.contains("usage")) << events[i];
    ASSERT_EQ(c["choices"].size(), 1u);
    const util::Json& choice = c["choices"][0];
    if (i == 0) {
      EXPECT_EQ(choice["delta"]["role"], "assistant");
      EXPECT_EQ(choice["delta"]["content"], "");
    }
    if (choice["delta"].contains("content")) text += choice["delta"]["content"].get<std::string>();
    if (!choice["finish_reason"].is_null()) {
      ++finishes;
      EXPECT_EQ(choice["finish_reason"], "stop");  // the script ran out
    }
  }
  EXPECT_EQ(text, "Hello world");
  EXPECT_EQ(finishes, 1);
}

TEST_F(ApiServerTest, IncludeUsageAddsOneUsageChunkWithEmptyChoices) {
  CaptureWriter w = Chat(R"(,"stream":true,"stream_options":{"include_usage":true})");
  std::vector<std::string> events = w.Events();
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  util::Json usage_chunk = *util::ParseJson(events[events.size() - 2]);
  EXPECT_TRUE(usage_chunk["choices"].is_array());
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], 11);
  EXPECT_EQ(usage_chunk["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    util::Json c = *util::ParseJson(events[i]);
    EXPECT_TRUE(c["usage"].is_null()) << events[i];
    EXPECT_EQ(c["choices"].size(), 1u);
  }
}

TEST_F(ApiServerTest, StopStringEndsTextBeforeItAndCancelsTheEngineRequest) {
  engine_->SetScript(ByteTokens("Hello world, and more text that never comes"));
  CaptureWriter w = Chat(R"(,"stop":["o w","zzz"])");
  util::Json j = w.json();
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hell");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_LE(j["usage"]["completion_tokens"].get<int>(), 7);
  EXPECT_TRUE(WaitForCancelled(1));
}

TEST_F(ApiServerTest, StreamedStopStringNeverLeaksAPrefix) {
  engine_->SetScript(ByteTokens("Hello world, and more"));
  CaptureWriter w = Chat(R"(,"stream":true,"stop":"lo wor")");
  std::string text, finish;
  for (const std::string& e : w.Events()) {
    if (e == "[DONE]") continue;
    util::Json c = *util::ParseJson(e);
    const util::Json& choice = c["choices"][0];
    if (choice["delta"].contains("content")) text += choice["delta"]["content"].get<std::string>();
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
  }
  EXPECT_EQ(text, "Hel");
  EXPECT_EQ(finish, "stop");
}

TEST_F(ApiServerTest, MaxTokensEndsWithLength) {
  util::Json j = Chat(R"(,"max_tokens":3)").json();
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hel");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
}

TEST_F(ApiServerTest, ChoicesAreIndexedAndSeededPerChoice) {
  util::Json j = Chat(R"(,"n":2,"seed":5)").json();
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][1]["message"]["content"], "Hello world");
  EXPECT_EQ(j["usage"]["completion_tokens"], 22);
  auto submitted = engine_->submitted();
  ASSERT_EQ(submitted.size(), 2u);
  EXPECT_EQ(submitted[0].sampling.seed, 5u);
  EXPECT_EQ(submitted[1].sampling.seed, 6u);
  EXPECT_TRUE(submitted[1].sampling.has_seed);
}

TEST_F(ApiServerTest, NoMaxTokensUsesTheRestOfTheWindowUpToTheOutputCap) {
  served_.max_output_tokens = 100000;
  Chat("");
  auto submitted = engine_->submitted();
  ASSERT_EQ(submitted.size(), 1u);
  EXPECT_EQ(submitted[0].max_tokens + static_cast<int32_t>(submitted[0].prompt.size()), 512);
  served_.max_output_tokens = 10;
  Chat("");
  EXPECT_EQ(engine_->submitted()[1].max_tokens, 10);
}

TEST_F(ApiServerTest, ContextOverflowIsA400BeforeAnyStreamByte) {
  std::string long_text(600, 'x');
  CaptureWriter w =
      Call("POST", "/v1/chat/completions",
           R"({"stream":true,"messages":[{"role":"user","content":")" + long_text + R"("}]})");
  EXPECT_EQ(w.status(), 400);
  EXPECT_FALSE(w.streaming());
  util::Json e = w.json()["error"];
  EXPECT_EQ(e["code"], "context_length_exceeded");
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["param"], "messages");
  EXPECT_EQ(e["n_ctx"], 512);
  EXPECT_GT(e["n_prompt_tokens"].get<int>(), 600);
  EXPECT_EQ(engine_->num_submitted(), 0);

  CaptureWriter w2 = Chat(R"(,"stream":true,"max_tokens":600)");
  EXPECT_EQ(w2.status(), 400);
  EXPECT_EQ(w2.json()["error"]["param"], "max_tokens");
  EXPECT_EQ(w2.json()["error"]["code"], "context_length_exceeded");
}

TEST_F(ApiServerTest, UnknownModelIs404) {
  CaptureWriter w = Call("POST", "/v1/chat/completions",
                         R"({"model":"gpt-4","messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(w.status(), 404);
  EXPECT_EQ(w.json()["error"]["code"], "model_not_found");
}

TEST_F(ApiServerTest, BadInputIs400WithParam) {
  CaptureWriter w = Call("POST", "/v1/chat/completions", "{not json");
  EXPECT_EQ(w.status(), 400);
  EXPECT_EQ(w.json()["error"]["code"], "invalid_json");
  CaptureWriter w2 = Chat(R"(,"temperature":3)");
  EXPECT_EQ(w2.status(), 400);
  EXPECT_EQ(w2.json()["error"]["param"], "temperature");
  EXPECT_EQ(engine_->num_submitted(), 0);
}

TEST_F(ApiServerTest, ClientGoneWhileQueuedCancelsTheEngineRequest) {
  engine_->Pause(true);
  CaptureWriter w = Chat("", /*close_after_writes=*/0);
  EXPECT_EQ(engine_->num_submitted(), 1);
  EXPECT_TRUE(WaitForCancelled(1));
  EXPECT_EQ(w.status(), 499);
}

TEST_F(ApiServerTest, ClientGoneMidStreamCancelsOnlyItsRequest) {
  FakeEngine::Options slow;
  slow.step = std::chrono::milliseconds(5);
  Init(slow);
  engine_->SetScript(ByteTokens(std::string(60, 'a')));
  CaptureWriter w = Chat(R"(,"stream":true)", /*close_after_writes=*/3);
  EXPECT_TRUE(WaitForCancelled(1));
  EXPECT_FALSE(w.ended());
  // The engine still serves the next request in full.
  engine_->SetScript(ByteTokens("ok"));
  EXPECT_EQ(Chat("").json()["choices"][0]["message"]["content"], "ok");
}

TEST_F(ApiServerTest, EngineErrorAfterStreamStartIsAnInBandErrorThenDone) {
  engine_->FailNextAfter(3);
  CaptureWriter w = Chat(R"(,"stream":true)");
  std::vector<std::string> events = w.Events();
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  util::Json error = *util::ParseJson(events[events.size() - 2]);
  EXPECT_EQ(error["error"]["code"], "kv_cache_exhausted");
}

TEST_F(ApiServerTest, ShutdownEndsRequestsWithShuttingDown) {
  engine_->Pause(true);
  http::Request request;
  request.method = "POST";
  request.path = "/v1/chat/completions";
  request.body = R"({"stream":true,"messages":[{"role":"user","content":"x"}]})";
  CaptureWriter streaming;
  streaming.set_stopping(true);
  server_->Handle(request, streaming);
  std::vector<std::string> events = streaming.Events();
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ((*util::ParseJson(events[events.size() - 2]))["error"]["code"], "shutting_down");
  request.body = R"({"messages":[{"role":"user","content":"x"}]})";
  CaptureWriter plain;
  plain.set_stopping(true);
  server_->Handle(request, plain);
  EXPECT_EQ(plain.status(), 503);
  EXPECT_TRUE(WaitForCancelled(2));
}

TEST_F(ApiServerTest, EngineErrorWithoutStreamIsAnErrorResponse) {
  engine_->FailNextAfter(0);
  CaptureWriter w = Chat("");
  EXPECT_EQ(w.status(), 503);
  EXPECT_EQ(w.json()["error"]["code"], "kv_cache_exhausted");
}

TEST_F(ApiServerTest, ChatLogprobsHaveTokensBytesAndTopEntries) {
  util::Json j = Chat(R"(,"logprobs":true,"top_logprobs":2,"max_tokens":2)").json();
  const util::Json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], "H");
  EXPECT_FLOAT_EQ(content[0]["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(content[0]["bytes"], util::Json::array({72}));
  ASSERT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(content[0]["top_logprobs"][1]["token"], "I");
}

TEST_F(ApiServerTest, CompletionsReturnTextLogprobsAndEcho) {
  CaptureWriter w =
      Call("POST", "/v1/completions", R"({"prompt":"abc","max_tokens":4,"logprobs":1})");
  ASSERT_EQ(w.status(), 200) << w.body();
  util::Json j = w.json();
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(j["choices"][0]["text"], "Hell");
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"].size(), 4u);
  EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"], util::Json::array({0, 1, 2, 3}));
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);

  util::Json echo =
      Call("POST", "/v1/completions", R"({"prompt":"abc","max_tokens":2,"echo":true})").json();
  EXPECT_EQ(echo["choices"][0]["text"], "abcHe");
}

TEST_F(ApiServerTest, CompletionsWithSeveralPromptsIndexChoicesPromptMajor) {
  util::Json j =
      Call("POST", "/v1/completions", R"({"prompt":["ab","cde"],"n":2,"max_tokens":1})").json();
  ASSERT_EQ(j["choices"].size(), 4u);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
}

TEST_F(ApiServerTest, StreamingCompletionsEndWithUsageAndDone) {
  CaptureWriter w = Call("POST", "/v1/completions",
                         R"({"prompt":"abc","max_tokens":5,"stream":true,)"
                         R"("stream_options":{"include_usage":true}})");
  std::vector<std::string> events = w.Events();
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  util::Json usage = *util::ParseJson(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 5);
  std::string text;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    util::Json c = *util::ParseJson(events[i]);
    EXPECT_EQ(c["object"], "text_completion");
    text += c["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "Hello");
}

TEST_F(ApiServerTest, RepeatedLongPrefixReportsCachedTokens) {
  std::string prompt(100, 'p');
  std::string body = R"({"prompt":")" + prompt + R"(","max_tokens":1})";
  util::Json first = Call("POST", "/v1/completions", body).json();
  EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  util::Json second = Call("POST", "/v1/completions", body).json();
  EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"], 96);
}

TEST_F(ApiServerTest, TokenizeAndDetokenize) {
  util::Json t = Call("POST", "/tokenize", R"({"prompt":"abc"})").json();
  EXPECT_EQ(t["count"], 3);
  EXPECT_EQ(t["max_model_len"], 512);
  EXPECT_EQ(t["tokens"], util::Json::array({97, 98, 99}));
  util::Json m = Call("POST", "/tokenize",
                      R"({"messages":[{"role":"user","content":"Hi"}],"return_token_strs":true})")
                     .json();
  EXPECT_EQ(m["count"].get<size_t>(), m["tokens"].size());
  Chat("");
  EXPECT_EQ(m["count"].get<size_t>(), engine_->submitted().at(0).prompt.size());
  EXPECT_EQ(m["token_strs"][0], "<|im_start|>");
  util::Json d = Call("POST", "/detokenize", R"({"tokens":[104,105]})").json();
  EXPECT_EQ(d["prompt"], "hi");
}

TEST_F(ApiServerTest, ModelsHealthAndRoutingErrors) {
  util::Json models = Call("GET", "/v1/models", "").json();
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "byte-model");
  EXPECT_EQ(models["data"][0]["object"], "model");
  EXPECT_EQ(models["data"][0]["owned_by"], "deepinfer");
  EXPECT_EQ(models["data"][0]["max_model_len"], 512);
  EXPECT_EQ(Call("GET", "/v1/models/byte-model", "").status(), 200);
  EXPECT_EQ(Call("GET", "/v1/models/other", "").status(), 404);
  EXPECT_EQ(Call("GET", "/health", "").status(), 200);
  CaptureWriter missing = Call("GET", "/nope", "");
  EXPECT_EQ(missing.status(), 404);
  EXPECT_EQ(missing.json()["error"]["code"], "not_found");
  CaptureWriter method = Call("GET", "/v1/chat/completions", "");
  EXPECT_EQ(method.status(), 405);
  EXPECT_EQ(method.json()["error"]["code"], "method_not_allowed");
  EXPECT_EQ(method.Header("Allow"), "POST");
}

TEST_F(ApiServerTest, HealthIs503UntilTheModelIsServed) {
  ApiServer loading;
  http::Request request;
  request.method = "GET";
  request.path = "/health";
  CaptureWriter w;
  loading.Handle(request, w);
  EXPECT_EQ(w.status(), 503);
  request.path = "/v1/chat/completions";
  request.method = "POST";
  CaptureWriter w2;
  loading.Handle(request, w2);
  EXPECT_EQ(w2.status(), 503);
}

TEST_F(ApiServerTest, MetricsExposeEngineAndHttpSeries) {
  engine_->SetScript(ByteTokens("Hello world"));
  Chat(R"(,"stop":"lo")");
  Chat("");
  WaitForCancelled(1);
  CaptureWriter w = Call("GET", "/metrics", "");
  EXPECT_EQ(w.status(), 200);
  EXPECT_EQ(w.content_type().rfind("text/plain; version=0.0.4", 0), 0u);
  const std::string& text = w.body();
  for (const char* name :
       {"vllm:num_requests_running{model_name=\"byte-model\"}", "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
        "vllm:request_success_total", "vllm:num_preemptions_total",
        "vllm:time_to_first_token_seconds_bucket", "vllm:time_per_output_token_seconds_count",
        "vllm:e2e_request_latency_seconds_sum", "vllm:request_queue_time_seconds_bucket",
        "deepinfer_http_requests_total{route=\"/v1/chat/completions\",method=\"POST\","
        "status=\"200\"} 2"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name;
  }
}

TEST_F(ApiServerTest, RequestLogHoldsIdTokensAndEnding) {
  CaptureWriter w = Chat(R"(,"max_tokens":32)");
  const http::RequestLog& log = w.log();
  EXPECT_EQ(log.id, w.json()["id"]);
  EXPECT_TRUE(log.generated);
  EXPECT_FALSE(log.stream);
  EXPECT_EQ(log.completion_tokens, 11);
  EXPECT_EQ(log.prompt_tokens, w.json()["usage"]["prompt_tokens"].get<int64_t>());
  EXPECT_EQ(log.end, "stop");
  EXPECT_NE(log.first_token, std::chrono::steady_clock::time_point());
  CaptureWriter cut = Chat(R"(,"max_tokens":3,"stream":true)");
  EXPECT_EQ(cut.log().end, "length");
  EXPECT_TRUE(cut.log().stream);
  CaptureWriter gone = Chat(R"(,"stream":true)", /*close_after_writes=*/1);
  EXPECT_EQ(gone.log().end, "client_gone");
  EXPECT_FALSE(Call("GET", "/v1/models", "").log().generated);
  EXPECT_EQ(Call("POST", "/v1/chat/completions", R"({"messages":3})").log().error, "invalid_type");
}

TEST(RequestLogLineTest, FormatsTheFieldsAndNeutralisesClientText) {
  http::Request request;
  request.method = "POST";
  request.path = "/v1/chat/completions";
  request.headers.emplace_back("x-request-id", "abc\nFAKE line\x01");
  http::RequestLog log;
  log.received = std::chrono::steady_clock::time_point(std::chrono::seconds(100));
  log.first_token = log.received + std::chrono::milliseconds(40);
  log.id = "chatcmpl-1";
  log.generated = true;
  log.prompt_tokens = 34;
  log.cached_tokens = 32;
  log.completion_tokens = 11;
  log.end = "stop";
  EXPECT_EQ(ApiServer::RequestLogLine(request, 200, 0.140, log),
            "POST /v1/chat/completions 200 140.0ms id=chatcmpl-1 x_request_id=abc?FAKE?line? "
            "stream=false prompt_tokens=34 cached_tokens=32 completion_tokens=11 end=stop "
            "ttft_ms=40.0 tpot_ms=10.00");
  http::Request health;
  health.method = "GET";
  health.path = "/health";
  http::RequestLog failed;
  failed.error = "model_loading";
  EXPECT_EQ(ApiServer::RequestLogLine(health, 503, 0.0001, failed),
            "GET /health 503 0.1ms error=model_loading");
  EXPECT_FALSE(ApiServer::IsLoggedRequest(health, 503, failed));
  EXPECT_FALSE(ApiServer::IsLoggedRequest(health, 200, {}));
  EXPECT_TRUE(ApiServer::IsLoggedRequest(health, 500, {}));
  EXPECT_TRUE(ApiServer::IsLoggedRequest(request, 200, log));
}

// OpenAI Responses API (POST /v1/responses).
TEST_F(ApiServerTest, ResponsesReturnsAMessageItemAndUsage) {
  CaptureWriter w = Call("POST", "/v1/responses",
                         R"({"model":"byte-model","input":"Hi","max_output_tokens":32})");
  ASSERT_EQ(w.status(), 200) << w.body();
  util::Json j = w.json();
  EXPECT_EQ(j["id"].get<std::string>().rfind("resp_", 0), 0u);
  EXPECT_EQ(j["object"], "response");
  EXPECT_EQ(j["status"], "completed");
  EXPECT_TRUE(j["incomplete_details"].is_null());
  ASSERT_EQ(j["output"].size(), 1u);
  const util::Json& item = j["output"][0];
  EXPECT_EQ(item["type"], "message");
  EXPECT_EQ(item["role"], "assistant");
  EXPECT_EQ(item["content"][0]["type"], "output_text");
  EXPECT_EQ(item["content"][0]["text"], "Hello world");
  EXPECT_EQ(j["usage"]["output_tokens"], 11);
  EXPECT_EQ(j["max_output_tokens"], 32);
  util::Json chat = Chat(R"(,"max_tokens":32)").json();
  EXPECT_EQ(j["usage"]["input_tokens"], chat["usage"]["prompt_tokens"]);
  util::Json cut = Call("POST", "/v1/responses", R"({"input":"Hi","max_output_tokens":3})").json();
  EXPECT_EQ(cut["status"], "incomplete");
  EXPECT_EQ(cut["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(cut["output"][0]["status"], "incomplete");
}

TEST_F(ApiServerTest, ResponsesStreamEventsAreNumberedAndComplete) {
  CaptureWriter w = Call("POST", "/v1/responses", R"({"input":"Hi","stream":true})");
  auto events = w.NamedEvents();
  ASSERT_GE(events.size(), 8u);
  std::vector<std::string> names;
  std::string text;
  int64_t seq = 0;
  for (const auto& [name, data] : events) {
    EXPECT_EQ(data["sequence_number"], seq++) << name;
    if (names.empty() || names.back() != name) names.push_back(name);
    if (name == "response.output_text.delta") text += data["delta"].get<std::string>();
  }
  EXPECT_EQ(names, (std::vector<std::string>{
                       "response.created", "response.in_progress", "response.output_item.added",
                       "response.content_part.added", "response.output_text.delta",
                       "response.output_text.done", "response.content_part.done",
                       "response.output_item.done", "response.completed"}));
  EXPECT_EQ(text, "Hello world");
  const util::Json& done = events.back().second["response"];
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["output"][0]["content"][0]["text"], "Hello world");
  EXPECT_EQ(done["usage"]["output_tokens"], 11);
  EXPECT_TRUE(w.ended());
}

TEST_F(ApiServerTest, ResponsesBadInputIs400) {
  for (const char* body :
       {R"({"model":"byte-model"})", R"({"input":3})",
        R"({"input":"Hi","previous_response_id":"r"})",
        R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]})",
        R"({"input":"Hi","tools":[{"type":"web_search"}]})",
        R"({"input":"Hi","text":{"format":{"type":"json_schema"}}})",
        R"({"input":"Hi","max_output_tokens":0})", R"({"input":[{"type":"bogus"}]})"}) {
    CaptureWriter w = Call("POST", "/v1/responses", body);
    EXPECT_EQ(w.status(), 400) << body;
    EXPECT_EQ(w.json()["error"]["type"], "invalid_request_error") << body;
  }
  EXPECT_EQ(Call("POST", "/v1/responses", R"({"model":"gpt-x","input":"Hi"})").status(), 404);
}

// Anthropic Messages API (POST /v1/messages) over the same engine.
TEST_F(ApiServerTest, AnthropicMessageHasTextBlockStopReasonAndUsage) {
  CaptureWriter w = Messages("");
  ASSERT_EQ(w.status(), 200) << w.body();
  util::Json j = w.json();
  EXPECT_EQ(j["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(j["type"], "message");
  EXPECT_EQ(j["role"], "assistant");
  EXPECT_EQ(j["model"], "byte-model");
  ASSERT_EQ(j["content"].size(), 1u) << j.dump();
  EXPECT_EQ(j["content"][0], (util::Json{{"type", "text"}, {"text", "Hello world"}}));
  EXPECT_EQ(j["stop_reason"], "end_turn");
  EXPECT_TRUE(j["stop_sequence"].is_null());
  const util::Json& u = j["usage"];
  EXPECT_GT(u["input_tokens"].get<int>(), 0);
  EXPECT_EQ(u["output_tokens"], 11);  // the fake engine's "Hello world", one token per byte
  EXPECT_EQ(u["cache_read_input_tokens"], 0);
  EXPECT_EQ(u["cache_creation_input_tokens"], 0);
  // The prompt is the one the chat route renders for the same conversation.
  util::Json chat = Chat(R"(,"max_tokens":32)").json();
  EXPECT_EQ(u["input_tokens"], chat["usage"]["prompt_tokens"]);
  EXPECT_EQ(u["output_tokens"], chat["usage"]["completion_tokens"]);
}

TEST_F(ApiServerTest, AnthropicStreamSendsEventsInOrder) {
  CaptureWriter w = Messages(R"(,"stream":true)");
  ASSERT_EQ(w.status(), 200);
  EXPECT_EQ(w.content_type(), "text/event-stream");
  EXPECT_TRUE(w.ended());
  auto events = w.NamedEvents();
  ASSERT_GE(events.size(), 6u);
  std::vector<std::string> names;
  std::string text;
  for (const auto& [name, data] : events) {
    if (names.empty() || names.back() != name) names.push_back(name);
    if (name == "content_block_delta") {
      EXPECT_EQ(data["index"], 0);
      EXPECT_EQ(data["delta"]["type"], "text_delta");
      text += data["delta"]["text"].get<std::string>();
    }
  }
  EXPECT_EQ(names, (std::vector<std::string>{"message_start", "ping", "content_block_start",
                                             "content_block_delta", "content_block_stop",
                                             "message_delta", "message_stop"}));
  EXPECT_EQ(text, "Hello world");
  const util::Json& start = events[0].second["message"];
  EXPECT_EQ(start["content"], util::Json::array());
  EXPECT_TRUE(start["stop_reason"].is_null());
  EXPECT_EQ(events[2].second["content_block"], (util::Json{{"type", "text"}, {"text", ""}}));
  const util::Json& delta = events[events.size() - 2].second;
  EXPECT_EQ(delta["delta"]["stop_reason"], "end_turn");
  EXPECT_EQ(delta["usage"]["output_tokens"], 11);
  EXPECT_EQ(delta["usage"]["input_tokens"], start["usage"]["input_tokens"]);
}

TEST_F(ApiServerTest, AnthropicStopSequenceAndMaxTokensEndings) {
  util::Json j = Messages(R"(,"stop_sequences":["o w", "zz"])").json();
  EXPECT_EQ(j["content"][0]["text"], "Hell");
  EXPECT_EQ(j["stop_reason"], "stop_sequence");
  EXPECT_EQ(j["stop_sequence"], "o w");
  CaptureWriter w = Messages(R"(,"stop_sequences":["wor"],"stream":true)");
  auto events = w.NamedEvents();
  const util::Json& delta = events[events.size() - 2].second["delta"];
  EXPECT_EQ(delta["stop_reason"], "stop_sequence");
  EXPECT_EQ(delta["stop_sequence"], "wor");
  util::Json cut = Call("POST", "/v1/messages",
                        R"({"max_tokens":3,"messages":[{"role":"user","content":"Hi"}]})")
                       .json();
  EXPECT_EQ(cut["content"][0]["text"], "Hel");
  EXPECT_EQ(cut["stop_reason"], "max_tokens");
}

TEST_F(ApiServerTest, AnthropicErrorsHaveAnthropicShape) {
  struct Case {
    std::string body;
    int status;
    std::string type;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"messages":[{"role":"user","content":"Hi"}]})", 400, "invalid_request_error"},
           {R"({"max_tokens":0,"messages":[{"role":"user","content":"Hi"}]})", 400,
            "invalid_request_error"},
           {R"({"max_tokens":8,"messages":"Hi"})", 400, "invalid_request_error"},
           {R"({"max_tokens":8,"stop_sequences":"x","messages":[]})", 400, "invalid_request_error"},
           {R"({"max_tokens":8,"tool_choice":{"type":"maybe"},"messages":[]})", 400,
            "invalid_request_error"},
           {R"({"model":"claude-x","max_tokens":8,"messages":[{"role":"user","content":"Hi"}]})",
            404, "not_found_error"},
           {R"({"max_tokens":100000,"messages":[{"role":"user","content":"Hi"}]})", 400,
            "invalid_request_error"},
           {"[1,2", 400, "invalid_request_error"},
       }) {
    CaptureWriter w = Call("POST", "/v1/messages", c.body);
    EXPECT_EQ(w.status(), c.status) << c.body;
    util::Json j = w.json();
    EXPECT_EQ(j["type"], "error") << c.body;
    EXPECT_EQ(j["error"]["type"], c.type) << c.body;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
  }
  // Errors the router answers itself have Anthropic's shape on these paths too.
  CaptureWriter method = Call("GET", "/v1/messages", "");
  EXPECT_EQ(method.status(), 405);
  EXPECT_EQ(method.json()["error"]["type"], "invalid_request_error");
  EXPECT_EQ(Call("POST", "/v1/messages/batches", "{}").json()["error"]["type"], "not_found_error");
  // A context overflow is refused before any stream byte.
  CaptureWriter w = Call("POST", "/v1/messages",
                         R"({"max_tokens":100000,"stream":true,"messages":[{"role":"user",)"
                         R"("content":"Hi"}]})");
  EXPECT_EQ(w.status(), 400);
  EXPECT_FALSE(w.streaming());
}

// An image is refused before any stream byte on every generation route, in the route's shape,
// with the code unsupported_content (in the request log on the Anthropic route, whose error body
// has no code).
TEST_F(ApiServerTest, ImagesAreUnsupportedContentBeforeAnyStreamByte) {
  for (const char* stream : {"false", "true"}) {
    CaptureWriter chat =
        Call("POST", "/v1/chat/completions",
             std::string(R"({"stream":)") + stream +
                 R"(,"messages":[{"role":"user","content":[{"type":"image_url","image_url":)"
                 R"({"url":"data:image/png;base64,AAAA"}}]}]})");
    EXPECT_EQ(chat.status(), 400) << stream;
    EXPECT_FALSE(chat.streaming());
    EXPECT_EQ(chat.json()["error"]["code"], "unsupported_content");
    EXPECT_EQ(chat.json()["error"]["param"], "messages[0].content[0]");
    EXPECT_EQ(chat.log().error, "unsupported_content");

    CaptureWriter responses = Call(
        "POST", "/v1/responses",
        std::string(R"({"stream":)") + stream +
            R"(,"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]})");
    EXPECT_EQ(responses.status(), 400) << stream;
    EXPECT_FALSE(responses.streaming());
    EXPECT_EQ(responses.json()["error"]["code"], "unsupported_content");

    CaptureWriter messages =
        Call("POST", "/v1/messages",
             std::string(R"({"max_tokens":8,"stream":)") + stream +
                 R"(,"messages":[{"role":"user","content":[{"type":"image","source":)"
                 R"({"type":"base64","media_type":"image/png","data":"AAAA"}}]}]})");
    EXPECT_EQ(messages.status(), 400) << stream;
    EXPECT_FALSE(messages.streaming());
    EXPECT_EQ(messages.json()["type"], "error");
    EXPECT_EQ(messages.json()["error"]["type"], "invalid_request_error");
    EXPECT_NE(
        messages.json()["error"]["message"].get<std::string>().find("has no vision tower"),
        std::string::npos);
    EXPECT_EQ(messages.log().error, "unsupported_content");
  }
}

// A vision model (the byte model with a vision config): images are read, planned and expanded
// to their spans; /tokenize counts them; bad ones are refused before the engine sees anything;
// a good request reaches the engine with its ImageInputs.
constexpr char kPng1x1DataUri[] =
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhg"
    "GAWjR9awAAAABJRU5ErkJggg==";

std::string ChatWithImages(int n, const std::string& url, const std::string& extra = "") {
  std::string parts = R"({"type":"text","text":"Hi"})";
  for (int i = 0; i < n; ++i) {
    parts += R"(,{"type":"image_url","image_url":{"url":")" + url + R"("}})";
  }
  return R"({"max_tokens":4)" + extra + R"(,"messages":[{"role":"user","content":[)" + parts +
         "]}]}";
}

TEST_F(ApiServerTest, VisionModelImagesAreExpandedCheckedAndSubmitted) {
  FakeEngine::Options options;
  options.max_model_len = 2048;
  Init(options);
  model::DeepseekV41VisionConfig vision;
  vision.min_pixels = 295936;
  vision.image_token_id = 7;
  served_.vision = &vision;
  served_.media.limit_images_per_request = 2;
  auto code = [&](const std::string& body) {
    CaptureWriter w = Call("POST", "/v1/chat/completions", body);
    EXPECT_EQ(w.status(), 400) << body;
    return w.json()["error"]["code"].get<std::string>();
  };
  EXPECT_EQ(code(ChatWithImages(3, kPng1x1DataUri)), "too_many_images");
  EXPECT_EQ(code(ChatWithImages(1, "data:image/png;base64,AAAA")), "unsupported_image_format");
  EXPECT_EQ(code(ChatWithImages(1, "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAA")),
            "invalid_image");
  EXPECT_EQ(code(ChatWithImages(1, "http://example.com/a.png")), "image_url_not_allowed");
  EXPECT_EQ(engine_->num_submitted(), 0);

  // /tokenize: the text plus 184 tokens per 1x1 image (a 13x13 grid), the span all image ids.
  CaptureWriter text = Call("POST", "/tokenize", R"({"messages":[{"role":"user","content":"Hi"}]})");
  CaptureWriter one = Call("POST", "/tokenize", ChatWithImages(1, kPng1x1DataUri));
  CaptureWriter two = Call("POST", "/tokenize", ChatWithImages(2, kPng1x1DataUri));
  ASSERT_EQ(one.status(), 200) << one.body();
  ASSERT_EQ(two.status(), 200) << two.body();
  const int64_t base = one.json()["count"].get<int64_t>() - 184;
  EXPECT_EQ(two.json()["count"].get<int64_t>(), base + 2 * 184 + 1);  // the "\n" between parts
  EXPECT_GE(base, text.json()["count"].get<int64_t>());

  // A good request reaches the engine with both ImageInputs.
  CaptureWriter ok = Call("POST", "/v1/chat/completions", ChatWithImages(2, kPng1x1DataUri));
  ASSERT_EQ(ok.status(), 200) << ok.body();
  const std::vector<engine::GenerateRequest> seen = engine_->submitted();
  ASSERT_EQ(seen.size(), 1u);
  ASSERT_EQ(seen[0].images.size(), 2u);
  EXPECT_EQ(ok.json()["usage"]["prompt_tokens"].get<int64_t>(),
            static_cast<int64_t>(seen[0].prompt.size()));
  for (const auto& image : seen[0].images) {
    EXPECT_EQ(image->n_vit_h, 39);
    for (int32_t i = 0; i < 184; ++i) EXPECT_EQ(seen[0].prompt[image->position + i], 7);
  }
  EXPECT_EQ(seen[0].images[1]->position, seen[0].images[0]->position + 184 + 1);
}

TEST_F(ApiServerTest, AnthropicClientGoneMidStreamCancelsTheEngineRequest) {
  engine_->SetScript(ByteTokens(std::string(200, 'x')));
  CaptureWriter w = Messages(R"(,"max_tokens":200,"stream":true)", /*close_after_writes=*/3);
  EXPECT_TRUE(WaitForCancelled(1));
  EXPECT_FALSE(w.ended());
}

// DeepSeek tool calls: the byte model's tokenizer plays a V3.1 answer through the V3.1 encoder.
class ToolCallServerTest : public ApiServerTest {
 protected:
  void SetUp() override {
    ApiServerTest::SetUp();
    auto tmpl = tokenizer::CreateChatTemplateByName("deepseek-v3.1");
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    template_ = std::move(*tmpl);
    served_.chat_template = template_.get();
    served_.max_output_tokens = 400;
    auto script = ByteTokens(
        "Let me look.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
        "{\"city\": \"東京\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
    script.push_back(testing::kImEnd);
    engine_->SetScript(script);
  }
  static constexpr const char* kTools =
      R"(,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{}}}])";
};

TEST_F(ToolCallServerTest, CompletionReturnsToolCallsAndFinishReason) {
  util::Json j = Chat(kTools).json();
  const util::Json& choice = j["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  const util::Json& message = choice["message"];
  EXPECT_EQ(message["content"], "Let me look.");
  ASSERT_EQ(message["tool_calls"].size(), 2u) << j.dump();
  const util::Json& first = message["tool_calls"][0];
  EXPECT_EQ(first["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(first["type"], "function");
  EXPECT_EQ(first["function"]["name"], "get_weather");
  EXPECT_EQ(first["function"]["arguments"], "{\"city\": \"東京\"}");
  EXPECT_EQ(message["tool_calls"][1]["function"]["name"], "get_time");
  EXPECT_EQ(message["tool_calls"][1]["function"]["arguments"], "{}");
  EXPECT_NE(first["id"], message["tool_calls"][1]["id"]);
}

TEST_F(ToolCallServerTest, StreamingSendsEachCallOnceWithItsIndex) {
  CaptureWriter w = Chat(std::string(kTools) + R"(,"stream":true)");
  std::string content, finish;
  std::vector<util::Json> calls;
  for (const std::string& e : w.Events()) {
    if (e == "[DONE]") continue;
    util::Json c = *util::ParseJson(e);
    const util::Json& choice = c["choices"][0];
    const util::Json& delta = choice["delta"];
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (delta.contains("tool_calls")) {
      EXPECT_FALSE(delta.contains("content")) << e;
      for (const util::Json& call : delta["tool_calls"]) calls.push_back(call);
    }
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
  }
  EXPECT_EQ(content, "Let me look.");
  EXPECT_EQ(finish, "tool_calls");
  ASSERT_EQ(calls.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(calls[i]["index"], i);
    EXPECT_EQ(calls[i]["type"], "function");
    EXPECT_EQ(calls[i]["id"].get<std::string>().rfind("call_", 0), 0u);
  }
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(calls[0]["function"]["arguments"], "{\"city\": \"東京\"}");
  EXPECT_EQ(calls[1]["function"]["name"], "get_time");
  EXPECT_EQ(calls[1]["function"]["arguments"], "{}");
}

TEST_F(ToolCallServerTest, WithoutToolsOrWithToolChoiceNoneTheTextStays) {
  for (const std::string& extra :
       {std::string(""), std::string(kTools) + R"(,"tool_choice":"none")"}) {
    util::Json j = Chat(extra).json();
    const util::Json& choice = j["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "stop");
    EXPECT_FALSE(choice["message"].contains("tool_calls"));
    EXPECT_NE(choice["message"]["content"].get<std::string>().find("<｜tool▁calls▁begin｜>"),
              std::string::npos);
  }
}

TEST_F(ToolCallServerTest, CutByMaxTokensLeavesTheCallAsTextAndFinishesWithLength) {
  util::Json j = Chat(std::string(kTools) + R"(,"max_tokens":60)").json();
  const util::Json& choice = j["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_FALSE(choice["message"].contains("tool_calls"));
  EXPECT_EQ(choice["message"]["content"].get<std::string>().rfind(
                "Let me look.<｜tool▁calls▁begin｜>", 0),
            0u);
}

TEST_F(ToolCallServerTest, BadToolChoiceIs400) {
  CaptureWriter w = Chat(std::string(kTools) + R"(,"tool_choice":3)");
  EXPECT_EQ(w.status(), 400);
}

TEST_F(ToolCallServerTest, AnthropicToolUseBlocksAndStopReason) {
  const std::string tools =
      R"(,"tools":[{"name":"get_weather","input_schema":{"type":"object"}},{"name":"get_time"}])";
  util::Json j = Messages(tools + R"(,"max_tokens":400)").json();
  EXPECT_EQ(j["stop_reason"], "tool_use") << j.dump();
  const util::Json& content = j["content"];
  ASSERT_EQ(content.size(), 3u) << j.dump();
  EXPECT_EQ(content[0], (util::Json{{"type", "text"}, {"text", "Let me look."}}));
  EXPECT_EQ(content[1]["type"], "tool_use");
  EXPECT_EQ(content[1]["id"].get<std::string>().rfind("toolu_", 0), 0u);
  EXPECT_EQ(content[1]["name"], "get_weather");
  EXPECT_EQ(content[1]["input"], (util::Json{{"city", "東京"}}));
  EXPECT_EQ(content[2]["name"], "get_time");
  EXPECT_EQ(content[2]["input"], util::Json::object());

  // Streamed: a text block, then one block per call whose input arrives as input_json_delta.
  CaptureWriter w = Messages(tools + R"(,"max_tokens":400,"stream":true)");
  std::vector<util::Json> starts;
  std::map<int, std::string> partial_json;
  std::string stop_reason;
  for (const auto& [name, data] : w.NamedEvents()) {
    if (name == "content_block_start") {
      EXPECT_EQ(data["index"], static_cast<int>(starts.size()));
      starts.push_back(data["content_block"]);
    }
    if (name == "content_block_delta" && data["delta"]["type"] == "input_json_delta") {
      partial_json[data["index"].get<int>()] += data["delta"]["partial_json"].get<std::string>();
    }
    if (name == "message_delta") stop_reason = data["delta"]["stop_reason"];
  }
  ASSERT_EQ(starts.size(), 3u);
  EXPECT_EQ(starts[0]["type"], "text");
  EXPECT_EQ(starts[1]["type"], "tool_use");
  EXPECT_EQ(starts[1]["name"], "get_weather");
  EXPECT_EQ(starts[1]["input"], util::Json::object());
  EXPECT_EQ(*util::ParseJson(partial_json[1]), (util::Json{{"city", "東京"}}));
  EXPECT_EQ(*util::ParseJson(partial_json[2]), util::Json::object());
  EXPECT_EQ(stop_reason, "tool_use");

  // tool_choice none: the call stays text.
  util::Json none = Messages(tools + R"(,"max_tokens":400,"tool_choice":{"type":"none"})").json();
  EXPECT_EQ(none["stop_reason"], "end_turn");
  ASSERT_EQ(none["content"].size(), 1u);
  EXPECT_NE(none["content"][0]["text"].get<std::string>().find("get_weather"), std::string::npos);
}

TEST_F(ToolCallServerTest, ResponsesFunctionCallItems) {
  const std::string tools =
      R"(,"tools":[{"type":"function","name":"get_weather","parameters":{}}])";
  util::Json j =
      Call("POST", "/v1/responses", R"({"input":"Weather?","max_output_tokens":400)" + tools + "}")
          .json();
  ASSERT_EQ(j["output"].size(), 3u) << j.dump();
  EXPECT_EQ(j["output"][0]["type"], "message");
  EXPECT_EQ(j["output"][0]["content"][0]["text"], "Let me look.");
  EXPECT_EQ(j["output"][1]["type"], "function_call");
  EXPECT_EQ(j["output"][1]["name"], "get_weather");
  EXPECT_EQ(j["output"][1]["arguments"], "{\"city\": \"東京\"}");
  EXPECT_EQ(j["output"][1]["call_id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(j["output"][2]["name"], "get_time");
  EXPECT_EQ(j["tools"][0]["name"], "get_weather");

  CaptureWriter w =
      Call("POST", "/v1/responses",
           R"({"input":"Weather?","max_output_tokens":400,"stream":true)" + tools + "}");
  std::vector<std::string> args;
  util::Json final_output;
  for (const auto& [name, data] : w.NamedEvents()) {
    if (name == "response.function_call_arguments.done") args.push_back(data["arguments"]);
    if (name == "response.completed") final_output = data["response"]["output"];
  }
  EXPECT_EQ(args, (std::vector<std::string>{"{\"city\": \"東京\"}", "{}"}));
  ASSERT_EQ(final_output.size(), 3u);
  EXPECT_EQ(final_output[1]["type"], "function_call");
}

}  // namespace
}  // namespace deepinfer::api
