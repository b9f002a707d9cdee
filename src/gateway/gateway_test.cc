// The whole request path over real loopback sockets: a Gateway in front of in-process fake
// backends (http::Server instances with scripted handlers).

#include "gateway/gateway.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http.hpp"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "http/response_parser.h"
#include "http/socket_io.h"
#include "util/json.h"
#include "util/mapped_file.h"

namespace deepinfer::gateway {

using http::Clock;
using http::CloseNow;
using http::ConnectTcp;
using http::FdStream;
namespace {

namespace beast_http = boost::beast::http;
using namespace std::chrono_literals;

// A scripted backend. Paths: /health, /v1/models, /v1/echo (reports what it received),
// /v1/stream?n=N&gap=MS (SSE), /v1/hang (never answers; records when the gateway hangs up),
// /v1/die (two SSE events, then drops the connection).
class FakeBackend {
 public:
  explicit FakeBackend(std::string name, int idle_timeout_ms = 2000) : name_(std::move(name)) {
    http::ServerOptions o;
    o.port = 0;
    o.idle_timeout_ms = idle_timeout_ms;
    server_ = std::move(*http::Server::Start(
        o, [this](const http::Request& r, http::ResponseWriter& w) { Serve(r, w); }));
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }
  int requests() const { return requests_.load(); }
  int max_active() const { return max_active_.load(); }
  std::map<std::string, std::string> last_headers() {
    absl::MutexLock lock(&mu_);
    return last_headers_;
  }
  // Time the backend saw the gateway close a hanging request.
  Clock::time_point closed_at() {
    absl::MutexLock lock(&mu_);
    return closed_at_;
  }
  int closes() const { return closes_.load(); }
  int open_connections() const { return server_->num_connections(); }
  void Stop() { server_.reset(); }

 private:
  void Serve(const http::Request& r, http::ResponseWriter& w) {
    if (r.path == "/health") {
      w.Respond(200, {{"Content-Type", "application/json"}}, "{\"status\":\"ok\"}");
      return;
    }
    if (r.path == "/v1/models") {
      w.Respond(200, {{"Content-Type", "application/json"}},
                "{\"object\":\"list\",\"data\":[{\"id\":\"" + name_ + "\",\"object\":\"model\"}]}");
      return;
    }
    requests_++;
    int now = ++active_;
    int old = max_active_.load();
    while (now > old && !max_active_.compare_exchange_weak(old, now)) {
    }
    {
      absl::MutexLock lock(&mu_);
      last_headers_.clear();
      for (const auto& [k, v] : r.headers) last_headers_[k] = v;
    }
    if (r.path == "/v1/echo") {
      Digest d = Sha256(r.body);
      util::Json j{{"backend", name_},
                   {"target", r.target},
                   {"body_sha256", ToHex(d.data(), d.size())},
                   {"body_size", r.body.size()}};
      w.Respond(200, {{"Content-Type", "application/json"}}, util::DumpJson(j));
    } else if (r.path == "/v1/stream") {
      int n = 5, gap = 50;
      std::sscanf(r.target.c_str(), "/v1/stream?n=%d&gap=%d", &n, &gap);
      w.BeginBody(200, {{"Content-Type", "text/event-stream"}}, std::nullopt);
      for (int i = 0; i < n && !w.PeerClosed(); ++i) {
        if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(gap));
        w.Write("data: {\"i\":" + std::to_string(i) + "}\n\n");
      }
      if (w.PeerClosed()) {
        absl::MutexLock lock(&mu_);
        closed_at_ = Clock::now();
        closes_++;
      }
      w.Write("data: [DONE]\n\n");
      w.End();
    } else if (r.path == "/v1/late-first-event") {
      w.BeginBody(200, {{"Content-Type", "text/event-stream"}}, std::nullopt);
      std::this_thread::sleep_for(300ms);
      w.Write("data: {\"i\":0}\n\n");
      w.End();
    } else if (r.path == "/v1/hang") {
      while (!w.PeerClosed()) std::this_thread::sleep_for(1ms);
      absl::MutexLock lock(&mu_);
      closed_at_ = Clock::now();
      closes_++;
      w.Abort();
    } else if (r.path == "/v1/close") {
      w.Abort();  // hang up without a word
    } else if (r.path == "/v1/die") {
      w.BeginBody(200, {{"Content-Type", "text/event-stream"}}, std::nullopt);
      w.Write("data: {\"i\":0}\n\n");
      w.Write("data: {\"i\":1}\n\ndata: {\"partial");
      std::this_thread::sleep_for(20ms);
      w.Abort();
    } else {
      w.Respond(404, {{"Content-Type", "application/json"}}, "{}");
    }
    --active_;
  }

