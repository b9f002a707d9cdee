#include "tools/bench_http.h"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "boost/asio.hpp"
#include "gtest/gtest.h"

namespace deepinfer::tools {
namespace {

namespace asio = boost::asio;

TEST(ParseBaseUrlTest, AcceptsRootsAndOpenAiBaseUrls) {
  auto a = ParseBaseUrl("http://127.0.0.1:8900");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host(), "127.0.0.1");
  EXPECT_EQ(a->port(), 8900);
  EXPECT_EQ(a->path(), "");
  auto b = ParseBaseUrl("http://localhost:8000/v1/");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->port(), 8000);
  EXPECT_EQ(b->path(), "");
  auto c = ParseBaseUrl("http://example.com/proxy/v1");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->port(), 80);
  EXPECT_EQ(c->path(), "/proxy");
  EXPECT_EQ(c->ToString(), "http://example.com:80/proxy");
}

TEST(ParseBaseUrlTest, RejectsOtherSchemesAndBadPorts) {
  EXPECT_FALSE(ParseBaseUrl("https://127.0.0.1:8900").ok());
  EXPECT_FALSE(ParseBaseUrl("127.0.0.1:8900").ok());
  EXPECT_FALSE(ParseBaseUrl("http://:8900").ok());
  EXPECT_FALSE(ParseBaseUrl("http://host:99999").ok());
  EXPECT_FALSE(ParseBaseUrl("http://host:12ab").ok());
}

// A one-connection server that answers with `response` written in `pieces` parts, `pause_ms`
// apart.
class CannedServer {
 public:
  CannedServer(std::vector<std::string> pieces, int pause_ms)
      : acceptor_(ioc_, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this, pieces = std::move(pieces), pause_ms] {
      boost::system::error_code ec;
      asio::ip::tcp::socket socket(ioc_);
      acceptor_.accept(socket, ec);
      if (ec) return;
      asio::streambuf request;
      asio::read_until(socket, request, "\r\n\r\n", ec);
      for (const std::string& piece : pieces) {
        asio::write(socket, asio::buffer(piece), ec);
        std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
      }
      socket.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
    });
  }
  ~CannedServer() { thread_.join(); }
  http::Url url() const { return http::Url("127.0.0.1", port_); }

 private:
  asio::io_context ioc_;
  asio::ip::tcp::acceptor acceptor_;
  int port_ = 0;
  std::thread thread_;
};

TEST(HttpPostStreamingTest, DeliversChunkedBodyPiecesAsTheyArrive) {
  CannedServer server(
      {"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
       "9\r\ndata: a\n\n\r\n", "9\r\ndata: b\n\n\r\n", "0\r\n\r\n"},
      30);
  std::vector<std::pair<std::string, std::chrono::steady_clock::time_point>> pieces;
  HttpOptions options;
  options.idle_timeout_s = 5;
  auto r = HttpPostStreaming(
      server.url(), "/v1/completions", "{}", options, [&](std::string_view piece) {
        pieces.emplace_back(std::string(piece), std::chrono::steady_clock::now());
        return true;
      });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->Header("content-type"), "text/event-stream");
  std::string all;
  for (const auto& p : pieces) all += p.first;
  EXPECT_EQ(all, "data: a\n\ndata: b\n\n");
  // The pieces were handed over as they arrived, not at the end.
  ASSERT_GE(pieces.size(), 2u);
  EXPECT_GE(pieces.back().second - pieces.front().second, std::chrono::milliseconds(20));
}

TEST(HttpPostStreamingTest, ReadsErrorBodiesWhole) {
  std::string body = R"({"error":{"message":"too long"}})";
  CannedServer server({"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                       "Content-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body},
                      0);
  bool called = false;
  auto r = HttpPostStreaming(server.url(), "/v1/completions", "{}", HttpOptions{},
                             [&](std::string_view) { return called = true; });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(r->body, body);
  EXPECT_FALSE(called);
}

TEST(HttpFetchTest, IdleTimeoutEndsAStalledResponse) {
  CannedServer server({"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"}, 1500);
  HttpOptions options;
  options.idle_timeout_s = 0.2;
  auto start = std::chrono::steady_clock::now();
  auto r = HttpFetch(server.url(), "GET", "/health", "", options);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1200));
}

TEST(HttpFetchTest, ClosedPortIsConnectFailed) {
  int port = 0;
  {
    asio::io_context ioc;
    asio::ip::tcp::acceptor a(ioc, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    port = a.local_endpoint().port();
  }
  auto r = HttpFetch(http::Url("127.0.0.1", port), "GET", "/health", "", HttpOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace deepinfer::tools
