// The routes of `serve` (ApiServer) over the HTTP server and real loopback sockets, composed as
// src/cli/serve.cc composes them: keep-alive across JSON and SSE answers, 400/413 error shapes,
// cancellation of a generation whose client left, shutting_down while the server stops, and the
// observer feeding the HTTP metrics.

#include <chrono>
#include <thread>

#include "api/server.h"
#include "api/testing/fake_engine.h"
#include "boost/asio/connect.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http.hpp"
#include "gtest/gtest.h"
#include "http/server.h"
#include "tokenizer/chat_template.h"
#include "util/json.h"

namespace deepinfer::api {
namespace {

namespace beast_http = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

class ServeHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::MakeByteModel();
    tokenizer_ = std::move(*tokenizer::CreateTokenizer(model_->tokenizer));
    template_ = std::move(*tokenizer::CreateChatTemplate(model_->tokenizer));
    testing::FakeEngine::Options options;
    options.step = std::chrono::milliseconds(2);
    engine_ = std::make_unique<testing::FakeEngine>(*model_, options);
    engine_->SetScript(testing::ByteTokens("Hello world"));
    served_ = ServedModel{
        engine_.get(), tokenizer_.get(), template_.get(), "byte-model", 512, 64, 0, false, nullptr};
    api_ = std::make_unique<ApiServer>();
    served_.metrics = &api_->metrics();
    api_->SetServedModel(&served_);
  }
  void TearDown() override {
    if (server_) server_->Stop();
    server_.reset();
  }

  void StartServer(int64_t max_request_bytes = 1 << 20, int max_connections = 1024) {
    http::ServerOptions options;
    options.port = 0;
    options.max_request_bytes = max_request_bytes;
    options.max_connections = max_connections;
    options.idle_timeout_ms = 2000;
    auto server = http::Server::Start(
        options, [this](const http::Request& r, http::ResponseWriter& w) { api_->Handle(r, w); },
        [this](const http::Request& r, int status, double s, const http::RequestLog& log) {
          api_->Observe(r, status, s, log);
        });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    api_->SetHttpServer(server_.get());
  }

  tcp::socket Connect() {
    tcp::socket socket(io_);
    socket.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), server_->port()));
    return socket;
  }

  // Sends raw bytes and reads until the server closes the connection.
  std::string RawExchange(const std::string& bytes) {
    tcp::socket socket = Connect();
    boost::system::error_code ec;
    net::write(socket, net::buffer(bytes), ec);
    std::string out;
    char buf[4096];
    while (true) {
      size_t n = socket.read_some(net::buffer(buf), ec);
      if (ec) break;
      out.append(buf, n);
    }
    return out;
  }

  beast_http::response<beast_http::string_body> Request(tcp::socket& socket, beast_http::verb verb,
                                                        const std::string& target,
                                                        const std::string& body) {
    beast_http::request<beast_http::string_body> req{verb, target, 11};
    req.set(beast_http::field::host, "localhost");
    req.set(beast_http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    boost::system::error_code ec;
    beast_http::write(socket, req, ec);
    EXPECT_FALSE(ec) << ec.message();
    boost::beast::flat_buffer buffer;
    beast_http::response<beast_http::string_body> res;
    beast_http::read(socket, buffer, res, ec);
    EXPECT_FALSE(ec) << ec.message();
    return res;
  }

  net::io_context io_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<tokenizer::ChatTemplate> template_;
  std::unique_ptr<testing::FakeEngine> engine_;
  ServedModel served_;
  std::unique_ptr<ApiServer> api_;
  std::unique_ptr<http::Server> server_;
};

