// The gateway's front server over real loopback sockets: idle keep-alive connections wait in
// epoll without a thread each, pipelined requests are all answered, idle connections expire, and
// Stop closes idle connections at once.

#include "gateway/front_server.h"

#include <dirent.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "http/socket_io.h"

namespace deepinfer::gateway {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::unique_ptr<FrontServer> StartServer(FrontServerOptions o, std::atomic<int>* served) {
  o.port = 0;
  auto server = FrontServer::Start(o, [served](const FrontRequest& r, FrontWriter& w) {
    served->fetch_add(1);
    // x-t in the answer when the request's header (not a trailer) has it.
    w.Respond(200, {{"Content-Type", "text/plain"}},
              "ok " + r.path + (r.Header("x-t").empty() ? "" : " x-t") + " " + r.body);
  });
  EXPECT_TRUE(server.ok()) << server.status();
  return std::move(*server);
}

int Connect(int port) {
  auto fd = http::ConnectTcp("127.0.0.1", port, 2000);
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

TEST(FrontServerTest, IdleKeepAliveConnectionsHoldNoThread) {
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

TEST(FrontServerTest, PipelinedRequestsAreAllAnswered) {
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

TEST(FrontServerTest, EmptyLinesBeforeARequestAreIgnored) {
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

TEST(FrontServerTest, TrailerFieldsAreNotMergedIntoTheHeader) {
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

TEST(FrontServerTest, TransferEncodingOtherThanChunkedIs400AndCloses) {
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

TEST(FrontServerTest, EndlessChunkExtensionIs400NotUnboundedMemory) {
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

TEST(FrontServerTest, Http10ExpectationGetsNo100Continue) {
  std::atomic<int> served{0};
  auto server = StartServer({}, &served);
  int fd = Connect(server->port());
  SendAll(fd, "POST /a HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi");
  std::string got = ReadToClose(fd);
  EXPECT_EQ(got.find("100 Continue"), std::string::npos) << got;
  EXPECT_NE(got.find("ok /a hi"), std::string::npos) << got;
  ::close(fd);
}

TEST(FrontServerTest, IdleConnectionsExpire) {
  std::atomic<int> served{0};
  FrontServerOptions o;
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

TEST(FrontServerTest, AHeadDribbledByteByByteIsCutOffAtTheHeaderDeadline) {
  std::atomic<int> served{0};
  FrontServerOptions o;
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

TEST(FrontServerTest, StopClosesIdleConnectionsAtOnce) {
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
  EXPECT_FALSE(http::ConnectTcp("127.0.0.1", port, 500).ok());
}

TEST(FrontServerTest, ConnectionsOverTheLimitGet503) {
  std::atomic<int> served{0};
  FrontServerOptions o;
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

}  // namespace
}  // namespace deepinfer::gateway