  std::string name_;
  std::unique_ptr<http::Server> server_;
  std::atomic<int> requests_{0};
  std::atomic<int> active_{0};
  std::atomic<int> max_active_{0};
  std::atomic<int> closes_{0};
  absl::Mutex mu_;
  std::map<std::string, std::string> last_headers_ ABSL_GUARDED_BY(mu_);
  Clock::time_point closed_at_ ABSL_GUARDED_BY(mu_);
};

struct Reply {
  int status = 0;
  std::map<std::string, std::string> headers;
  std::string body;
};

// A blocking client connection to the gateway.
class Client {
 public:
  explicit Client(int port) { fd_ = *ConnectTcp("127.0.0.1", port, 1000); }
  ~Client() { Close(); }
  void Close() {
    if (fd_ >= 0) CloseNow(fd_);
    fd_ = -1;
  }
  void Send(const std::string& method, const std::string& target, const std::string& body,
            const std::map<std::string, std::string>& headers) {
    std::string req = method + " " + target + " HTTP/1.1\r\nHost: gw\r\n";
    for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
    req += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    FdStream s(fd_);
    ASSERT_TRUE(s.WriteAll(req));
  }
  // Reads the status and headers, then the body in pieces as they come (on_piece per read).
  Reply Read(const std::function<void(std::string_view)>& on_piece = nullptr, bool head = false,
             Clock::time_point* head_at = nullptr) {
    Reply reply;
    FdStream s(fd_);
    s.set_read_timeout_ms(5000);
    beast_http::response_parser<beast_http::buffer_body> p;
    p.body_limit(boost::none);
    p.skip(head);
    boost::system::error_code ec;
    beast_http::read_header(s, buffer_, p, ec);
    if (ec) return reply;
    if (head_at != nullptr) *head_at = Clock::now();
    reply.status = p.get().result_int();
    for (const auto& f : p.get()) {
      std::string name(f.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(c));
      reply.headers[name] = std::string(f.value());
    }
    char buf[4096];
    while (!p.is_done()) {
      p.get().body().data = buf;
      p.get().body().size = sizeof(buf);
      beast_http::read_some(s, buffer_, p, ec);
      if (ec == beast_http::error::need_buffer) ec = {};
      size_t n = sizeof(buf) - p.get().body().size;
      reply.body.append(buf, n);
      if (n > 0 && on_piece) on_piece(std::string_view(buf, n));
      if (ec) break;
    }
    return reply;
  }