TEST_F(ServeHttpTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  StartServer();
  tcp::socket socket = Connect();
  auto health = Request(socket, beast_http::verb::get, "/health", "");
  EXPECT_EQ(health.result_int(), 200);
  EXPECT_TRUE(health.keep_alive());
  auto chat = Request(socket, beast_http::verb::post, "/v1/chat/completions",
                      R"({"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(chat.result_int(), 200);
  EXPECT_EQ((*util::ParseJson(chat.body()))["choices"][0]["message"]["content"], "Hello world");
  // A streamed answer is chunked, so the connection stays usable after it.
  auto stream = Request(socket, beast_http::verb::post, "/v1/chat/completions",
                        R"({"stream":true,"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(stream.result_int(), 200);
  EXPECT_EQ(stream[beast_http::field::content_type], "text/event-stream");
  const std::string& body = stream.body();
  EXPECT_EQ(body.substr(body.size() - 14), "data: [DONE]\n\n");
  EXPECT_EQ(Request(socket, beast_http::verb::get, "/health", "").result_int(), 200);
}

TEST_F(ServeHttpTest, OversizedBodyIs413WithOpenAiError) {
  StartServer(/*max_request_bytes=*/1024);
  std::string body(5000, 'x');
  std::string reply = RawExchange("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                                  std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_EQ(reply.rfind("HTTP/1.1 413", 0), 0u) << reply;
  EXPECT_NE(reply.find("\"code\":\"request_too_large\""), std::string::npos) << reply;
  // On the Anthropic route the same error has Anthropic's shape.
  std::string anthropic = RawExchange("POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                                      std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_EQ(anthropic.rfind("HTTP/1.1 413", 0), 0u) << anthropic;
  EXPECT_NE(anthropic.find("\"type\":\"request_too_large\""), std::string::npos) << anthropic;
  EXPECT_NE(anthropic.find("\"type\":\"error\""), std::string::npos) << anthropic;
  // The server is still fine.
  tcp::socket socket = Connect();
  EXPECT_EQ(Request(socket, beast_http::verb::get, "/health", "").result_int(), 200);
}

TEST_F(ServeHttpTest, MalformedRequestIs400) {
  StartServer();
  std::string reply = RawExchange("NOT AN HTTP REQUEST\r\n\r\n");
  EXPECT_EQ(reply.rfind("HTTP/1.1 400", 0), 0u) << reply;
  EXPECT_NE(reply.find("\"error\""), std::string::npos);
  std::string binary("\x00\xff\x01\r\n\r\n", 7);
  reply = RawExchange(binary);
  EXPECT_EQ(reply.rfind("HTTP/1.1 400", 0), 0u) << reply;
  // HTTP/1.1 needs exactly one Host header (RFC 9112 section 3.2); HTTP/1.0 needs none.
  reply = RawExchange("GET /health HTTP/1.1\r\n\r\n");
  EXPECT_EQ(reply.rfind("HTTP/1.1 400", 0), 0u) << reply;
  EXPECT_NE(reply.find("Host"), std::string::npos) << reply;
  reply = RawExchange("GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
  EXPECT_EQ(reply.rfind("HTTP/1.1 400", 0), 0u) << reply;
  reply = RawExchange("GET /health HTTP/1.0\r\n\r\n");
  EXPECT_EQ(reply.rfind("HTTP/1.0 200", 0), 0u) << reply;
}

TEST_F(ServeHttpTest, ClientCloseMidStreamCancelsTheEngineRequest) {
  engine_->SetScript(testing::ByteTokens(std::string(2000, 'a')));
  StartServer();
  {
    tcp::socket socket = Connect();
    std::string body =
        R"({"stream":true,"max_tokens":400,"messages":[{"role":"user","content":"x"}]})";
    std::string req = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                      std::to_string(body.size()) + "\r\n\r\n" + body;
    net::write(socket, net::buffer(req));
    char buf[256];
    socket.read_some(net::buffer(buf));  // the stream has started
  }                                      // closes the socket
  for (int i = 0; i < 1000 && engine_->num_cancelled() < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(engine_->num_cancelled(), 1);
}

TEST_F(ServeHttpTest, HoldsHundredsOfConnectionsAtOnce) {
  StartServer();
  std::vector<tcp::socket> sockets;
  for (int i = 0; i < 300; ++i) sockets.push_back(Connect());
  for (auto& s : sockets) {
    EXPECT_EQ(Request(s, beast_http::verb::get, "/health", "").result_int(), 200);
  }
  EXPECT_EQ(server_->num_connections(), 300);
}

TEST_F(ServeHttpTest, BusyPortFailsToStart) {
  StartServer();
  http::ServerOptions options;
  options.port = server_->port();
  auto second = http::Server::Start(options, [](const http::Request&, http::ResponseWriter&) {});
  EXPECT_FALSE(second.ok());
}

TEST_F(ServeHttpTest, StopEndsAStreamInProgressWithShuttingDown) {
  engine_->SetScript(testing::ByteTokens(std::string(2000, 'a')));
  StartServer();
  tcp::socket socket = Connect();
  std::string body =
      R"({"stream":true,"max_tokens":400,"messages":[{"role":"user","content":"x"}]})";
  net::write(socket,
             net::buffer("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                         std::to_string(body.size()) + "\r\n\r\n" + body));
  std::string got;
  char buf[4096];
  boost::system::error_code ec;
  while (got.find("data: ") == std::string::npos && !ec) {
    got.append(buf, socket.read_some(net::buffer(buf), ec));  // the stream has started
  }
  std::thread stop([this] { EXPECT_TRUE(server_->Stop(5000)); });
  while (!ec) got.append(buf, socket.read_some(net::buffer(buf), ec));  // to the close
  stop.join();
  // The generation ends at once with an in-band 503, then [DONE] and the last chunk.
  EXPECT_NE(got.find("\"code\":\"shutting_down\""), std::string::npos) << got;
  EXPECT_NE(got.find("data: [DONE]\n\n\r\n0\r\n\r\n"), std::string::npos) << got;
  for (int i = 0; i < 1000 && engine_->num_cancelled() < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(engine_->num_cancelled(), 1);
}

TEST_F(ServeHttpTest, EveryAnswerReachesTheHttpMetricsThroughTheObserver) {
  StartServer();
  tcp::socket socket = Connect();
  EXPECT_EQ(Request(socket, beast_http::verb::get, "/health", "").result_int(), 200);
  EXPECT_EQ(Request(socket, beast_http::verb::post, "/v1/chat/completions", "{").result_int(), 400);
  // The server's own answer to a malformed request is observed too.
  EXPECT_EQ(RawExchange("NOT AN HTTP REQUEST\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  std::string metrics = Request(socket, beast_http::verb::get, "/metrics", "").body();
  for (const char* series :
       {"deepinfer_http_requests_total{route=\"/health\",method=\"GET\",status=\"200\"} 1",
        "deepinfer_http_requests_total{route=\"/v1/chat/completions\",method=\"POST\","
        "status=\"400\"} 1",
        "deepinfer_http_requests_total{route=\"other\",method=\"other\",status=\"400\"} 1"}) {
    EXPECT_NE(metrics.find(series), std::string::npos) << series << "\n" << metrics;
  }
}

// Regression: deepinfer_http_open_connections stayed 0 (nothing updated it); it is the server's
// own count of open client connections, read at the scrape.
TEST_F(ServeHttpTest, OpenConnectionsGaugeReportsTheServersOpenConnections) {
  StartServer();
  tcp::socket first = Connect();
  tcp::socket second = Connect();
  EXPECT_EQ(Request(first, beast_http::verb::get, "/health", "").result_int(), 200);
  EXPECT_EQ(Request(second, beast_http::verb::get, "/health", "").result_int(), 200);
  std::string metrics = Request(first, beast_http::verb::get, "/metrics", "").body();
  EXPECT_NE(metrics.find("\ndeepinfer_http_open_connections 2\n"), std::string::npos) << metrics;
  second.close();
  // The server sees the close at its next look at the socket.
  for (int i = 0; i < 500 && server_->num_connections() != 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  metrics = Request(first, beast_http::verb::get, "/metrics", "").body();
  EXPECT_NE(metrics.find("\ndeepinfer_http_open_connections 1\n"), std::string::npos) << metrics;
}

TEST_F(ServeHttpTest, ConnectionsOverTheLimitGet503TooManyConnections) {
  StartServer(1 << 20, /*max_connections=*/1);
  tcp::socket first = Connect();
  EXPECT_EQ(Request(first, beast_http::verb::get, "/health", "").result_int(), 200);
  std::string refused = RawExchange("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(refused.rfind("HTTP/1.1 503", 0), 0u) << refused;
  EXPECT_NE(refused.find("\"code\":\"too_many_connections\""), std::string::npos) << refused;
  EXPECT_NE(refused.find("The server has too many open connections."), std::string::npos)
      << refused;
}

}  // namespace
}  // namespace deepinfer::api
