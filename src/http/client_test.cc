// The client against real loopback servers: the repo's http::Server for well-formed exchanges,
// and a canned one-connection server for what a well-behaved server never sends.

#include "http/client.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "boost/asio/error.hpp"
#include "gtest/gtest.h"
#include "http/server.h"
#include "http/socket_io.h"
#include "util/status.h"

namespace deepinfer::http {
namespace {

using namespace std::chrono_literals;

// Paths: /echo (method, target, headers and body back as text), /stream?n=N (N SSE events 30 ms
// apart, stopping when the client leaves), /hang (waits for the client to leave).
class TestServer {
 public:
  TestServer() {
    ServerOptions o;
    o.port = 0;
    o.idle_timeout_ms = 2000;
    server_ =
        std::move(*Server::Start(o, [this](const Request& r, ResponseWriter& w) { Serve(r, w); }));
  }
  Url url() const { return Url("127.0.0.1", server_->port()); }
  int num_connections() const { return server_->num_connections(); }
  bool saw_hang_up() const { return hung_up_.load(); }
  int events_sent() const { return events_sent_.load(); }

 private:
  void Serve(const Request& r, ResponseWriter& w) {
    if (r.path == "/echo") {
      std::string text = r.method + " " + r.target + "\n";
      for (const auto& [name, value] : r.headers) text += name + ": " + value + "\n";
      w.Respond(200, {{"Content-Type", "text/plain"}}, text + "\n" + r.body);
    } else if (r.path == "/stream") {
      int n = 3;
      std::sscanf(r.target.c_str(), "/stream?n=%d", &n);
      w.BeginBody(200, {{"Content-Type", "text/event-stream"}}, std::nullopt);
      for (int i = 0; i < n && !w.PeerClosed(); ++i) {
        if (i > 0) std::this_thread::sleep_for(30ms);
        w.Write("data: " + std::to_string(i) + "\n\n");
        events_sent_++;
      }
      if (w.PeerClosed()) hung_up_ = true;
      w.End();
    } else if (r.path == "/hang") {
      while (!w.PeerClosed()) std::this_thread::sleep_for(1ms);
      hung_up_ = true;
      w.Abort();
    } else {
      w.Respond(404, {{"Content-Type", "application/json"}}, "{\"error\":\"not found\"}");
    }
  }

  std::atomic<bool> hung_up_{false};
  std::atomic<int> events_sent_{0};
  std::unique_ptr<Server> server_;
};

// A one-connection server that answers its one request with `pieces`, `pause_ms` apart, then
// closes.
class CannedServer {
 public:
  CannedServer(std::vector<std::string> pieces, int pause_ms) {
    listen_fd_ = *ListenTcp("127.0.0.1", 0, &port_);
    thread_ = std::thread([this, pieces = std::move(pieces), pause_ms] {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      char buf[4096];
      std::string request;
      while (request.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) break;
        request.append(buf, n);
      }
      for (const std::string& piece : pieces) {
        if (::send(fd, piece.data(), piece.size(), MSG_NOSIGNAL) < 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
      }
      ::close(fd);
    });
  }
  ~CannedServer() {
    thread_.join();
    ::close(listen_fd_);
  }
  Url url() const { return Url("127.0.0.1", port_); }