 private:
  int fd_ = -1;
  boost::beast::flat_buffer buffer_;
};

// A backend that answers every request but /health with fixed bytes, however wrong: for the
// gateway's handling of answers a real server would not send.
class RawBackend {
 public:
  explicit RawBackend(std::string reply) : reply_(std::move(reply)) {
    fd_ = *http::ListenTcp("127.0.0.1", 0, &port_);
    thread_ = std::thread([this] { Loop(); });
  }
  ~RawBackend() {
    stopping_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    for (std::thread& t : connections_) t.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  void Loop() {
    for (;;) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0 || stopping_) {
        if (c >= 0) ::close(c);
        return;
      }
      connections_.emplace_back([this, c] { Serve(c); });
    }
  }
  void Serve(int c) {
    std::string in;
    char buf[4096];
    while (!stopping_) {
      size_t end = in.find("\r\n\r\n");
      if (end == std::string::npos) {
        pollfd p{c, POLLIN, 0};
        if (::poll(&p, 1, 100) == 0) continue;
        ssize_t n = ::recv(c, buf, sizeof(buf), 0);
        if (n <= 0) break;
        in.append(buf, static_cast<size_t>(n));
        continue;
      }
      std::string head = in.substr(0, end);
      size_t length = 0;
      size_t cl = head.find("Content-Length: ");
      if (cl != std::string::npos) length = std::stoul(head.substr(cl + 16));
      if (in.size() < end + 4 + length) {
        ssize_t n = ::recv(c, buf, sizeof(buf), 0);
        if (n <= 0) break;
        in.append(buf, static_cast<size_t>(n));
        continue;
      }
      in.erase(0, end + 4 + length);
      const std::string& out = head.rfind("GET /health", 0) == 0
                                   ? std::string("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                                   : reply_;
      if (::send(c, out.data(), out.size(), MSG_NOSIGNAL) < 0) break;
    }
    ::close(c);
  }

  const std::string reply_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  std::vector<std::thread> connections_;
};

class GatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/gwtest-" + std::to_string(::getpid()) + "-" +
           std::to_string(counter_++);
    ASSERT_EQ(::system(("mkdir -p " + dir_).c_str()), 0);
    key_ = *AddKeyToFile(dir_ + "/keys.json", {"alice", 0, 0, false});
    admin_key_ = *AddKeyToFile(dir_ + "/keys.json", {"ops", 0, 0, true});
    for (int i = 0; i < 2; ++i)
      backends_.push_back(std::make_unique<FakeBackend>(fmt::format("m{}", i)));
  }
  void TearDown() override {
    gateway_.reset();
    backends_.clear();
    ::system(("rm -rf " + dir_).c_str());
  }
  void WriteAdmission(const std::string& text) {
    ASSERT_TRUE(util::WriteFileAtomically(dir_ + "/admission.json", text).ok());
  }
  std::string AdmitAll() {
    std::string out = "{\"admit\":[";
    for (size_t i = 0; i < backends_.size(); ++i)
      out += (i ? ",\"" : "\"") + backends_[i]->url() + "\"";
    return out + "]}";
  }
  // A gateway whose only admitted backend is `raw`.
  void StartGatewayBehind(const RawBackend& raw) {
    WriteAdmission("{\"admit\":[\"" + raw.url() + "\"]}");
    StartGateway({raw.url()});
  }
  void StartGateway(std::vector<std::string> extra_urls = {}, FlowOptions flow = {}) {
    if (!util::ReadFile(dir_ + "/admission.json").ok()) WriteAdmission(AdmitAll());
    GatewayOptions o;
    for (auto& b : backends_) o.backend_urls.push_back(b->url());
    for (auto& u : extra_urls) o.backend_urls.push_back(u);
    o.front.port = 0;
    o.flow = flow;
    o.flow.wait_slice_ms = 5;
    o.key_store_path = dir_ + "/keys.json";
    o.control_path = dir_ + "/admission.json";
    o.bindings_path = dir_ + "/bindings.json";
    o.backend_state_path = dir_ + "/backend-state.json";
    o.health_interval_ms = 100;
    o.reload_poll_ms = 50;
    o.limits.model_context_limit = 4096;
    auto g = Gateway::Start(o);
    ASSERT_TRUE(g.ok()) << g.status();
    gateway_ = std::move(*g);
  }
  Reply Request(const std::string& method, const std::string& target, const std::string& body,
                std::map<std::string, std::string> headers = {}, bool auth = true) {
    Client c(gateway_->port());
    if (auth) headers["Authorization"] = "Bearer " + key_;
    c.Send(method, target, body, headers);
    return c.Read();
  }
  void WaitIdle() {
    auto deadline = Clock::now() + 2s;
    std::string m;
    while (Clock::now() < deadline) {
      m = gateway_->MetricsText();
      if (m.find("deepinfer_gateway_inflight 0\n") != std::string::npos) break;
      std::this_thread::sleep_for(5ms);
    }
    EXPECT_NE(m.find("deepinfer_gateway_inflight 0\n"), std::string::npos);
  }
  void ExpectNoLeakedSlots() {
    WaitIdle();
    std::string m = gateway_->MetricsText();
    auto value = [&](const std::string& name) {
      size_t p = m.find("\n" + name + " ");
      EXPECT_NE(p, std::string::npos) << name;
      return std::stod(m.substr(p + name.size() + 2));
    };
    EXPECT_EQ(value("deepinfer_gateway_slots_acquired_total"),
              value("deepinfer_gateway_slots_released_total"));
  }

  static inline int counter_ = 0;
  std::string dir_;
  std::string key_;
  std::string admin_key_;
  std::vector<std::unique_ptr<FakeBackend>> backends_;
  std::unique_ptr<Gateway> gateway_;
};

TEST_F(GatewayTest, MissingOrWrongKeyGets401AndNeverReachesABackend) {
  StartGateway();
  Reply none = Request("POST", "/v1/echo", "{}", {}, /*auth=*/false);
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.headers["www-authenticate"], "Bearer");
  EXPECT_EQ(none.headers["x-should-retry"], "false");
  auto body = util::ParseJson(none.body);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ((*body)["error"]["code"], "missing_api_key");
  EXPECT_EQ((*body)["error"]["type"], "authentication_error");
  EXPECT_EQ((*body)["error"]["message"].get<std::string>().find("x-api-key"), std::string::npos);
  // Anthropic clients send x-api-key, so that is what the Anthropic route asks for.
  Reply messages = Request("POST", "/v1/messages", "{}", {}, /*auth=*/false);
  EXPECT_EQ(messages.status, 401);
  auto anthropic = *util::ParseJson(messages.body);
  EXPECT_EQ(anthropic["type"], "error");
  EXPECT_NE(anthropic["error"]["message"].get<std::string>().find("x-api-key"), std::string::npos);
  Reply wrong = Request("POST", "/v1/echo", "{}", {{"Authorization", "Bearer sk-di-nope"}}, false);
  EXPECT_EQ(wrong.status, 401);
  EXPECT_EQ((*util::ParseJson(wrong.body))["error"]["code"], "invalid_api_key");
  EXPECT_EQ(backends_[0]->requests() + backends_[1]->requests(), 0);
}

