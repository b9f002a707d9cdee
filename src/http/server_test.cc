// The HTTP server of `serve` and the gateway over real loopback sockets: idle keep-alive
// connections wait in epoll without a thread each, pipelined requests are all answered, idle
// connections expire, Stop closes idle connections at once and lets answers in progress end,
// streamed bodies are chunked, and the observer sees every answer with its request log.

#include "http/server.h"

#include <dirent.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "http/socket_io.h"
#include "http/sse.h"
#include "util/status.h"

namespace deepinfer::http {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::unique_ptr<Server> StartServer(ServerOptions o, std::atomic<int>* served) {
  o.port = 0;
  auto server = Server::Start(o, [served](const Request& r, ResponseWriter& w) {
    served->fetch_add(1);
    // x-t in the answer when the request's header (not a trailer) has it.
    w.Respond(200, {{"Content-Type", "text/plain"}},
              "ok " + r.path + (r.Header("x-t").empty() ? "" : " x-t") + " " + r.body);
  });
  EXPECT_TRUE(server.ok()) << server.status();
  return std::move(*server);
}

int Connect(int port) {
  auto fd = ConnectTcp("127.0.0.1", port, 2000);
  EXPECT_TRUE(fd.ok()) << fd.status();
  return fd.ok() ? *fd : -1;
}

void SendAll(int fd, const std::string& data) {
  ASSERT_EQ(::send(fd, data.data(), data.size(), MSG_NOSIGNAL), static_cast<ssize_t>(data.size()));
}

std::string Get(const std::string& path) { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n"; }

// Reads until `count` answers with body "ok ..." arrived (each ends its body with the path), or
// until the peer closes or 5 s pass. Returns what was read.
std::string ReadAnswers(int fd, int count) {
  std::string got;
  auto deadline = Clock::now() + 5s;
  auto answers = [&] {
    int n = 0;
    for (size_t p = got.find("HTTP/1.1 200"); p != std::string::npos;
         p = got.find("HTTP/1.1 200", p + 1)) {
      ++n;
    }
    return n;
  };
  while (Clock::now() < deadline) {
    // A complete answer ends with its body "ok /path"; wait for the last one's body too.
    if (answers() >= count && got.size() >= 3 && got.rfind("ok /") != std::string::npos &&
        got.rfind("ok /") > got.rfind("\r\n\r\n")) {
      break;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

// True once the peer closed `fd` (recv returns 0 or fails) within `timeout`.
bool ClosedWithin(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
  char c;
  return ::recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

int ThreadsOfThisProcess() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/task");
  if (d == nullptr) return -1;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.' ? 1 : 0;
  ::closedir(d);
  return n;
}

TEST(ServerTest, IdleKeepAliveConnectionsHoldNoThread) {
  std::atomic<int> served{0};
  auto server = StartServer({}, &served);
  const int before = ThreadsOfThisProcess();
  constexpr int kConnections = 200;
  std::vector<int> fds;
  for (int i = 0; i < kConnections; ++i) {
    fds.push_back(Connect(server->port()));
    SendAll(fds.back(), Get("/a"));
    ASSERT_NE(ReadAnswers(fds.back(), 1).find("ok /a"), std::string::npos) << i;
  }
  EXPECT_EQ(server->num_connections(), kConnections);
  // One thread per connection would be 200 more; the workers follow requests in flight.
  EXPECT_LT(ThreadsOfThisProcess() - before, 20);
  // Every idle connection still serves its next request, in any order.
  for (int i = kConnections - 1; i >= 0; --i) SendAll(fds[i], Get("/b"));
  for (int fd : fds) EXPECT_NE(ReadAnswers(fd, 1).find("ok /b"), std::string::npos);
  EXPECT_EQ(served.load(), 2 * kConnections);
  for (int fd : fds) ::close(fd);
}

TEST(ServerTest, PipelinedRequestsAreAllAnswered) {
  std::atomic<int> served{0};
  auto server = StartServer({}, &served);
  int fd = Connect(server->port());
  // Three requests in one send: the second and third are read with the first, so epoll never
  // reports them.
  SendAll(fd, Get("/1") + Get("/2") + Get("/3"));
  std::string got = ReadAnswers(fd, 3);
  size_t one = got.find("ok /1"), two = got.find("ok /2"), three = got.find("ok /3");
  ASSERT_NE(three, std::string::npos) << got;
  EXPECT_LT(one, two);
  EXPECT_LT(two, three);
  ::close(fd);
}

TEST(ServerTest, EmptyLinesBeforeARequestAreIgnored) {
  // RFC 9112 section 2.2: some clients end a body with an extra CRLF; it must not be read as
  // a malformed next request (which would answer 400 and close the connection).
  std::atomic<int> served{0};
  auto server = StartServer({}, &served);
  int fd = Connect(server->port());
  SendAll(fd, "\r\n" + Get("/1") + "\r\n\r\n" + Get("/2") + "\r\n");
  std::string got = ReadAnswers(fd, 2);
  EXPECT_NE(got.find("ok /1"), std::string::npos) << got;
  EXPECT_NE(got.find("ok /2"), std::string::npos) << got;
  // Empty lines arriving alone, then the request.
  SendAll(fd, "\r\n");
  std::this_thread::sleep_for(50ms);
  SendAll(fd, "\n" + Get("/3"));
  got = ReadAnswers(fd, 1);
  EXPECT_NE(got.find("ok /3"), std::string::npos) << got;
  EXPECT_EQ(got.find("400"), std::string::npos) << got;
  EXPECT_EQ(served.load(), 3);
  ::close(fd);
}

// What arrives until the server closes the connection (or 5 s pass).
std::string ReadToClose(int fd) {
  std::string got;
  char buf[4096];
  for (auto deadline = Clock::now() + 5s; Clock::now() < deadline;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

TEST(ServerTest, TrailerFieldsAreNotMergedIntoTheHeader) {
  std::atomic<int> served{0};
  auto server = StartServer({}, &served);
  int fd = Connect(server->port());
  SendAll(fd,
          "POST /t HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
          "2\r\nhi\r\n0\r\nX-T: 1\r\n\r\n"
          "POST /h HTTP/1.1\r\nHost: x\r\nX-T: 1\r\nContent-Length: 2\r\n\r\nho");
  std::string got = ReadAnswers(fd, 2);
  EXPECT_NE(got.find("ok /t hi"), std::string::npos) << got;
  EXPECT_NE(got.find("ok /h x-t ho"), std::string::npos) << got;
  ::close(fd);
}

TEST(ServerTest, TransferEncodingOtherThanChunkedIs400AndCloses) {
  // RFC 9112 6.3: chunked not last means no known body length; read as an empty body, the
  // bytes after the head would be served as a next (smuggled) request.
  for (const char* te : {"chunked, identity", "gzip, chunked", "xchunked"}) {
    std::atomic<int> served{0};
    auto server = StartServer({}, &served);
    int fd = Connect(server->port());
    SendAll(fd, std::string("POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: ") + te +
                    "\r\n\r\n" + Get("/smuggled"));
    std::string got = ReadToClose(fd);
    EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << te << ": " << got;
    EXPECT_EQ(got.find("smuggled"), std::string::npos) << te << ": " << got;
    EXPECT_EQ(served.load(), 0) << te;
    ::close(fd);
  }
}

TEST(ServerTest, EndlessChunkExtensionIs400NotUnboundedMemory) {
  std::atomic<int> served{0};
  auto server = StartServer({}, &served);
  int fd = Connect(server->port());
  SendAll(fd, "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;");
  const std::string extension(16 * 1024, 'e');
  std::string got;
  // Past the reader's 68 KiB bound; the server answers and closes before 1 MiB.
  for (int i = 0; i < 64 && got.empty(); ++i) {
    if (::send(fd, extension.data(), extension.size(), MSG_NOSIGNAL) < 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0) got = ReadToClose(fd);
  }
  if (got.empty()) got = ReadToClose(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << got;
  EXPECT_EQ(served.load(), 0);
  ::close(fd);
}

TEST(ServerTest, Http10ExpectationGetsNo100Continue) {
  std::atomic<int> served{0};
  auto server = StartServer({}, &served);
  int fd = Connect(server->port());
  SendAll(fd, "POST /a HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi");
  std::string got = ReadToClose(fd);
  EXPECT_EQ(got.find("100 Continue"), std::string::npos) << got;
  EXPECT_NE(got.find("ok /a hi"), std::string::npos) << got;
  ::close(fd);
}

TEST(ServerTest, IdleConnectionsExpire) {
  std::atomic<int> served{0};
  ServerOptions o;
  o.idle_timeout_ms = 200;
  auto server = StartServer(o, &served);
  int fd = Connect(server->port());
  SendAll(fd, Get("/a"));
  ASSERT_NE(ReadAnswers(fd, 1).find("ok /a"), std::string::npos);
  // Checked once a second: closed within the timeout plus one sweep.
  EXPECT_TRUE(ClosedWithin(fd, 3s));
  ::close(fd);
  for (auto deadline = Clock::now() + 2s; server->num_connections() > 0 && Clock::now() < deadline;)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(server->num_connections(), 0);
}

TEST(ServerTest, AHeadDribbledByteByByteIsCutOffAtTheHeaderDeadline) {
  std::atomic<int> served{0};
  ServerOptions o;
  o.io_timeout_ms = 600;  // each read, and the whole head from its first byte
  auto server = StartServer(o, &served);
  int fd = Connect(server->port());
  SendAll(fd, "GET /a HTTP/1.1\r\n");
  // Every gap is shorter than the per-read timeout; only the deadline for the whole head ends it.
  const auto start = Clock::now();
  bool closed = false;
  for (int i = 0; i < 40 && !closed; ++i) {
    closed = ClosedWithin(fd, 100ms);
    if (!closed) ::send(fd, "X", 1, MSG_NOSIGNAL);
  }
  EXPECT_TRUE(closed);
  EXPECT_LT(Clock::now() - start, 2s);
  EXPECT_EQ(served.load(), 0);
  ::close(fd);
}

TEST(ServerTest, StopClosesIdleConnectionsAtOnce) {
  std::atomic<int> served{0};
  auto server = StartServer({}, &served);
  int fd = Connect(server->port());
  SendAll(fd, Get("/a"));
  ASSERT_NE(ReadAnswers(fd, 1).find("ok /a"), std::string::npos);
  const int port = server->port();
  auto start = Clock::now();
  EXPECT_TRUE(server->Stop(2000));
  EXPECT_LT(Clock::now() - start, 1s);
  EXPECT_TRUE(ClosedWithin(fd, 1s));
  ::close(fd);
  // No longer listening.
  EXPECT_FALSE(ConnectTcp("127.0.0.1", port, 500).ok());
}

TEST(ServerTest, ConnectionsOverTheLimitGet503) {
  std::atomic<int> served{0};
  ServerOptions o;
  o.max_connections = 2;
  auto server = StartServer(o, &served);
  std::vector<int> fds;
  for (int i = 0; i < 2; ++i) {
    fds.push_back(Connect(server->port()));
    SendAll(fds.back(), Get("/a"));
    ASSERT_NE(ReadAnswers(fds.back(), 1).find("ok /a"), std::string::npos);
  }
  int third = Connect(server->port());
  std::string got;
  char buf[4096];
  pollfd p{third, POLLIN, 0};
  if (::poll(&p, 1, 2000) > 0) {
    ssize_t n = ::recv(third, buf, sizeof(buf), 0);
    if (n > 0) got.assign(buf, static_cast<size_t>(n));
  }
  EXPECT_NE(got.find("503"), std::string::npos) << got;
  EXPECT_NE(got.find("too_many_connections"), std::string::npos) << got;
  ::close(third);
  for (int fd : fds) ::close(fd);
}

// What an observer saw of one answer.
struct Observed {
  std::string path;
  int status = 0;
  double seconds = -1;
  RequestLog log;
};

class ObservedAnswers {
 public:
  Observer observer() {
    return [this](const Request& r, int status, double seconds, const RequestLog& log) {
      absl::MutexLock lock(&mu_);
      seen_.push_back({r.path, status, seconds, log});
    };
  }
  // Waits (up to 2 s) until `count` answers were observed; returns them.
  std::vector<Observed> Wait(size_t count) {
    for (auto deadline = Clock::now() + 2s; Clock::now() < deadline;) {
      {
        absl::MutexLock lock(&mu_);
        if (seen_.size() >= count) return seen_;
      }
      std::this_thread::sleep_for(2ms);
    }
    absl::MutexLock lock(&mu_);
    return seen_;
  }

 private:
  absl::Mutex mu_;
  std::vector<Observed> seen_ ABSL_GUARDED_BY(mu_);
};

TEST(ServerTest, TheObserverSeesEveryAnswerWithWhatTheHandlerLogged) {
  ObservedAnswers observed;
  ServerOptions o;
  auto server = Server::Start(
      o,
      [](const Request& r, ResponseWriter& w) {
        EXPECT_NE(w.log().received, Clock::time_point());  // set before the handler runs
        w.log().id = "id" + r.path;
        w.log().completion_tokens = 7;
        if (r.path == "/none") return;  // no answer: the server answers 500 itself
        w.Respond(201, {{"Content-Type", "text/plain"}}, "made");
      },
      observed.observer());
  ASSERT_TRUE(server.ok()) << server.status();
  int fd = Connect((*server)->port());
  SendAll(fd, Get("/a") + "GET /none HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  std::string got = ReadToClose(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 201 Created", 0), 0u) << got;
  EXPECT_NE(got.find("HTTP/1.1 500"), std::string::npos) << got;
  EXPECT_NE(got.find("no_response"), std::string::npos) << got;
  ::close(fd);
  std::vector<Observed> seen = observed.Wait(2);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].path, "/a");
  EXPECT_EQ(seen[0].status, 201);
  EXPECT_GE(seen[0].seconds, 0);
  EXPECT_EQ(seen[0].log.id, "id/a");
  EXPECT_EQ(seen[0].log.completion_tokens, 7);
  EXPECT_EQ(seen[1].status, 500);
  EXPECT_EQ(seen[1].log.id, "id/none");
}

TEST(ServerTest, BadRequestsAreAnsweredAndObservedWithTheirErrorCode) {
  ObservedAnswers observed;
  ServerOptions o;
  o.max_request_bytes = 16;
  std::atomic<int> served{0};
  auto server = Server::Start(
      o, [&served](const Request&, ResponseWriter& w) { served.fetch_add(1); },
      observed.observer());
  ASSERT_TRUE(server.ok()) << server.status();
  // Malformed, a missing Host (RFC 9112 section 3.2), a body over the limit.
  int fd = Connect((*server)->port());
  SendAll(fd, "NOT HTTP\r\n\r\n");
  std::string bad = ReadToClose(fd);
  ::close(fd);
  EXPECT_EQ(bad.rfind("HTTP/1.1 400", 0), 0u) << bad;
  EXPECT_NE(bad.find("Connection: close"), std::string::npos) << bad;
  fd = Connect((*server)->port());
  SendAll(fd, "GET /h HTTP/1.1\r\n\r\n");
  std::string no_host = ReadToClose(fd);
  ::close(fd);
  EXPECT_EQ(no_host.rfind("HTTP/1.1 400", 0), 0u) << no_host;
  fd = Connect((*server)->port());
  SendAll(fd, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" +
                  std::string(100, 'x'));
  std::string large = ReadToClose(fd);
  ::close(fd);
  EXPECT_EQ(large.rfind("HTTP/1.1 413", 0), 0u) << large;
  // The error body takes the shape of the API the path belongs to.
  EXPECT_NE(large.find("\"type\":\"error\""), std::string::npos) << large;
  std::vector<Observed> seen = observed.Wait(3);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].status, 400);
  EXPECT_EQ(seen[0].log.error, "bad_http_request");
  EXPECT_EQ(seen[1].status, 400);
  EXPECT_EQ(seen[2].status, 413);
  EXPECT_EQ(seen[2].path, "/v1/messages");
  EXPECT_EQ(seen[2].log.error, "request_too_large");
  EXPECT_EQ(served.load(), 0);
}

TEST(ServerTest, AnEventStreamIsChunkedAndTheConnectionStaysUsable) {
  ServerOptions o;
  auto server = Server::Start(o, [](const Request& r, ResponseWriter& w) {
    if (r.path != "/stream") {
      w.Respond(200, {{"Content-Type", "text/plain"}}, "ok " + r.path);
      return;
    }
    ASSERT_TRUE(BeginEventStream(w));
    EXPECT_TRUE(w.Write(SseData("one")));
    EXPECT_TRUE(w.Write(""));  // nothing: an empty chunk would end the body
    EXPECT_TRUE(w.Write(SseDone()));
    EXPECT_TRUE(w.End());
  });
  ASSERT_TRUE(server.ok()) << server.status();
  int fd = Connect((*server)->port());
  SendAll(fd, Get("/stream"));
  SendAll(fd, Get("/after"));
  std::string got = ReadAnswers(fd, 2);
  EXPECT_EQ(got.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << got;
  EXPECT_NE(got.find("Content-Type: text/event-stream\r\n"), std::string::npos) << got;
  EXPECT_NE(got.find("Cache-Control: no-cache\r\n"), std::string::npos) << got;
  EXPECT_NE(got.find("Transfer-Encoding: chunked\r\n"), std::string::npos) << got;
  EXPECT_NE(got.find("b\r\ndata: one\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"), std::string::npos)
      << got;
  EXPECT_NE(got.find("ok /after"), std::string::npos) << got;
  ::close(fd);
}

TEST(ServerTest, AnHttp10EventStreamEndsWithTheConnection) {
  ServerOptions o;
  auto server = Server::Start(o, [](const Request& r, ResponseWriter& w) {
    BeginEventStream(w);
    w.Write(SseDone());
    w.End();
  });
  ASSERT_TRUE(server.ok()) << server.status();
  int fd = Connect((*server)->port());
  SendAll(fd, "GET /s HTTP/1.0\r\n\r\n");
  std::string got = ReadToClose(fd);
  ::close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.0 200", 0), 0u) << got;
  EXPECT_EQ(got.find("chunked"), std::string::npos) << got;
  EXPECT_NE(got.find("Connection: close\r\n"), std::string::npos) << got;
  EXPECT_EQ(got.substr(got.size() - 14), "data: [DONE]\n\n") << got;
}

TEST(ServerTest, TheServerNameIsSentWhenSet) {
  ServerOptions o;
  o.server_name = "deepinfer";
  std::atomic<int> served{0};
  auto server = StartServer(o, &served);
  int fd = Connect(server->port());
  SendAll(fd, Get("/a"));
  std::string got = ReadAnswers(fd, 1);
  EXPECT_NE(got.find("\r\nServer: deepinfer\r\n"), std::string::npos) << got;
  ::close(fd);
  // Without a name (the gateway passes its backend's on) there is none.
  auto plain = StartServer({}, &served);
  fd = Connect(plain->port());
  SendAll(fd, Get("/a"));
  got = ReadAnswers(fd, 1);
  EXPECT_EQ(got.find("Server:"), std::string::npos) << got;
  ::close(fd);
}

TEST(ServerTest, StopLetsAnAnswerInProgressEndAndTheHandlerSeesStopping) {
  std::atomic<bool> in_handler{false};
  std::atomic<bool> peer_closed_while_stopping{true};
  auto server = Server::Start({}, [&](const Request&, ResponseWriter& w) {
    EXPECT_FALSE(w.stopping());
    in_handler = true;
    for (auto deadline = Clock::now() + 5s; !w.stopping() && Clock::now() < deadline;) {
      std::this_thread::sleep_for(2ms);
    }
    // A stopping server is not a gone client: a proxied stream is not cut by it.
    peer_closed_while_stopping = w.PeerClosed();
    w.Respond(503, {{"Content-Type", "application/json"}}, R"({"error":"shutting_down"})");
  });
  ASSERT_TRUE(server.ok()) << server.status();
  int fd = Connect((*server)->port());
  SendAll(fd, Get("/long"));
  for (auto deadline = Clock::now() + 2s; !in_handler && Clock::now() < deadline;) {
    std::this_thread::sleep_for(2ms);
  }
  ASSERT_TRUE(in_handler);
  EXPECT_TRUE((*server)->Stop(3000));
  EXPECT_TRUE((*server)->stopping());
  std::string got = ReadToClose(fd);
  ::close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 503", 0), 0u) << got;
  // The answer closes the connection: the server takes no next request.
  EXPECT_NE(got.find("Connection: close\r\n"), std::string::npos) << got;
  EXPECT_NE(got.find("shutting_down"), std::string::npos) << got;
  EXPECT_FALSE(peer_closed_while_stopping);
}

TEST(ServerTest, PeerClosedSeesAClientThatLeft) {
  std::atomic<bool> in_handler{false};
  std::atomic<bool> saw_close{false};
  auto server = Server::Start({}, [&](const Request&, ResponseWriter& w) {
    EXPECT_FALSE(w.PeerClosed());
    EXPECT_GE(w.client_fd(), 0);
    EXPECT_EQ(w.request_path(), "/wait");
    in_handler = true;
    for (auto deadline = Clock::now() + 5s; Clock::now() < deadline && !saw_close;) {
      saw_close = w.PeerClosed();
      std::this_thread::sleep_for(2ms);
    }
  });
  ASSERT_TRUE(server.ok()) << server.status();
  int fd = Connect((*server)->port());
  SendAll(fd, Get("/wait"));
  for (auto deadline = Clock::now() + 2s; !in_handler && Clock::now() < deadline;) {
    std::this_thread::sleep_for(2ms);
  }
  ::close(fd);
  for (auto deadline = Clock::now() + 3s; !saw_close && Clock::now() < deadline;) {
    std::this_thread::sleep_for(2ms);
  }
  EXPECT_TRUE(saw_close);
}

TEST(ServerTest, ABusyPortFailsToStart) {
  std::atomic<int> served{0};
  auto server = StartServer({}, &served);
  ServerOptions o;
  o.port = server->port();
  auto second = Server::Start(o, [](const Request&, ResponseWriter&) {});
  EXPECT_FALSE(second.ok());
  EXPECT_EQ(ErrorCodeOf(second.status()), "bind_failed") << second.status();
}

}  // namespace
}  // namespace deepinfer::http