 private:
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

FetchOptions Quick() {
  FetchOptions o;
  o.idle_timeout_ms = 5000;
  return o;
}

TEST(RequestHeadTest, FramesBodiesAndAlwaysPostsAndNamesTheConnection) {
  RequestHead get("GET", "/health", "h:1");
  get.Add("Accept", "*/*");
  EXPECT_EQ(get.Finish(0, false),
            "GET /health HTTP/1.1\r\nHost: h:1\r\nAccept: */*\r\nConnection: close\r\n\r\n");
  RequestHead post("POST", "/v1/x", "[::1]:8");
  EXPECT_EQ(post.Finish(0, true),
            "POST /v1/x HTTP/1.1\r\nHost: [::1]:8\r\nContent-Length: 0\r\n"
            "Connection: keep-alive\r\n\r\n");
  RequestHead del("DELETE", "/k", "h:1");
  EXPECT_EQ(del.Finish(3, false),
            "DELETE /k HTTP/1.1\r\nHost: h:1\r\nContent-Length: 3\r\nConnection: close\r\n\r\n");
}

TEST(FetchTest, SendsMethodTargetHeadersAndBody) {
  TestServer server;
  ClientRequest request;
  request.method = "POST";
  request.target = "/echo?x=1";
  request.headers = {{"Content-Type", "application/json"}, {"X-Test", "yes"}};
  request.body = "{\"a\":1}";
  auto r = Fetch(server.url(), request, Quick());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->Header("content-type"), "text/plain");
  EXPECT_EQ(r->Header("Content-Type"), "text/plain");
  EXPECT_NE(r->body.find("POST /echo?x=1\n"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("x-test: yes\n"), std::string::npos);
  EXPECT_NE(r->body.find("host: 127.0.0.1:"), std::string::npos);
  EXPECT_NE(r->body.find("content-length: 7\n"), std::string::npos);
  EXPECT_NE(r->body.find("\n\n{\"a\":1}"), std::string::npos);
}

TEST(FetchTest, HandsAStreamToTheSinkAsItArrives) {
  TestServer server;
  ClientRequest request;
  request.target = "/stream?n=3";
  std::vector<std::pair<std::string, std::chrono::steady_clock::time_point>> pieces;
  auto r = Fetch(server.url(), request, Quick(), [&](std::string_view piece) {
    pieces.emplace_back(std::string(piece), std::chrono::steady_clock::now());
    return true;
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->Header("content-type"), "text/event-stream");
  EXPECT_TRUE(r->body.empty());
  EXPECT_FALSE(r->aborted);
  std::string all;
  for (const auto& p : pieces) all += p.first;
  EXPECT_EQ(all, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  ASSERT_GE(pieces.size(), 2u);
  EXPECT_GE(pieces.back().second - pieces.front().second, 40ms);
}

TEST(FetchTest, ASinkThatHangsUpClosesTheConnectionAtOnce) {
  TestServer server;
  ClientRequest request;
  request.target = "/stream?n=1000";
  auto r = Fetch(server.url(), request, Quick(), [](std::string_view) { return false; });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->aborted);
  for (int i = 0; i < 200 && !server.saw_hang_up(); ++i) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(server.saw_hang_up());
  EXPECT_LT(server.events_sent(), 100);
}

TEST(FetchTest, ErrorBodiesAreReadWholeEvenWithASink) {
  TestServer server;
  ClientRequest request;
  request.target = "/missing";
  bool called = false;
  auto r = Fetch(server.url(), request, Quick(), [&](std::string_view) { return called = true; });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(r->body, "{\"error\":\"not found\"}");
  EXPECT_FALSE(called);
}

TEST(FetchTest, ABodyOverTheLimitFails) {
  TestServer server;
  ClientRequest request;
  request.target = "/echo";
  FetchOptions options = Quick();
  options.max_body_bytes = 8;
  auto r = Fetch(server.url(), request, options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ErrorCodeOf(r.status()), "body_too_large");
}

TEST(FetchTest, ClosedPortIsConnectFailed) {
  int port = 0;
  ::close(*ListenTcp("127.0.0.1", 0, &port));
  auto r = Fetch(Url("127.0.0.1", port), ClientRequest{}, Quick());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ErrorCodeOf(r.status()), "connect_failed");
}

TEST(FetchTest, IdleTimeoutEndsAStalledBody) {
  CannedServer server({"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"}, 1500);
  FetchOptions options;
  options.idle_timeout_ms = 200;
  const auto start = std::chrono::steady_clock::now();
  auto r = Fetch(server.url(), ClientRequest{}, options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ErrorCodeOf(r.status()), "timeout");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1200ms);
}

TEST(FetchTest, TotalTimeoutEndsADribblingBody) {
  std::vector<std::string> pieces = {"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"};
  for (int i = 0; i < 100; ++i) pieces.push_back("x");
  CannedServer server(pieces, 20);
  FetchOptions options;
  options.idle_timeout_ms = 1000;
  options.total_timeout_ms = 300;
  const auto start = std::chrono::steady_clock::now();
  auto r = Fetch(server.url(), ClientRequest{}, options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ErrorCodeOf(r.status()), "timeout");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1000ms);
}

TEST(FetchTest, AnEarlyCloseIsAnIoError) {
  CannedServer server({"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"}, 0);
  auto r = Fetch(server.url(), ClientRequest{}, Quick());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ErrorCodeOf(r.status()), "io_error");
  EXPECT_NE(std::string(r.status().message()).find("read:"), std::string::npos);
}

TEST(FetchTest, ABodyUntilTheCloseIsWhole) {
  CannedServer server({"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nabc", "def"}, 20);
  auto r = Fetch(server.url(), ClientRequest{}, Quick());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body, "abcdef");
}