TEST_F(GatewayTest, ForwardsBodyByteExactWithoutTheClientKey) {
  StartGateway();
  std::string body =
      "{\"messages\":[{\"role\":\"user\",\"content\":\"h\\u00e9llo \\\"x\\\"\"}],"
      "\"weird\":  [1,2 ,3]}";
  Reply r = Request("POST", "/v1/echo?x=1", body,
                    {{"X-Request-Id", "req-123"}, {"x-api-key", "also-secret"}, {"X-Custom", "v"}});
  ASSERT_EQ(r.status, 200) << r.body;
  auto j = *util::ParseJson(r.body);
  Digest d = Sha256(body);
  EXPECT_EQ(j["body_sha256"], ToHex(d.data(), d.size()));
  EXPECT_EQ(j["target"], "/v1/echo?x=1");
  EXPECT_EQ(r.headers["x-request-id"], "req-123");
  for (auto& b : backends_) {
    if (b->requests() == 0) continue;
    auto h = b->last_headers();
    EXPECT_EQ(h.count("authorization"), 0u);
    EXPECT_EQ(h.count("x-api-key"), 0u);
    EXPECT_EQ(h["x-request-id"], "req-123");
    EXPECT_EQ(h["x-custom"], "v");
  }
  // HEAD: the length of a body that never comes, and the connection stays usable.
  Client head(gateway_->port());
  for (int i = 0; i < 2; ++i) {
    head.Send("HEAD", "/v1/echo", "", {{"Authorization", "Bearer " + key_}});
    Reply h = head.Read(nullptr, /*head=*/true);
    EXPECT_EQ(h.status, 200);
    EXPECT_NE(h.headers["content-length"], "0");
    EXPECT_TRUE(h.body.empty());
  }
  Reply generated = Request("POST", "/v1/echo", "{}");
  EXPECT_EQ(generated.headers["x-request-id"].rfind("gw-", 0), 0u);
  ExpectNoLeakedSlots();
}

TEST_F(GatewayTest, SseEventsArriveAsTheBackendSendsThem) {
  StartGateway();
  Client c(gateway_->port());
  c.Send("POST", "/v1/stream?n=4&gap=150", "{\"stream\":true}",
         {{"Authorization", "Bearer " + key_}});
  std::vector<Clock::time_point> times;
  Reply r = c.Read([&](std::string_view piece) { times.push_back(Clock::now()); });
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["x-accel-buffering"], "no");
  EXPECT_EQ(r.body,
            "data: {\"i\":0}\n\ndata: {\"i\":1}\n\ndata: {\"i\":2}\n\ndata: {\"i\":3}\n\n"
            "data: [DONE]\n\n");
  ASSERT_GE(times.size(), 4u);
  EXPECT_GE(times[3] - times[0], 400ms);  // not held back and sent at the end
  ExpectNoLeakedSlots();
}

TEST_F(GatewayTest, SmallAnswerReachesTheClientInOneSend) {
  StartGateway();
  int fd = *ConnectTcp("127.0.0.1", gateway_->port(), 1000);
  std::string body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
  std::string req = "POST /v1/echo HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + key_ +
                    "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(FdStream(fd).WriteAll(req));
    // The head and the body leave the gateway in one send, so the first read has it all: a
    // head sent alone costs the client a wake-up and a packet.
    pollfd p{fd, POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 5000), 1);
    std::string got(65536, '\0');
    ssize_t n = ::recv(fd, got.data(), got.size(), 0);
    ASSERT_GT(n, 0);
    got.resize(static_cast<size_t>(n));
    size_t end = got.find("\r\n\r\n");
    ASSERT_NE(end, std::string::npos) << got;
    size_t at = got.find("Content-Length: ");
    ASSERT_NE(at, std::string::npos) << got;
    EXPECT_EQ(got.size() - end - 4, std::stoul(got.substr(at + 16))) << got;
  }
  CloseNow(fd);
  ExpectNoLeakedSlots();
}

TEST_F(GatewayTest, StreamHeadIsNotHeldBackUntilTheFirstEvent) {
  StartGateway();
  Client c(gateway_->port());
  auto start = Clock::now();
  c.Send("POST", "/v1/late-first-event", "{\"stream\":true}",
         {{"Authorization", "Bearer " + key_}});
  Clock::time_point head_at{}, event_at{};
  Reply r = c.Read(
      [&](std::string_view) {
        if (event_at == Clock::time_point{}) event_at = Clock::now();
      },
      false, &head_at);
  ASSERT_EQ(r.status, 200);
  EXPECT_LT(head_at - start, 200ms);
  EXPECT_GE(event_at - start, 250ms);
  ExpectNoLeakedSlots();
}

