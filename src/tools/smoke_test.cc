#include "tools/smoke.h"

#include <set>
#include <sstream>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "http/server.h"
#include "http/sse.h"
#include "util/json.h"

namespace deepinfer::tools {
namespace {

using util::Json;

// What a fake OpenAI-compatible server gets right or wrong.
struct FakeBehavior {
  int window = 256;
  bool prefix_caching = true;
  bool send_done = true;
  bool refuse_over_window = true;
  bool expect_rank_header = false;
  bool vision = false;  // answers images (50 tokens each); otherwise refuses them
};

// A server speaking just enough of the API for the smoke checks, over real sockets.
class FakeServer {
 public:
  explicit FakeServer(FakeBehavior behavior) : behavior_(behavior) {
    http::ServerOptions options;
    options.port = 0;
    auto server = http::Server::Start(
        options, [this](const http::Request& r, http::ResponseWriter& w) { Handle(r, w); });
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  std::string base() const { return "http://127.0.0.1:" + std::to_string(server_->port()) + "/v1"; }
  int num_rank_headers() const { return num_rank_headers_; }

 private:
  static int64_t Words(const std::string& s) {
    std::istringstream in(s);
    std::string w;
    int64_t n = 0;
    while (in >> w) ++n;
    return n;
  }

  void Handle(const http::Request& r, http::ResponseWriter& w) {
    if (r.path == "/health") {
      w.Respond(200, {{"Content-Type", "application/json"}}, "{\"status\":\"ok\"}");
      return;
    }
    if (r.path == "/v1/models") {
      util::Json body = {
          {"object", "list"},
          {"data",
           util::Json::array({util::Json{{"id", "fake"}, {"max_model_len", behavior_.window}}})}};
      w.Respond(200, {{"Content-Type", "application/json"}}, util::DumpJson(body));
      return;
    }
    if (r.path != "/v1/chat/completions") {
      w.Respond(404, {{"Content-Type", "application/json"}}, "{}");
      return;
    }
    if (!r.Header("x-data-parallel-rank").empty()) ++num_rank_headers_;
    util::Json req = *util::ParseJson(r.body);
    int64_t prompt = 0;
    std::string system;
    for (util::Json& m : req["messages"]) {
      if (m["content"].is_array()) {  // text and image parts
        for (util::Json& part : m["content"]) {
          if (part["type"] == "text") prompt += Words(part["text"].get<std::string>());
          if (part["type"] != "image_url") continue;
          if (!behavior_.vision) {
            w.Respond(400, {{"Content-Type", "application/json"}},
                      "{\"error\":{\"message\":\"text only\",\"type\":"
                      "\"invalid_request_error\",\"param\":\"messages\",\"code\":"
                      "\"unsupported_content\"}}");
            return;
          }
          prompt += 50;
        }
        prompt += 4;
        continue;
      }
      prompt += Words(m["content"].get<std::string>()) + 4;
      if (m["role"] == "system") system = m["content"].get<std::string>();
    }
    if (prompt >= behavior_.window && behavior_.refuse_over_window) {
      w.Respond(400, {{"Content-Type", "application/json"}},
                "{\"error\":{\"message\":\"too long\",\"type\":\"invalid_request_error\","
                "\"param\":\"messages\",\"code\":\"context_length_exceeded\"}}");
      return;
    }
    int64_t cached = 0;
    {
      absl::MutexLock lock(&mu_);
      if (!system.empty() && !seen_.insert(system).second && behavior_.prefix_caching) {
        cached = 16;
      }
    }
    util::Json usage = {{"prompt_tokens", prompt},
                        {"completion_tokens", 2},
                        {"total_tokens", prompt + 2},
                        {"prompt_tokens_details", {{"cached_tokens", cached}}}};
    if (req.value("stream", false)) {
      http::BeginEventStream(w);
      w.Write(
          "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
          "\"content\":\"\"},\"finish_reason\":null}]}\n\n");
      for (int i = 0; i < 3; ++i) {
        if (!w.Write("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi \"},"
                     "\"finish_reason\":null}]}\n\n")) {
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      w.Write(
          "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":"
          "\"length\"}]}\n\n");
      w.Write("data: " +
              util::DumpJson(util::Json{{"choices", util::Json::array()}, {"usage", usage}}) +
              "\n\n");
      if (behavior_.send_done) w.Write("data: [DONE]\n\n");
      w.End();
      return;
    }
    util::Json body = {
        {"object", "chat.completion"},
        {"choices", util::Json::array(
                        {util::Json{{"index", 0},
                                    {"message", {{"role", "assistant"}, {"content", "hi there"}}},
                                    {"finish_reason", "length"}}})},
        {"usage", usage}};
    w.Respond(200, {{"Content-Type", "application/json"}}, util::DumpJson(body));
  }

  FakeBehavior behavior_;
  std::unique_ptr<http::Server> server_;
  absl::Mutex mu_;
  std::set<std::string> seen_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> num_rank_headers_{0};
};

SmokeOptions Options(const std::string& base) {
  SmokeOptions options;
  options.base_url = base;
  options.timeout_s = 10;
  return options;
}

const SmokeCheck* Find(const SmokeReport& report, const std::string& name) {
  for (const SmokeCheck& c : report.checks) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

TEST(SmokeTest, GoodServerPassesEveryCheck) {
  FakeServer server(FakeBehavior{});
  SmokeOptions options;
  options.base_url = server.base();
  options.dp_rank = 3;
  options.timeout_s = 10;
  auto report = RunSmoke(options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok()) << FormatSmokeReport(*report);
  EXPECT_EQ(report->checks.size(), 8u);
  const SmokeCheck* image = Find(*report, "image");
  ASSERT_NE(image, nullptr);
  EXPECT_NE(image->detail.find("text only"), std::string::npos) << image->detail;
  EXPECT_EQ(report->window, 256);
  EXPECT_EQ(report->model, "fake");
  EXPECT_GT(server.num_rank_headers(), 0);
  EXPECT_NE(FormatSmokeReport(*report).find("PASS"), std::string::npos);
  auto json = util::ParseJson(SmokeReportJson(*report));
  ASSERT_TRUE(json.ok());
  EXPECT_EQ((*json)["ok"], true);
}

TEST(SmokeTest, VisionServerAnswersTheImageWithALongerPrompt) {
  FakeBehavior b;
  b.vision = true;
  FakeServer server(b);
  auto report = RunSmoke(Options(server.base()));
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok()) << FormatSmokeReport(*report);
  const SmokeCheck* c = Find(*report, "image");
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c->detail.find("about 50 prompt tokens"), std::string::npos) << c->detail;
}

TEST(SmokeTest, ServerWithoutPrefixCachingFailsWithOneClearLine) {
  FakeBehavior b;
  b.prefix_caching = false;
  FakeServer server(b);
  auto report = RunSmoke(Options(server.base()));
  ASSERT_TRUE(report.ok());
  EXPECT_FALSE(report->ok());
  const SmokeCheck* c = Find(*report, "prefix_cache");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->ok);
  EXPECT_NE(c->detail.find("cached_tokens=0"), std::string::npos) << c->detail;
  for (const SmokeCheck& other : report->checks) {
    if (other.name != "prefix_cache") {
      EXPECT_TRUE(other.ok) << other.name << ": " << other.detail;
    }
  }
}

TEST(SmokeTest, StreamWithoutDoneFails) {
  FakeBehavior b;
  b.send_done = false;
  FakeServer server(b);
  auto report = RunSmoke(Options(server.base()));
  ASSERT_TRUE(report.ok());
  const SmokeCheck* c = Find(*report, "stream");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->ok);
  EXPECT_NE(c->detail.find("[DONE]"), std::string::npos) << c->detail;
}

TEST(SmokeTest, OverWindowPromptThatStartsAStreamFails) {
  FakeBehavior b;
  b.refuse_over_window = false;
  FakeServer server(b);
  auto report = RunSmoke(Options(server.base()));
  ASSERT_TRUE(report.ok());
  const SmokeCheck* c = Find(*report, "over_window");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->ok);
  EXPECT_NE(c->detail.find("started a stream"), std::string::npos) << c->detail;
}

TEST(SmokeTest, WrongWindowFailsTheModelsCheck) {
  FakeServer server(FakeBehavior{});
  SmokeOptions options = Options(server.base());
  options.expect_window = 4096;
  auto report = RunSmoke(options);
  ASSERT_TRUE(report.ok());
  const SmokeCheck* c = Find(*report, "models");
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->ok);
  EXPECT_NE(c->detail.find("expected 4096"), std::string::npos) << c->detail;
}

TEST(SmokeTest, UnreachableServerFailsEveryCheckWithoutCrashing) {
  SmokeOptions options = Options("http://127.0.0.1:1/v1");
  options.timeout_s = 2;
  auto report = RunSmoke(options);
  ASSERT_TRUE(report.ok());
  EXPECT_FALSE(report->ok());
  for (const SmokeCheck& c : report->checks) EXPECT_FALSE(c.ok) << c.name;
}

}  // namespace
}  // namespace deepinfer::tools