TEST(FetchTest, CancelEndsTheExchangeAsClientClosedRequest) {
  TestServer server;
  std::atomic<bool> gone{false};
  FetchOptions options;
  options.cancel = [&gone] { return gone.load(); };
  std::thread leave([&gone] {
    std::this_thread::sleep_for(100ms);
    gone = true;
  });
  ClientRequest r;
  r.target = "/hang";
  const auto start = std::chrono::steady_clock::now();
  auto answer = Fetch(server.url(), r, options);
  leave.join();
  ASSERT_FALSE(answer.ok());
  EXPECT_TRUE(absl::IsCancelled(answer.status()));
  EXPECT_EQ(ErrorCodeOf(answer.status()), "client_closed_request");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  for (int i = 0; i < 200 && !server.saw_hang_up(); ++i) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(server.saw_hang_up());
}

TEST(ClientConnectionTest, SkipsInterimAnswersAndRefusesUpgrades) {
  CannedServer server({"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                       "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Final: 1\r\n\r\nok"},
                      0);
  ClientOptions options;
  ClientConnection connection(options);
  ASSERT_TRUE(connection.Connect(server.url()).ok());
  ASSERT_FALSE(connection.Send(RequestHead("GET", "/", "h").Finish(0, false), ""));
  Headers headers;
  ASSERT_FALSE(connection.ReadHead(&headers));
  EXPECT_EQ(connection.response().status(), 200);
  ASSERT_EQ(headers.size(), 1u);  // Content-Length is framing, not passed on
  EXPECT_EQ(headers[0].first, "X-Final");
  char buf[16];
  boost::system::error_code ec;
  EXPECT_EQ(connection.ReadBody(buf, sizeof(buf), ec), 2u);
  EXPECT_FALSE(ec);
  EXPECT_TRUE(connection.done());

  CannedServer upgrade({"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n"}, 0);
  ClientConnection second(options);
  ASSERT_TRUE(second.Connect(upgrade.url()).ok());
  ASSERT_FALSE(second.Send(RequestHead("GET", "/", "h").Finish(0, false), ""));
  EXPECT_TRUE(second.ReadHead(&headers));
}

TEST(ClientConnectionTest, AKeptAliveConnectionCarriesTheNextRequest) {
  TestServer server;
  ClientOptions options;
  ClientConnection connection(options);
  ASSERT_TRUE(connection.Connect(server.url()).ok());
  for (int i = 0; i < 2; ++i) {
    const std::string target = "/echo?i=" + std::to_string(i);
    ASSERT_FALSE(connection.Send(RequestHead("GET", target, "h").Finish(0, true), ""));
    Headers headers;
    ASSERT_FALSE(connection.ReadHead(&headers));
    std::string body;
    char buf[64];
    boost::system::error_code ec;
    while (!connection.done() && !ec) body.append(buf, connection.ReadBody(buf, sizeof(buf), ec));
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_EQ(body.rfind("GET " + target, 0), 0u) << body;
    EXPECT_TRUE(connection.reusable());
  }
  // Handed over (as to a pool) and adopted by another connection object: still the same socket.
  ClientConnection next(options);
  next.Adopt(connection.Release());
  EXPECT_EQ(connection.fd(), -1);
  ASSERT_FALSE(next.Send(RequestHead("GET", "/echo", "h").Finish(0, true), ""));
  Headers headers;
  EXPECT_FALSE(next.ReadHead(&headers));
  EXPECT_EQ(next.response().status(), 200);
  EXPECT_EQ(server.num_connections(), 1);
}

TEST(ClientConnectionTest, CancelEndsAWaitForTheHeadAndTheServerSeesTheClose) {
  TestServer server;
  std::atomic<bool> gone{false};
  ClientOptions options;
  options.cancel = [&gone] { return gone.load(); };
  options.slice_ms = 5;
  std::thread leave([&gone] {
    std::this_thread::sleep_for(100ms);
    gone = true;
  });
  boost::system::error_code ec;
  {
    ClientConnection connection(options);
    ASSERT_TRUE(connection.Connect(server.url()).ok());
    ASSERT_FALSE(connection.Send(RequestHead("GET", "/hang", "h").Finish(0, false), ""));
    Headers headers;
    ec = connection.ReadHead(&headers);
  }
  leave.join();
  EXPECT_EQ(ec, boost::asio::error::operation_aborted);
  for (int i = 0; i < 200 && !server.saw_hang_up(); ++i) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(server.saw_hang_up());
}

TEST(ClientConnectionTest, HeaderTimeoutEndsAWaitForTheHead) {
  TestServer server;
  ClientOptions options;
  options.header_timeout_ms = 150;
  ClientConnection connection(options);
  ASSERT_TRUE(connection.Connect(server.url()).ok());
  ASSERT_FALSE(connection.Send(RequestHead("GET", "/hang", "h").Finish(0, false), ""));
  Headers headers;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(connection.ReadHead(&headers), boost::asio::error::timed_out);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1000ms);
}

}  // namespace
}  // namespace deepinfer::http