TEST_F(GatewayTest, ClientLeavingClosesTheBackendConnectionAtOnce) {
  StartGateway();
  for (const char* path : {"/v1/hang", "/v1/stream?n=100&gap=30"}) {
    int before = backends_[0]->closes() + backends_[1]->closes();
    Client c(gateway_->port());
    c.Send("POST", path, "{}", {{"Authorization", "Bearer " + key_}});
    std::this_thread::sleep_for(150ms);
    auto left = Clock::now();
    c.Close();
    auto deadline = Clock::now() + 2s;
    while (backends_[0]->closes() + backends_[1]->closes() == before && Clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
    ASSERT_GT(backends_[0]->closes() + backends_[1]->closes(), before) << path;
    auto seen = std::max(backends_[0]->closed_at(), backends_[1]->closed_at());
    EXPECT_LT(seen - left, 100ms) << path;
  }
  ExpectNoLeakedSlots();
  std::string m = gateway_->MetricsText();
  EXPECT_NE(m.find("deepinfer_gateway_cancellations_total{phase=\"waiting_headers\"} 1"),
            std::string::npos);
  EXPECT_NE(m.find("deepinfer_gateway_cancellations_total{phase=\"streaming\"} 1"),
            std::string::npos);
}

TEST_F(GatewayTest, BackendDyingMidStreamEndsWithACleanErrorEvent) {
  StartGateway();
  Reply r = Request("POST", "/v1/die", "{\"stream\":true}");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body.rfind("data: {\"i\":0}\n\ndata: {\"i\":1}\n\ndata: {\"error\":", 0), 0u)
      << r.body;
  EXPECT_NE(r.body.find("backend_disconnected"), std::string::npos);
  EXPECT_EQ(r.body.substr(r.body.size() - 14), "data: [DONE]\n\n");
  EXPECT_EQ(r.body.find("partial"), std::string::npos);
  ExpectNoLeakedSlots();
}

TEST_F(GatewayTest, BackendConnectionsAreReused) {
  WriteAdmission("{\"admit\":[\"" + backends_[0]->url() + "\"]}");
  StartGateway();
  for (int i = 0; i < 5; ++i) ASSERT_EQ(Request("POST", "/v1/echo", "{}").status, 200);
  EXPECT_EQ(backends_[0]->requests(), 5);
  // One pooled connection served them all. Health probes (every 100 ms) open short-lived
  // connections of their own, so wait out a probe in flight; five unpooled keep-alive
  // connections would stay open and still fail this.
  auto deadline = std::chrono::steady_clock::now() + 2s;
  while (backends_[0]->open_connections() != 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(backends_[0]->open_connections(), 1);
}

TEST_F(GatewayTest, IdleConnectionClosedByTheBackendIsNotReused) {
  backends_.clear();
  backends_.push_back(std::make_unique<FakeBackend>("short-idle", /*idle_timeout_ms=*/50));
  StartGateway();
  ASSERT_EQ(Request("POST", "/v1/echo", "{}").status, 200);
  // The backend closes the idle connection after 50 ms. A health probe (every 100 ms) has a
  // connection of its own open for a moment, so wait for a count of 0 rather than sample it.
  std::this_thread::sleep_for(100ms);
  auto deadline = std::chrono::steady_clock::now() + 2s;
  while (backends_[0]->open_connections() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(backends_[0]->open_connections(), 0);
  EXPECT_EQ(Request("POST", "/v1/echo", "{}").status, 200);
  EXPECT_TRUE(gateway_->StatusJson().find("\"healthy\":true") != std::string::npos);
  ExpectNoLeakedSlots();
}

TEST_F(GatewayTest, BackendHangingUpBeforeAnsweringIs502) {
  StartGateway();
  Reply r = Request("POST", "/v1/close", "{}");
  EXPECT_EQ(r.status, 502);
  EXPECT_EQ((*util::ParseJson(r.body))["error"]["code"], "backend_error");
  ExpectNoLeakedSlots();
}

TEST_F(GatewayTest, RefusedConnectIsRetriedOnAnotherBackendAndEjected) {
  // A port nothing listens on (bound once, then released).
  http::ServerOptions o;
  o.port = 0;
  auto tmp = std::move(*http::Server::Start(o, [](const http::Request&, http::ResponseWriter&) {}));
  std::string dead = "http://127.0.0.1:" + std::to_string(tmp->port());
  tmp.reset();
  WriteAdmission("{\"admit\":[\"" + backends_[0]->url() + "\",\"" + backends_[1]->url() + "\",\"" +
                 dead + "\"]}");
  StartGateway({dead});
  // The start-up probe ejected it already; every request is served.
  for (int i = 0; i < 6; ++i) EXPECT_EQ(Request("POST", "/v1/echo", "{}").status, 200);
  auto status = *util::ParseJson(gateway_->StatusJson());
  EXPECT_FALSE(status["backends"][2]["healthy"].get<bool>());
  auto state = util::ReadFile(dir_ + "/backend-state.json");
  ASSERT_TRUE(state.ok());
  EXPECT_NE(state->find("\"healthy\":false"), std::string::npos);
}

TEST_F(GatewayTest, BackendKilledBetweenProbesIsRetriedBeforeAnyByte) {
  StartGateway({}, [] {
    FlowOptions f;
    f.max_active_per_backend = 8;
    return f;
  }());
  backends_[1]->Stop();
  int ok = 0;
  for (int i = 0; i < 6; ++i) ok += Request("POST", "/v1/echo", "{}").status == 200 ? 1 : 0;
  EXPECT_EQ(ok, 6);
  ExpectNoLeakedSlots();
}

TEST_F(GatewayTest, SessionOfAFailedBackendIsBoundWhereItWasServed) {
  // Bindings are written once a request is with its backend (after the send), so a connect
  // failure binds nothing: a bound session moves to the backend that served the retry, and a
  // new one is bound there at once (one "new", no "rebind").
  StartGateway({}, [] {
    FlowOptions f;
    f.max_active_per_backend = 8;
    return f;
  }());
  auto served_by = [](const Reply& r) {
    return (*util::ParseJson(r.body))["backend"].get<std::string>();
  };
  Reply first = Request("POST", "/v1/echo", "{}", {{"X-Session-Id", "moving"}});
  ASSERT_EQ(first.status, 200);
  const std::string home = served_by(first);
  const int dead = home == "m0" ? 0 : 1;  // the fake backends answer with their names
  backends_[dead]->Stop();
  // Past the pool's no-recheck window (2 ms), so that the gateway sees the pooled connection
  // closed and its fresh connect refused: the connect-failure retry.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Reply moved = Request("POST", "/v1/echo", "{}", {{"X-Session-Id", "moving"}});
  ASSERT_EQ(moved.status, 200);
  const std::string other = served_by(moved);
  EXPECT_NE(other, home);
  for (int i = 0; i < 3; ++i) {
    Reply again = Request("POST", "/v1/echo", "{}", {{"X-Session-Id", "moving"}});
    ASSERT_EQ(again.status, 200);
    EXPECT_EQ(served_by(again), other);
  }
  // A request's metrics are recorded as it ends, just after its answer: wait for that.
  ExpectNoLeakedSlots();
  std::string metrics = gateway_->MetricsText();
  EXPECT_NE(metrics.find("deepinfer_gateway_affinity_total{result=\"new\"} 1\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("deepinfer_gateway_affinity_total{result=\"rebind\"} 1\n"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("deepinfer_gateway_affinity_total{result=\"hit\"} 3\n"), std::string::npos)
      << metrics;
}

TEST_F(GatewayTest, InterimAnswersAreSkippedAndNeverLeftForTheNextRequest) {
  // 100 and 103 before the final answer: the client gets the final one, and the reused
  // backend connection holds nothing left over for the next request.
  RawBackend raw(
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 8\r\n\r\n{\"n\":42}");
  StartGatewayBehind(raw);
  for (int i = 0; i < 4; ++i) {
    Reply r = Request("POST", "/v1/echo", "{}");
    EXPECT_EQ(r.status, 200) << i;
    EXPECT_EQ(r.body, "{\"n\":42}") << i;
  }
  ExpectNoLeakedSlots();
}

TEST(ListsTokenTest, FindsElementsOfAConnectionHeader) {
  EXPECT_TRUE(http::ListsToken("keep-alive, X-Secret", "x-secret"));
  EXPECT_TRUE(http::ListsToken(" close ,\tUpgrade", "upgrade"));
  EXPECT_FALSE(http::ListsToken("keep-alive, X-Secret-2", "x-secret"));
  EXPECT_FALSE(http::ListsToken("", "x"));
  EXPECT_FALSE(http::ListsToken(",,", "x"));
}

TEST_F(GatewayTest, FieldsTheBackendsConnectionHeaderNamesDoNotReachTheClient) {
  RawBackend raw(
      "HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Secret\r\nX-Secret: leak\r\n"
      "X-Kept: yes\r\nContent-Length: 2\r\n\r\nok");
  StartGatewayBehind(raw);
  Reply r = Request("POST", "/v1/echo", "{}");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers.count("x-secret"), 0u);
  EXPECT_EQ(r.headers["x-kept"], "yes");
  ExpectNoLeakedSlots();
}

TEST_F(GatewayTest, FieldsTheClientsConnectionHeaderNamesDoNotReachTheBackend) {
  StartGateway();
  Reply r = Request("POST", "/v1/echo", "{}",
                    {{"Connection", "keep-alive, X-Drop-Me"}, {"X-Drop-Me", "1"}, {"X-Keep", "2"}});
  ASSERT_EQ(r.status, 200) << r.body;
  for (auto& b : backends_) {
    if (b->requests() == 0) continue;
    auto h = b->last_headers();
    EXPECT_EQ(h.count("x-drop-me"), 0u);
    EXPECT_EQ(h["x-keep"], "2");
  }
}

TEST_F(GatewayTest, BodilessAnswersWithAContentLengthReachTheClient) {
  // A 204 or 304 carries no body whatever its Content-Length says (RFC 9110 15.3.5, 15.4.5).
  RawBackend no_content("HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n");
  StartGatewayBehind(no_content);
  for (int i = 0; i < 2; ++i) {
    Reply r = Request("POST", "/v1/echo", "{}");
    EXPECT_EQ(r.status, 204) << i;
    EXPECT_EQ(r.headers.count("content-length"), 0u) << i;
    EXPECT_EQ(r.body, "") << i;
  }
  ExpectNoLeakedSlots();
}

TEST_F(GatewayTest, UpgradeOrAnInvalidStatusFromTheBackendIs502) {
  for (const char* reply : {"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
                            "HTTP/1.1 999 Odd\r\nContent-Length: 0\r\n\r\n",
                            "HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\n"}) {
    RawBackend raw(reply);
    StartGatewayBehind(raw);
    Reply r = Request("POST", "/v1/echo", "{}");
    EXPECT_EQ(r.status, 502) << reply;
    ExpectNoLeakedSlots();
    gateway_.reset();
  }
}

TEST_F(GatewayTest, AdmissionFileClosesAndReopensWithinASecond) {
  StartGateway();
  EXPECT_EQ(Request("POST", "/v1/echo", "{}").status, 200);
  for (const char* closed : {"", "{not json", "{\"admit\":[]}"}) {
    WriteAdmission(closed);
    auto deadline = Clock::now() + 1s;
    Reply r;
    do {
      r = Request("POST", "/v1/echo", "{}");
    } while (r.status == 200 && Clock::now() < deadline);
    EXPECT_EQ(r.status, 503) << closed;
    EXPECT_EQ((*util::ParseJson(r.body))["error"]["code"], "admission_closed");
    EXPECT_FALSE(r.headers["retry-after"].empty());
    WriteAdmission(AdmitAll());
    deadline = Clock::now() + 1s;
    do {
      r = Request("POST", "/v1/echo", "{}");
    } while (r.status != 200 && Clock::now() < deadline);
    EXPECT_EQ(r.status, 200);
  }
  ::unlink((dir_ + "/admission.json").c_str());
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(Request("POST", "/v1/echo", "{}").status, 503);
}

TEST_F(GatewayTest, DeAdmittedBackendFinishesItsStream) {
  StartGateway();
  WriteAdmission("{\"admit\":[\"" + backends_[0]->url() + "\"]}");
  std::this_thread::sleep_for(200ms);
  Client c(gateway_->port());
  c.Send("POST", "/v1/stream?n=6&gap=60", "{}", {{"Authorization", "Bearer " + key_}});
  std::this_thread::sleep_for(50ms);
  WriteAdmission("");  // close admission while the stream runs
  Reply r = c.Read();
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("data: [DONE]"), std::string::npos);
  EXPECT_EQ(Request("POST", "/v1/echo", "{}").status, 503);
  ExpectNoLeakedSlots();
}

TEST_F(GatewayTest, KeyStoreReloadsAndAnInvalidFileKeepsTheLastGoodOne) {
  StartGateway();
  std::string bob = *AddKeyToFile(dir_ + "/keys.json", {"bob", 0, 0, false});
  auto deadline = Clock::now() + 1s;
  Reply r;
  do {
    r = Request("POST", "/v1/echo", "{}", {{"Authorization", "Bearer " + bob}}, false);
  } while (r.status != 200 && Clock::now() < deadline);
  EXPECT_EQ(r.status, 200);
  ASSERT_TRUE(util::WriteFileAtomically(dir_ + "/keys.json", "{broken").ok());
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(Request("POST", "/v1/echo", "{}", {{"Authorization", "Bearer " + bob}}, false).status,
            200);
  auto status = *util::ParseJson(gateway_->StatusJson());
  EXPECT_TRUE(status["keys"]["last_error"].is_string());
  std::string m = gateway_->MetricsText();
  std::string series = "deepinfer_gateway_reloads_total{file=\"keys\",result=\"rejected\"} ";
  size_t at = m.find(series);
  ASSERT_NE(at, std::string::npos);
  EXPECT_GE(std::stod(m.substr(at + series.size())), 1.0);
}

// A keep-alive connection reuses its last verified key without hashing it again, but only while
// the key store is the same: a key removed by a reload is refused on the very next request.
TEST_F(GatewayTest, KeyRemovedByAReloadIsRefusedOnAKeepAliveConnection) {
  StartGateway();
  Client c(gateway_->port());
  for (int i = 0; i < 2; ++i) {
    c.Send("POST", "/v1/echo", "{}", {{"Authorization", "Bearer " + key_}});
    EXPECT_EQ(c.Read().status, 200);
  }
  std::string carol = *AddKeyToFile(dir_ + "/other.json", {"carol", 0, 0, false});
  ASSERT_TRUE(
      util::WriteFileAtomically(dir_ + "/keys.json", *util::ReadFile(dir_ + "/other.json")).ok());
  auto deadline = Clock::now() + 2s;
  while (Clock::now() < deadline &&
         Request("POST", "/v1/echo", "{}", {{"Authorization", "Bearer " + carol}}, false).status !=
             200) {
  }
  c.Send("POST", "/v1/echo", "{}", {{"Authorization", "Bearer " + key_}});
  EXPECT_EQ(c.Read().status, 401);
  c.Send("POST", "/v1/echo", "{}", {{"Authorization", "Bearer " + carol}});
  EXPECT_EQ(c.Read().status, 200);
}

TEST_F(GatewayTest, StatusNeedsAnAdminKey) {
  StartGateway();
  EXPECT_EQ(Request("GET", "/gateway/status", "").status, 403);
  Reply r =
      Request("GET", "/gateway/status", "", {{"Authorization", "Bearer " + admin_key_}}, false);
  ASSERT_EQ(r.status, 200);
  auto j = *util::ParseJson(r.body);
  EXPECT_EQ(j["backends"].size(), 2u);
  EXPECT_TRUE(j["admission"]["open"].get<bool>());
  EXPECT_EQ(r.body.find(key_), std::string::npos);
  EXPECT_EQ(Request("GET", "/gateway/status", "", {}, /*auth=*/false).status, 401);
  // Every answer of the endpoint is counted, so rejections never outnumber requests. Each count
  // follows its answer (on whichever worker served it), so it may land a moment after the client
  // has read the answer.
  std::string m;
  auto counted = [&m](const char* code) {
    return m.find("deepinfer_gateway_requests_total{code=\"" + std::string(code)) !=
           std::string::npos;
  };
  for (auto deadline = Clock::now() + 2s; Clock::now() < deadline;) {
    m = gateway_->MetricsText();
    if (counted("200") && counted("401") && counted("403")) break;
    std::this_thread::sleep_for(5ms);
  }
  for (const char* code : {"200", "401", "403"}) EXPECT_TRUE(counted(code)) << code << "\n" << m;
}

TEST_F(GatewayTest, ModelsIsTheUnionOfAdmittedHealthyBackends) {
  StartGateway();
  Reply r = Request("GET", "/v1/models", "");
  ASSERT_EQ(r.status, 200);
  auto j = *util::ParseJson(r.body);
  ASSERT_EQ(j["data"].size(), 2u);
  WriteAdmission("{\"admit\":[\"" + backends_[1]->url() + "\"]}");
  std::this_thread::sleep_for(300ms);
  j = *util::ParseJson(Request("GET", "/v1/models", "").body);
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "m1");
}

TEST_F(GatewayTest, OversizedMaxTokensIs400BeforeQueueing) {
  StartGateway();
  Reply r = Request("POST", "/v1/echo", "{\"max_tokens\":5000,\"messages\":[]}");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ((*util::ParseJson(r.body))["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(r.headers["x-should-retry"], "false");
  EXPECT_EQ(backends_[0]->requests() + backends_[1]->requests(), 0);
}

TEST_F(GatewayTest, SessionsStickToTheirBackend) {
  StartGateway();
  std::map<std::string, std::string> first;
  for (int turn = 0; turn < 3; ++turn) {
    for (int s = 0; s < 8; ++s) {
      std::string session = fmt::format("s{}", s);
      Reply r = Request("POST", "/v1/echo", "{}", {{"X-Session-Id", session}});
      ASSERT_EQ(r.status, 200);
      std::string backend = (*util::ParseJson(r.body))["backend"];
      if (turn == 0) first[session] = backend;
      EXPECT_EQ(backend, first[session]) << session;
    }
  }
  std::set<std::string> used;
  for (auto& [s, b] : first) used.insert(b);
  EXPECT_EQ(used.size(), 2u);  // new sessions spread over both backends
}

TEST_F(GatewayTest, OverloadSplitsIntoServedQueueFullAndQueueTimeout) {
  FlowOptions f;
  f.max_active_per_backend = 1;
  f.max_waiting = 2;
  f.queue_timeout_ms = 150;
  StartGateway({}, f);
  std::vector<std::thread> threads;
  absl::Mutex mu;
  std::map<std::string, int> outcomes;  // under mu
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      Reply r = Request("POST", "/v1/stream?n=3&gap=150", "{}");
      std::string what = std::to_string(r.status);
      if (r.status == 429) {
        what = (*util::ParseJson(r.body))["error"]["code"];
        EXPECT_FALSE(r.headers["retry-after"].empty());
      }
      absl::MutexLock lock(&mu);
      outcomes[what]++;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(outcomes["200"], 2);
  EXPECT_EQ(outcomes["queue_timeout"], 2);
  EXPECT_EQ(outcomes["queue_full"], 4);
  EXPECT_EQ(backends_[0]->max_active(), 1);
  EXPECT_EQ(backends_[1]->max_active(), 1);
  ExpectNoLeakedSlots();
}

}  // namespace
}  // namespace deepinfer::gateway
